// SPDX-License-Identifier: GPL-2.0
/*
 * account — exact per-thread activity of the processes whose requests
 * holter accounts (Stardust §3.2: "by monitoring the context switches and
 * the requests being processed during thread run time, Stardust charges a
 * request the exact amount of CPU time it used").
 *
 * The recorder's vitals only sketch and sample; charging a span the CPU
 * its thread ran needs every on-CPU interval of that thread. So for the
 * processes in `tracked` (filled by user space from the process.pid of the
 * spans it receives) every context switch becomes a record:
 *
 *   ACCT_CPU     switch-in .. switch-out of a tracked thread
 *   ACCT_OFFCPU  switch-out .. switch-in, with the state it left in (0 =
 *                preempted, still runnable), when it was woken, the
 *                user-space PC at kernel entry (the blck vital's site) and
 *                the top of the kernel stack it slept in, or of its kind's;
 *                when the thread switched out for it was tracked too, its
 *                ACCT_CPU interval rides along (ran_*): one record, not two
 *   ACCT_IO      a block request the thread submitted, issue .. completion
 *   ACCT_WRITEBACK  a block write of a file a tracked thread dirtied, that
 *                someone else (a kernel flusher) submitted: charged to the
 *                thread that last dirtied the file (by inode), with when
 *   ACCT_DIRTY   page cache the thread dirtied in one file, first .. last
 *                dirtying in one run on a CPU (bytes newly made dirty)
 *   ACCT_TRACK / ACCT_UNTRACK  a process began to be tracked from the
 *                kernel side (exec of a matching program, fork of a tracked
 *                process) or ended
 *
 * Records are submitted without waking the reader, which polls (a
 * wake-up per context switch would cost more than the record).
 *
 * Processes enter `tracked` from user space (spans named them) or here:
 * at exec when the new program's name is in `match_comm` or its file in
 * `match_exe`, and at fork when the parent is tracked, so the first
 * requests of a process started after the recorder are accounted. They
 * leave it when their last thread exits.
 *
 * It is a separate object from the vitals: user space attaches it only
 * while some process is tracked or some match rule is set, so a recorder
 * that accounts nothing pays nothing; while attached, an untracked context
 * switch costs two task-storage lookups that find nothing and two hash
 * lookups on the tgid, and a wake-up one task-storage lookup.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define ACCT_KSTACK 12
#define MAX_TRACKED 1024
#define MAX_IO_INFLIGHT 4096
#define MAX_MATCH 64
#define MAX_DIRTY_FILES 8192
#define MAX_SLEEP_KINDS 4096
#define PAGE_BYTES 4096
#define FLAG_PG_HEAD (1UL << 6)

enum acct_kind {
	ACCT_CPU = 1,
	ACCT_OFFCPU = 2,
	ACCT_IO = 3,
	ACCT_WRITEBACK = 4,
	ACCT_DIRTY = 5,
	ACCT_TRACK = 6,
	ACCT_UNTRACK = 7,
};

struct acct_event {
	__u32 kind;
	__u32 pid;          /* tgid */
	__u32 tid;
	__u32 state;        /* offcpu: task state at switch-out, 0 preempted; io: op */
	__u64 start;        /* TAI ns (now_ns) */
	__u64 end;
	__u64 wake;         /* offcpu: woken at, 0 if preempted or not seen;
	                       writeback: when the thread last dirtied the file */
	__u64 site;         /* offcpu: user PC at kernel entry; io, writeback, dirty: device */
	__u64 bytes;        /* io, writeback: bytes requested; dirty: bytes dirtied;
	                       offcpu: system call it slept in + 1, 0 none */
	__u64 ino;          /* writeback, dirty: the file's inode */
	__s32 kstack_bytes; /* offcpu: < 0 error, 0 none */
	__u32 flags;        /* offcpu: ACCT_F_SAME_STACK */
	/*
	 * offcpu, if ran_tid != 0: the ACCT_CPU interval of the thread
	 * switched out at the same switch, ran_start .. end.
	 */
	__u32 ran_pid;
	__u32 ran_tid;
	__u64 ran_start;
	/*
	 * cpu, and offcpu's ran interval: the time the thread executed in it
	 * by the scheduler's clock (se.sum_exec_runtime, the thread's CPU
	 * clock), which leaves out what the hypervisor stole from the vCPU;
	 * 0 unknown (the whole interval).
	 */
	__u64 exec;
	__u64 kstack[ACCT_KSTACK];
};

/*
 * offcpu: no stack taken; the sleep is of a kind (process, user PC at
 * kernel entry, system call and state) whose stack user space has.
 */
#define ACCT_F_SAME_STACK 1
/*
 * cpu, offcpu: a context switch of the thread that sched_switch did not
 * report was inferred, and the record's bounds with it (see unseen_in).
 */
#define ACCT_F_UNSEEN 2

/* A file, as the kernel names it: super block device and inode number. */
struct file_key {
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

/* The tracked thread that last dirtied a file's pages, and when. */
struct dirtier {
	__u32 pid;
	__u32 tid;
	__u64 ts;
};

/* Per CPU: records written, and records the ring buffer had no room for. */
struct acct_stats {
	__u64 events;
	__u64 lost;
	__u64 io_lost;      /* submissions the in-flight map had no room for */
	__u64 refused;      /* processes to track the tracked map had no room for */
};

struct thread_state {
	__u64 on_ts;    /* switched in; 0 = not seen running */
	__u64 on_exec;  /* its se.sum_exec_runtime then */
	__u64 off_ts;   /* switched out; 0 = running or not seen */
	__u64 off_exec; /* its se.sum_exec_runtime then */
	__u64 wake_ts;
	__u64 site;
	__u32 state;
	__u32 nr;       /* system call it slept in, + 1; 0 none */
	/* page cache dirtied in the current run, not yet submitted */
	__u64 dirty_ino;
	__u64 dirty_bytes;
	__u64 dirty_first;
	__u64 dirty_last;
	__u32 dirty_dev;
	__u32 pad2;
};

struct io_start {
	__u64 ts;
	__u64 bytes;
	__u32 pid;
	__u32 tid;
	__u32 op;
	__u32 dev;
	__u64 ino;        /* writeback: the file */
	__u64 dirtied;    /* writeback: when the charged thread last dirtied it; 0 = own I/O */
	__u64 sector;     /* where the request started when it was seen */
	__u64 issued;     /* whether it was seen issued */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TRACKED);
	__type(key, __u32);
	__type(value, __u32);
} tracked SEC(".maps");

/* Program names (comm, 16 bytes, NUL padded) tracked from exec. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_MATCH);
	__type(key, char[16]);
	__type(value, __u32);
} match_comm SEC(".maps");

/* Executable files tracked from exec. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_MATCH);
	__type(key, struct file_key);
	__type(value, __u32);
} match_exe SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_DIRTY_FILES);
	__type(key, struct file_key);
	__type(value, struct dirtier);
} dirtiers SEC(".maps");

/*
 * A kind of sleep in a process: where user space entered the kernel, the
 * system call and the state it slept in.
 */
struct sleep_kind {
	__u64 site;
	__u32 tgid;
	__u32 nr;
	__u32 state;
	__u32 pad;
};

/* Per kind of sleep, when its kernel stack was last taken and the sleeps since. */
struct sleep_stack {
	__u64 taken;
	__u32 since;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_SLEEP_KINDS);
	__type(key, struct sleep_kind);
	__type(value, struct sleep_stack);
} sleep_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_state);
} threads SEC(".maps");

/*
 * Preallocated (some 400 KiB): a submission then takes an element off a
 * free list instead of allocating one, a fraction of what allocating cost.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_IO_INFLIGHT);
	__type(key, __u64);
	__type(value, struct io_start);
} io_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} acct_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct acct_stats);
} acct_counters SEC(".maps");

/*
 * Every timestamp is read on the TAI clock: the wall clock plus a whole
 * number of seconds, taken when the event happens. Spans are stamped with
 * the wall clock; a monotonic time converted at the next flush would be
 * shifted by any step of the wall clock in between (a virtual machine's
 * clock being set), and a request's on-CPU time with it.
 */
static __always_inline __u64 now_ns(void)
{
	return bpf_ktime_get_tai_ns();
}

/*
 * Interruptible sleeps shorter than this get no kernel stack (set at load
 * time): taking the stack of a woken thread (an unwind of its kernel
 * stack, several microseconds on a virtual machine) is most of what a
 * tracked context switch costs, and the many short waits on futexes,
 * pipes and polls (a Go runtime parking its threads) say little about
 * where a request waited. Uninterruptible sleeps (disk, page locks) of
 * this long or longer get their own; shorter ones, their kind's.
 */
const volatile __u64 kstack_min_ns = 0;
#define TASK_UNINTERRUPTIBLE_BIT 0x2

/*
 * Nor does an interruptible sleep of a kind whose stack was taken before —
 * same process, user PC at kernel entry, system call and state, as a
 * thread pool parking on its futex or a loop on its poll — nor a short
 * uninterruptible one, as a server's reads waiting for the disk, get a
 * stack, until STACK_REFRESH sleeps of that kind and STACK_REFRESH_NS have
 * passed since its stack was taken: the record says so (ACCT_F_SAME_STACK)
 * and user space gives it the kind's last stack, a sample of where sleeps
 * like it wait. Kinds are counted across the process's threads, not per
 * thread: a Go runtime's threads take turns parking on futexes and polling
 * the network, so a thread's sleeps alternate between kinds its process
 * has seen many times. The time bound keeps a busy server's hot kinds
 * (hundreds of sleeps a second each) at a stack a second: on the demo
 * system, refreshes every 100 ms were a fifth to a quarter of what
 * its context switches cost, 150-200 ns of 700-900 a switch.
 */
#define STACK_REFRESH 16
#define STACK_REFRESH_NS 1000000000ULL

/* Keeps the record layouts in BTF so bpf2go generates their Go types. */
struct acct_event *unused_acct_event __attribute__((unused));
struct acct_stats *unused_acct_stats __attribute__((unused));

static __always_inline bool is_tracked(__u32 tgid)
{
	return bpf_map_lookup_elem(&tracked, &tgid) != NULL;
}

/*
 * The state of thread t if its process is tracked, created if need be.
 * Only threads of tracked processes have one, and a process leaves
 * `tracked` only when it has ended (its threads' states end with them), so
 * a thread with a state skips the lookup in `tracked`: the common case of
 * a context switch or wake-up costs a task-storage lookup, not a hash.
 */
static __always_inline struct thread_state *tracked_thread(struct task_struct *t)
{
	struct thread_state *ts = bpf_task_storage_get(&threads, t, 0, 0);

	if (ts || !is_tracked(t->tgid))
		return ts;
	return bpf_task_storage_get(&threads, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

static __always_inline struct acct_stats *counters(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&acct_counters, &zero);
}

/*
 * Only an off-CPU record with a kernel stack carries kstack: the others
 * are reserved without it, under half the size, so the ring buffer (and
 * the reader copying out of it) moves less memory per context switch.
 */
#define ACCT_HEADER_BYTES __builtin_offsetof(struct acct_event, kstack)

static __always_inline struct acct_event *reserve(__u32 kind, __u32 tgid, __u32 tid, __u64 size)
{
	struct acct_stats *st = counters();
	struct acct_event *e = bpf_ringbuf_reserve(&acct_events, size, 0);

	if (!e) {
		if (st)
			st->lost++;
		return NULL;
	}
	if (st)
		st->events++;
	e->kind = kind;
	e->pid = tgid;
	e->tid = tid;
	e->state = 0;
	e->wake = 0;
	e->site = 0;
	e->bytes = 0;
	e->ino = 0;
	e->kstack_bytes = 0;
	e->flags = 0;
	e->ran_pid = 0;
	e->ran_tid = 0;
	e->ran_start = 0;
	e->exec = 0;
	return e;
}

/* A record without a kernel stack. */
static __always_inline struct acct_event *begin(__u32 kind, struct task_struct *t)
{
	return reserve(kind, t->tgid, t->pid, ACCT_HEADER_BYTES);
}

/* Submits the page cache t dirtied in its current run, if any. */
static __always_inline void flush_dirty(struct task_struct *t, struct thread_state *ts)
{
	struct acct_event *e;

	if (!ts->dirty_bytes)
		return;
	if ((e = begin(ACCT_DIRTY, t))) {
		e->start = ts->dirty_first;
		e->end = ts->dirty_last;
		e->bytes = ts->dirty_bytes;
		e->site = ts->dirty_dev;
		e->ino = ts->dirty_ino;
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	}
	ts->dirty_bytes = 0;
}

/*
 * An on-CPU interval of thread tid of tgid, start .. end, that executed
 * exec by its CPU clock (0: unknown, the whole interval).
 */
static __always_inline void record_cpu(__u32 tgid, __u32 tid, __u64 start, __u64 end, __u64 exec, __u32 flags)
{
	struct acct_event *e = reserve(ACCT_CPU, tgid, tid, ACCT_HEADER_BYTES);

	if (!e)
		return;
	e->start = start;
	e->end = end;
	e->exec = exec;
	e->flags = flags;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/*
 * Tracks process tgid from now on, and tells user space since when.
 * running: t is the current task, on a CPU since now as far as accounting
 * goes (at exec), rather than to be switched in (a forked child).
 */
static __always_inline void track(struct task_struct *t, bool running)
{
	__u32 tgid = t->tgid, one = 1;
	struct thread_state *ts;
	struct acct_event *e;
	struct acct_stats *st;
	__u64 now;

	if (bpf_map_update_elem(&tracked, &tgid, &one, BPF_NOEXIST) != 0) {
		if (!is_tracked(tgid) && (st = counters()))
			st->refused++;
		return;
	}
	now = now_ns();
	if (running && (ts = bpf_task_storage_get(&threads, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE))) {
		ts->on_ts = now;
		ts->on_exec = t->se.sum_exec_runtime;
		ts->off_ts = 0;
	}
	if ((e = begin(ACCT_TRACK, t))) {
		e->start = e->end = now;
		bpf_ringbuf_submit(e, 0);
	}
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(account_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct file_key fk = {};
	char comm[16] = {};
	struct inode *ino;

	if (is_tracked(p->tgid))
		return 0;
	bpf_probe_read_kernel_str(comm, sizeof(comm), p->comm);
	if (bpf_map_lookup_elem(&match_comm, comm)) {
		track(p, true);
		return 0;
	}
	ino = BPF_CORE_READ(bprm, file, f_inode);
	if (!ino)
		return 0;
	fk.ino = BPF_CORE_READ(ino, i_ino);
	fk.dev = BPF_CORE_READ(ino, i_sb, s_dev);
	if (bpf_map_lookup_elem(&match_exe, &fk))
		track(p, true);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(account_fork, struct task_struct *parent, struct task_struct *child)
{
	/* A new process (not a thread) of a tracked one is tracked too. */
	if (child->pid == child->tgid && is_tracked(parent->tgid))
		track(child, false);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(account_exit, struct task_struct *p, bool group_dead)
{
	__u32 tgid = p->tgid;
	struct thread_state *ts;
	struct acct_event *e;

	if (!is_tracked(tgid))
		return 0;
	/*
	 * The exiting thread's last run: its final switch-out comes after
	 * the process has left `tracked`.
	 */
	ts = bpf_task_storage_get(&threads, p, 0, 0);
	if (ts && ts->on_ts) {
		flush_dirty(p, ts);
		record_cpu(tgid, p->pid, ts->on_ts, now_ns(), 0, 0);
		ts->on_ts = 0;
	}
	if (!group_dead || bpf_map_delete_elem(&tracked, &tgid) != 0)
		return 0;
	if ((e = begin(ACCT_UNTRACK, p))) {
		e->start = e->end = now_ns();
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	}
	return 0;
}

/* A folio of a file became dirty; the writer is the current task. */
SEC("tp_btf/writeback_dirty_folio")
int BPF_PROG(account_dirty, struct folio *folio, struct address_space *mapping)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct thread_state *ts;
	struct file_key fk = {};
	struct dirtier d = {};
	struct inode *host;
	__u64 bytes = PAGE_BYTES, now;

	ts = tracked_thread(task);
	if (!ts || !mapping)
		return 0;
	host = mapping->host;
	if (!host)
		return 0;
	fk.ino = host->i_ino;
	fk.dev = BPF_CORE_READ(host, i_sb, s_dev);
	if (folio->flags.f & FLAG_PG_HEAD)
		bytes = (__u64)folio->_nr_pages * PAGE_BYTES;
	now = now_ns();
	d.pid = task->tgid;
	d.tid = task->pid;
	d.ts = now;
	bpf_map_update_elem(&dirtiers, &fk, &d, BPF_ANY);
	if (ts->dirty_bytes && (ts->dirty_ino != fk.ino || ts->dirty_dev != fk.dev))
		flush_dirty(task, ts);
	if (!ts->dirty_bytes) {
		ts->dirty_ino = fk.ino;
		ts->dirty_dev = fk.dev;
		ts->dirty_first = now;
	}
	ts->dirty_bytes += bytes;
	ts->dirty_last = now;
	return 0;
}

/*
 * When a woken thread became runnable. Where the kernel keeps scheduling
 * statistics (CONFIG_SCHED_INFO) and a CFS entity knows its run queue
 * (CONFIG_FAIR_GROUP_SCHED), user space sets wake_from_queue at load time
 * and leaves account_wakeup unattached: at the switch-in, the thread's
 * sched_info.last_queued still holds when the wake-up queued it, on its
 * run queue's clock, so the wake-up was (rq clock - last_queued) before
 * now. That spares a program on every wake-up of the machine, some 20 % of
 * what accounting cost the demo's services. When the waker preempted the
 * CPU's thread for the woken one, the scheduler skips its clock update and
 * the wake-up reads up to tens of microseconds late (p90 25 us, at most
 * 110 us in a test against account_wakeup's), which the waits it splits
 * off, a CPU's turn, dwarf.
 */
const volatile bool wake_from_queue = false;

static __always_inline __u64 queued_at(struct task_struct *t, __u64 now)
{
	struct rq *rq;
	__u64 q, clk;

	if (!bpf_core_field_exists(t->sched_info.last_queued) || !bpf_core_field_exists(t->se.cfs_rq->rq))
		return 0;
	q = t->sched_info.last_queued;
	rq = t->se.cfs_rq->rq;
	if (!q || !rq)
		return 0;
	clk = rq->clock;
	if (clk < q || clk - q >= now)
		return 0;
	return now - (clk - q);
}

/* When the thread ts holds, switched in now, was woken; 0 if preempted or not seen. */
static __always_inline __u64 woken_at(struct task_struct *t, struct thread_state *ts, __u64 now)
{
	__u64 w;

	if (!wake_from_queue)
		return ts->wake_ts;
	if (!ts->state)
		return 0;
	w = queued_at(t, now);
	return w > ts->off_ts ? w : 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(account_wakeup, struct task_struct *p)
{
	struct thread_state *ts = bpf_task_storage_get(&threads, p, 0, 0);

	if (ts && ts->off_ts && !ts->wake_ts)
		ts->wake_ts = now_ns();
	return 0;
}

/* A tracked thread's run that ended at a context switch. */
struct ran {
	__u32 pid;
	__u32 tid;
	__u64 start;
	__u64 exec; /* acct_event.exec */
};

/*
 * Thread t is switched in after the off-CPU interval ts holds: records it,
 * with the kernel stack it slept in where one is due (see kstack_min_ns
 * and STACK_REFRESH), and the run of the thread switched out for it, if
 * any, which is then recorded (ran->tid = 0). A record costs a context
 * switch more than the rest of its accounting does.
 */
static __always_inline void switched_in(struct task_struct *t, struct thread_state *ts, __u64 now, struct ran *ran)
{
	struct sleep_kind k = {.site = ts->site, .tgid = t->tgid, .nr = ts->nr, .state = ts->state};
	bool disk = ts->state & TASK_UNINTERRUPTIBLE_BIT, long_sleep = now - ts->off_ts >= kstack_min_ns;
	bool stack = false, same = false;
	struct acct_event *e;
	struct sleep_stack *kind = NULL;

	if (ts->state && (disk || long_sleep)) {
		kind = bpf_map_lookup_elem(&sleep_stacks, &k);
		if (!(disk && long_sleep) && kind && (kind->since < STACK_REFRESH || now - kind->taken < STACK_REFRESH_NS)) {
			same = true;
			kind->since++;
		} else {
			stack = true;
		}
	}
	if (!(e = reserve(ACCT_OFFCPU, t->tgid, t->pid, stack ? sizeof(*e) : ACCT_HEADER_BYTES)))
		return;
	e->start = ts->off_ts;
	e->end = now;
	e->wake = woken_at(t, ts, now);
	e->state = ts->state;
	e->site = ts->site;
	e->bytes = ts->nr;
	if (same)
		e->flags = ACCT_F_SAME_STACK;
	if (ran->tid) {
		e->ran_pid = ran->pid;
		e->ran_tid = ran->tid;
		e->ran_start = ran->start;
		e->exec = ran->exec;
		ran->tid = 0;
	}
	if (stack) {
		/* A sleeper's kernel stack is still where it slept. */
		e->kstack_bytes = bpf_get_task_stack(t, e->kstack, sizeof(e->kstack), 0);
		/*
		 * Restarts the kind's count in place: an update of an LRU hash
		 * takes a new element even for a key it holds.
		 */
		if (e->kstack_bytes > 0) {
			if (kind) {
				kind->since = 0;
				kind->taken = now;
			} else {
				struct sleep_stack fresh = {.taken = now};

				bpf_map_update_elem(&sleep_stacks, &k, &fresh, BPF_ANY);
			}
		}
	}
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/*
 * sched_switch does not report every context switch: on the virtual
 * machines holter is tested on, a switch from some tasks (the idle task,
 * a hypervisor agent's threads) to another is missing from the tracepoint,
 * for BPF and ftrace alike, a few times a second. A tracked thread switched
 * in unseen is then switched out with no run begun (on_ts 0, off_ts set);
 * one switched out unseen is switched in with its run not ended; one
 * switched in and out unseen is switched in having run while off. Its CPU
 * clock still tells how long it ran in between: the run is recorded as
 * that much time, ending at the switch seen (unseen_in: it was switched in
 * unseen, so it ran up to now) or beginning at the last switch seen
 * (unseen_run: it ran from then, and then waited), and the wait fills the
 * rest; the records inferred say ACCT_F_UNSEEN. Without this, the whole
 * run was lost: tens of milliseconds of a CPU-bound thread's time.
 */
static __always_inline void unseen_in(struct task_struct *t, struct thread_state *ts, __u64 now)
{
	__u64 exec = t->se.sum_exec_runtime - ts->off_exec, start = now - exec;
	struct acct_event *e;

	if (exec > now - ts->off_ts)
		start = ts->off_ts;
	if ((e = begin(ACCT_OFFCPU, t))) {
		e->start = ts->off_ts;
		e->end = start;
		e->state = ts->state;
		e->site = ts->site;
		e->bytes = ts->nr;
		/* no stack taken: a sleep's gets its kind's */
		e->flags = ACCT_F_UNSEEN | (ts->state ? ACCT_F_SAME_STACK : 0);
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	}
	ts->on_ts = start;
	ts->on_exec = ts->off_exec;
}

/*
 * t, switched in now, ran since the last switch of it seen: from its
 * switch-in, if that was the last seen (its switch-out was not), or from
 * its switch-out, if it was switched in and out again unseen. Records that
 * run as beginning then, and the rest as a wait of unknown kind (0,
 * runnable) that switched_in records next.
 */
static __always_inline void unseen_run(struct task_struct *t, struct thread_state *ts, __u64 now)
{
	__u64 from = ts->on_ts ? ts->on_ts : ts->off_ts, base = ts->on_ts ? ts->on_exec : ts->off_exec;
	__u64 exec = t->se.sum_exec_runtime - base;

	if (exec > now - from)
		exec = now - from;
	record_cpu(t->tgid, t->pid, from, from + exec, exec, ACCT_F_UNSEEN);
	ts->off_ts = from + exec;
	ts->off_exec = base + exec;
	ts->on_ts = 0;
	ts->state = 0;
	ts->site = 0;
	ts->nr = 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(account_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	struct thread_state *ts;
	struct ran ran = {};
	__u64 now = 0;

	if (prev->pid != 0) {
		ts = tracked_thread(prev);
		if (ts) {
			now = now_ns();
			if (!ts->on_ts && ts->off_ts)
				unseen_in(prev, ts, now);
			if (ts->on_ts) {
				ran.pid = prev->tgid;
				ran.tid = prev->pid;
				ran.start = ts->on_ts;
				/* brought up to date when prev was dequeued or put back */
				ran.exec = prev->se.sum_exec_runtime - ts->on_exec;
			}
			flush_dirty(prev, ts);
			ts->on_ts = 0;
			ts->off_ts = now;
			ts->off_exec = prev->se.sum_exec_runtime;
			ts->wake_ts = 0;
			ts->state = preempt ? 0 : prev_state;
			ts->site = 0;
			ts->nr = 0;
			if (prev->mm) {
				struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(prev);
				if (regs) {
					ts->site = regs->ip;
					if ((long)regs->orig_ax >= 0)
						ts->nr = regs->orig_ax + 1;
				}
			}
		}
	}
	if (next->pid != 0) {
		ts = tracked_thread(next);
		if (ts) {
			if (!now)
				now = now_ns();
			if ((ts->on_ts && !ts->off_ts) || (ts->off_ts && next->se.sum_exec_runtime > ts->off_exec))
				unseen_run(next, ts, now);
			if (ts->off_ts)
				switched_in(next, ts, now, &ran);
			ts->on_ts = now;
			ts->on_exec = next->se.sum_exec_runtime;
			ts->off_ts = 0;
			ts->wake_ts = 0;
		}
	}
	/* prev's run, if it did not ride along with next's record */
	if (ran.tid)
		record_cpu(ran.pid, ran.tid, ran.start, now, ran.exec, 0);
	return 0;
}

/* The file the first page of a bio belongs to, if any. */
static __always_inline bool bio_file(struct bio *bio, struct file_key *fk)
{
	struct address_space *mapping = BPF_CORE_READ(bio, bi_io_vec, bv_page, mapping);
	struct inode *host;

	/* anonymous and movable pages tag the low bits */
	if (!mapping || ((unsigned long)mapping & 3))
		return false;
	host = BPF_CORE_READ(mapping, host);
	if (!host)
		return false;
	fk->ino = BPF_CORE_READ(host, i_ino);
	fk->dev = BPF_CORE_READ(host, i_sb, s_dev);
	return fk->ino != 0;
}

/*
 * Whose I/O of op, of the bio bio, the current task submits: its own, if it
 * is tracked; else write-back of a file a tracked thread dirtied. False
 * when neither.
 */
static __always_inline bool io_owner(struct task_struct *task, __u32 op, struct bio *bio, struct io_start *io)
{
	/* Read before any branch: the compiler would otherwise share one load
	 * between the task and the dirtier, which the verifier refuses. */
	__u32 tgid = task->tgid, tid = task->pid;
	struct file_key fk = {};
	struct dirtier *d;

	io->op = op;
	if (is_tracked(tgid)) {
		io->pid = tgid;
		io->tid = tid;
		return true;
	}
	/* Someone else writing a file a tracked thread dirtied: write-back. */
	if (op != REQ_OP_WRITE || !bio || !bio_file(bio, &fk))
		return false;
	d = bpf_map_lookup_elem(&dirtiers, &fk);
	if (!d)
		return false;
	io->pid = d->pid;
	io->tid = d->tid;
	io->dirtied = d->ts;
	io->ino = fk.ino;
	return true;
}

/* The I/O of request rq as the current task submits it, now; false when
 * it is no tracked thread's (io_owner) or carries no data. */
static __always_inline bool io_of_request(struct request *rq, struct io_start *io)
{
	if (rq->__data_len == 0)
		return false;
	if (!io_owner(bpf_get_current_task_btf(), rq->cmd_flags & 0xff, rq->bio, io))
		return false;
	io->ts = now_ns();
	io->bytes = rq->__data_len;
	io->dev = rq->part ? rq->part->bd_dev : 0;
	io->sector = rq->__sector;
	return true;
}

static __always_inline void io_submitted(struct request *rq, bool issue)
{
	struct io_start io = {}, *seen;
	__u64 key = (__u64)rq;
	struct acct_stats *st;

	if (!io_of_request(rq, &io))
		return;
	seen = bpf_map_lookup_elem(&io_inflight, &key);
	/* Inserted, now issued (its start may have moved by a front merge
	 * since), or issued again after a requeue: the submitter was seen
	 * then. Else the entry is another request's, which had this address
	 * and ended without its completion seen (as the blio vital finds). */
	if (seen && (seen->sector == rq->__sector || (issue && !seen->issued))) {
		if (issue)
			seen->issued = 1;
		return;
	}
	io.issued = issue;
	if (bpf_map_update_elem(&io_inflight, &key, &io, BPF_ANY) != 0) {
		if ((st = counters()))
			st->io_lost++;
	}
}

/* Send the I/O io, ended at end, to its submitter. */
static __always_inline void io_send(struct io_start *io, __u64 end)
{
	struct acct_event *e;

	/* The submitter's, in whatever context the request completes. */
	e = reserve(io->dirtied ? ACCT_WRITEBACK : ACCT_IO, io->pid, io->tid, ACCT_HEADER_BYTES);
	if (!e)
		return;
	e->wake = io->dirtied;
	e->ino = io->ino;
	e->state = io->op;
	e->start = io->ts;
	e->end = end;
	e->site = io->dev;
	e->bytes = io->bytes;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(account_io_insert, struct request *rq)
{
	io_submitted(rq, false);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(account_io_issue, struct request *rq)
{
	io_submitted(rq, true);
	return 0;
}

/* The request rq has ended: its I/O, if it was seen, goes to its
 * submitter. Returns whether it was seen. */
static __always_inline bool io_ended(struct request *rq)
{
	__u64 key = (__u64)rq;
	struct io_start *io = bpf_map_lookup_elem(&io_inflight, &key);

	if (!io)
		return false;
	io_send(io, now_ns());
	bpf_map_delete_elem(&io_inflight, &key);
	return true;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(account_io_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	io_ended(rq);
	return 0;
}

/*
 * A request merged away into another queued one never completes: it is
 * sent now, its time the time it waited until then (the request it joined
 * is not followed), and its entry goes, or the next request the block
 * layer makes at its address would pass for it. One merged as it was
 * inserted, in its submitter's context, was never seen: it is sent as a
 * merged bio is, its bytes and no time.
 */
SEC("tp_btf/block_rq_merge")
int BPF_PROG(account_io_rq_merge, struct request *rq)
{
	struct io_start merged = {};

	if (!io_ended(rq) && io_of_request(rq, &merged))
		io_send(&merged, merged.ts);
	return 0;
}

/*
 * A bio merged into a request already queued (often another task's, whose
 * adjacent I/O it joins) makes no request of its own: its submitter's I/O
 * is sent as it merges, its bytes and no time (its completion is the other
 * request's, not followed). One merged into a request of the task's own
 * plug, not inserted yet, is left to that request, whose bytes it becomes.
 */
static __always_inline void io_bio_merged(struct bio *bio)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct io_start io = {};

	if (!bio->bi_iter.bi_size)
		return;
	if (task->plug && task->plug->rq_count)
		return;
	if (!io_owner(task, bio->bi_opf & 0xff, bio, &io))
		return;
	io.ts = now_ns();
	io.bytes = bio->bi_iter.bi_size;
	io.dev = bio->bi_bdev ? bio->bi_bdev->bd_dev : 0;
	io_send(&io, io.ts);
}

SEC("tp_btf/block_bio_backmerge")
int BPF_PROG(account_io_backmerge, struct bio *bio)
{
	io_bio_merged(bio);
	return 0;
}

SEC("tp_btf/block_bio_frontmerge")
int BPF_PROG(account_io_frontmerge, struct bio *bio)
{
	io_bio_merged(bio);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
