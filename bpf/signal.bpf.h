/* SPDX-License-Identifier: GPL-2.0 */
/*
 * signal — signals (Chopstix §4.2). An event is a signal generated, charged
 * to the sending task (its stack is the sending site); the receiver, the
 * handler it has installed and the outcome are fields. Label: the sending
 * site (stable_addr: the same in every run of the program) and the signal
 * number. Weight: 1.
 *
 * Fields: f[0] signal, f[1] receiving pid (tgid), f[2] si_code, f[3]
 * handler address (0 default, 1 ignore), f[4] result (TRACE_SIGNAL_*),
 * f[5] receiving tid.
 */
SEC("tp_btf/signal_generate")
int BPF_PROG(vital_signal_generate, int sig, struct kernel_siginfo *info,
	     struct task_struct *target, int group, int result)
{
	struct hl_control *ctl = get_control();
	struct task_struct *task;
	struct mm_struct *mm;
	struct hl_sample *s;
	struct hl_stats *st;
	struct hot_slot *h;
	struct verdict v;
	__u64 handler = 0, proc, site;

	if (!record_current(ctl, VITAL_SIGNAL) || sig <= 0 || sig > 64)
		return 0;
	st = run_stats(ctl, VITAL_SIGNAL);
	if (!st)
		return 0;
	task = bpf_get_current_task_btf();
	mm = task->mm;
	proc = proc_key(mm);
	site = user_site(task);
	if (count_event(st, &h, proc, site, sig, 1))
		return 0;
	s = current_event(ctx, ctl, VITAL_SIGNAL, st, h, proc, site, sig,
			  stable_addr(mm, site), sig, current_who(task), 1, &v);
	if (!s)
		return 0;
	if (target->sighand)
		handler = (__u64)BPF_CORE_READ(target, sighand, action[(sig - 1) & 63].sa.sa_handler);
	s->f[0] = sig;
	s->f[1] = target->tgid;
	/* SEND_SIG_NOINFO and SEND_SIG_PRIV are the pointers 0 and 1 */
	s->f[2] = (__u64)info > 1 ? BPF_CORE_READ(info, si_code) : 0;
	s->f[3] = handler;
	s->f[4] = result;
	s->f[5] = target->pid;
	sample_submit(s, VITAL_SIGNAL, &v);
	return 0;
}
