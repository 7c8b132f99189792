// Package findings runs filters over recorded vital signs and says what
// they found (Chopstix, OSDI 2008, §2.2, §3.2, §4.3).
//
// A Window is a run of intervals of one timescale — raw epochs, or the
// 5m/1h/1d rollups — with each vital's exact totals per interval (from the
// vitals or rollups table) and per-process estimates from the samples
// (Load explains the estimate). A Filter reads a window and returns
// Findings: a rule or detector name, a subject, a time range, a score, the
// processes and code sites involved and the evidence. Filters are pure, so
// they are tested on constructed windows; Evaluate runs a set of them and
// merges a condition lasting several intervals into one finding, and
// Attribute adds the heaviest processes, stacks and samples of the finding's
// range from the store. A filter whose vitals are not available (l2 on a
// host without a PMU) is reported as Unevaluated with the reason rather
// than silently finding nothing.
//
// The filters:
//
//   - EWMAFilter: an exponentially weighted moving average of a measure
//     (by default every vital's weight per second) with a k·σ band
//     (EWMA: alpha, k, warm-up, a floor on σ relative to the mean).
//   - Threshold: a measure at or above / at or below a level (the default
//     set has a signal storm, signals per second).
//   - The ten rules of §3.2, with "low" and "high" from Levels.
//
// # The rules over holter's vitals
//
//	#  paper                                         here
//	1  high cpuu, near-zero l2mi: busy loop         machine CPU utilisation >= CPUHigh and l2
//	                                                misses per CPU-ms <= L2LowPerCPUms. Needs l2,
//	                                                so unevaluable without a hardware PMU.
//	2  rising net memory allocated: leak            kmem pages allocated minus freed (the vital's
//	                                                secondary total) positive for LeakIntervals
//	                                                running and >= LeakMinPages, with the fall in
//	                                                free_kb as evidence. umem counts faults and
//	                                                has no frees, so only kernel memory is judged.
//	3  returned bytes < requested: bad blocks       sampled blio requests with bytes_completed <
//	                                                bytes_requested or a non-zero status.
//	                                                Only sampled requests can be seen.
//	4  processes' cpuu low, sched high, total       CPU utilisation high, the kernel's share of
//	   cpuu high: kernel bottleneck                 cpu samples (in_kernel) high, and the
//	                                                machine's scheduling delay high.
//	5  blck high mirrored by blio, lock or sock     a process blocked >= ProcBlckHigh s/s that
//	                                                also has blio, lock or sock samples (lock
//	                                                waits making up >= 10% of the blocked time);
//	                                                the mirroring vitals name the source.
//	                                                Blocking mirrored by none is a process
//	                                                waiting for work and is not reported.
//	6  umem high with blck and blio high: swapping  per process: faults/s, blocked s/s, blio
//	                                                bytes/s all high.
//	7  cpuu low for process and kernel, sched high  per process: scheduling delay high, CPU used
//	   for it: held; normally if total cpuu high    low, the kernel not busy; "normally" when the
//	                                                machine is busy (scored lower), else
//	                                                "abnormally".
//	8  kmem low against the syscall rate            per process: syscalls/s high and kernel pages
//	                                                allocated per call low.
//	9  umem high: l2mi low = init, high = load      per process faults/s high, judged by l2
//	                                                misses per CPU-ms. Needs l2.
//	10 vital signs vanish: died or hung             a pid seen in GoneAfter intervals running
//	                                                (GoneMinSamples each) and absent from the
//	                                                next; its sampled signals (SIGKILL: killed;
//	                                                SIGSEGV, SIGBUS, …: accidental) and exit
//	                                                syscalls (voluntary; the recorder samples
//	                                                every exit and exit_group) give the cause.
//
// Where the vitals differ from the paper's: the per-process figures are
// estimates from logarithmically sampled events (a sample stands for the
// weight its label gathered since its previous sample), so a rule on a
// process is as good as that process's samples; the cpu label holds the
// executable, not the pid, so per-process cpu splits a label by the pids
// its samples show; and everything is per interval, so a rule sees a
// condition only at the timescale it is evaluated at.
package findings
