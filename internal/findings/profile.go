package findings

import (
	"path/filepath"
	"sort"
)

// Profile is what one process did in one interval, from its groups: the
// figures the per-process detectors judge, as rates per second.
type Profile struct {
	Interval  int
	Pid       uint32
	Comm, Exe string
	// CPU is the CPUs it used (s/s), CPUUser the part in user space, and
	// Functions that user-space time by the function of its own code it
	// was in (OwnFunction).
	CPU, CPUUser float64
	Functions    map[string]float64
	// Sched is the time it waited to run (s/s), Woken the part of it that
	// followed a wake-up rather than a preemption, WokenThreads the most
	// threads seen waiting so.
	Sched, Woken float64
	WokenThreads int
	// Blocked is the time it slept (s/s) by what it waited for, Threads
	// the most threads seen waiting for it.
	Blocked map[Wait]float64
	Threads map[Wait]int
	// Syscalls and Failed are system calls per second, all and those that
	// returned an error; FailedBy the failed ones by call and error.
	Syscalls, Failed float64
	FailedBy         map[SyscallError]float64
	// FailedFirstNs and FailedLastNs are the times of the first and the
	// last failed call sampled.
	FailedFirstNs, FailedLastNs int64
	// Faults are user page faults per second; Alloc pages allocated per
	// second by what for.
	Faults float64
	Alloc  map[Memory]float64
	// Signals are signals sent per second, Targets by receiving process.
	Signals float64
	Targets map[uint32]float64
	// Sock and Blio are bytes per second sent or received, and requested
	// of block devices; LockWait the time waited for contended kernel
	// locks (s/s).
	Sock, Blio, LockWait float64
}

// SyscallError is a system call and the error it returned.
type SyscallError struct {
	Nr    int
	Errno int64
}

// futexNr is futex(2)'s number on x86-64.
const futexNr = 202

// FailedCall says whether system call nr, returning ret, failed: it
// returned an errno (-4095 to -1, the kernel's MAX_ERRNO; a return past
// that is a result) that is no "not now" (notYet). What a retry loop is
// made of (the failing-syscall detector).
func FailedCall(nr int, ret int64) bool {
	return ret >= -4095 && ret <= -1 && !notYet(nr, -ret)
}

// notYet says whether a system call's error means "not now" rather than
// failure: a wait that timed out or was interrupted, a non-blocking call
// with nothing to do yet, a futex whose value had changed.
func notYet(nr int, errno int64) bool {
	switch errno {
	case 4, 11, 110, 115: // EINTR, EAGAIN, ETIMEDOUT, EINPROGRESS
		return true
	}
	return nr == futexNr
}

// Profiles are the window's per-process profiles of interval i, heaviest
// user of the CPU first; the monitor's own processes are left out unless
// w.IncludeSelf.
func (w *Window) Profiles(i int) []*Profile {
	if w.profiles == nil {
		w.profiles = map[int][]*Profile{}
	}
	if ps, ok := w.profiles[i]; ok {
		return ps
	}
	secs := w.Intervals[i].Seconds()
	byPid := map[uint32]*Profile{}
	get := func(g Group) *Profile {
		p := byPid[g.Pid]
		if p == nil {
			p = &Profile{Interval: i, Pid: g.Pid, Comm: g.Comm, Exe: g.Exe, Functions: map[string]float64{},
				Blocked: map[Wait]float64{}, Threads: map[Wait]int{}, FailedBy: map[SyscallError]float64{},
				Alloc: map[Memory]float64{}, Targets: map[uint32]float64{}}
			byPid[g.Pid] = p
		}
		return p
	}
	for _, k := range w.groupsIn(i) {
		g := w.Groups[k]
		if !w.IncludeSelf && IsMonitor(g.Comm, g.Exe) {
			continue
		}
		p := get(g)
		switch g.Vital {
		case "cpu":
			p.CPU += g.Weight / 1e6 / secs
			if !g.InKernel {
				p.CPUUser += g.Weight / 1e6 / secs
				if f := OwnFunction(w.Stacks.Get(g.UStack), g.Exe); f != "" {
					p.Functions[f] += g.Weight / 1e6 / secs
				}
			}
		case "sched":
			p.Sched += g.Weight / 1e6 / secs
			if !g.Preempted {
				p.Woken += g.Weight / 1e6 / secs
				p.WokenThreads = max(p.WokenThreads, g.Threads)
			}
		case "blck":
			c := ClassifyWait(w.Stacks.Get(g.KStack), w.Stacks.Get(g.UStack))
			p.Blocked[c] += g.Weight / 1e6 / secs
			p.Threads[c] = max(p.Threads[c], g.Threads)
		case "syscall":
			p.Syscalls += g.Events / secs
			if g.Failed && !notYet(g.Syscall, g.Errno) {
				if p.Failed == 0 || g.FirstNs < p.FailedFirstNs {
					p.FailedFirstNs = g.FirstNs
				}
				p.FailedLastNs = max(p.FailedLastNs, g.LastNs)
				p.Failed += g.Events / secs
				p.FailedBy[SyscallError{g.Syscall, g.Errno}] += g.Events / secs
			}
			// Waits for a user-space lock shorter than blck's least
			// interval are only seen as futex calls.
			if g.Syscall == futexNr && ClassifyWait(&Stack{Frames: []string{"futex_wait"}}, w.Stacks.Get(g.UStack)) == WaitLock {
				p.Blocked[WaitLock] += g.Weight / 1e6 / secs
				p.Threads[WaitLock] = max(p.Threads[WaitLock], g.Threads)
			}
		case "umem":
			p.Faults += g.Events / secs
		case "kmem":
			p.Alloc[ClassifyAllocation(w.Stacks.Get(g.KStack))] += g.Weight / secs
		case "signal":
			p.Signals += g.Events / secs
			p.Targets[g.Target] += g.Events / secs
		case "sock":
			p.Sock += g.Weight / secs
		case "blio":
			p.Blio += g.Weight / secs
		case "lock":
			p.LockWait += g.Weight / 1e6 / secs
		}
	}
	ps := make([]*Profile, 0, len(byPid))
	for _, p := range byPid {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(a, b int) bool {
		if ps[a].CPU != ps[b].CPU {
			return ps[a].CPU > ps[b].CPU
		}
		return ps[a].Pid < ps[b].Pid
	})
	w.profiles[i] = ps
	return ps
}

// Profile is one process's profile in interval i; nil if it left no
// samples there.
func (w *Window) Profile(i int, pid uint32) *Profile {
	for _, p := range w.Profiles(i) {
		if p.Pid == pid {
			return p
		}
	}
	return nil
}

// IsMonitor says whether a process is holter itself, which findings are
// not about unless asked.
func IsMonitor(comm, exe string) bool {
	return comm == "holter" || exe != "" && filepath.Base(exe) == "holter"
}

// KernelThread says whether a process with this executable is a kernel
// thread (the recorder names their executable "[kernel]").
func KernelThread(exe string) bool { return exe == "" || exe == "[kernel]" }

// Concentration is the share of a process's user-space CPU time spent in
// its n heaviest functions.
func (p *Profile) Concentration(n int) float64 {
	var ws []float64
	total := 0.0
	for _, w := range p.Functions {
		ws = append(ws, w)
		total += w
	}
	if p.CPUUser <= 0 {
		return 0
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(ws)))
	top := 0.0
	for k := 0; k < len(ws) && k < n; k++ {
		top += ws[k]
	}
	// Time in frames with no name counts as spread out.
	return top / max(total, p.CPUUser)
}

// culprit names the process pid over intervals first..last: the heaviest
// pair of stacks among its groups of the vitals given (all vitals when
// none), with the function of its own code from them, or from its CPU
// time when those stacks hold none (a system call's wrapper that keeps no
// frame pointer leaves no readable user stack). A user stack with no frame
// of the executable (a sleep sampled with its site alone, a wrapper whose
// caller was lost) is completed from another of the process's stacks
// there that has the same innermost frame and does (ownStackAt).
func (w *Window) culprit(pid uint32, first, last int, keep func(Group) bool, vitals ...string) *Culprit {
	weight := map[stackPair]float64{}
	var comm, exe string
	var latest int64
	want := map[string]bool{}
	for _, v := range vitals {
		want[v] = true
	}
	cpuFns := map[string]float64{}
	var mine, users []int
	for i := first; i <= last; i++ {
		mine = append(mine, w.groupsIn(i)...)
	}
	for _, k := range mine {
		g := w.Groups[k]
		if g.Pid != pid {
			continue
		}
		if g.LastNs >= latest {
			comm, exe, latest = g.Comm, g.Exe, g.LastNs // its name when last seen
		}
		if g.UStack != 0 {
			users = append(users, k)
		}
		if g.Vital == "cpu" && !g.InKernel {
			st := w.Stacks.Get(g.UStack)
			if f := OwnFunction(st, g.Exe); inExe(st, f, g.Exe) {
				cpuFns[f] += g.Weight
			}
		}
		if len(want) > 0 && !want[g.Vital] || keep != nil && !keep(g) {
			continue
		}
		// Shared across vitals, a stack pair's weight is in each vital's
		// own unit; within one finding's vitals the heaviest is what the
		// finding is about.
		weight[stackPair{g.KStack, g.UStack}] += g.Weight / max(w.vitalTotal(g.Vital, g.Interval), 1)
	}
	if comm == "" && exe == "" {
		return nil
	}
	c := &Culprit{Pid: pid, Comm: comm, Exe: exe}
	var pairs []stackPair
	for p := range weight {
		pairs = append(pairs, p)
	}
	sort.Slice(pairs, func(a, b int) bool {
		if weight[pairs[a]] != weight[pairs[b]] {
			return weight[pairs[a]] > weight[pairs[b]]
		}
		return pairs[a].u < pairs[b].u || pairs[a].u == pairs[b].u && pairs[a].k < pairs[b].k
	})
	var from *Stack // the user stack c.Function was read from
	for _, p := range pairs {
		u, k := w.Stacks.Get(p.u), w.Stacks.Get(p.k)
		if c.User == nil && u != nil {
			if !inExe(u, OwnFunction(u, exe), exe) {
				if own := w.ownStackAt(u, users, exe); own != nil {
					u = own
				}
			}
			c.User = TopFrames(u, 6)
			c.Function, from = OwnFunction(u, exe), u
		}
		if c.Kernel == nil && k != nil {
			c.Kernel = TopFrames(k, 6)
		}
		if c.User != nil && c.Kernel != nil {
			break
		}
	}
	if !inExe(from, c.Function, exe) {
		best, bw := c.Function, 0.0
		for f, fw := range cpuFns {
			if fw > bw || fw == bw && f < best {
				best, bw = f, fw
			}
		}
		if bw > 0 {
			c.Function = best
		}
	}
	return c
}

// stackPair is a kernel and a user stack.
type stackPair struct{ k, u uint64 }

// inExe says whether function is a frame of st in the executable's own
// code (rather than a library's).
func inExe(st *Stack, function, exe string) bool {
	if st == nil || function == "" {
		return false
	}
	for i, f := range st.Frames {
		if f == function && i < len(st.Modules) {
			return filepath.Base(st.Modules[i]) == filepath.Base(exe)
		}
	}
	return false
}

// ownStackAt is the heaviest of the groups' user stacks (positions in
// w.Groups) that has u's innermost frame innermost too and a frame of
// the executable; nil when none has.
func (w *Window) ownStackAt(u *Stack, groups []int, exe string) *Stack {
	if len(u.Frames) == 0 {
		return nil
	}
	var best *Stack
	bw := -1.0
	for _, k := range groups {
		g := w.Groups[k]
		st := w.Stacks.Get(g.UStack)
		if st == nil || len(st.Frames) == 0 || st.Frames[0] != u.Frames[0] || !inExe(st, OwnFunction(st, exe), exe) {
			continue
		}
		if share := g.Weight / max(w.vitalTotal(g.Vital, g.Interval), 1); share > bw {
			best, bw = st, share
		}
	}
	return best
}

// vitalTotal is a vital's exact weight in interval i (0 when unknown).
func (w *Window) vitalTotal(vital string, i int) float64 {
	s := w.Vitals[vital]
	if s == nil || i >= len(s.Weight) {
		return 0
	}
	return nanZero(s.Weight[i])
}
