package account

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"unsafe"

	"github.com/holter-dev/holter/internal/store"
)

// Recent intervals (Options.Recent): what the accounting pass charges spans
// from. A context switch of a tracked thread is an interval; storing each
// as a row costs the recorder more than the request it serves does (on the
// demo system, some 50 rows and 0.5 ms of the recorder's CPU a request),
// so the recorder keeps them exact in memory for as long as spans take to
// arrive, and stores summaries (Options.Summarize).

// recentInterval is one interval of a thread, as charging needs it. It
// holds no pointer, so the collector does not scan the many of them.
type recentInterval struct {
	start, end, wake int64
	n                uint64 // io, dirty: bytes; cpu: Ns (execNs)
	stack            uint32 // Accountant.stackNames index, 0 none
	kind             uint8
}

const (
	recentCPU = iota + 1
	recentRunnable
	recentBlocked
	recentIO
	recentDirty
)

var recentKinds = [...]string{recentCPU: "cpu", recentRunnable: "runnable", recentBlocked: "blocked", recentIO: "io", recentDirty: "dirty"}

// intervalChunk is how many intervals a full chunk of a thread's log
// holds (160 KiB). Kept in one slice, grown by append and trimmed at the
// front as they are forgotten, a busy thread's intervals were copied
// whole every time appends outgrew it (every quarter of its length, the
// way Go grows large slices). In chunks, appends copy at most a chunk,
// and forgetting frees whole chunks.
const intervalChunk = 4096

// intervalLog is a thread's intervals in chunks: every chunk but the last
// holds intervalChunk; the last grows by append, so a quiet thread's is
// small.
type intervalLog struct {
	chunks [][]recentInterval
	off    int // intervals forgotten from chunks[0]
	n      int // intervals kept
}

func (l *intervalLog) len() int { return l.n }

// at is the i-th interval kept.
func (l *intervalLog) at(i int) *recentInterval {
	i += l.off
	return &l.chunks[i/intervalChunk][i%intervalChunk]
}

func (l *intervalLog) append(r recentInterval) {
	if k := len(l.chunks); k == 0 || len(l.chunks[k-1]) == intervalChunk {
		l.chunks = append(l.chunks, nil)
	}
	last := &l.chunks[len(l.chunks)-1]
	*last = append(*last, r)
	l.n++
}

// forget drops the first n intervals kept.
func (l *intervalLog) forget(n int) {
	l.off += n
	l.n -= n
	if k := l.off / intervalChunk; k > 0 {
		clear(l.chunks[:k])
		l.chunks = l.chunks[k:]
		l.off -= k * intervalChunk
	}
}

// recentThread is one thread's intervals in the order they were read,
// which is the order they ended, but for block I/O and dirtied pages.
type recentThread struct {
	intervals intervalLog
	// reads are where each flush that read some of them began in
	// intervals: those a flush read ended before it had drained the ring,
	// so a lookup skips the reads done before its time.
	reads []recentRead
	// from: intervals ending before it may have been forgotten.
	from int64
}

type recentRead struct {
	idx  int   // the read's first interval
	done int64 // wall ns the flush had drained the ring; 0 while it drains
}

// remember keeps e, an interval of thread t; a.mu is held.
func (a *Accountant) remember(t [2]uint32, e *accountAcctEvent, offset int64) {
	r := recentInterval{start: int64(e.Start) + offset, end: int64(e.End) + offset, n: e.Bytes}
	switch e.Kind {
	case kindCPU:
		r.kind = recentCPU
		r.n = uint64(e.execNs())
	case kindOffCPU:
		r.kind = recentRunnable
		if e.State != 0 {
			r.kind = recentBlocked
			if e.Wake != 0 {
				r.wake = int64(e.Wake) + offset
			}
			_, r.stack = a.kstack(e)
		}
	case kindIO:
		r.kind = recentIO
	case kindDirty:
		r.kind = recentDirty
	default:
		return // write-back is charged later, by the span_writeback view
	}
	rt := a.recent[t]
	if rt == nil {
		rt = &recentThread{}
		a.recent[t] = rt
	}
	if n := len(rt.reads); n == 0 || rt.reads[n-1].done != 0 {
		rt.reads = append(rt.reads, recentRead{idx: rt.intervals.len()})
		a.reading = append(a.reading, rt)
	}
	rt.intervals.append(r)
	a.recentN++
}

// readDone marks the reads of the flush that drained the ring by done;
// a.mu is held.
func (a *Accountant) readDone(done int64) {
	for _, rt := range a.reading {
		rt.reads[len(rt.reads)-1].done = done
	}
	a.reading = a.reading[:0]
}

// maxRecent bounds the intervals kept in memory (40 bytes each, 40 MiB
// in all, well under the recorder's memory limit): past it, they are kept
// for less than Options.Recent.
const maxRecent = 1 << 20

// forgetOldRecent drops the intervals older than Options.Recent, and
// younger ones, halving the time kept, while there are more than
// maxRecent; a.mu is held. (Cutting in proportion to how many there were
// kept them all when a load had begun within Options.Recent: 2.6 million,
// 103 MiB, and the recorder's collector running without pause against its
// memory limit.)
func (a *Accountant) forgetOldRecent(now int64) {
	keep := int64(a.opts.Recent)
	a.forgetRecent(now - keep)
	for a.recentN > maxRecent && keep > 0 {
		keep /= 2
		a.forgetRecent(now - keep)
	}
}

// forgetRecent drops the intervals that ended before cut; a.mu is held.
func (a *Accountant) forgetRecent(cut int64) {
	for t, rt := range a.recent {
		n := 0
		for n < rt.intervals.len() && rt.intervals.at(n).end < cut {
			rt.from = max(rt.from, rt.intervals.at(n).end+1)
			n++
		}
		a.recentN -= n
		if n == rt.intervals.len() {
			if _, tracked := a.since[t[0]]; !tracked || rt.from < cut-int64(a.opts.Recent) {
				delete(a.recent, t) // quiet for as long again: forgotten
				continue
			}
		}
		if n > 0 {
			rt.intervals.forget(n)
			k := 0 // reads wholly forgotten
			for k+1 < len(rt.reads) && rt.reads[k+1].idx <= n {
				k++
			}
			rt.reads = rt.reads[k:]
			for i := range rt.reads {
				rt.reads[i].idx = max(rt.reads[i].idx-n, 0)
			}
		}
	}
}

// maxStacks bounds the interned kernel stacks; later new ones are not
// interned, and the intervals kept in memory have none.
const maxStacks = 1 << 16

// Activity returns the intervals of thread (pid, tid) of host that overlap
// lo..hi, ordered by start, and whether memory holds all of them: it keeps
// Options.Recent of them, from the time the thread's process was tracked.
// The accounting passes of internal/requests charge spans from it.
func (a *Accountant) Activity(host string, pid, tid uint32, lo, hi int64) ([]store.ThreadActivity, bool) {
	if host != a.opts.Host {
		return nil, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	rt := a.recent[[2]uint32{pid, tid}]
	if rt == nil || rt.from >= lo {
		return nil, false
	}
	// The first read that may hold an interval ending at lo or later.
	j := sort.Search(len(rt.reads), func(j int) bool { return rt.reads[j].done == 0 || rt.reads[j].done >= lo })
	first := rt.intervals.len()
	if j < len(rt.reads) {
		first = rt.reads[j].idx
	}
	n := 0
	for i := first; i < rt.intervals.len(); i++ {
		if r := rt.intervals.at(i); r.end >= lo && r.start < hi {
			n++
		}
	}
	out := make([]store.ThreadActivity, 0, n)
	for i := first; i < rt.intervals.len(); i++ {
		r := rt.intervals.at(i)
		if r.end < lo || r.start >= hi {
			continue
		}
		x := store.ThreadActivity{Host: host, Pid: pid, Tid: tid, Kind: recentKinds[r.kind],
			StartNs: r.start, EndNs: r.end, WakeNs: r.wake, KStack: a.stackNames[r.stack], Bytes: r.n}
		if r.kind == recentCPU {
			x.Ns, x.Bytes = int64(r.n), 0
		}
		out = append(out, x)
	}
	byStart := func(x, y store.ThreadActivity) int { return cmp.Compare(x.StartNs, y.StartNs) }
	if !slices.IsSortedFunc(out, byStart) {
		slices.SortStableFunc(out, byStart)
	}
	return out, true
}

// kstack is e's kernel stack below the scheduler, by function name, and
// its index in a.stackNames (0 when there are too many to intern); a.mu is
// held.
func (a *Accountant) kstack(e *accountAcctEvent) ([]string, uint32) {
	n := min(int(e.KstackBytes/8), len(e.Kstack))
	if n <= 0 {
		return nil, 0
	}
	key := unsafe.String((*byte)(unsafe.Pointer(&e.Kstack[0])), n*8)
	if id, ok := a.stackIDs[key]; ok {
		return a.stackNames[id], id
	}
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("0x%x", e.Kstack[i])
		if f := a.kernel.Resolve(e.Kstack[i]); f.Func != "" {
			name = f.Func
		}
		if len(names) == 0 && hasAnyPrefix(name, schedulerFrames) {
			continue
		}
		names = append(names, name)
	}
	if len(a.stackNames) >= maxStacks {
		return names, 0
	}
	id := uint32(len(a.stackNames))
	a.stackIDs[string([]byte(key))] = id
	a.stackNames = append(a.stackNames, names)
	return names, id
}

// summary adds up the on-CPU, runnable and blocked intervals of one flush
// into one row per thread and kind (blocked: per kernel stack) spanning
// them, with their total time (Ns); a blocked interval's wait for a CPU
// once woken goes to the runnable row.
type summary struct {
	rows []store.ThreadActivity
	n    []uint64 // intervals in each row
	at   map[summaryKey]int
}

type summaryKey struct {
	pid, tid uint32
	kind     uint8
	stack    uint32
}

// summarize adds e, an on-CPU or off-CPU record, to s; a.mu is held.
func (a *Accountant) summarize(s *summary, e *accountAcctEvent, offset int64) {
	start, end := int64(e.Start)+offset, int64(e.End)+offset
	if e.Kind == kindCPU {
		s.add(a.opts.Host, e, recentCPU, start, end, e.execNs(), nil, 0)
		return
	}
	if e.State == 0 {
		s.add(a.opts.Host, e, recentRunnable, start, end, 0, nil, 0)
		return
	}
	woken := end
	if w := int64(e.Wake) + offset; e.Wake != 0 && w > start && w < end {
		woken = w
	}
	names, id := a.kstack(e)
	s.add(a.opts.Host, e, recentBlocked, start, woken, 0, names, id)
	s.add(a.opts.Host, e, recentRunnable, woken, end, 0, nil, 0)
}

// add adds the interval start..end of e to its row in s: ns of its kind,
// or all of it when ns is 0.
func (s *summary) add(host string, e *accountAcctEvent, kind uint8, start, end, ns int64, stack []string, id uint32) {
	if end <= start {
		return
	}
	if s.at == nil {
		s.at = map[summaryKey]int{}
	}
	k := summaryKey{e.Pid, e.Tid, kind, id}
	i, ok := s.at[k]
	if !ok {
		i = len(s.rows)
		s.at[k] = i
		r := store.ThreadActivity{Host: host, Pid: e.Pid, Tid: e.Tid, Kind: recentKinds[kind], StartNs: start, EndNs: end, KStack: stack}
		if kind == recentBlocked {
			r.SleepState = e.State
		}
		s.rows = append(s.rows, r)
		s.n = append(s.n, 0)
	}
	r := &s.rows[i]
	r.StartNs, r.EndNs = min(r.StartNs, start), max(r.EndNs, end)
	if ns == 0 {
		ns = end - start
	}
	r.Ns += ns
	if kind != recentRunnable || e.State == 0 {
		s.n[i]++ // a blocked interval's wait counts once, as blocked
	}
}
