// Package account records, for the processes whose requests holter
// accounts, the exact activity of each of their threads: every interval it
// ran on a CPU, every interval it was off one — asleep (blocked, with the
// state it slept in, when it was woken, its user-space site and the top of
// the kernel stack it slept in) or preempted (runnable) — and every block
// I/O request it submitted, from issue to completion. This is the kernel's
// half of Stardust's resource accounting (§3.2): joined with the spans
// that name the thread (thread.id, process.pid), it charges a request the
// CPU its threads actually ran, the time they were blocked and why, and
// their disk I/O (internal/requests).
//
// An on-CPU interval runs from the thread's switch-in to its switch-out by
// the TAI clock, and holds (Ns) the time the thread executed in it by the
// scheduler's clock: the thread's CPU clock, as perf's task-clock and
// getrusage count it. The two differ by what the hypervisor stole from a
// virtual CPU while the thread was on it — on the shared 2-CPU VM holter
// is developed on, some 10 % of a busy machine's time, and up to a fifth
// of a 30 ms burst — which a request did not use and is not charged.
//
// It also follows buffered writes: the page cache a thread dirties
// ("dirty" intervals, by file), and the block writes of those files that
// someone else — a kernel flusher, or another process's sync — submits
// later ("writeback" intervals, charged to the thread that last dirtied the
// file, with when it did, so the request that wrote the data is charged
// the I/O the kernel did for it afterwards).
//
// The BPF programs (bpf/account.bpf.c) are attached only while at least
// one process is tracked or a match rule is set, so the whole-system
// recorder's cost does not change when nothing is accounted. Processes are
// tracked when spans arrive from them (Track), or from their exec when
// their program name or executable matches Options.Comms or Options.Exes
// (or, with FollowExes, an executable that sent spans before), and the
// processes a tracked one forks are tracked too: so the first requests of
// a freshly started service, whose spans only arrive after they ended,
// are accounted. Processes that exit are forgotten after a while (their
// last spans still arrive after the exit).
//
// With Options.HoldUnnamed, the intervals of a thread no span has named
// (SpanThreads) are held in memory, written when a span names the thread
// and dropped after the hold, so only request-serving threads fill the
// store.
//
// With Options.Recent, every thread's exact intervals of that last while
// are also kept in memory (Activity), and internal/requests charges spans
// from them rather than reading them back from the store. The recorder
// adds Options.Summarize: a context switch of a served thread is an
// interval, and storing each cost it more CPU than the request it served
// (on the demo system some 50 rows and 0.5 ms a request), so it stores
// instead one row per thread and kind for each flush (blocked: per kernel
// stack) holding their total time (ns), with I/O, dirtying and write-back
// exact; spans received after their intervals left memory are charged
// from those summaries in proportion.
package account
