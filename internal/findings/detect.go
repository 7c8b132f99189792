package findings

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/holter-dev/holter/internal/sysname"
)

// The per-process detectors: each judges the profiles (Window.Profiles) of
// the processes of each interval and names the culprit, with a severity on
// the scale doc.go describes.

// detector is a filter over per-process profiles.
type detector struct {
	name  string
	needs []string
	eval  func(w *Window, l Levels) []Finding
	l     Levels
}

func (d detector) Name() string                 { return d.name }
func (d detector) Needs() []string              { return d.needs }
func (d detector) Evaluate(w *Window) []Finding { return d.eval(w, d.l) }

// Detectors are the per-process detectors that need no hardware counter.
func Detectors(l Levels) []Filter {
	return []Filter{
		detector{"busy-loop", []string{"cpu"}, busyLoopNoPMU, l},
		detector{"failing-syscall", []string{"syscall"}, failingSyscalls, l},
		detector{"memory-leak", []string{"kmem"}, memoryLeak, l},
		detector{"signal-storm", []string{"signal"}, signalStorm, l},
	}
}

// procFinding is a finding about a process's profile p.
func procFinding(w *Window, p *Profile, severity, score float64, resource, summary string, vitals ...string) Finding {
	f := at(p.Interval, procSubject(ProcStat{Pid: p.Pid, Comm: p.Comm}), score, summary, vitals...)
	f.Severity, f.Resource = math.Min(math.Max(severity, 0), 1), resource
	f.Processes = []Process{{Pid: p.Pid, Comm: p.Comm, Exe: p.Exe}}
	return f
}

// busyLoopNoPMU finds a process burning CPU in user space in a few
// functions of its own while showing no sign of progress: few system calls
// and page faults for the CPU it uses, and no block or socket I/O. Rule 1
// tells a busy loop by its cache misses; without a hardware PMU to count
// them, the shape of its time is what is left. Severity: the share of the
// machine's CPU it demands, the CPU it used and the time it waited for
// more (on a busy machine a loop gets less than it would burn).
func busyLoopNoPMU(w *Window, l Levels) []Finding {
	var out []Finding
	for i := w.ReportFrom; i < len(w.Intervals); i++ {
		for _, p := range w.Profiles(i) {
			if p.CPU+p.Sched < l.BusyCPU || p.CPU < l.BusyCPU/5 || p.CPUUser < l.BusyUserShare*p.CPU {
				continue
			}
			conc := p.Concentration(l.BusyFunctions)
			if conc < l.BusyConcentration || p.Syscalls > l.BusySyscallsPerCPU*p.CPU || p.Faults > l.BusyFaultsPerCPU*p.CPU ||
				p.Blio+p.Sock > l.BusyIOBytes {
				continue
			}
			share := w.machineShare(p.CPU + p.Sched)
			f := procFinding(w, p, share, p.CPU, ResourceCPU, "", "cpu")
			f.Culprit = w.culprit(p.Pid, i, i, func(g Group) bool { return !g.InKernel }, "cpu")
			fn := "its code"
			if f.Culprit != nil && f.Culprit.Function != "" {
				fn = f.Culprit.Function
			}
			f.Summary = fmt.Sprintf("%s spins in %s: %.2f CPUs and %.2f s/s waiting for more (%.0f%% of the machine), %.0f%% of it in its %d heaviest functions, with %.0f system calls/s and no I/O",
				procSubject(ProcStat{Pid: p.Pid, Comm: p.Comm}), fn, p.CPU, p.Sched, share*100, conc*100, l.BusyFunctions, p.Syscalls)
			f.Evidence = []Evidence{
				{Name: "cpu demanded", Value: p.CPU + p.Sched, Against: l.BusyCPU, Relation: ">=", Unit: "CPUs", Interval: i},
				{Name: "share in its top functions", Value: conc, Against: l.BusyConcentration, Relation: ">=", Interval: i},
				{Name: "system calls", Value: p.Syscalls, Against: l.BusySyscallsPerCPU * p.CPU, Relation: "<=", Unit: "calls/s", Interval: i},
				{Name: "user page faults", Value: p.Faults, Against: l.BusyFaultsPerCPU * p.CPU, Relation: "<=", Unit: "faults/s", Interval: i}}
			out = append(out, f)
		}
	}
	return out
}

// failingSyscalls finds a process retrying a system call that fails: for
// FailedMinDuration at least, interval after interval, many of its calls
// return an error, many times a second, and its time goes into them rather
// than into work of its own in user space (a compiler probing paths that
// are not there fails as often, between its real work, and not for long).
// Errors that mean "not yet" (notYet) are not failures. Severity: how
// hard it retries, its failed calls a second on a log scale from
// FailedCalls (0) to FailedSevere (1). Not the share of its calls that
// fail: under the storage cap failed calls are sampled from a floor of
// their own and a process's other calls, each light, may keep no sample,
// so the share over what was kept reads 100 % for a server that fails a
// stat at each request while it mostly waits for the next one.
func failingSyscalls(w *Window, l Levels) []Finding {
	type run struct {
		first, last   int
		fromNs, toNs  int64
		strongest     *Profile
		top           SyscallError
		failed, calls float64
	}
	var out []Finding
	report := func(pid uint32, r *run) {
		if float64(r.toNs-r.fromNs)/1e9 < l.FailedMinDuration.Seconds() || r.last < w.ReportFrom {
			return
		}
		p := r.strongest
		share, rate := r.failed/r.calls, r.failed/float64(r.last-r.first+1)
		f := procFinding(w, p, math.Log(rate/l.FailedCalls)/math.Log(l.FailedSevere/l.FailedCalls), p.Failed, ResourceSyscall, "", "syscall")
		f.First, f.Last = r.first, r.last
		f.Culprit = w.culprit(pid, r.first, r.last, func(g Group) bool { return g.Failed && g.Syscall == r.top.Nr }, "syscall")
		f.Summary = fmt.Sprintf("%s retries %s%s that fails with %s: %.0f failed calls/s for %.0f s, %.0f%% of its system calls",
			procSubject(ProcStat{Pid: p.Pid, Comm: p.Comm}), sysname.Syscall(int64(r.top.Nr)), named(f.Culprit, "in"), sysname.Errno(r.top.Errno),
			rate, float64(r.toNs-r.fromNs)/1e9, share*100)
		f.Evidence = []Evidence{
			{Name: "failed system calls", Value: p.Failed, Against: l.FailedCalls, Relation: ">=", Unit: "calls/s", Interval: r.last},
			{Name: "share of its calls failing", Value: share, Against: l.FailedShare, Relation: ">=", Interval: r.last},
			{Name: "cpu used", Value: p.CPU, Relation: "while", Unit: "CPUs", Interval: r.last}}
		out = append(out, f)
	}
	runs := newRuns(report)
	for i := w.SampledFrom; i < len(w.Intervals); i++ {
		for _, p := range w.Profiles(i) {
			if p.Failed < l.FailedCalls || p.Failed < l.FailedShare*p.Syscalls || p.CPUUser > 0.5*p.CPU {
				continue
			}
			var top SyscallError
			for se, n := range p.FailedBy {
				if n > p.FailedBy[top] || n == p.FailedBy[top] && (se.Nr < top.Nr || se.Nr == top.Nr && se.Errno < top.Errno) {
					top = se
				}
			}
			r, fresh := runs.at(p.Pid)
			if fresh {
				r.first, r.fromNs = i, p.FailedFirstNs
			}
			r.last, r.toNs = i, p.FailedLastNs
			r.failed, r.calls = r.failed+p.Failed, r.calls+p.Syscalls
			if r.strongest == nil || p.Failed > r.strongest.Failed {
				r.strongest, r.top = p, top
			}
		}
		runs.next()
	}
	runs.close()
	return out
}

// runs follows, per process, a run of consecutive intervals in which it
// meets a detector's condition, and hands each run to end when it stops:
// at an interval in which the process did not meet it, or at the end of
// the window.
type runs[R any] struct {
	open map[uint32]*R
	seen map[uint32]bool
	end  func(pid uint32, r *R)
}

func newRuns[R any](end func(uint32, *R)) *runs[R] {
	return &runs[R]{open: map[uint32]*R{}, seen: map[uint32]bool{}, end: end}
}

// at is the open run of a process that meets the condition in the
// interval being judged; fresh when the run starts there.
func (t *runs[R]) at(pid uint32) (r *R, fresh bool) {
	t.seen[pid] = true
	if r = t.open[pid]; r == nil {
		r, fresh = new(R), true
		t.open[pid] = r
	}
	return r, fresh
}

// next ends the runs of the processes that did not meet the condition in
// the interval just judged.
func (t *runs[R]) next() {
	for _, pid := range slices.Sorted(maps.Keys(t.open)) {
		if !t.seen[pid] {
			t.end(pid, t.open[pid])
			delete(t.open, pid)
		}
	}
	clear(t.seen)
}

// close ends every open run.
func (t *runs[R]) close() {
	for _, pid := range slices.Sorted(maps.Keys(t.open)) {
		t.end(pid, t.open[pid])
	}
	clear(t.open)
}

// signalStorm finds a process sending signals to other processes at a high
// rate (a runtime signalling its own threads, as Go preempts goroutines
// with SIGURG a hundred times a second, is not a storm). Severity:
// the share of the machine's CPU the sender and its receivers demand (the
// CPU they used and the time they waited for more), which is what a storm
// of signals costs.
func signalStorm(w *Window, l Levels) []Finding {
	var out []Finding
	for i := w.ReportFrom; i < len(w.Intervals); i++ {
		for _, p := range w.Profiles(i) {
			sent := p.Signals - p.Targets[p.Pid]
			if sent < l.SignalStorm {
				continue
			}
			cpu := p.CPU + p.Sched
			var targets []string
			for t, n := range p.Targets {
				if t == p.Pid {
					continue
				}
				if q := w.Profile(i, t); q != nil {
					cpu += q.CPU + q.Sched
				}
				if n >= 0.1*sent {
					targets = append(targets, fmt.Sprint(t))
				}
			}
			sort.Strings(targets)
			share := cpu / float64(max(w.CPUs, 1))
			f := procFinding(w, p, share, sent, ResourceSignal, "", "signal", "cpu")
			f.Culprit = w.culprit(p.Pid, i, i, nil, "signal")
			where := ""
			if f.Culprit != nil && f.Culprit.Function != "" {
				where = " from " + f.Culprit.Function
			}
			f.Summary = fmt.Sprintf("%s sends %.0f signals/s%s to pid %s; sender and receivers demand %.2f CPUs",
				procSubject(ProcStat{Pid: p.Pid, Comm: p.Comm}), sent, where, strings.Join(targets, ", "), cpu)
			f.Evidence = []Evidence{
				{Name: "signals sent to others", Value: sent, Against: l.SignalStorm, Relation: ">=", Unit: "signals/s", Interval: i},
				{Name: "cpu of sender and receivers", Value: cpu, Relation: "costs", Unit: "CPUs", Interval: i}}
			out = append(out, f)
		}
	}
	return out
}

// memoryLeak finds a process whose allocations of user or kernel memory
// (page cache, which the kernel takes back when it must, is left out) go
// on interval after interval, for LeakIntervals and LeakMinDuration at
// least (a short-lived process growing its heap to its working set, a
// compiler's, is not leaking), while the machine's memory grows as much
// (machineGrowth). The leak is the smaller of the two: a process that
// allocates and frees as fast (the machine does not grow) leaks nothing.
// Severity: the share of the memory free at the start that the leak would
// take in LeakHorizon.
func memoryLeak(w *Window, l Levels) []Finding {
	s := w.series("kmem")
	var out []Finding
	type run struct {
		first, last int
		alloc, net  float64
		comm, exe   string
	}
	for _, class := range []Memory{MemoryUser, MemoryKernel} {
		flush := func(pid uint32, r *run) {
			n := r.last - r.first + 1
			secs := float64(w.Intervals[r.last].EndNs-w.Intervals[r.first].StartNs) / 1e9
			if n < l.LeakIntervals || secs < l.LeakMinDuration.Seconds() || r.last < w.ReportFrom {
				return
			}
			growth, grew, machine := w.machineGrowth(class, r.first, r.last, r.net)
			leak := math.Min(r.alloc, growth)
			rate := leak / secs // pages/s
			if rate < l.LeakRate {
				return
			}
			free := math.NaN()
			for k := r.first; k <= r.last && math.IsNaN(free); k++ {
				free = w.FreeKB[k]
			}
			severity := 0.0
			if free > 0 {
				severity = rate * 4 * l.LeakHorizon.Seconds() / free
			}
			p := &Profile{Interval: r.last, Pid: pid, Comm: r.comm, Exe: r.exe}
			f := procFinding(w, p, severity, rate, ResourceMemory, "", "kmem", "umem")
			f.First = r.first
			f.Culprit = w.culprit(pid, r.first, r.last, func(g Group) bool {
				return g.Vital != "kmem" || ClassifyAllocation(w.Stacks.Get(g.KStack)) == class
			}, "kmem", "umem")
			where := ""
			if f.Culprit != nil && f.Culprit.Function != "" {
				where = " in " + f.Culprit.Function
			}
			f.Summary = fmt.Sprintf("%s keeps allocating %s memory%s: %.1f MiB/s for %.0f s while %s",
				procSubject(ProcStat{Pid: pid, Comm: r.comm}), class, where, rate*4/1024, secs, grew)
			if free > 0 {
				f.Summary += fmt.Sprintf("; at this rate the %.1f GiB free would last %s", free/(1<<20), humanSeconds(free/4/rate))
			}
			f.Evidence = []Evidence{
				{Name: string(class) + " pages allocated", Value: r.alloc, Unit: "pages", Relation: "over the run", Interval: r.last},
				machine,
				{Name: "free memory", Value: free, Unit: "KiB", Relation: "at the start", Interval: r.first}}
			out = append(out, f)
		}
		runs := newRuns(flush)
		for i := w.SampledFrom; i < len(w.Intervals); i++ {
			net := s.Weight[i] - s.Secondary[i]
			sampled := map[uint32]bool{}
			for _, p := range w.Profiles(i) {
				for _, a := range p.Alloc {
					sampled[p.Pid] = sampled[p.Pid] || a > 0
				}
				if p.Alloc[class] < l.LeakRate {
					continue
				}
				r, fresh := runs.at(p.Pid)
				if fresh {
					r.first, r.comm, r.exe = i, p.Comm, p.Exe
				}
				r.last = i
				r.alloc += p.Alloc[class] * w.Intervals[i].Seconds()
				if !math.IsNaN(net) {
					r.net += net
				}
			}
			// The storage budget may keep no kmem sample of a heavy
			// allocator in an interval, which does not say it stopped: a
			// kernel leak's run goes on over up to LeakGap such intervals
			// where the kernel memory in use, which measures it, is read.
			if class == MemoryKernel && i < len(w.KernelLastKB) && !math.IsNaN(w.KernelLastKB[i]) {
				for pid, r := range runs.open {
					if !sampled[pid] && i-r.last <= l.LeakGap {
						runs.seen[pid] = true
					}
				}
			}
			runs.next()
		}
		runs.close()
	}
	return out
}

// machineGrowth is how much the machine's memory of a class grew over
// intervals first to last, in pages, with what a finding says of it in its
// summary and evidence. Kernel memory: the kernel memory in use
// (kernelGrowth), which other work on the host hardly moves. User memory,
// and kernel memory in a store without that reading: net, the machine's
// pages allocated less pages freed over the intervals, which page cache
// filled and reclaimed and processes started and ended swing by more than
// a kernel leak's few MiB a second.
func (w *Window) machineGrowth(class Memory, first, last int, net float64) (float64, string, Evidence) {
	if class == MemoryKernel {
		if kb, ok := w.kernelGrowth(first, last); ok {
			return kb / 4, fmt.Sprintf("the machine's kernel memory in use grew %.0f MiB", kb/1024),
				Evidence{Name: "kernel memory in use grew", Value: kb / 1024, Unit: "MiB", Relation: "over the run", Interval: last}
		}
	}
	return net, "the machine's memory in use grew as much",
		Evidence{Name: "machine's net allocation", Value: net, Unit: "pages", Relation: "over the run", Interval: last}
}

// humanSeconds is a duration in the largest unit that keeps it above 1.
func humanSeconds(s float64) string {
	switch {
	case s >= 2*86400:
		return fmt.Sprintf("%.0f days", s/86400)
	case s >= 2*3600:
		return fmt.Sprintf("%.0f hours", s/3600)
	case s >= 120:
		return fmt.Sprintf("%.0f minutes", s/60)
	}
	return fmt.Sprintf("%.0f seconds", s)
}
