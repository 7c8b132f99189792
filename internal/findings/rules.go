package findings

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Levels are the vital-specific lines between "low" and "high" that the
// rules use (Chopstix §3.2: "the classification of values as low and high
// is vital-specific"). Rates are per second of the interval; time-weighted
// vitals are in seconds of delay per second.
type Levels struct {
	// CPUHigh: machine CPU utilisation (0..1) that is high.
	CPUHigh float64
	// ProcCPULow: a process's CPU use, in CPUs, that is low.
	ProcCPULow float64
	// KernelShareHigh: share of CPU time in the kernel that is high.
	KernelShareHigh float64
	// L2LowPerCPUms: cache misses per CPU-millisecond that are low.
	L2LowPerCPUms float64
	// L2HighPerCPUms: cache misses per CPU-millisecond that are high.
	L2HighPerCPUms float64
	// SchedHigh: the machine's runnable-but-waiting time (s/s) that is high.
	SchedHigh float64
	// ProcSchedHigh: a process's scheduling delay (s/s) that is high.
	ProcSchedHigh float64
	// ProcBlckHigh: a process's blocked time (s/s) that is high.
	ProcBlckHigh float64
	// ProcBlioHigh: a process's block I/O (bytes/s) that is high.
	ProcBlioHigh float64
	// ProcUmemHigh: a process's user page faults per second that are high.
	ProcUmemHigh float64
	// ProcSyscallHigh: a process's system calls per second that are high.
	ProcSyscallHigh float64
	// KmemPerSyscallLow: pages a process allocates per system call that
	// are low (Rule #8).
	KmemPerSyscallLow float64
	// LeakIntervals: consecutive intervals of net kernel allocation that
	// make a leak (Rule #2), and LeakMinPages the least total growth.
	LeakIntervals int
	LeakMinPages  float64
	// GoneAfter: intervals a process must have been seen in before its
	// disappearance counts (Rule #10), each with at least GoneMinSamples.
	GoneAfter      int
	GoneMinSamples int
	// SignalStorm: signals per second that make a storm.
	SignalStorm float64
}

// DefaultLevels are starting points for a small server; tune per fleet.
var DefaultLevels = Levels{
	CPUHigh: 0.8, ProcCPULow: 0.05, KernelShareHigh: 0.5,
	L2LowPerCPUms: 1, L2HighPerCPUms: 100,
	SchedHigh: 0.2, ProcSchedHigh: 0.1, ProcBlckHigh: 0.5, ProcBlioHigh: 1 << 20,
	ProcUmemHigh: 1000, ProcSyscallHigh: 20000, KmemPerSyscallLow: 0.001,
	LeakIntervals: 5, LeakMinPages: 256,
	GoneAfter: 3, GoneMinSamples: 2,
	SignalStorm: 100,
}

// rule is a diagnostic rule of Chopstix §3.2 expressed over holter's vitals.
type rule struct {
	name  string
	needs []string
	eval  func(w *Window, l Levels) []Finding
	l     Levels
}

func (r rule) Name() string                 { return r.name }
func (r rule) Needs() []string              { return r.needs }
func (r rule) Evaluate(w *Window) []Finding { return r.eval(w, r.l) }

// Rules returns the ten rules of Chopstix §3.2 as filters; see doc.go for
// how each maps onto holter's vitals.
func Rules(l Levels) []Filter {
	return []Filter{
		rule{"rule1-busy-loop", []string{"cpu", "l2"}, busyLoop, l},
		rule{"rule2-leak", []string{"kmem"}, leak, l},
		rule{"rule3-unsatisfied-io", []string{"blio"}, unsatisfiedIO, l},
		rule{"rule4-kernel-bottleneck", []string{"cpu", "sched"}, kernelBottleneck, l},
		rule{"rule5-blocking", []string{"blck"}, blockingMirrored, l}, // mirrors looked for in whichever of blio, lock, sock are recorded
		rule{"rule6-swapping", []string{"umem", "blck", "blio"}, swapping, l},
		rule{"rule7-held", []string{"cpu", "sched"}, heldFromScheduling, l},
		rule{"rule8-syscall-loop", []string{"syscall", "kmem"}, syscallLoop, l},
		rule{"rule9-init-or-load", []string{"umem", "l2", "cpu"}, initOrLoad, l},
		rule{"rule10-disappeared", nil, disappeared, l},
	}
}

// Options chooses the default filter set.
type Options struct {
	Levels Levels
	EWMA   EWMA
}

// DefaultFilters are an EWMA detector on every vital's weight rate, a
// signal storm threshold and the ten rules.
func DefaultFilters(o *Options) []Filter {
	opt := Options{Levels: DefaultLevels}
	if o != nil {
		opt = *o
	}
	var fs []Filter
	for _, v := range Vitals {
		fs = append(fs, EWMAFilter{Measure: WeightRate(v), Detector: opt.EWMA})
	}
	storm := opt.Levels.SignalStorm
	fs = append(fs, Threshold{Label: "signal-storm", Measure: EventRate("signal"), Above: &storm})
	return append(fs, Rules(opt.Levels)...)
}

func cpus(p ProcStat) float64 { return p.Weight / 1e6 }

// Rule #1: high cpu with nearly no L2 misses is a busy loop.
func busyLoop(w *Window, l Levels) []Finding {
	var out []Finding
	for i := range w.Intervals {
		util := w.CPUUtil(i)
		cpuMs := w.series("cpu").Weight[i] / 1e3
		misses := w.series("l2").Weight[i] / math.Max(cpuMs, 1)
		if util >= l.CPUHigh && misses <= l.L2LowPerCPUms {
			f := at(i, "cpu", util, fmt.Sprintf("CPU %.0f%% busy with %.3g L2 misses per CPU-ms: a busy loop", util*100, misses), "cpu")
			f.Evidence = []Evidence{
				{Name: "cpu utilisation", Value: util, Against: l.CPUHigh, Relation: ">=", Interval: i},
				{Name: "l2 misses per cpu-ms", Value: misses, Against: l.L2LowPerCPUms, Relation: "<=", Interval: i}}
			for k, p := range w.ProcsOf(i, "cpu") {
				if k < 3 {
					f.Processes = append(f.Processes, procOf(p))
				}
			}
			out = append(out, f)
		}
	}
	return out
}

// Rule #2: kernel memory allocated and not freed, interval after interval.
func leak(w *Window, l Levels) []Finding {
	s := w.series("kmem")
	var out []Finding
	run, total := 0, 0.0
	for i := range w.Intervals {
		net := s.Weight[i] - s.Secondary[i]
		if math.IsNaN(net) || net <= 0 {
			run, total = 0, 0
			continue
		}
		run++
		total += net
		if run < l.LeakIntervals || total < l.LeakMinPages {
			continue
		}
		first := i - run + 1
		f := at(i, "kmem", total, fmt.Sprintf("net kernel allocation grew %d intervals running, +%.0f pages", run, total), "kmem")
		f.First = first
		f.Evidence = []Evidence{{Name: "net pages allocated", Value: total, Against: l.LeakMinPages, Relation: ">=", Unit: "pages", Interval: i}}
		if a, b := w.FreeKB[first], w.FreeKB[i]; !math.IsNaN(a) && !math.IsNaN(b) {
			f.Evidence = append(f.Evidence, Evidence{Name: "free memory", Value: b, Against: a, Relation: "vs start", Unit: "KiB", Interval: i})
			if b < a {
				f.Summary += fmt.Sprintf(", free memory fell from %.0f to %.0f KiB", a, b)
			}
		}
		// The processes with the largest allocation over the run.
		byPid := map[uint32]Process{}
		for _, p := range w.Procs {
			if p.Vital == "kmem" && p.Interval >= first && p.Interval <= i {
				q := byPid[p.Pid]
				q.Pid, q.Comm, q.Exe, q.Vital = p.Pid, p.Comm, p.Exe, "kmem"
				q.Weight += p.Weight
				byPid[p.Pid] = q
			}
		}
		f.Processes = topProcesses(byPid, 3)
		out = append(out, f)
	}
	return out
}

func topProcesses(m map[uint32]Process, n int) []Process {
	var ps []Process
	for _, p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(a, b int) bool {
		return ps[a].Weight > ps[b].Weight || ps[a].Weight == ps[b].Weight && ps[a].Pid < ps[b].Pid
	})
	if len(ps) > n {
		ps = ps[:n]
	}
	return ps
}

// Rule #3: a block request that returned less than it asked for (or
// failed) hints at bad blocks.
func unsatisfiedIO(w *Window, _ Levels) []Finding {
	var out []Finding
	for _, r := range w.Unsatisfied {
		f := at(r.Interval, fmt.Sprintf("dev %s", r.Dev), float64(r.Requested-min(r.Completed, r.Requested)),
			fmt.Sprintf("%s of %d bytes at sector %d on %s completed %d bytes (status %d)", r.Op, r.Requested, r.Sector, r.Dev, r.Completed, r.Error), "blio")
		f.Processes = []Process{{Pid: r.Pid, Comm: r.Comm, Vital: "blio"}}
		f.Samples = []SampleRef{r.SampleRef}
		f.Evidence = []Evidence{{Name: "bytes completed", Value: float64(r.Completed), Against: float64(r.Requested), Relation: "< requested", Unit: "bytes", Interval: r.Interval}}
		out = append(out, f)
	}
	return out
}

// Rule #4: the machine is busy, mostly in the kernel, while processes
// wait to run: a kernel bottleneck.
func kernelBottleneck(w *Window, l Levels) []Finding {
	var out []Finding
	for i := range w.Intervals {
		util, kshare, sched := w.CPUUtil(i), w.KernelCPU[i], w.WeightRate("sched", i)/1e6
		if util >= l.CPUHigh && kshare >= l.KernelShareHigh && sched >= l.SchedHigh {
			f := at(i, "kernel", sched, fmt.Sprintf("CPU %.0f%% busy, %.0f%% of it in the kernel, while threads waited %.2f s/s to run: a kernel bottleneck",
				util*100, kshare*100, sched), "cpu", "sched")
			f.Evidence = []Evidence{
				{Name: "cpu utilisation", Value: util, Against: l.CPUHigh, Relation: ">=", Interval: i},
				{Name: "kernel share of cpu", Value: kshare, Against: l.KernelShareHigh, Relation: ">=", Interval: i},
				{Name: "scheduling delay", Value: sched, Against: l.SchedHigh, Relation: ">=", Unit: "s/s", Interval: i}}
			out = append(out, f)
		}
	}
	return out
}

// lockShareOfBlocked is the least share of a process's blocked time that
// its lock waits must make up to mirror it (Rule #5).
const lockShareOfBlocked = 0.1

// Rule #5: a process blocked much of the time, and what mirrors it among
// blio, lock and sock — the source of the blockage.
func blockingMirrored(w *Window, l Levels) []Finding {
	var out []Finding
	for i, iv := range w.Intervals {
		for _, p := range w.ProcsOf(i, "blck") {
			blocked := p.Weight / 1e6 / iv.Seconds()
			if blocked < l.ProcBlckHigh {
				continue
			}
			var mirrors []string
			f := at(i, procSubject(p), blocked, "", "blck")
			f.Processes = []Process{procOf(p)}
			f.Evidence = []Evidence{{Name: "blocked", Value: blocked, Against: l.ProcBlckHigh, Relation: ">=", Unit: "s/s", Interval: i}}
			for _, v := range []string{"blio", "lock", "sock"} {
				m := w.Proc(i, v, p.Pid)
				if m.Samples == 0 {
					continue
				}
				// Lock waits are time, like blocking: a moment of
				// contention in a process whose threads are otherwise
				// parked waiting for work (a Go runtime's, blocked
				// seconds a second) does not explain the blocking.
				if v == "lock" && m.Weight < lockShareOfBlocked*p.Weight {
					continue
				}
				mirrors = append(mirrors, v)
				f.Vitals = append(f.Vitals, v)
				f.Evidence = append(f.Evidence, Evidence{Name: v, Value: m.Weight / iv.Seconds(), Relation: "mirrors", Unit: unitOf(v) + "/s", Interval: i})
			}
			if len(mirrors) == 0 {
				// Blocking not mirrored by I/O, locks or sockets is a
				// process waiting for work (a pipe, a timer, a futex): normal.
				continue
			}
			f.Summary = fmt.Sprintf("%s blocked %.2f s/s, mirrored by %s", procSubject(p), blocked, strings.Join(mirrors, ", "))
			out = append(out, f)
		}
	}
	return out
}

// Rule #6: a process faulting in many user pages while it blocks and does
// block I/O is short of memory and swapping.
func swapping(w *Window, l Levels) []Finding {
	var out []Finding
	for i, iv := range w.Intervals {
		for _, p := range w.ProcsOf(i, "umem") {
			faults := p.Events / iv.Seconds()
			if faults < l.ProcUmemHigh {
				continue
			}
			blocked := w.Proc(i, "blck", p.Pid).Weight / 1e6 / iv.Seconds()
			io := w.Proc(i, "blio", p.Pid).Weight / iv.Seconds()
			if blocked < l.ProcBlckHigh || io < l.ProcBlioHigh {
				continue
			}
			f := at(i, procSubject(p), faults, fmt.Sprintf("%s faulted %.0f pages/s while blocked %.2f s/s with %.0f bytes/s of block I/O: low memory, swapping",
				procSubject(p), faults, blocked, io), "umem", "blck", "blio")
			f.Processes = []Process{procOf(p)}
			f.Evidence = []Evidence{
				{Name: "user page faults", Value: faults, Against: l.ProcUmemHigh, Relation: ">=", Unit: "faults/s", Interval: i},
				{Name: "blocked", Value: blocked, Against: l.ProcBlckHigh, Relation: ">=", Unit: "s/s", Interval: i},
				{Name: "block I/O", Value: io, Against: l.ProcBlioHigh, Relation: ">=", Unit: "bytes/s", Interval: i}}
			out = append(out, f)
		}
	}
	return out
}

// Rule #7: a process that barely runs while it waits long to be scheduled,
// with the kernel not busy, is being held from scheduling — normally when
// the machine is busy (fair sharing), abnormally when it is not.
func heldFromScheduling(w *Window, l Levels) []Finding {
	var out []Finding
	for i, iv := range w.Intervals {
		util := w.CPUUtil(i)
		kernel := util * nanZero(w.KernelCPU[i])
		for _, p := range w.ProcsOf(i, "sched") {
			wait := p.Weight / 1e6 / iv.Seconds()
			used := cpus(w.Proc(i, "cpu", p.Pid)) / iv.Seconds()
			if wait < l.ProcSchedHigh || used > l.ProcCPULow || kernel >= l.KernelShareHigh*l.CPUHigh {
				continue
			}
			how, score := "abnormally (the machine is not busy)", wait
			if util >= l.CPUHigh {
				how, score = "normally, in fair sharing of a busy machine", wait/10
			}
			f := at(i, procSubject(p), score, fmt.Sprintf("%s waited %.2f s/s to run and ran %.3f CPUs: held from scheduling %s",
				procSubject(p), wait, used, how), "sched", "cpu")
			f.Processes = []Process{procOf(p)}
			f.Evidence = []Evidence{
				{Name: "scheduling delay", Value: wait, Against: l.ProcSchedHigh, Relation: ">=", Unit: "s/s", Interval: i},
				{Name: "cpu used", Value: used, Against: l.ProcCPULow, Relation: "<=", Unit: "CPUs", Interval: i},
				{Name: "machine cpu utilisation", Value: util, Against: l.CPUHigh, Relation: "vs high", Interval: i}}
			out = append(out, f)
		}
	}
	return out
}

// Rule #8: many system calls with almost no kernel allocation behind them
// is a busy loop around a system call (a send that keeps failing).
func syscallLoop(w *Window, l Levels) []Finding {
	var out []Finding
	for i, iv := range w.Intervals {
		for _, p := range w.ProcsOf(i, "syscall") {
			rate := p.Events / iv.Seconds()
			if rate < l.ProcSyscallHigh {
				continue
			}
			pages := w.Proc(i, "kmem", p.Pid).Weight
			perCall := pages / math.Max(p.Events, 1)
			if perCall > l.KmemPerSyscallLow {
				continue
			}
			f := at(i, procSubject(p), rate, fmt.Sprintf("%s made %.0f system calls/s allocating %.2g kernel pages per call: a busy loop around a system call",
				procSubject(p), rate, perCall), "syscall", "kmem")
			f.Processes = []Process{procOf(p)}
			f.Evidence = []Evidence{
				{Name: "system calls", Value: rate, Against: l.ProcSyscallHigh, Relation: ">=", Unit: "calls/s", Interval: i},
				{Name: "kernel pages per call", Value: perCall, Against: l.KmemPerSyscallLow, Relation: "<=", Interval: i}}
			out = append(out, f)
		}
	}
	return out
}

// Rule #9: many user page faults with few cache misses is a process
// initialising; with many cache misses, load increasing.
func initOrLoad(w *Window, l Levels) []Finding {
	var out []Finding
	for i, iv := range w.Intervals {
		cpuMs := w.series("cpu").Weight[i] / 1e3
		misses := w.series("l2").Weight[i] / math.Max(cpuMs, 1)
		for _, p := range w.ProcsOf(i, "umem") {
			faults := p.Events / iv.Seconds()
			if faults < l.ProcUmemHigh {
				continue
			}
			var what string
			switch {
			case misses <= l.L2LowPerCPUms:
				what = "initialising"
			case misses >= l.L2HighPerCPUms:
				what = "under increasing load"
			default:
				continue
			}
			f := at(i, procSubject(p)+" "+what, faults, fmt.Sprintf("%s faulted %.0f pages/s with %.3g L2 misses per CPU-ms: %s", procSubject(p), faults, misses, what), "umem", "l2")
			f.Processes = []Process{procOf(p)}
			out = append(out, f)
		}
	}
	return out
}

// Rule #10: a process whose vital signs stop abruptly has died or hung;
// the signals it received and its exit calls tell which.
func disappeared(w *Window, l Levels) []Finding {
	seen := map[uint32][]int{} // pid -> samples per interval
	names := map[uint32]ProcStat{}
	for _, p := range w.Procs {
		if p.Pid == 0 {
			continue
		}
		if seen[p.Pid] == nil {
			seen[p.Pid] = make([]int, len(w.Intervals))
		}
		seen[p.Pid][p.Interval] += p.Samples
		names[p.Pid] = p
	}
	var out []Finding
	for pid, per := range seen {
		for i := l.GoneAfter; i < len(w.Intervals); i++ {
			if per[i] > 0 {
				continue
			}
			alive := true
			for k := i - l.GoneAfter; k < i; k++ {
				alive = alive && per[k] >= l.GoneMinSamples
			}
			if !alive {
				continue
			}
			p := names[pid]
			cause := "no exit or fatal signal was sampled: it may have hung, or died unseen"
			f := at(i, procSubject(p), float64(per[i-1]), "", "signal", "syscall")
			f.Processes = []Process{procOf(p)}
			for _, s := range w.Signals {
				if s.TargetPid == pid && s.Interval >= i-1 && s.Interval <= i {
					f.Samples = append(f.Samples, s.SampleRef)
					switch s.Signal {
					case 9:
						cause = fmt.Sprintf("SIGKILL from pid %d (%s): killed", s.Pid, s.Comm)
					case 11, 7, 4, 8, 6:
						cause = fmt.Sprintf("signal %d: accidental death (a fault)", s.Signal)
					case 15, 2, 1:
						cause = fmt.Sprintf("signal %d from pid %d (%s): asked to terminate", s.Signal, s.Pid, s.Comm)
					}
				}
			}
			for _, e := range w.Exits {
				if e.Pid == pid && e.Interval >= i-1 && e.Interval <= i {
					f.Samples = append(f.Samples, e)
					cause = "it called exit: voluntary death"
				}
			}
			f.Summary = fmt.Sprintf("%s stopped showing vital signs: %s", procSubject(p), cause)
			out = append(out, f)
			break
		}
	}
	return out
}
