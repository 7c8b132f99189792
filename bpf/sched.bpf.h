/* SPDX-License-Identifier: GPL-2.0 */
/*
 * sched — scheduling delay, and blck — resource blocking (Chopstix §4.2).
 *
 * Both are measured on the context-switch path, by one program. When a
 * task switches out we note why (preempted while runnable, or asleep on a
 * resource), when, and where: the site is the user-space PC at which it
 * entered the kernel. When it switches in again, the kernel's own
 * scheduling statistics say when it was queued to run (sched_info
 * .last_queued: woken, or preempted and queued again), which closes both
 * intervals: asleep from the switch-out to the queueing (blck), runnable
 * from the queueing to now (sched). No program runs at wake-up. Times are
 * the runqueue clock (task_rq_clock: rq->clock, updated by the scheduler
 * as it switches), which needs no clock read. Each interval over its qualifying threshold
 * is one event, weighted by its length in µs, labelled by the site
 * (stable_addr: the same in every run of the program) and, for kernel
 * threads, which have no user site, the thread.
 *
 * Stacks cost most of the time here, so they are taken lazily. The user
 * stack can only be read while the task is current, i.e. at switch-out; it
 * is kept in task-local storage and taken again only when the site (user
 * PC and stack pointer at kernel entry) changed, and then at most every
 * USTACK_REFRESH_NS per task: a task that blocks at the same call again and
 * again pays for one unwind, and one that moves between sites at every
 * switch (a Go thread parking in its scheduler from one of several places,
 * a CPU hog preempted by a storm of kernel workers) for one every
 * USTACK_REFRESH_NS rather than one a switch. One sleep may come sooner:
 * when the stack kept was taken at a preemption, a sleep at another site
 * takes its own (a task preempted as it wakes its peer and then waiting
 * for the answer would otherwise show the wait without its caller), so a
 * task pays for at most two unwinds every USTACK_REFRESH_NS. A task
 * preempted while running is somewhere new each time; its sample has the
 * last stack taken.
 * A sleeping task's sample has its stack when it was taken at this sleep's
 * site, else only the site itself, one frame (ustack_bytes 8), so that a
 * sleep is never given another site's stack. The kernel stack of a
 * sleeping task is still in place at its switch-in, so it is taken there,
 * for sampled events only.
 *
 * A task that goes to sleep in a system call also leaves the call's
 * number, stack pointer and the time in its state; when it wakes from a
 * sleep that qualifies for blck, its switch-in hands them to the syscall
 * vital through the CPU's woke record, which times the call when it
 * returns (on the same CPU, as it nearly always does).
 *
 * Fields (sched): f[0] prio, f[1] delay ns, f[2] site, f[3] 1 if preempted
 * Fields (blck):  f[0] prio, f[1] blocked ns, f[2] site, f[3] sleep state
 */
struct task_state {
	__u64 sleep_ts;     /* switched out asleep (rq clock); 0 = not asleep */
	__u64 site;
	__u64 site_key;     /* site at the last switch-out (user PC, stack pointer) */
	__u64 ustack_key;   /* site the user stack was taken at */
	__u64 ustack_ts;    /* when */
	__u64 slept_ts;     /* the sleep in a system call: when it began, */
	__u64 slept_sp;     /* the call's user stack pointer */
	__s64 slept_nr;     /* and number; -1 when not in a system call */
	__u32 sleep_state;
	__u32 preempted;
	__s32 ustack_bytes;
	__u32 sp_bytes;     /* of sp_words, read with the user stack */
	__u32 ustack_slept; /* the user stack was taken going to sleep */
	__u32 pad;
	__u64 sp_words[SP_WORDS];
	__u64 ustack[MAX_STACK];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_state);
} task_states SEC(".maps");

#define TASK_RUNNING_STATE 0
#define USTACK_REFRESH_NS (10 * 1000 * 1000)

/* The clock of t's runqueue, which is this CPU's for the tasks a switch
 * involves and for the current task: the time the scheduler last read (at
 * every switch, wake-up onto this CPU and tick). Every task's fair-class
 * entity points into its CPU's runqueue, whatever its class. */
static __always_inline __u64 task_rq_clock(struct task_struct *t)
{
	struct cfs_rq *cfs = t->se.cfs_rq;

	if (!cfs)
		return 0;
	if (bpf_core_field_exists(cfs->rq))
		return cfs->rq->clock;
	/* without group scheduling the cfs_rq is the runqueue's own */
	return BPF_CORE_READ((struct rq *)((void *)cfs - bpf_core_field_offset(struct rq, cfs)), clock);
}

static __always_inline __u32 us_weight(__u64 ns)
{
	__u64 us = ns / 1000;
	if (us == 0)
		us = 1;
	if (us > 0xffffffffULL)
		us = 0xffffffffULL;
	return us;
}

static __always_inline void emit_switch_in(struct hl_control *ctl, __u32 vital,
					   struct task_struct *task,
					   struct task_state *ts,
					   __u64 interval_ns, __u64 f3)
{
	struct mm_struct *mm = task->mm;
	__u64 who = who_word(mm && mm->exe_file ? mm->exe_file->f_inode->i_ino : 0, BPF_CORE_READ(task, cred, uid.val));
	__u64 site = stable_addr(mm, ts->site);
	__u64 proc = proc_key(mm);
	__u64 w1 = kthread_word(task);
	__u32 weight = us_weight(interval_ns);
	struct hot_slot *h;
	struct hl_stats *st;
	struct verdict v;
	struct hl_sample *s;

	if (vital == VITAL_SCHED)
		site &= ~0xffULL;
	st = stats_of(ctl->gen & 1, vital);
	if (!st || count_event(st, &h, proc, site ^ w1, 0, weight))
		return;
	if (!sketch_event(ctl, vital, st, h, proc, site ^ w1, 0, site, w1, who, weight, &v) || !v.sampled)
		return;
	s = sample_begin(&v, vital, site, w1, who, weight);
	if (!s)
		return;
	ident_from_task(s, task);
	s->f[0] = task->prio;
	s->f[1] = interval_ns;
	s->f[2] = ts->site;
	s->f[3] = f3;
	s->kstack_bytes = bpf_get_task_stack(task, s->stack, MAX_STACK * sizeof(__u64), 0);
	if (ts->preempted || ts->ustack_key == ts->site_key) {
		put_ustack(s, ts->ustack, ts->ustack_bytes, ts->sp_words, ts->sp_bytes);
	} else if (ts->site) {
		*ustack_at(s) = ts->site;
		s->ustack_bytes = sizeof(__u64);
	}
	sample_submit(s, vital, &v);
}

/* prev switches out: note where, and whether asleep. */
static __always_inline void switch_out(void *ctx, struct task_struct *prev, unsigned int prev_state, bool returned, __u64 now)
{
	struct task_state *ts = bpf_task_storage_get(&task_states, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	struct pt_regs *regs;
	__u64 ip = 0, sp = 0, key = 0;
	bool sleeping = prev_state != TASK_RUNNING_STATE;
	__s64 nr = -1;

	if (!ts)
		return;
	regs = prev->mm ? task_regs(prev) : NULL;
	if (regs) {
		ip = regs->ip; /* BTF pointers: plain loads, no probe-read helper */
		sp = regs->sp;
		nr = regs->orig_ax;
		key = ip ^ (sp << 1);
	}
	ts->site = ip;
	ts->site_key = key;
	/* prev is current: its user stack is readable now, and never again
	 * before it runs. */
	if (!ip) {
		ts->ustack_bytes = 0;
		ts->ustack_key = 0;
	} else if (ts->ustack_bytes <= 0 ||
		   (key != ts->ustack_key && (now - ts->ustack_ts >= USTACK_REFRESH_NS ||
					      (sleeping && !ts->ustack_slept)))) {
		take_ustack(ctx, prev, ts->ustack, &ts->ustack_bytes, ts->sp_words, &ts->sp_bytes);
		ts->ustack_key = key;
		ts->ustack_ts = now;
		ts->ustack_slept = sleeping;
	}
	if (prev_state == TASK_RUNNING_STATE) {
		ts->preempted = 1;
		ts->sleep_ts = 0;
		return;
	}
	ts->preempted = 0;
	ts->sleep_ts = now;
	ts->sleep_state = prev_state;
	/* a call that sleeps again keeps the start of its first sleep; a
	 * task that returned from a call since it last ran is in another,
	 * however alike (a loop taking a lock at one place), whose time
	 * starts now */
	if (returned || nr != ts->slept_nr || sp != ts->slept_sp || !ts->slept_ts)
		ts->slept_ts = now;
	ts->slept_sp = sp;
	ts->slept_nr = nr;
}

/* next switches in: close its sleep and its wait to run. Its state is not
 * even looked up when neither can qualify: a sleep began after the task
 * last arrived on a CPU (sched_info.last_arrival) and ended when it was
 * queued, so in a storm of short sleeps and waits (a ping-pong over a
 * pipe) nothing more is done. */
static __always_inline void switch_in(struct hl_control *ctl, struct on_cpu *c, struct task_struct *next, __u64 now)
{
	__u64 queued = next->sched_info.last_queued, blocked = 0;
	__u64 arrived = next->sched_info.last_arrival;
	struct task_state *ts;

	if ((!queued || now < queued + ctl->sched_min_ns) &&
	    (queued ? queued : now) < arrived + ctl->blck_min_ns)
		return;
	ts = bpf_task_storage_get(&task_states, next, 0, 0);
	if (!ts)
		return;
	if (ts->sleep_ts) {
		/* woken at queued; a wake-up the scheduler statistics missed
		 * counts as asleep until now */
		blocked = (queued > ts->sleep_ts ? queued : now) - ts->sleep_ts;
		ts->sleep_ts = 0;
		if (ts->slept_nr >= 0 && ts->slept_ts) {
			c->woke.tid = next->pid;
			c->woke.nr = ts->slept_nr;
			c->woke.sp = ts->slept_sp;
			c->woke.slept_ts = ts->slept_ts;
		}
	}
	if (blocked >= ctl->blck_min_ns && blocked && vital_enabled(ctl, VITAL_BLCK))
		emit_switch_in(ctl, VITAL_BLCK, next, ts, blocked, ts->sleep_state);
	if (queued && now > queued && now - queued >= ctl->sched_min_ns && vital_enabled(ctl, VITAL_SCHED))
		emit_switch_in(ctl, VITAL_SCHED, next, ts, now - queued, ts->preempted);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(vital_sched_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	struct hl_control *ctl = get_control();
	struct on_cpu *c = on_cpu_here();
	bool returned;
	__u64 now;

	if (!c)
		return 0;
	c->regs = 0; /* another task runs: the record no longer serves */
	returned = c->returned;
	c->returned = 0;
	if (!(ctl->enabled & ((1u << VITAL_SCHED) | (1u << VITAL_BLCK))))
		return 0;
	run_stats(ctl, vital_enabled(ctl, VITAL_SCHED) ? VITAL_SCHED : VITAL_BLCK);
	now = task_rq_clock(prev);
	if (!now)
		return 0;
	if (prev->pid != 0 && !is_self(ctl, prev->tgid))
		switch_out(ctx, prev, prev_state, returned, now);
	if (next->pid != 0 && !is_self(ctl, next->tgid))
		switch_in(ctl, c, next, now);
	return 0;
}
