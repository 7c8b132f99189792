// Package findings runs filters over recorded vital signs and says what
// they found (Chopstix, OSDI 2008, §2.2, §3.2, §4.3), and derives the
// low-level metrics holter diff ranks (Shen et al., SIGMETRICS 2009).
//
// A Window is a run of intervals of one timescale — raw epochs, or the
// 5m/1h/1d rollups — with each vital's exact totals per interval (from the
// vitals or rollups table) and the samples grouped per process, vital and
// pair of stacks (Groups; Load explains the estimate), from which each
// process's Profile per interval is read: the CPU it used and where, the
// time it waited to run and what it blocked on (classified from its stacks
// by ClassifyWait), its failed system calls, its allocations by what for
// (ClassifyAllocation), the signals it sent. A Filter reads a window and
// returns Findings: a rule or detector name, a subject, a time range, a
// severity, the resource and the culprit (process, executable, the
// function of its own code, its top user and kernel frames), a summary and
// the evidence. Filters are pure, so they are tested on constructed
// windows; Evaluate runs a set of them and merges a condition lasting
// several intervals into one finding. A filter whose vitals are not
// available (l2 on a host without a PMU) is reported as Unevaluated with
// the reason rather than silently finding nothing. Holter's own processes
// are never a finding's subject unless Window.IncludeSelf.
//
// # Severity
//
// Every finding's Severity, from 0 to 1, is what the problem costs, on one
// scale across filters:
//
//   - a problem that burns CPU (a busy loop, a storm of signals, a loop
//     around a system call, a kernel bottleneck): the share of the
//     machine's CPUs it demands — the CPU used and the time spent waiting
//     for more;
//   - a problem that makes threads wait (blocked on the disk, a network
//     peer, a lock or memory; held from a CPU after waking): the share of
//     the waiting threads' time lost;
//   - retrying a call that fails: how hard it retries, its failed calls a
//     second on a log scale, 0 at Levels.FailedCalls (100/s: a server
//     failing a stat at each request) to 1 at FailedSevere (10 000/s: a
//     thread doing little else) — its threads' time in the loop is not
//     known, fast calls being counted, not timed;
//   - memory that keeps growing: the share of the free memory it would
//     take in LeakHorizon (an hour) at its rate;
//   - a crash or a failed block request: 1.
//
// What no cost can be put on — a vital's rise (EWMA), the machine's net
// allocation (Rule #2, which holds the page cache), a drift of the diff
// metrics, a kill — has severity 0 and ranks after everything that costs.
//
// # The filters
//
//   - EWMAFilter: an exponentially weighted moving average of a measure
//     (by default every vital's weight per second) with a k·σ band, σ
//     floored both relative to the mean and in the measure's units (a
//     vital at zero has no variance to divide by).
//   - Threshold: a measure at or above / at or below a level.
//   - The detectors that need no hardware counter (Detectors): a busy
//     loop (Rule #1 without l2: CPU in user space in a few functions of
//     the process's own, with few system calls and page faults for it and
//     no I/O), a loop around a failing system call, a process's memory
//     growing (user or kernel memory, not page cache) while the machine's
//     does (its kernel memory in use, kmem samples' kernel_kb, for kernel
//     memory), a process sending signals in a storm.
//   - The ten rules of §3.2, with "low" and "high" from Levels.
//
// # The rules over holter's vitals
//
//	#  paper                                         here
//	1  high cpuu, near-zero l2mi: busy loop         machine CPU utilisation >= CPUHigh and l2
//	                                                misses per CPU-ms <= L2LowPerCPUms. Needs l2,
//	                                                so unevaluable without a hardware PMU (the
//	                                                busy-loop detector judges processes without).
//	2  rising net memory allocated: leak            kmem pages allocated minus freed (the vital's
//	                                                secondary total) positive for LeakIntervals
//	                                                running and >= LeakMinPages, with the fall in
//	                                                free_kb as evidence; the memory-leak detector
//	                                                names the process.
//	3  returned bytes < requested: bad blocks       sampled blio requests that completed with a
//	                                                non-zero status. Linux completes a request in
//	                                                parts, each reporting its own bytes, so the
//	                                                bytes alone do not tell a failure.
//	4  processes' cpuu low, sched high, total       CPU utilisation high, the kernel's share of
//	   cpuu high: kernel bottleneck                 cpu samples (in_kernel) high, and the
//	                                                machine's scheduling delay high.
//	5  blck high mirrored by blio, lock or sock     a process blocked >= WaitMin s/s and >=
//	                                                WaitShare of its waiting threads' time on the
//	                                                disk, a network peer, a lock or memory, read
//	                                                from where it slept (ClassifyWait), with the
//	                                                mirroring vital as evidence. Waiting for work
//	                                                (a poll, a timer, a child, a condition, a
//	                                                pipe, a parked thread pool) is normal and not
//	                                                reported; nor are kernel threads.
//	6  umem high with blck and blio high: swapping  per process: faults/s, blocked on the disk
//	                                                s/s, blio bytes/s all high.
//	7  cpuu low for process and kernel, sched high  per process: the time it waited for a CPU
//	   for it: held; normally if total cpuu high    after waking high, the kernel not busy;
//	                                                waits after a preemption are fair sharing of
//	                                                a busy machine ("held normally") and not
//	                                                reported. The culprit is the process that
//	                                                used the most CPU meanwhile.
//	8  kmem low against the syscall rate            per process: syscalls/s high and kernel pages
//	                                                allocated per call low.
//	9  umem high: l2mi low = init, high = load      per process faults/s high with l2 misses per
//	                                                CPU-ms high: increasing load. Initialising is
//	                                                normal and not reported. Needs l2.
//	10 vital signs vanish: died or hung             a process whose samples stop with a fatal
//	                                                signal sent to it that it left at its default
//	                                                action: SIGKILL killed it, a fault signal
//	                                                crashed it. One that called exit (the
//	                                                recorder samples every exit and exit_group)
//	                                                died as it meant to, and one that went quiet
//	                                                is idle: neither is reported.
//
// Where the vitals differ from the paper's: the per-process figures are
// estimates from logarithmically sampled events (a sample stands for the
// weight its label gathered since its previous sample), so a rule on a
// process is as good as that process's samples; and everything is per
// interval, so a rule sees a condition only at the timescale it is
// evaluated at.
package findings
