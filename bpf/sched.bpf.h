/* SPDX-License-Identifier: GPL-2.0 */
/*
 * sched — scheduling delay, and blck — resource blocking (Chopstix §4.2).
 *
 * Both are measured on the context-switch path. When a task switches out
 * we note why (preempted while runnable, or asleep on a resource) and where:
 * the site is the user-space PC at which it entered the kernel. At wake-up
 * we close the blocked interval; at switch-in we close the runnable wait.
 * Each interval over its qualifying threshold is one event, weighted by its
 * length in µs, labelled by the thread and the site.
 *
 * Stacks cost most of the time here, so they are taken lazily. The user
 * stack can only be read while the task is current, i.e. at switch-out; it
 * is kept in task-local storage and taken again only when the site (user
 * PC and stack pointer at kernel entry) changed, and then at most every
 * USTACK_REFRESH_NS per task: a task that blocks at the same call again and
 * again pays for one unwind, and one that moves between sites at every
 * switch (a Go thread parking in its scheduler from one of several places,
 * a CPU hog preempted by a storm of kernel workers) for one every
 * USTACK_REFRESH_NS rather than one a switch — on the demo system of
 * internal/requests an unwind at nearly every switch had made this program
 * cost three times what it does without. A task preempted while running
 * is somewhere new each time; its sample has the last stack taken. A
 * sleeping task's sample has its stack when it was taken at this sleep's
 * site, else only the site itself, one frame (ustack_bytes 8), so that a
 * sleep is never given another site's stack. The kernel stack of a
 * sleeping task is still in place at its switch-in, so it is taken there,
 * for sampled events only.
 *
 * Fields (sched): f[0] prio, f[1] delay ns, f[2] site, f[3] 1 if preempted
 * Fields (blck):  f[0] prio, f[1] blocked ns, f[2] site, f[3] sleep state
 */
struct task_state {
	__u64 runnable_ts;  /* became runnable (woken or preempted); 0 = unknown */
	__u64 sleep_ts;     /* switched out asleep; 0 = not asleep */
	__u64 blocked_ns;   /* closed at wake-up */
	__u64 site;
	__u64 site_key;     /* site at the last switch-out (user PC, stack pointer) */
	__u64 ustack_key;   /* site the user stack was taken at */
	__u64 ustack_ts;    /* when */
	__u32 sleep_state;
	__u32 preempted;
	__s32 ustack_bytes;
	__u32 pad;
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
	__u32 tid = BPF_CORE_READ(task, pid);
	__u32 uid = BPF_CORE_READ(task, cred, uid.val);
	__u64 who = who_word(BPF_CORE_READ(task, mm, exe_file, f_inode, i_ino), uid);
	__u64 site = vital == VITAL_SCHED ? ts->site & ~0xffULL : ts->site;
	__u32 weight = us_weight(interval_ns);
	struct verdict v;
	struct hl_sample *s;

	if (!sketch_update(ctl, vital, tid, site, who, weight, &v) || !v.sampled)
		return;
	s = sample_begin(&v, vital, tid, site, who, weight);
	if (!s)
		return;
	ident_from_task(s, task);
	s->f[0] = BPF_CORE_READ(task, prio);
	s->f[1] = interval_ns;
	s->f[2] = ts->site;
	s->f[3] = f3;
	s->kstack_bytes = bpf_get_task_stack(task, s->kstack, sizeof(s->kstack), 0);
	if (ts->preempted || ts->ustack_key == ts->site_key) {
		s->ustack_bytes = ts->ustack_bytes;
		if (ts->ustack_bytes > 0)
			bpf_probe_read_kernel(s->ustack, sizeof(s->ustack), ts->ustack);
	} else if (ts->site) {
		s->ustack[0] = ts->site;
		s->ustack_bytes = sizeof(s->ustack[0]);
	}
	note_stack(s, vital, v.copy);
	bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
}

static __always_inline void on_wakeup(struct task_struct *p)
{
	struct hl_control *ctl = get_control();
	struct task_state *ts;
	__u64 now;

	if (!ctl || !(ctl->enabled & ((1u << VITAL_SCHED) | (1u << VITAL_BLCK))) || p->tgid == ctl->self_tgid)
		return;
	ts = bpf_task_storage_get(&task_states, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ts)
		return;
	now = bpf_ktime_get_ns();
	if (ts->sleep_ts) {
		ts->blocked_ns = now - ts->sleep_ts;
		ts->sleep_ts = 0;
	}
	ts->runnable_ts = now;
	ts->preempted = 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(vital_sched_wakeup, struct task_struct *p)
{
	on_wakeup(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(vital_sched_wakeup_new, struct task_struct *p)
{
	on_wakeup(p);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(vital_sched_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	struct hl_control *ctl = get_control();
	struct task_state *ts;
	__u64 now;

	if (!ctl || !(ctl->enabled & ((1u << VITAL_SCHED) | (1u << VITAL_BLCK))))
		return 0;
	now = bpf_ktime_get_ns();

	if (prev->pid != 0 && prev->tgid != ctl->self_tgid) {
		ts = bpf_task_storage_get(&task_states, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (ts) {
			struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(prev);
			__u64 ip = 0, key = 0;

			if (prev->mm && regs) {
				ip = regs->ip; /* BTF pointers: plain loads, no probe-read helper */
				key = ip ^ (regs->sp << 1);
			}
			ts->site = ip;
			ts->site_key = key;
			/* prev is current: its user stack is readable now, and never
			 * again before it runs. */
			if (!ip) {
				ts->ustack_bytes = 0;
				ts->ustack_key = 0;
			} else if (ts->ustack_bytes <= 0 ||
				   (key != ts->ustack_key && now - ts->ustack_ts >= USTACK_REFRESH_NS)) {
				ts->ustack_bytes = bpf_get_stack(ctx, ts->ustack, sizeof(ts->ustack), BPF_F_USER_STACK);
				ts->ustack_key = key;
				ts->ustack_ts = now;
			}
			ts->blocked_ns = 0;
			if (prev_state == TASK_RUNNING_STATE) {
				ts->runnable_ts = now;
				ts->preempted = 1;
				ts->sleep_ts = 0;
			} else {
				ts->sleep_ts = now;
				ts->sleep_state = prev_state;
				ts->runnable_ts = 0;
				ts->preempted = 0;
			}
		}
	}

	if (next->pid == 0 || next->tgid == ctl->self_tgid)
		return 0;
	ts = bpf_task_storage_get(&task_states, next, 0, 0);
	if (!ts)
		return 0;
	if (ts->sleep_ts) { /* woken by a path we did not see */
		ts->blocked_ns = now - ts->sleep_ts;
		ts->sleep_ts = 0;
	}
	if (ts->blocked_ns >= ctl->blck_min_ns && ts->blocked_ns && vital_enabled(ctl, VITAL_BLCK))
		emit_switch_in(ctl, VITAL_BLCK, next, ts, ts->blocked_ns, ts->sleep_state);
	if (ts->runnable_ts && now - ts->runnable_ts >= ctl->sched_min_ns && vital_enabled(ctl, VITAL_SCHED))
		emit_switch_in(ctl, VITAL_SCHED, next, ts, now - ts->runnable_ts, ts->preempted);
	ts->blocked_ns = 0;
	ts->runnable_ts = 0;
	return 0;
}
