/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cpu — CPU utilisation (Chopstix §4.2). Triggered by a perf event per CPU:
 * cycles where a PMU exists, else the cpu-clock software event. Label:
 * the PC with its low 8 bits masked (nearby sites are one label), the
 * executable and the user. Weight: the sampling period in µs, so the
 * vital's weight sum is CPU time. Sample data: the exact PC and stacks.
 *
 * Fields: f[0] exact PC, f[1] 1 when the PC is in the kernel.
 */
SEC("perf_event")
int vital_cpu(struct bpf_perf_event_data *ctx)
{
	struct hl_control *ctl = get_control();
	struct task_struct *task = bpf_get_current_task_btf();
	struct verdict v;
	struct hl_sample *s;
	__u64 ip, who;
	__u32 weight, pid = bpf_get_current_pid_tgid() >> 32;

	if (!record_current(ctl, VITAL_CPU) || pid == 0) /* the idle task is not CPU use */
		return 0;
	ip = PT_REGS_IP(&ctx->regs);
	who = who_word(BPF_CORE_READ(task, mm, exe_file, f_inode, i_ino),
		       (__u32)bpf_get_current_uid_gid());
	weight = ctx->sample_period / 1000;
	if (weight == 0)
		weight = 1;
	if (!sketch_update(ctl, VITAL_CPU, ip & ~0xffULL, 0, who, weight, &v) || !v.sampled)
		return 0;

	s = sample_begin(&v, VITAL_CPU, ip & ~0xffULL, 0, who, weight);
	if (!s)
		return 0;
	ident_from_task(s, task);
	s->f[0] = ip;
	s->f[1] = ip >= 0xffff800000000000ULL;
	s->kstack_bytes = bpf_get_stack(ctx, s->kstack, sizeof(s->kstack), 0);
	s->ustack_bytes = bpf_get_stack(ctx, s->ustack, sizeof(s->ustack), BPF_F_USER_STACK);
	note_stack(s, VITAL_CPU, v.copy);
	bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
	return 0;
}
