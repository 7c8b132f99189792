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
// The BPF programs (bpf/account.bpf.c) are attached only while at least
// one process is tracked, so the whole-system recorder's cost does not
// change when nothing is accounted. Processes are tracked when spans
// arrive from them; processes that exit are forgotten.
package account
