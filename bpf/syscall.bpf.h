/* SPDX-License-Identifier: GPL-2.0 */
/*
 * syscall — system calls (Chopstix §4.2, raw_syscalls). Entry notes the
 * time, number, first argument and user stack pointer in task storage; exit
 * closes the call. Label: the stack pointer with its low 8 bits masked (the
 * call's place in the program, stable across calls from one site) and the
 * syscall number. The stack pointer is taken as a depth below the top of
 * the process's stack, so that address-space randomisation does not give
 * every process of one program labels of its own. Weight: latency in µs.
 *
 * Fields: f[0] syscall number, f[1] first argument, f[2] return value,
 * f[3] latency ns.
 *
 * Every call is counted in the vital's exact totals (events, and weight in
 * µs), but only some enter its sketch: a call that took SYS_SLOW_NS or
 * longer always does, and so does a fast one that would be sampled
 * (sketch_would_sample: its label's estimate would reach the next power
 * of t, as a rare label's first call of the epoch always does), while of
 * the other fast ones a random 1 in SYS_FAST_EVERY does, with its weight
 * multiplied by SYS_FAST_EVERY so the sketch's estimates stay unbiased.
 * A sketch update costs more than reading its four counters, and a
 * syscall-heavy program makes millions of fast calls.
 * Before the check, a rare fast call was seen with probability
 * 1/SYS_FAST_EVERY, and bench/coverage.sh missed 84-87 % of them; with
 * it, under 1 %, for 23 ns more a getpid.
 *
 * exit and exit_group never return, so sys_exit never closes them: they are
 * counted at entry with no latency, and every one is sampled, labelled by
 * the process rather than the site. A process ends once, and its end is
 * what Rule #10 (internal/findings) needs to tell a process that called
 * exit from one that vanished.
 */
#define NR_EXIT 60
#define NR_EXIT_GROUP 231
#define SYS_SLOW_NS (64 * 1000)
#define SYS_FAST_EVERY 8 /* a power of 2 */

static __always_inline void sys_last_call(void *ctx, struct hl_control *ctl, struct task_struct *task,
					  long id, __u64 arg0)
{
	__u64 who = current_who(task);
	struct hl_sample *s;
	struct verdict v;

	if (!sketch_update(ctl, VITAL_SYSCALL, task->tgid, id, who, 1, &v))
		return;
	s = sample_begin(&v, VITAL_SYSCALL, task->tgid, id, who, 1);
	if (!s)
		return;
	ident_from_task(s, task);
	s->ustack_bytes = task->mm ? bpf_get_stack(ctx, s->ustack, sizeof(s->ustack), BPF_F_USER_STACK) : 0;
	s->f[0] = id;
	s->f[1] = arg0;
	sample_submit(s, VITAL_SYSCALL, &v);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(vital_sys_enter, struct pt_regs *regs, long id)
{
	struct hl_control *ctl = get_control();
	struct task_struct *task;
	struct task_marks *m;

	if (!record_current(ctl, VITAL_SYSCALL))
		return 0;
	task = bpf_get_current_task_btf();
	if (id == NR_EXIT || id == NR_EXIT_GROUP) {
		sys_last_call(ctx, ctl, task, id, regs->di);
		return 0;
	}
	m = bpf_task_storage_get(&task_marks, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!m)
		return 0;
	m->sys_ts = bpf_ktime_get_ns();
	m->sys_nr = id;
	m->sys_arg0 = regs->di;
	m->sys_sp = task->mm ? task->mm->start_stack - regs->sp : regs->sp;
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(vital_sys_exit, struct pt_regs *regs, long ret)
{
	struct hl_control *ctl = get_control();
	struct task_struct *task;
	struct task_marks *m;
	struct hl_stats *st;
	struct hl_sample *s;
	struct verdict v;
	__u64 lat, weight, who;

	if (!record_current(ctl, VITAL_SYSCALL))
		return 0;
	task = bpf_get_current_task_btf();
	m = bpf_task_storage_get(&task_marks, task, 0, 0);
	if (!m || !m->sys_ts)
		return 0; /* entered before the recorder started */
	lat = bpf_ktime_get_ns() - m->sys_ts;
	m->sys_ts = 0;
	weight = clamp_weight(lat / 1000);
	st = stats_of(ctl->gen & 1, VITAL_SYSCALL);
	if (!st)
		return 0;
	st->events++;
	st->weight += weight;
	who = current_who(task);
	if (lat < SYS_SLOW_NS && !sketch_would_sample(ctl, VITAL_SYSCALL, m->sys_sp & ~0xffULL, m->sys_nr, who, weight)) {
		if (bpf_get_prandom_u32() & (SYS_FAST_EVERY - 1))
			return 0;
		weight *= SYS_FAST_EVERY;
	}
	s = current_event_add(ctx, ctl, VITAL_SYSCALL, m->sys_sp & ~0xffULL, m->sys_nr, who,
			      clamp_weight(weight), true, &v);
	if (!s)
		return 0;
	s->f[0] = m->sys_nr;
	s->f[1] = m->sys_arg0;
	s->f[2] = ret;
	s->f[3] = lat;
	sample_submit(s, VITAL_SYSCALL, &v);
	return 0;
}
