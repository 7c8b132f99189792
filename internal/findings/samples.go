package findings

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
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
	// Syscall is the system call of syscall samples (-1 for the others);
	// Failed says it returned an error, and Errno which (the most
	// negative return value among the group's samples, negated).
	Syscall int
	Failed  bool
	Errno   int64
	// Target is the process a signal was sent to, Signal its number (-1
	// for other vitals).
	Target uint32
	Signal int
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
		n := min(len(missing), 1000)
		res, err := q.Query(ctx, `SELECT stack_id, kind, frames, modules FROM stacks WHERE stack_id IN (`+strings.Join(missing[:n], ", ")+`)`)
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
	cte := representedBy(w.Host, width, from, to, "", `s.ts_ns, s.epoch, s.vital, s.pid, s.tid, s.comm, s.exe, s.weight,
		s.kstack_id, s.ustack_id, s.in_kernel, s.preempted, s.ret, s.syscall_nr, s.target_pid, s.signal`, byLabel)
	res, err := q.Query(ctx, cte+`
		SELECT b, vital, pid, any_value(comm), any_value(exe), coalesce(kstack_id, 0) AS k, coalesce(ustack_id, 0) AS u,
			coalesce(in_kernel, false) AS ik, coalesce(preempted, false) AS pre, coalesce(vital = 'syscall' AND ret < 0, false) AS failed,
			coalesce(syscall_nr, -1) AS nr, coalesce(target_pid, 0) AS tp, coalesce(signal, -1) AS sig,
			sum(dw), sum(de), count(*), count(DISTINCT tid), coalesce(-min(ret) FILTER (WHERE vital = 'syscall' AND ret < 0), 0),
			min(ts_ns), max(ts_ns)
		FROM r GROUP BY b, vital, pid, k, u, ik, pre, failed, nr, tp, sig`)
	if err != nil {
		return fmt.Errorf("load processes: %w", err)
	}
	// Each group's share of its vital's represented weight and events in
	// the interval, times the vital's exact totals.
	type key struct {
		i     int
		vital string
	}
	dw, de := map[key]float64{}, map[key]float64{}
	var ids []uint64
	for _, r := range res.Rows {
		i, ok := index[toInt(r[0])]
		if !ok {
			continue
		}
		g := Group{Interval: i, Vital: fmt.Sprint(r[1]), Pid: uint32(toInt(r[2])), Comm: fmt.Sprint(r[3]), Exe: fmt.Sprint(r[4]),
			KStack: uint64(toInt(r[5])), UStack: uint64(toInt(r[6])), InKernel: r[7] == true, Preempted: r[8] == true, Failed: r[9] == true,
			Syscall: int(toInt(r[10])), Target: uint32(toInt(r[11])), Signal: int(toInt(r[12])),
			Weight: nanZero(toFloat(r[13])), Events: nanZero(toFloat(r[14])), Samples: int(toInt(r[15])), Threads: int(toInt(r[16])),
			Errno: toInt(r[17]), FirstNs: toInt(r[18]), LastNs: toInt(r[19])}
		s := w.Vitals[g.Vital]
		if s == nil || math.IsNaN(s.Weight[i]) {
			continue
		}
		k := key{i, g.Vital}
		dw[k] += g.Weight
		de[k] += g.Events
		w.Groups = append(w.Groups, g)
		ids = append(ids, g.KStack, g.UStack)
	}
	for n := range w.Groups {
		g := &w.Groups[n]
		k, s := key{g.Interval, g.Vital}, w.Vitals[g.Vital]
		g.Weight = share(g.Weight, dw[k]) * s.Weight[g.Interval]
		g.Events = share(g.Events, de[k]) * s.Events[g.Interval]
	}
	w.sumProcs()
	if err := w.Stacks.fetch(ctx, q, ids); err != nil {
		return err
	}

	// Rows of single samples, by kind: the first exit of each process per
	// interval, fatal signals, failed block requests, and the least free
	// memory per interval.
	var fatal []string
	for _, s := range fatalSignals {
		fatal = append(fatal, fmt.Sprint(s))
	}
	where := fmt.Sprintf(`s.host = %s AND e.start_ns >= %d AND e.start_ns < %d`, sqlString(w.Host), from-from%max(width, 1), to)
	res, err = q.Query(ctx, fmt.Sprintf(`WITH x AS (SELECT %[1]s AS b, s.* FROM samples s JOIN epochs e ON e.host = s.host AND e.epoch = s.epoch WHERE %[2]s)
		SELECT 'exit', b, min(epoch), min(ts_ns), pid, any_value(comm), 0, 0, '', '', 0, 0, 0, 0, NULL FROM x
			WHERE vital = 'syscall' AND syscall_nr IN (60, 231) GROUP BY b, pid
		UNION ALL (SELECT 'signal', b, epoch, ts_ns, pid, comm, signal, coalesce(target_pid, 0), '', '', coalesce(handler, 0),
			coalesce(result, 0), 0, 0, NULL FROM x
			WHERE vital = 'signal' AND signal IN (%[3]s) AND coalesce(handler, 0) = 0 ORDER BY ts_ns LIMIT 1000)
		UNION ALL (SELECT 'blio', b, epoch, ts_ns, pid, comm, 0, 0, coalesce(dev, ''), coalesce(op, ''), coalesce(sector, 0),
			coalesce(bytes_requested, 0), coalesce(bytes_completed, 0), coalesce(error, 0), NULL FROM x
			WHERE vital = 'blio' AND error <> 0 ORDER BY ts_ns LIMIT 1000)
		UNION ALL SELECT 'free', b, 0, 0, 0, '', 0, 0, '', '', 0, 0, 0, 0, CAST(min(free_kb) AS DOUBLE) FROM x
			WHERE vital IN ('kmem', 'umem') GROUP BY b`, bucketExpr(width), where, strings.Join(fatal, ", ")))
	if err != nil {
		return fmt.Errorf("load exits, signals and block requests: %w", err)
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
		case "free":
			w.FreeKB[i] = toFloat(r[14])
		}
	}
	sort.Slice(w.Signals, func(a, b int) bool { return w.Signals[a].TsNs < w.Signals[b].TsNs })
	sort.Slice(w.Unsatisfied, func(a, b int) bool { return w.Unsatisfied[a].TsNs < w.Unsatisfied[b].TsNs })
	return nil
}

func share(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return part / whole
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
