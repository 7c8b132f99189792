/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cpu — CPU utilisation (Chopstix §4.2). Triggered by a perf event per CPU:
 * cycles where a PMU exists, else the cpu-clock software event. Label:
 * the PC — for user code as stable_addr gives it, the same in every run
 * of the program — with its low 8 bits masked (nearby sites are one
 * label), the executable and the user. Weight: the sampling period in µs,
 * so the vital's weight sum is CPU time. Sample data: the exact PC and
 * stacks.
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
	struct hl_stats *st;
	struct hot_slot *h;
	struct mm_struct *mm;
	__u64 proc, ip, site, who;
	__u32 weight, pid = bpf_get_current_pid_tgid() >> 32;
	bool kernel;

	if (!record_current(ctl, VITAL_CPU) || pid == 0) /* the idle task is not CPU use */
		return 0;
	st = run_stats(ctl, VITAL_CPU);
	if (!st)
		return 0;
	ip = PT_REGS_IP(&ctx->regs);
	kernel = ip >= 0xffff800000000000ULL;
	mm = task->mm;
	proc = proc_key(mm);
	site = (kernel ? ip : stable_addr(mm, ip)) & ~0xffULL;
	weight = ctx->sample_period / 1000;
	if (weight == 0)
		weight = 1;
	if (count_event(st, &h, proc, site, 0, weight))
		return 0;
	who = who_word(BPF_CORE_READ(task, mm, exe_file, f_inode, i_ino), (__u32)bpf_get_current_uid_gid());
	if (!sketch_event(ctl, VITAL_CPU, st, h, proc, site, 0, site, 0, who, weight, &v) || !v.sampled)
		return 0;
	s = sample_begin(&v, VITAL_CPU, site, 0, who, weight);
	if (!s)
		return 0;
	ident_from_current(s, task);
	s->f[0] = ip;
	s->f[1] = kernel;
	take_stacks(ctx, s, task, VITAL_CPU);
	sample_submit(s, VITAL_CPU, &v);
	return 0;
}
