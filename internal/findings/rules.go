package findings

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/holter-dev/holter/internal/sysname"
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
	// LeakRate: pages a second a process must go on allocating, for
	// LeakIntervals and LeakMinDuration, for its allocations to be a
	// leak; LeakHorizon how far ahead a leak's severity projects it.
	// LeakGap: intervals without a kmem sample of the process a kernel
	// leak's run may span.
	LeakRate                     float64
	LeakMinDuration, LeakHorizon time.Duration
	LeakGap                      int
	// SignalStorm: signals per second a process sends that make a storm.
	SignalStorm float64
	// BusyCPU: CPUs a process must demand for a busy loop — use, or wait
	// to use: on a busy machine a loop gets less than it would burn — of
	// which it must get a fifth at least; BusyUserShare the
	// least share of that in user space, and BusyConcentration the least
	// share of the user-space time in its BusyFunctions heaviest
	// functions. Its progress signs must stay under BusySyscallsPerCPU
	// system calls and BusyFaultsPerCPU page faults a second per CPU it
	// uses, and BusyIOBytes of block and socket I/O a second.
	BusyCPU, BusyUserShare, BusyConcentration float64
	BusyFunctions                             int
	BusySyscallsPerCPU, BusyFaultsPerCPU      float64
	BusyIOBytes                               float64
	// FailedCalls: failed system calls a second that make a retry loop,
	// when at least FailedShare of the process's calls fail (a loop that
	// sleeps between tries fails half of them) for FailedMinDuration;
	// FailedSevere failed calls a second make the severity 1.
	FailedCalls, FailedShare, FailedSevere float64
	FailedMinDuration                      time.Duration
	// WaitMin: seconds a second a process must wait for a resource (Rule
	// #5) or, after waking, for a CPU (Rule #7), and WaitShare the least
	// share of its threads' time (for a CPU: of the time it wanted one)
	// that makes.
	WaitMin, WaitShare float64
}

// DefaultLevels are starting points for a small server; tune per fleet.
var DefaultLevels = Levels{
	CPUHigh: 0.8, ProcCPULow: 0.05, KernelShareHigh: 0.5,
	L2LowPerCPUms: 1, L2HighPerCPUms: 100,
	SchedHigh: 0.2, ProcSchedHigh: 0.1, ProcBlckHigh: 0.5, ProcBlioHigh: 1 << 20,
	ProcUmemHigh: 1000, ProcSyscallHigh: 20000, KmemPerSyscallLow: 0.001,
	LeakIntervals: 3, LeakMinPages: 256, LeakRate: 256, LeakMinDuration: 30 * time.Second, LeakHorizon: time.Hour, LeakGap: 2,
	SignalStorm: 100,
	BusyCPU:     0.25, BusyUserShare: 0.8, BusyConcentration: 0.7, BusyFunctions: 3,
	BusySyscallsPerCPU: 1000, BusyFaultsPerCPU: 1000, BusyIOBytes: 64 << 10,
	FailedCalls: 100, FailedShare: 0.4, FailedSevere: 10000, FailedMinDuration: 10 * time.Second,
	WaitMin: 0.1, WaitShare: 0.2,
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
		rule{"rule10-died", []string{"signal"}, died, l},
	}
}

// Options chooses the default filter set.
type Options struct {
	Levels Levels
	EWMA   EWMA
}

// DefaultFilters are an EWMA detector on every vital's weight rate, the
// per-process detectors and the ten rules.
func DefaultFilters(o *Options) []Filter {
	opt := Options{Levels: DefaultLevels}
	if o != nil {
		opt = *o
	}
	var fs []Filter
	for _, v := range Vitals {
		fs = append(fs, EWMAFilter{Measure: WeightRate(v), Detector: opt.EWMA})
	}
	fs = append(fs, Detectors(opt.Levels)...)
	return append(fs, Rules(opt.Levels)...)
}

func cpus(p ProcStat) float64 { return p.Weight / 1e6 }

// machineShare is CPUs as a share of the machine's.
func (w *Window) machineShare(cpus float64) float64 { return cpus / float64(max(w.CPUs, 1)) }

// topCPU is the process that used the most CPU in interval i, other than
// pid; nil when none did.
func (w *Window) topCPU(i int, except uint32) *Profile {
	for _, p := range w.Profiles(i) {
		if p.Pid != except && p.Pid != 0 && p.CPU > 0 {
			return p
		}
	}
	return nil
}

// named is " in FUNCTION" for a culprit with a function, else "".
func named(c *Culprit, prep string) string {
	if c == nil || c.Function == "" {
		return ""
	}
	return " " + prep + " " + c.Function
}

// Rule #1: high cpu with nearly no L2 misses is a busy loop. Severity: the
// machine's CPU utilisation.
func busyLoop(w *Window, l Levels) []Finding {
	var out []Finding
	for i := range w.Intervals {
		util := w.CPUUtil(i)
		cpuMs := w.series("cpu").Weight[i] / 1e3
		misses := w.series("l2").Weight[i] / math.Max(cpuMs, 1)
		if util >= l.CPUHigh && misses <= l.L2LowPerCPUms {
			f := at(i, "cpu", util, fmt.Sprintf("CPU %.0f%% busy with %.3g L2 misses per CPU-ms: a busy loop", util*100, misses), "cpu")
			f.Severity, f.Resource = math.Min(util, 1), ResourceCPU
			f.Evidence = []Evidence{
				{Name: "cpu utilisation", Value: util, Against: l.CPUHigh, Relation: ">=", Interval: i},
				{Name: "l2 misses per cpu-ms", Value: misses, Against: l.L2LowPerCPUms, Relation: "<=", Interval: i}}
			for k, p := range w.ProcsOf(i, "cpu") {
				if k < 3 {
					f.Processes = append(f.Processes, procOf(p))
				}
			}
			if top := w.topCPU(i, 0); top != nil {
				f.Culprit = w.culprit(top.Pid, i, i, func(g Group) bool { return !g.InKernel }, "cpu")
			}
			out = append(out, f)
		}
	}
	return out
}

// Rule #2: kernel memory allocated and not freed, interval after interval.
// It judges the machine, whose net allocation holds the page cache too,
// which the kernel gives back when it must: the memory-leak detector names
// the process; this rule's finding is evidence, with no severity of its
// own.
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
		f.First, f.Resource = first, ResourceMemory
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
			if p.Vital == "kmem" && p.Interval >= first && p.Interval <= i && (w.IncludeSelf || !IsMonitor(p.Comm, p.Exe)) {
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

// Rule #3: a block request that failed hints at bad blocks. Chopstix
// judged a request by the bytes it returned against those it asked for;
// Linux completes a large request in parts, each completion reporting the
// bytes of its part, so only the status tells a failure here. Severity 1:
// data did not reach the disk or come back from it.
func unsatisfiedIO(w *Window, _ Levels) []Finding {
	var out []Finding
	for _, r := range w.Unsatisfied {
		f := at(r.Interval, fmt.Sprintf("dev %s", r.Dev), float64(r.Requested-min(r.Completed, r.Requested)),
			fmt.Sprintf("%s of %d bytes at sector %d on %s completed %d bytes (status %d)", r.Op, r.Requested, r.Sector, r.Dev, r.Completed, r.Error), "blio")
		f.Severity, f.Resource = 1, ResourceDisk
		f.Processes = []Process{{Pid: r.Pid, Comm: r.Comm, Vital: "blio"}}
		f.Samples = []SampleRef{r.SampleRef}
		f.Evidence = []Evidence{{Name: "bytes completed", Value: float64(r.Completed), Against: float64(r.Requested), Relation: "< requested", Unit: "bytes", Interval: r.Interval}}
		if c := w.culprit(r.Pid, r.Interval, r.Interval, nil, "blio"); c != nil {
			f.Culprit = c
		} else {
			f.Culprit = &Culprit{Pid: r.Pid, Comm: r.Comm}
		}
		out = append(out, f)
	}
	return out
}

// Rule #4: the machine is busy, mostly in the kernel, while processes
// wait to run: a kernel bottleneck. Severity: the share of the machine's
// CPU spent in the kernel.
func kernelBottleneck(w *Window, l Levels) []Finding {
	var out []Finding
	for i := range w.Intervals {
		util, kshare, sched := w.CPUUtil(i), w.KernelCPU[i], w.WeightRate("sched", i)/1e6
		if util >= l.CPUHigh && kshare >= l.KernelShareHigh && sched >= l.SchedHigh {
			f := at(i, "kernel", sched, fmt.Sprintf("CPU %.0f%% busy, %.0f%% of it in the kernel, while threads waited %.2f s/s to run: a kernel bottleneck",
				util*100, kshare*100, sched), "cpu", "sched")
			f.Severity, f.Resource = math.Min(util*kshare, 1), ResourceCPU
			f.Evidence = []Evidence{
				{Name: "cpu utilisation", Value: util, Against: l.CPUHigh, Relation: ">=", Interval: i},
				{Name: "kernel share of cpu", Value: kshare, Against: l.KernelShareHigh, Relation: ">=", Interval: i},
				{Name: "scheduling delay", Value: sched, Against: l.SchedHigh, Relation: ">=", Unit: "s/s", Interval: i}}
			var top *Profile
			for _, p := range w.Profiles(i) {
				if top == nil || p.CPU-p.CPUUser > top.CPU-top.CPUUser {
					top = p
				}
			}
			if top != nil {
				f.Culprit = w.culprit(top.Pid, i, i, func(g Group) bool { return g.InKernel }, "cpu")
			}
			out = append(out, f)
		}
	}
	return out
}

// Rule #5: a process blocked much of the time, and on what: the disk, a
// network peer, a lock or memory, read from where its threads slept (and,
// for locks, from its contended futex calls and the lock vital), with the
// vital that mirrors it (blio, sock, lock) as evidence. Blocking to wait
// for work — a poll, a timer, a child, a condition, a pipe — is normal
// and not reported, nor are kernel threads, which wait on behalf of
// others. Severity: the share of the waiting threads' time.
func blockingMirrored(w *Window, l Levels) []Finding {
	mirrors := map[Wait]string{WaitDisk: "blio", WaitSocket: "sock", WaitLock: "lock"}
	var out []Finding
	for i := w.ReportFrom; i < len(w.Intervals); i++ {
		for _, p := range w.Profiles(i) {
			if KernelThread(p.Exe) {
				continue
			}
			for _, c := range []Wait{WaitDisk, WaitSocket, WaitLock, WaitMemory} {
				blocked := p.Blocked[c]
				if c == WaitLock {
					blocked += p.LockWait
				}
				threads := max(p.Threads[c], 1)
				share := math.Min(blocked/float64(threads), 1)
				if blocked < l.WaitMin || share < l.WaitShare {
					continue
				}
				f := procFinding(w, p, share, blocked, c.Resource(), "", "blck")
				f.Subject += " " + c.Resource()
				f.Culprit = w.culprit(p.Pid, i, i, func(g Group) bool {
					switch g.Vital {
					case "blck":
						return ClassifyWait(w.Stacks.Get(g.KStack), w.Stacks.Get(g.UStack)) == c
					case "syscall":
						return c == WaitLock && g.Syscall == futexNr
					}
					return c == WaitLock
				}, "blck", "syscall", "lock")
				f.Evidence = []Evidence{{Name: "blocked on " + c.Resource(), Value: blocked, Against: l.WaitMin, Relation: ">=", Unit: "s/s", Interval: i},
					{Name: "share of its waiting threads' time", Value: share, Against: l.WaitShare, Relation: ">=", Interval: i}}
				mirror := ""
				if v, ok := mirrors[c]; ok {
					if m := w.Proc(i, v, p.Pid); m.Samples > 0 {
						f.Vitals = append(f.Vitals, v)
						mirror = ", mirrored by " + v
						f.Evidence = append(f.Evidence, Evidence{Name: v, Value: m.Weight / w.Intervals[i].Seconds(), Relation: "mirrors", Unit: unitOf(v) + "/s", Interval: i})
					}
				}
				f.Summary = fmt.Sprintf("%s waits for the %s%s %.0f%% of the time (%.2f s/s over %d threads)%s",
					procSubject(ProcStat{Pid: p.Pid, Comm: p.Comm}), c.Resource(), named(f.Culprit, "in"), share*100, blocked, threads, mirror)
				out = append(out, f)
			}
		}
	}
	return out
}

// Rule #6: a process faulting in many user pages while it waits for the
// disk and does block I/O is short of memory and swapping (or paging its
// program in from a slow disk). Severity: the share of its threads' time
// spent waiting for the disk.
func swapping(w *Window, l Levels) []Finding {
	var out []Finding
	for i := w.ReportFrom; i < len(w.Intervals); i++ {
		for _, p := range w.Profiles(i) {
			blocked, threads := p.Blocked[WaitDisk], max(p.Threads[WaitDisk], 1)
			if p.Faults < l.ProcUmemHigh || blocked < l.WaitMin || p.Blio < l.ProcBlioHigh {
				continue
			}
			share := math.Min(blocked/float64(threads), 1)
			f := procFinding(w, p, share, p.Faults, ResourceMemory, fmt.Sprintf("%s faulted %.0f pages/s while waiting for the disk %.2f s/s with %.0f bytes/s of block I/O: low memory, swapping",
				procSubject(ProcStat{Pid: p.Pid, Comm: p.Comm}), p.Faults, blocked, p.Blio), "umem", "blck", "blio")
			f.Culprit = w.culprit(p.Pid, i, i, nil, "umem", "blck")
			f.Evidence = []Evidence{
				{Name: "user page faults", Value: p.Faults, Against: l.ProcUmemHigh, Relation: ">=", Unit: "faults/s", Interval: i},
				{Name: "blocked on the disk", Value: blocked, Against: l.WaitMin, Relation: ">=", Unit: "s/s", Interval: i},
				{Name: "block I/O", Value: p.Blio, Against: l.ProcBlioHigh, Relation: ">=", Unit: "bytes/s", Interval: i}}
			out = append(out, f)
		}
	}
	return out
}

// Rule #7: a process that barely runs while it waits long to be scheduled,
// with the kernel not busy, is being held from scheduling. Only waits after
// a wake-up count: a thread that wakes to do a little work and waits for a
// CPU is held, while one preempted in the middle of its work is sharing a
// busy machine fairly (Chopstix's "held normally", which is not a
// problem). The culprit is the process that used the most CPU meanwhile.
// Severity: the share of its waiting threads' time spent so.
func heldFromScheduling(w *Window, l Levels) []Finding {
	var out []Finding
	for i := w.ReportFrom; i < len(w.Intervals); i++ {
		util := w.CPUUtil(i)
		if util*nanZero(w.KernelCPU[i]) >= l.KernelShareHigh*l.CPUHigh {
			continue // a kernel bottleneck (Rule #4)
		}
		for _, p := range w.Profiles(i) {
			share := p.Woken / (p.Woken + p.CPU)
			if p.Woken < l.WaitMin || share < l.WaitShare || KernelThread(p.Exe) {
				continue
			}
			f := procFinding(w, p, p.Woken/float64(max(p.WokenThreads, 1)), p.Woken, ResourceRunQueue, "", "sched", "cpu")
			hog := w.topCPU(i, p.Pid)
			if hog != nil {
				f.Culprit = w.culprit(hog.Pid, i, i, func(g Group) bool { return !g.InKernel }, "cpu")
				f.Processes = append(f.Processes, Process{Pid: hog.Pid, Comm: hog.Comm, Exe: hog.Exe, Vital: "cpu", Weight: hog.CPU})
			}
			by := ""
			if hog != nil {
				by = fmt.Sprintf(" while %s used %.2f CPUs%s", procSubject(ProcStat{Pid: hog.Pid, Comm: hog.Comm}), hog.CPU, named(f.Culprit, "in"))
			}
			f.Summary = fmt.Sprintf("%s waited %.2f s/s for a CPU after waking, %.0f%% of the time it wanted one%s: held from scheduling",
				procSubject(ProcStat{Pid: p.Pid, Comm: p.Comm}), p.Woken, share*100, by)
			f.Evidence = []Evidence{
				{Name: "scheduling delay after wake-ups", Value: p.Woken, Against: l.WaitMin, Relation: ">=", Unit: "s/s", Interval: i},
				{Name: "cpu used", Value: p.CPU, Relation: "while", Unit: "CPUs", Interval: i},
				{Name: "machine cpu utilisation", Value: util, Relation: "while", Interval: i}}
			out = append(out, f)
		}
	}
	return out
}

// Rule #8: many system calls with almost no kernel allocation behind them
// is a busy loop around a system call (a send that keeps failing).
// Severity: the share of the machine's CPU the process uses.
func syscallLoop(w *Window, l Levels) []Finding {
	var out []Finding
	for i := w.ReportFrom; i < len(w.Intervals); i++ {
		for _, p := range w.Profiles(i) {
			if p.Syscalls < l.ProcSyscallHigh {
				continue
			}
			pages := 0.0
			for _, a := range p.Alloc {
				pages += a
			}
			perCall := pages / p.Syscalls
			if perCall > l.KmemPerSyscallLow {
				continue
			}
			f := procFinding(w, p, w.machineShare(p.CPU), p.Syscalls, ResourceSyscall, "", "syscall", "kmem")
			f.Culprit = w.culprit(p.Pid, i, i, nil, "syscall")
			f.Summary = fmt.Sprintf("%s made %.0f system calls/s%s allocating %.2g kernel pages per call: a busy loop around a system call",
				procSubject(ProcStat{Pid: p.Pid, Comm: p.Comm}), p.Syscalls, named(f.Culprit, "in"), perCall)
			f.Evidence = []Evidence{
				{Name: "system calls", Value: p.Syscalls, Against: l.ProcSyscallHigh, Relation: ">=", Unit: "calls/s", Interval: i},
				{Name: "kernel pages per call", Value: perCall, Against: l.KmemPerSyscallLow, Relation: "<=", Interval: i}}
			out = append(out, f)
		}
	}
	return out
}

// Rule #9: many user page faults with few cache misses is a process
// initialising, which is normal and not reported; with many cache misses,
// load increasing, reported with no severity: it is a change to know of,
// not a cost.
func initOrLoad(w *Window, l Levels) []Finding {
	var out []Finding
	for i, iv := range w.Intervals {
		cpuMs := w.series("cpu").Weight[i] / 1e3
		misses := w.series("l2").Weight[i] / math.Max(cpuMs, 1)
		if misses < l.L2HighPerCPUms {
			continue
		}
		for _, p := range w.ProcsOf(i, "umem") {
			faults := p.Events / iv.Seconds()
			if faults < l.ProcUmemHigh {
				continue
			}
			f := at(i, procSubject(p)+" under increasing load", faults, fmt.Sprintf("%s faulted %.0f pages/s with %.3g L2 misses per CPU-ms: under increasing load", procSubject(p), faults, misses), "umem", "l2")
			f.Resource = ResourceMemory
			f.Processes = []Process{procOf(p)}
			out = append(out, f)
		}
	}
	return out
}

// Rule #10: a process whose vital signs stop with a fatal signal sent to
// it died: a fault (SIGSEGV, SIGBUS, SIGABRT, …) is a crash, severity 1;
// SIGKILL a kill, whose cost is not known (a supervisor stopping a
// child does it too). A process that called exit died as it meant to,
// and one that just went quiet is idle; neither is reported.
func died(w *Window, l Levels) []Finding {
	last := map[uint32]int{} // pid -> last interval with samples
	names := map[uint32]ProcStat{}
	for _, p := range w.Procs {
		if p.Pid == 0 || !w.IncludeSelf && IsMonitor(p.Comm, p.Exe) {
			continue
		}
		if i, ok := last[p.Pid]; !ok || p.Interval > i {
			last[p.Pid] = p.Interval
		}
		names[p.Pid] = p
	}
	var out []Finding
	seen := map[uint32]bool{}
	for _, s := range w.Signals {
		i, ok := last[s.TargetPid]
		if !ok || seen[s.TargetPid] || s.Interval < i || s.Interval > i+1 || s.Interval < w.ReportFrom {
			continue
		}
		seen[s.TargetPid] = true
		p := names[s.TargetPid]
		cause, severity := fmt.Sprintf("%s from pid %d (%s): crashed", sysname.Signal(s.Signal), s.Pid, s.Comm), 1.0
		if s.Signal == 9 {
			cause, severity = fmt.Sprintf("SIGKILL from pid %d (%s): killed", s.Pid, s.Comm), 0
		}
		f := at(s.Interval, procSubject(p), float64(s.Signal), fmt.Sprintf("%s stopped showing vital signs: %s", procSubject(p), cause), "signal")
		f.Severity, f.Resource = severity, ResourceProcess
		f.Processes = []Process{procOf(p)}
		f.Samples = []SampleRef{s.SampleRef}
		f.Culprit = w.culprit(p.Pid, max(i-1, 0), i, nil)
		out = append(out, f)
	}
	return out
}
