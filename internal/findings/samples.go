package findings

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/holter-dev/holter/internal/store"
)

// Group is the samples of one process, vital and pair of stacks in one
// interval of a window, with the part of the vital's exact totals they
// stand for (see Load).
type Group struct {
	Interval  int
	Vital     string
	Pid       uint32
	Comm, Exe string
	// KStack and UStack are the samples' stacks (0: none).
	KStack, UStack uint64
	// InKernel: cpu samples taken in the kernel. Preempted: sched samples
	// of waits that followed a preemption (else a wake-up).
	InKernel, Preempted bool
	// Syscall is the system call of failed or futex calls (-1 for the
	// others); Failed says it returned an error, and Errno which (the
	// most negative return value among the group's samples, negated).
	Syscall int
	Failed  bool
	Errno   int64
	// Target is the process a signal was sent to.
	Target uint32
	// Weight and Events are the group's estimated part of the vital's
	// exact totals in the interval; Samples how many samples it has and
	// Threads how many threads they came from.
	Weight, Events   float64
	Samples, Threads int
	// FirstNs and LastNs are the times of its first and last sample.
	FirstNs, LastNs int64
}

// Stack is a stored stack's frames, innermost first, with the module of
// each.
type Stack struct {
	Kind    string
	Frames  []string
	Modules []string
}

// Stacks caches the frames of stored stacks by id: a stack's row never
// changes once written, so a long-lived reader (the recorder's online
// analysis) asks the store for each one once.
type Stacks struct {
	mu sync.Mutex
	m  map[uint64]*Stack
}

// NewStacks is an empty cache.
func NewStacks() *Stacks { return &Stacks{m: map[uint64]*Stack{}} }

// Get is the stack with the id; nil when unknown.
func (c *Stacks) Get(id uint64) *Stack {
	if c == nil || id == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}

// Add puts stacks in the cache: the recorder's online analysis has the
// stacks of each epoch it commits at hand, and so asks the store for
// none.
func (c *Stacks) Add(sts []store.Stack) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m)+len(sts) > maxCachedStacks {
		c.m = map[uint64]*Stack{}
	}
	for _, st := range sts {
		c.m[st.ID] = &Stack{Kind: st.Kind, Frames: st.Frames, Modules: st.Modules}
	}
}

// maxCachedStacks bounds the cache; past it the cache starts over.
const maxCachedStacks = 200_000

// fetch reads the stacks among ids that the cache lacks.
func (c *Stacks) fetch(ctx context.Context, q Querier, ids []uint64) error {
	c.mu.Lock()
	var missing []string
	seen := map[uint64]bool{}
	for _, id := range ids {
		if _, ok := c.m[id]; !ok && id != 0 && !seen[id] {
			seen[id] = true
			missing = append(missing, fmt.Sprint(id))
		}
	}
	if len(c.m)+len(missing) > maxCachedStacks {
		c.m = map[uint64]*Stack{}
	}
	c.mu.Unlock()
	for len(missing) > 0 {
		// The ids as a list joined to the table: a long IN list is
		// compared id by id. The list is one string split by the query:
		// a list literal of thousands of numbers costs more to parse
		// (and check, through a recorder's API) than the join to run.
		n := min(len(missing), 20000)
		res, err := q.Query(ctx, `SELECT stack_id, kind, frames, modules FROM stacks
			WHERE stack_id IN (SELECT unnest(CAST(string_split('`+strings.Join(missing[:n], ",")+`', ',') AS UBIGINT[])))`)
		if err != nil {
			return fmt.Errorf("load stacks: %w", err)
		}
		missing = missing[n:]
		c.mu.Lock()
		for _, r := range res.Rows {
			c.m[uint64(toInt(r[0]))] = &Stack{Kind: fmt.Sprint(r[1]), Frames: strings_(r[2]), Modules: strings_(r[3])}
		}
		c.mu.Unlock()
	}
	return nil
}

// strings_ reads a list of strings as the store or the API returns it.
func strings_(v any) []string {
	xs, _ := v.([]any)
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// fatalSignals are the signals whose default action ends a process: a
// fault (SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV, SIGSYS) or a kill. Only
// those sent to a process that left the default action in place (handler
// 0) are loaded: a Go program turns its own SIGSEGVs into panics.
var fatalSignals = []int64{4, 6, 7, 8, 9, 11, 31}

// loadSamples fills in the window's groups and what rules read from single
// samples (exits, fatal signals, block requests that failed) from the
// samples of the intervals from the first one starting at or after from.
func (w *Window) loadSamples(ctx context.Context, q Querier, index map[int64]int, width, from, to int64) error {
	// The groups are read a stretch of intervals at a time, each of at
	// most store.DefaultMaxResultRows samples (a group has one sample at least), so
	// that no answer is cut: a busy host's minute can hold a hundred
	// thousand.
	res, err := q.Query(ctx, fmt.Sprintf(`SELECT %s AS b, count(*) FROM samples s JOIN epochs e ON e.host = s.host AND e.epoch = s.epoch
		WHERE s.host = %s AND e.start_ns >= %d AND e.start_ns < %d GROUP BY b`, bucketExpr(width), sqlString(w.Host), from-from%max(width, 1), to))
	if err != nil {
		return fmt.Errorf("count samples: %w", err)
	}
	count := map[int]int64{}
	for _, r := range res.Rows {
		if i, ok := index[toInt(r[0])]; ok {
			count[i] = toInt(r[1])
		}
	}
	first := sort.Search(len(w.Intervals), func(i int) bool { return w.Intervals[i].StartNs >= from-from%max(width, 1) })
	var ids []uint64
	for lo := first; lo < len(w.Intervals); {
		hi, n := lo+1, count[lo]
		for hi < len(w.Intervals) && n+count[hi] <= store.DefaultMaxResultRows {
			n += count[hi]
			hi++
		}
		more, err := w.loadGroups(ctx, q, index, width, w.Intervals[lo].StartNs, w.Intervals[hi-1].StartNs+1)
		if err != nil {
			return err
		}
		ids = append(ids, more...)
		lo = hi
	}
	// Each group's represented weight and events, scaled up to the
	// vital's exact totals in the interval as far as the samples' tails
	// go (scaleUp).
	t, err := w.thresholds(ctx, q, index, width, from, to)
	if err != nil {
		return err
	}
	w.scaleGroups(t)
	w.sumProcs()
	if err := w.Stacks.fetch(ctx, q, ids); err != nil {
		return err
	}

	// Rows of single samples, by kind: the first exit of each process per
	// interval, fatal signals, failed block requests, and the least free
	// memory and the first and last kernel memory in use per interval.
	var fatal []string
	for _, s := range fatalSignals {
		fatal = append(fatal, fmt.Sprint(s))
	}
	kernelKB := "s.kernel_kb"
	if !hasSampleColumn(ctx, q, "kernel_kb") {
		kernelKB = "CAST(NULL AS UBIGINT)"
	}
	where := fmt.Sprintf(`s.host = %s AND e.start_ns >= %d AND e.start_ns < %d`, sqlString(w.Host), from-from%max(width, 1), to)
	res, err = q.Query(ctx, fmt.Sprintf(`WITH x AS (SELECT %[1]s AS b, s.epoch, s.ts_ns, s.pid, s.comm, s.vital, s.syscall_nr, s.signal,
			s.target_pid, s.handler, s.result, s.dev, s.op, s.sector, s.bytes_requested, s.bytes_completed, s.error, s.free_kb,
			%[4]s AS kernel_kb
			FROM samples s JOIN epochs e ON e.host = s.host AND e.epoch = s.epoch WHERE %[2]s)
		SELECT 'exit', b, min(epoch), min(ts_ns), pid, any_value(comm), 0, 0, '', '', 0, 0, 0, 0, NULL, NULL, NULL FROM x
			WHERE vital = 'syscall' AND syscall_nr IN (60, 231) GROUP BY b, pid
		UNION ALL (SELECT 'signal', b, epoch, ts_ns, pid, comm, signal, coalesce(target_pid, 0), '', '', coalesce(handler, 0),
			coalesce(result, 0), 0, 0, NULL, NULL, NULL FROM x
			WHERE vital = 'signal' AND signal IN (%[3]s) AND coalesce(handler, 0) = 0 ORDER BY ts_ns LIMIT %[5]d)
		UNION ALL (SELECT 'blio', b, epoch, ts_ns, pid, comm, 0, 0, coalesce(dev, ''), coalesce(op, ''), coalesce(sector, 0),
			coalesce(bytes_requested, 0), coalesce(bytes_completed, 0), coalesce(error, 0), NULL, NULL, NULL FROM x
			WHERE vital = 'blio' AND error <> 0 ORDER BY ts_ns LIMIT %[5]d)
		UNION ALL SELECT 'memory', b, 0, 0, 0, '', 0, 0, '', '', 0, 0, 0, 0, CAST(min(free_kb) AS DOUBLE),
			CAST(arg_min(kernel_kb, ts_ns) FILTER (WHERE kernel_kb IS NOT NULL) AS DOUBLE),
			CAST(arg_max(kernel_kb, ts_ns) FILTER (WHERE kernel_kb IS NOT NULL) AS DOUBLE) FROM x
			WHERE vital IN ('kmem', 'umem') GROUP BY b`, bucketExpr(width), where, strings.Join(fatal, ", "), kernelKB, maxSingles))
	if err != nil {
		return fmt.Errorf("load exits, signals, block requests and memory: %w", err)
	}
	for _, r := range res.Rows {
		i, ok := index[toInt(r[1])]
		if !ok {
			continue
		}
		ref := SampleRef{Interval: i, Epoch: toInt(r[2]), TsNs: toInt(r[3]), Pid: uint32(toInt(r[4]))}
		switch r[0] {
		case "exit":
			ref.Vital = "syscall"
			w.Exits = append(w.Exits, ref)
		case "signal":
			ref.Vital = "signal"
			w.Signals = append(w.Signals, SignalEvent{SampleRef: ref, Comm: fmt.Sprint(r[5]), Signal: toInt(r[6]), TargetPid: uint32(toInt(r[7]))})
		case "blio":
			ref.Vital = "blio"
			w.Unsatisfied = append(w.Unsatisfied, IORequest{SampleRef: ref, Comm: fmt.Sprint(r[5]), Dev: fmt.Sprint(r[8]), Op: fmt.Sprint(r[9]),
				Sector: uint64(toInt(r[10])), Requested: uint64(toInt(r[11])), Completed: uint64(toInt(r[12])), Error: toInt(r[13])})
		case "memory":
			w.FreeKB[i], w.KernelFirstKB[i], w.KernelLastKB[i] = toFloat(r[14]), toFloat(r[15]), toFloat(r[16])
		}
	}
	w.sortSingles()
	return nil
}

// scaleGroups scales each group's represented weight and events up to
// the vital's exact totals in its interval, as far as the samples' tails
// go (scaleUp), t being the vitals' thresholds.
func (w *Window) scaleGroups(t map[vitalAt]float64) {
	dw, de := map[vitalAt]float64{}, map[vitalAt]float64{}
	for _, g := range w.Groups {
		k := vitalAt{g.Interval, g.Vital}
		dw[k] += g.Weight
		de[k] += g.Events
	}
	for n := range w.Groups {
		g := &w.Groups[n]
		k, s := vitalAt{g.Interval, g.Vital}, w.Vitals[g.Vital]
		g.Weight *= scaleUp(dw[k], s.Weight[g.Interval], t[k])
		g.Events *= scaleUp(de[k], s.Events[g.Interval], t[k])
	}
}

// vitalAt is a vital in an interval of a window.
type vitalAt struct {
	i     int
	vital string
}

// scaleUp is what a vital's represented weight (or events) in an
// interval stands for, as a factor: its exact total over the represented,
// but at most the vital's sampling threshold t there. A label's samples,
// taken as its estimate crosses each power of t, represent more than 1/t
// of what it counted (the rest came after its last sample, below the next
// power), so that is all the scaling up makes good. What is missing beyond
// it is the weight of labels no sample was kept of — on a busy host the
// storage budget keeps a few in a hundred — which is no kept process's:
// spread over them, it made one thread blocked on a peer block 5 s a
// second, and every process kept look as busy. t unknown (0): the exact
// total over the represented.
func scaleUp(represented, total, t float64) float64 {
	if represented <= 0 {
		return 0
	}
	f := total / represented
	if t >= 2 {
		f = math.Min(f, t)
	}
	return f
}

// thresholds reads each vital's sampling threshold per interval, the
// largest among the interval's epochs.
func (w *Window) thresholds(ctx context.Context, q Querier, index map[int64]int, width, from, to int64) (map[vitalAt]float64, error) {
	res, err := q.Query(ctx, fmt.Sprintf(`SELECT %s AS b, v.vital, CAST(max(v.threshold) AS DOUBLE)
		FROM vitals v JOIN epochs e ON e.host = v.host AND e.epoch = v.epoch
		WHERE v.host = %s AND e.start_ns >= %d AND e.start_ns < %d GROUP BY b, v.vital`,
		bucketExpr(width), sqlString(w.Host), from-from%max(width, 1), to))
	if err != nil {
		return nil, fmt.Errorf("load sampling thresholds: %w", err)
	}
	t := map[vitalAt]float64{}
	for _, r := range res.Rows {
		if i, ok := index[toInt(r[0])]; ok {
			t[vitalAt{i, fmt.Sprint(r[1])}] = toFloat(r[2])
		}
	}
	return t, nil
}

// loadGroups reads the groups of the samples of the intervals starting in
// [from, to) (see loadSamples), their weights still the represented ones,
// and returns the ids of the stacks they name.
func (w *Window) loadGroups(ctx context.Context, q Querier, index map[int64]int, width, from, to int64) ([]uint64, error) {
	cte := representedBy(w.Host, width, from, to, "", `s.ts_ns, s.epoch, s.vital, s.pid, s.tid, s.comm, s.exe, s.weight,
		s.kstack_id, s.ustack_id, s.in_kernel, s.preempted, s.ret, s.syscall_nr, s.target_pid`, byLabel)
	// A busy host's samples have hundreds of thousands of distinct user
	// stacks (a short-lived process's frames are its own), and only the
	// processes that weigh in a vital can be a finding's culprit: the
	// stacks are kept for the ten heaviest processes of each vital and
	// interval and those with 1% of it at least, their twenty heaviest
	// stacks (a loop's samples are at a handful of places), and otherwise
	// only where they say what was waited for (blck's kernel stacks) or
	// allocated (kmem's). The system call number is kept where a detector
	// reads it: failed calls, and futex calls (a lock's waits). A call
	// failed when it returned an errno, -4095 to -1 (the kernel's
	// MAX_ERRNO): a return value past that is a result (a pointer, an
	// offset), and INT64_MIN's negation would overflow. A group's
	// threads are the most of the groups it is made of.
	res, err := q.Query(ctx, cte+`,
		p AS (SELECT b, vital, pid, sum(dw) AS w FROM r GROUP BY b, vital, pid),
		big AS (SELECT b, vital, pid FROM p
			QUALIFY row_number() OVER (PARTITION BY b, vital ORDER BY w DESC, pid) <= 10 OR w >= 0.01 * sum(w) OVER (PARTITION BY b, vital)),
		g AS (SELECT r.*, big.pid IS NOT NULL AS heavy, coalesce(r.vital = 'syscall' AND r.ret BETWEEN -4095 AND -1, false) AS failed
			FROM r LEFT JOIN big ON big.b = r.b AND big.vital = r.vital AND big.pid = r.pid),
		g1 AS (SELECT b, vital, pid, arg_max(comm, ts_ns) AS comm, arg_max(exe, ts_ns) AS exe,
			CASE WHEN heavy OR vital IN ('blck', 'kmem') THEN coalesce(kstack_id, 0) ELSE 0 END AS k,
			CASE WHEN heavy THEN coalesce(ustack_id, 0) ELSE 0 END AS u,
			coalesce(in_kernel, false) AS ik, coalesce(preempted, false) AS pre, failed,
			CASE WHEN failed OR syscall_nr = 202 THEN syscall_nr ELSE -1 END AS nr, coalesce(target_pid, 0) AS tp,
			sum(dw) AS dw, sum(de) AS de, count(*) AS n, count(DISTINCT tid) AS th, min(ret) FILTER (WHERE failed) AS mret,
			min(ts_ns) AS t0, max(ts_ns) AS t1
			FROM g GROUP BY b, vital, pid, k, u, ik, pre, failed, nr, tp),
		g2 AS (SELECT *, CASE WHEN row_number() OVER (PARTITION BY b, vital, pid ORDER BY dw DESC, u) > 20 THEN 0 ELSE u END AS u2 FROM g1)
		SELECT b, vital, pid, arg_max(comm, t1), arg_max(exe, t1), k, u2, ik, pre, failed, nr, tp,
			sum(dw), sum(de), sum(n), max(th), coalesce(-min(mret), 0), min(t0), max(t1)
		FROM g2 GROUP BY b, vital, pid, k, u2, ik, pre, failed, nr, tp`)
	if err != nil {
		return nil, fmt.Errorf("load processes: %w", err)
	}
	if res.Truncated {
		// A stretch holds at most store.DefaultMaxResultRows samples, so this is a store
		// that cut its answer shorter than it says.
		return nil, fmt.Errorf("load processes: the answer was cut at %d rows", len(res.Rows))
	}
	var ids []uint64
	for _, r := range res.Rows {
		i, ok := index[toInt(r[0])]
		if !ok {
			continue
		}
		g := Group{Interval: i, Vital: fmt.Sprint(r[1]), Pid: uint32(toInt(r[2])), Comm: fmt.Sprint(r[3]), Exe: fmt.Sprint(r[4]),
			KStack: uint64(toInt(r[5])), UStack: uint64(toInt(r[6])), InKernel: r[7] == true, Preempted: r[8] == true, Failed: r[9] == true,
			Syscall: int(toInt(r[10])), Target: uint32(toInt(r[11])),
			Weight: nanZero(toFloat(r[12])), Events: nanZero(toFloat(r[13])), Samples: int(toInt(r[14])), Threads: int(toInt(r[15])),
			Errno: toInt(r[16]), FirstNs: toInt(r[17]), LastNs: toInt(r[18])}
		if s := w.Vitals[g.Vital]; s == nil || math.IsNaN(s.Weight[i]) {
			continue
		}
		w.Groups = append(w.Groups, g)
		ids = append(ids, g.KStack, g.UStack)
	}
	w.nameByLatest()
	return ids, nil
}

// nameByLatest gives each process's groups in an interval the name its
// latest sample there had: a process sampled between fork and exec has
// its parent's name in its first samples, and a finding names it by what
// it became (groups come in no order, so "the last group's name" would be
// either).
func (w *Window) nameByLatest() {
	type key struct {
		i   int
		pid uint32
	}
	latest := map[key]int{}
	for k, g := range w.Groups {
		at := key{g.Interval, g.Pid}
		if j, ok := latest[at]; !ok || g.LastNs > w.Groups[j].LastNs {
			latest[at] = k
		}
	}
	for k := range w.Groups {
		g := &w.Groups[k]
		l := w.Groups[latest[key{g.Interval, g.Pid}]]
		g.Comm, g.Exe = l.Comm, l.Exe
	}
}

// sumProcs derives Procs, the per-process totals of each vital, and the
// kernel's share of cpu from the groups.
func (w *Window) sumProcs() {
	type key struct {
		i     int
		vital string
		pid   uint32
	}
	at := map[key]int{}
	w.Procs = w.Procs[:0]
	kernel, cpu := map[int]float64{}, map[int]float64{}
	for _, g := range w.Groups {
		k := key{g.Interval, g.Vital, g.Pid}
		n, ok := at[k]
		if !ok {
			n = len(w.Procs)
			at[k] = n
			w.Procs = append(w.Procs, ProcStat{Interval: g.Interval, Vital: g.Vital, Pid: g.Pid, Comm: g.Comm, Exe: g.Exe})
		}
		p := &w.Procs[n]
		p.Weight += g.Weight
		p.Events += g.Events
		p.Samples += g.Samples
		if g.Vital == "cpu" {
			cpu[g.Interval] += g.Weight
			if g.InKernel {
				kernel[g.Interval] += g.Weight
			}
		}
	}
	for i, c := range cpu {
		if c > 0 {
			w.KernelCPU[i] = kernel[i] / c
		}
	}
	sort.SliceStable(w.Procs, func(a, b int) bool {
		if w.Procs[a].Interval != w.Procs[b].Interval {
			return w.Procs[a].Interval < w.Procs[b].Interval
		}
		if w.Procs[a].Vital != w.Procs[b].Vital {
			return w.Procs[a].Vital < w.Procs[b].Vital
		}
		return w.Procs[a].Weight > w.Procs[b].Weight
	})
}

// hasSampleColumn says whether the samples table has a field column (a
// store an older holter wrote, opened read-only, may lack one). When the
// catalog cannot be read it says yes: the query that needs the column then
// tells what is wrong.
func hasSampleColumn(ctx context.Context, q Querier, name string) bool {
	res, err := q.Query(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'samples' AND column_name = `+sqlString(name))
	return err != nil || len(res.Rows) != 1 || toInt(res.Rows[0][0]) > 0
}
