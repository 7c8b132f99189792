/* SPDX-License-Identifier: GPL-2.0 */
/*
 * syscall — system calls (Chopstix §4.2), seen as they return
 * (raw_syscalls sys_exit): the registers the call was made with are still
 * in pt_regs (orig_ax the number, di the first argument, sp the stack
 * pointer), so no program runs at entry. Label: the stack depth
 * (stack_depth: the call's place in the program, stable across calls from
 * one site and across runs of the program; on stacks other than the main
 * one, the place within an 8 KiB window) with its low 8 bits masked, and
 * the number.
 *
 * Weight: 1 for a call that did not block 1 ms or more; for one that did,
 * the µs from the moment it went to sleep until it ran again, which the
 * context-switch program (sched.bpf.h) hands over in the CPU's woke record
 * when sched or blck is recorded: such a call goes past its hot slot to be
 * timed. A fast call is not timed: that would take a clock read at entry
 * and at exit, more than the rest of the program.
 *
 * Fields: f[0] syscall number, f[1] first argument, f[2] return value,
 * f[3] latency ns and f[4] 1 when the call blocked and was timed.
 *
 * exit and exit_group never return: a process's end is seen at
 * sched_process_exit instead (before its memory is let go), as syscall
 * 231 for the last thread of a process and 60 for a thread that ends
 * alone. The end of a process that ran LONG_LIVED_NS or longer is always
 * sampled, outside the sketch (it is in the exact totals): it ends once,
 * and its end is what Rule #10 (internal/findings) needs to tell a process
 * that called exit from one that vanished. A process that lived less was
 * never seen running by an analysis; its end goes through the sketch like
 * any call, labelled by the program, so that a thousand runs of one
 * program are one label. A process killed by a signal is the signal
 * vital's.
 */
#define NR_EXIT 60
#define NR_EXIT_GROUP 231
#define SIGNAL_GROUP_EXIT_FLAG 0x00000004
#define LONG_LIVED_NS (1000 * 1000 * 1000ULL)

SEC("tp_btf/sched_process_exit")
int BPF_PROG(vital_sys_last, struct task_struct *p, bool group_dead)
{
	struct hl_control *ctl = get_control();
	struct hot_slot *h;
	struct hl_stats *st;
	struct hl_sample *s;
	struct verdict v;
	__u64 who;
	__u32 nr;
	int code;

	/* The tracepoint comes before do_exit sets exit_code: a process's
	 * status is its group's exit code when the group is exiting (exit_group
	 * or a fatal signal), exit_code otherwise (a thread's own exit). A
	 * killed process's low 7 bits are the signal. */
	if (!record_current(ctl, VITAL_SYSCALL) || !p->mm)
		return 0;
	code = p->exit_code;
	if (p->signal->flags & SIGNAL_GROUP_EXIT_FLAG)
		code = p->signal->group_exit_code;
	if (code & 0x7f)
		return 0;
	if (group_dead)
		nr = NR_EXIT_GROUP;
	else if (!(p->signal->flags & SIGNAL_GROUP_EXIT_FLAG))
		nr = NR_EXIT;
	else
		return 0; /* a thread ended by another's exit_group */
	st = run_stats(ctl, VITAL_SYSCALL);
	if (!st)
		return 0;
	who = current_who(p);
	if (bpf_ktime_get_ns() - p->group_leader->start_time < LONG_LIVED_NS) {
		if (count_event(st, &h, proc_key(p->mm), nr, 1, 1))
			return 0;
		s = current_event(ctx, ctl, VITAL_SYSCALL, st, h, proc_key(p->mm), nr, 1, 0, nr, who, 1, &v);
		if (!s)
			return 0;
		s->f[0] = nr;
		s->f[1] = (code >> 8) & 0xff;
		sample_submit(s, VITAL_SYSCALL, &v);
		return 0;
	}
	st->events++;
	st->weight++;
	v.gen = ctl->gen;
	v.copy = v.gen & 1;
	v.est = 1;
	s = sample_begin(&v, VITAL_SYSCALL, p->tgid, nr, who, 1);
	if (!s)
		return 0;
	ident_from_current(s, p);
	take_stacks(ctx, s, p, VITAL_SYSCALL);
	s->f[0] = nr;
	s->f[1] = (code >> 8) & 0xff;
	sample_submit(s, VITAL_SYSCALL, &v);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(vital_sys_exit, struct pt_regs *regs, long ret)
{
	struct hl_control *ctl = get_control();
	struct task_struct *task;
	struct hot_slot *h;
	struct hl_stats *st;
	struct hl_sample *s;
	struct on_cpu *c;
	struct verdict v;
	__u64 depth, nr, site, lat = 0;
	__u32 weight = 1;

	if (!vital_enabled(ctl, VITAL_SYSCALL))
		return 0;
	nr = regs->orig_ax;
	c = on_cpu_current(ctl, (__u64)regs, nr == NR_EXECVE || nr == NR_EXECVEAT);
	if (!c || is_self(ctl, c->tgid))
		return 0;
	c->returned = 1;
	st = run_stats(ctl, VITAL_SYSCALL);
	if (!st)
		return 0;
	depth = stack_depth(c->start_stack, regs->sp) & ~0xffULL;
	site = depth ^ (nr << 48);
	if (c->woke.tid == c->pid) {
		c->woke.tid = 0;
		if (c->woke.nr == nr && c->woke.sp == regs->sp) {
			lat = task_rq_clock(bpf_get_current_task_btf()) - c->woke.slept_ts;
			weight = clamp_weight(lat / 1000);
		}
	}
	h = hot_slot_of(st, c->proc, site);
	if (!lat && hot_hit(h, c->proc, site, 0, 1)) {
		st->events++;
		st->weight++;
		return 0;
	}
	/* Past its slot: new here, crossing a power of t, or it blocked. */
	st->events++;
	st->weight += weight;
	task = bpf_get_current_task_btf();
	s = current_event(ctx, ctl, VITAL_SYSCALL, st, h, c->proc, site, 0,
			  depth, nr, current_who(task), weight, &v);
	if (!s)
		return 0;
	s->f[0] = nr;
	s->f[1] = regs->di;
	s->f[2] = ret;
	s->f[3] = lat;
	s->f[4] = lat != 0;
	sample_submit(s, VITAL_SYSCALL, &v);
	return 0;
}
