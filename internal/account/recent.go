package account

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/holter-dev/holter/internal/store"
)

// Recent intervals (Options.Recent): what the accounting pass charges spans
// from. A context switch of a tracked thread is an interval; storing each
// as a row costs the recorder more than the request it serves does (on the
// demo system, some 50 rows and 0.5 ms of the recorder's CPU a request),
// so the recorder keeps them exact in memory for as long as spans take to
// arrive, and stores summaries (Options.Summarize).

// recentInterval is one interval of a thread, as charging needs it.
type recentInterval struct {
	start, end, wake int64
	bytes            uint64
	kstack           []string // interned: equal stacks share the slice
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

// recentThread is one thread's intervals in the order they were read,
// which is the order they ended, but for block I/O.
type recentThread struct {
	intervals []recentInterval
	// from: intervals ending before it may have been forgotten.
	from int64
}

// remember keeps e, an interval of thread t; a.mu is held.
func (a *Accountant) remember(t [2]uint32, e *accountAcctEvent, offset int64) {
	r := recentInterval{start: int64(e.Start) + offset, end: int64(e.End) + offset, bytes: e.Bytes}
	switch e.Kind {
	case kindCPU:
		r.kind = recentCPU
	case kindOffCPU:
		r.kind = recentRunnable
		if e.State != 0 {
			r.kind = recentBlocked
			if e.Wake != 0 {
				r.wake = int64(e.Wake) + offset
			}
			r.kstack = a.kstack(e)
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
	rt.intervals = append(rt.intervals, r)
}

// forgetRecent drops the intervals that ended before cut; a.mu is held.
func (a *Accountant) forgetRecent(cut int64) {
	for t, rt := range a.recent {
		n := 0
		for n < len(rt.intervals) && rt.intervals[n].end < cut {
			rt.from = max(rt.from, rt.intervals[n].end+1)
			n++
		}
		if n == len(rt.intervals) {
			if _, tracked := a.since[t[0]]; !tracked || rt.from < cut-int64(a.opts.Recent) {
				delete(a.recent, t) // quiet for as long again: forgotten
				continue
			}
		}
		if n > 0 {
			// Moved to a new array as appends outgrow it.
			rt.intervals = rt.intervals[n:]
		}
	}
	if len(a.stacks) > maxStacks {
		clear(a.stacks)
	}
}

// maxStacks bounds the interned kernel stacks.
const maxStacks = 1 << 14

// Activity returns the intervals of thread (pid, tid) of host that overlap
// lo..hi, ordered by start, and whether memory holds all of them: it keeps
// Options.Recent of them, from the time the thread's process was tracked.
// requests.AccountRecent charges spans from it.
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
	var out []store.ThreadActivity
	for i := range rt.intervals {
		r := &rt.intervals[i]
		if r.end < lo || r.start >= hi {
			continue
		}
		out = append(out, store.ThreadActivity{Host: host, Pid: pid, Tid: tid, Kind: recentKinds[r.kind],
			StartNs: r.start, EndNs: r.end, WakeNs: r.wake, KStack: r.kstack, Bytes: r.bytes})
	}
	slices.SortStableFunc(out, func(x, y store.ThreadActivity) int { return int(min(max(x.StartNs-y.StartNs, -1), 1)) })
	return out, true
}

// kstack is e's kernel stack below the scheduler, by function name,
// interned; a.mu is held.
func (a *Accountant) kstack(e *accountAcctEvent) []string {
	n := min(int(e.KstackBytes/8), len(e.Kstack))
	if n <= 0 {
		return nil
	}
	key := unsafe.String((*byte)(unsafe.Pointer(&e.Kstack[0])), n*8)
	if s, ok := a.stacks[key]; ok {
		return s
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
	a.stacks[string([]byte(key))] = names
	return names
}

// summarize replaces the on-CPU, runnable and blocked intervals in as by
// one row per thread and kind (blocked: per kernel stack) spanning them,
// with their total time (Ns); a blocked interval's wait for a CPU once
// woken goes to the runnable row. The rest is kept as it is.
func summarize(as []store.ThreadActivity) []store.ThreadActivity {
	type key struct {
		host     string
		pid, tid uint32
		kind     string
		stack    *string // interned stacks: one pointer per stack
	}
	sums := map[key]int{}
	var out []store.ThreadActivity
	add := func(a *store.ThreadActivity, kind string, start, end int64, stack []string) {
		if end <= start {
			return
		}
		k := key{a.Host, a.Pid, a.Tid, kind, unsafe.SliceData(stack)}
		i, ok := sums[k]
		if !ok {
			sums[k] = len(out)
			out = append(out, store.ThreadActivity{Host: a.Host, Pid: a.Pid, Tid: a.Tid, Kind: kind, StartNs: start, EndNs: end,
				KStack: stack})
			if kind == "blocked" {
				out[len(out)-1].SleepState = a.SleepState
			}
			i = len(out) - 1
		}
		s := &out[i]
		s.StartNs, s.EndNs = min(s.StartNs, start), max(s.EndNs, end)
		s.Ns += end - start
	}
	for i := range as {
		a := &as[i]
		if a.Ns != 0 {
			out = append(out, *a)
			continue
		}
		switch a.Kind {
		case "cpu", "runnable":
			add(a, a.Kind, a.StartNs, a.EndNs, nil)
		case "blocked":
			woken := a.EndNs
			if a.WakeNs > a.StartNs && a.WakeNs < a.EndNs {
				woken = a.WakeNs
			}
			add(a, "blocked", a.StartNs, woken, a.KStack)
			add(a, "runnable", woken, a.EndNs, nil)
		default:
			out = append(out, *a)
		}
	}
	return out
}
