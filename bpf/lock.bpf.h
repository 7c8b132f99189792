/* SPDX-License-Identifier: GPL-2.0 */
/*
 * lock — kernel lock contention (Chopstix §4.2): lock:contention_begin and
 * contention_end fire on the slow path only, as the paper's trigger did.
 * Label: the lock's address and the user-space site (stable_addr: the
 * same in every run of the program). Weight: µs waited.
 *
 * Fields: f[0] lock address, f[1] flags (LCB_F_*), f[2] wait ns, f[3] ret.
 */
SEC("tp_btf/contention_begin")
int BPF_PROG(vital_lock_begin, void *lock, unsigned int flags)
{
	struct hl_control *ctl = get_control();
	struct task_marks *m;

	if (!record_current(ctl, VITAL_LOCK))
		return 0;
	run_stats(ctl, VITAL_LOCK);
	m = bpf_task_storage_get(&task_marks, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!m)
		return 0;
	m->lock_ts = bpf_ktime_get_ns();
	m->lock_addr = (__u64)lock;
	m->lock_flags = flags;
	return 0;
}

SEC("tp_btf/contention_end")
int BPF_PROG(vital_lock_end, void *lock, int ret)
{
	struct hl_control *ctl = get_control();
	struct task_struct *task;
	struct task_marks *m;
	struct mm_struct *mm;
	struct hl_sample *s;
	struct hl_stats *st;
	struct hot_slot *h;
	struct verdict v;
	__u64 wait, proc, site;
	__u32 weight;

	if (!record_current(ctl, VITAL_LOCK))
		return 0;
	st = run_stats(ctl, VITAL_LOCK);
	if (!st)
		return 0;
	task = bpf_get_current_task_btf();
	m = bpf_task_storage_get(&task_marks, task, 0, 0);
	if (!m || !m->lock_ts || m->lock_addr != (__u64)lock)
		return 0;
	wait = bpf_ktime_get_ns() - m->lock_ts;
	m->lock_ts = 0;
	weight = clamp_weight(wait / 1000);
	mm = task->mm;
	proc = proc_key(mm);
	site = user_site(task);
	if (count_event(st, &h, proc, site, (__u64)lock, weight))
		return 0;
	s = current_event(ctx, ctl, VITAL_LOCK, st, h, proc, site, (__u64)lock,
			  (__u64)lock, stable_addr(mm, site), current_who(task), weight, &v);
	if (!s)
		return 0;
	s->f[0] = (__u64)lock;
	s->f[1] = m->lock_flags;
	s->f[2] = wait;
	s->f[3] = ret;
	sample_submit(s, VITAL_LOCK, &v);
	return 0;
}
