/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kmem — kernel page allocation, and umem — user page faults (Chopstix §4.2).
 *
 * kmem: kmem:mm_page_alloc is the event, weighted by the pages allocated
 * (2^order), labelled by the user-space site that led into the allocator
 * (stable_addr: the same in every run of the program) and, for kernel
 * threads, which have none, the thread; mm_page_free adds the pages freed
 * to the vital's exact totals (vitals.secondary), so net allocation is
 * visible per epoch. The paper labelled by the kernel call site, which it
 * got by patching the allocator; a stack walk per page would cost too
 * much, so the kernel stack is taken for sampled events only.
 * Fields: f[0] order, f[1] gfp flags, f[2] migrate type.
 *
 * umem: exceptions:page_fault_user; label: the faulting PC as stable_addr
 * gives it, low 8 bits masked. Weight: 1. Fields: f[0] faulting address,
 * f[1] exact PC, f[2] error code.
 *
 * Free memory, the paper's other field, is added in user space when the
 * sample is read (within 100 ms of the event).
 */
SEC("tp_btf/mm_page_alloc")
int BPF_PROG(vital_kmem_alloc, struct page *page, unsigned int order, gfp_t gfp, int migratetype)
{
	struct hl_control *ctl = get_control();
	struct task_struct *task;
	struct mm_struct *mm;
	struct hl_sample *s;
	struct hl_stats *st;
	struct hot_slot *h;
	struct verdict v;
	__u64 proc, site, w1;
	__u32 weight = 1u << (order & 31);

	if (!vital_enabled(ctl, VITAL_KMEM) || !page)
		return 0;
	task = bpf_get_current_task_btf();
	if (is_self(ctl, task->tgid))
		return 0;
	st = run_stats(ctl, VITAL_KMEM);
	if (!st)
		return 0;
	mm = task->mm;
	proc = proc_key(mm);
	site = user_site(task);
	w1 = kthread_word(task);
	if (count_event(st, &h, proc, site ^ w1, 0, weight))
		return 0;
	s = current_event(ctx, ctl, VITAL_KMEM, st, h, proc, site ^ w1, 0,
			  stable_addr(mm, site), w1, current_who(task), weight, &v);
	if (!s)
		return 0;
	s->f[0] = order;
	s->f[1] = gfp;
	s->f[2] = migratetype;
	sample_submit(s, VITAL_KMEM, &v);
	return 0;
}

SEC("tp_btf/mm_page_free")
int BPF_PROG(vital_kmem_free, struct page *page, unsigned int order)
{
	struct hl_control *ctl = get_control();
	struct hl_stats *st;

	if (!vital_enabled(ctl, VITAL_KMEM))
		return 0;
	st = run_stats(ctl, VITAL_KMEM);
	if (st)
		st->secondary += 1u << (order & 31);
	return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(vital_umem_fault, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	struct hl_control *ctl = get_control();
	struct hl_sample *s;
	struct hl_stats *st;
	struct hot_slot *h;
	struct on_cpu *c;
	struct verdict v;
	__u64 ip, site;

	if (!vital_enabled(ctl, VITAL_UMEM))
		return 0;
	/* regs are the task's own: page_fault_user is a fault in user mode */
	c = on_cpu_current(ctl, (__u64)regs, false);
	if (!c || is_self(ctl, c->tgid))
		return 0;
	st = run_stats(ctl, VITAL_UMEM);
	if (!st)
		return 0;
	ip = regs->ip;
	site = on_cpu_stable_addr(c, ip) & ~0xffULL;
	if (count_event(st, &h, c->proc, site, 0, 1))
		return 0;
	s = current_event(ctx, ctl, VITAL_UMEM, st, h, c->proc, site, 0,
			  site, 0, current_who(bpf_get_current_task_btf()), 1, &v);
	if (!s)
		return 0;
	s->f[0] = address;
	s->f[1] = ip;
	s->f[2] = error_code;
	sample_submit(s, VITAL_UMEM, &v);
	return 0;
}
