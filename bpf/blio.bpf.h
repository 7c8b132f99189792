/* SPDX-License-Identifier: GPL-2.0 */
/*
 * blio — disk I/O (Chopstix §4.2). A request is charged to the task that
 * submitted it: its context (pid, the user-space site, stacks) is only
 * there when the request is first seen — at insertion into the I/O
 * scheduler, or at issue when it bypasses the scheduler — since completion
 * runs in interrupt context. The weight, the bytes requested, is known then
 * too, so the sketch is updated and the sampling decided at submission and
 * stacks are taken for sampled requests only; the sample itself is sent at
 * completion, when latency and outcome are known, and belongs to the epoch
 * the request was submitted in, whose sketch its estimate is of: filed in
 * the next epoch, a request that straddles the boundary would stand for
 * all its label's requests of the last one (the store weighs a sample by
 * the growth of its label's estimate since the previous one). One that
 * completes after user space has read the epoch is counted late.
 *
 * Requests that carry no data (cache flushes) are not disk I/O the vital
 * counts: on a device without a volatile cache the block layer completes
 * them without issuing them at all.
 *
 * A bio merged into a request already queued (block_bio_backmerge,
 * block_bio_frontmerge: often another task's, whose adjacent writes it
 * joins) makes no request of its own, so its submitter would have no
 * event: under stress-ng --hdd, every rare writer's write that went
 * unsampled had been merged so. It is an event of its own, charged where
 * it is merged, in the submitter's context, with the label its request
 * would have had; sampled then, as its completion is its request's, which
 * is not followed: f[4] carries BLIO_MERGED, and bytes completed, latency
 * and queue time are unknown. A bio merged into a request of the task's
 * own plug, not inserted yet, is not: its bytes are the request's, counted
 * when it is inserted.
 *
 * Label: the user-space site of submission (stable_addr: the same in every
 * run of the program) and, for kernel threads (writeback), the thread.
 *
 * Fields: f[0] device (kernel dev_t), f[1] sector, f[2] bytes requested,
 * f[3] bytes completed, f[4] op (REQ_OP_*, | BLIO_MERGED), f[5] latency ns
 * (issue to completion), f[6] error (blk_status_t), f[7] queue ns (insert
 * to issue).
 */
#define BLIO_MERGED (1ULL << 16)

struct io_state {
	__u64 gen;      /* epoch generation at submission */
	__u64 insert_ts;
	__u64 issue_ts;
	__u64 site;
	__u64 sector;
	__u64 exe_ino;
	__u64 start_code;
	__u64 mmap_base;
	__u64 label_w0;
	__u64 label_w1;
	__u64 label_w2;
	__u32 pid;
	__u32 tid;
	__u32 uid;
	__u32 exe_dev;
	__u32 bytes;
	__u32 op;
	__u32 dev;
	__u32 est;
	__u32 sampled;  /* 0 no, 1 without stacks, 2 with stacks */
	__u32 self;     /* submitted by the recorder: not counted */
	char comm[16];
};

/* Stacks of the sampled requests, taken at submission. */
struct io_stacks {
	__s32 kstack_bytes;
	__s32 ustack_bytes;
	__u32 sp_bytes;
	__u32 pad;
	__u64 kstack[MAX_STACK];
	__u64 ustack[MAX_STACK];
	__u64 sp_words[SP_WORDS];
};

#define MAX_INFLIGHT 4096
#define MAX_INFLIGHT_SAMPLED 256

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_INFLIGHT);
	__type(key, __u64);
	__type(value, struct io_state);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_INFLIGHT_SAMPLED);
	__type(key, __u64);
	__type(value, struct io_stacks);
} inflight_stacks SEC(".maps");

/* Scratch for building io_stacks: too big for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct io_stacks);
} io_scratch SEC(".maps");

static __always_inline void count_lost(struct hl_control *ctl)
{
	struct hl_stats *st = stats_of(ctl->gen & 1, VITAL_BLIO);

	if (st)
		st->lost_state++;
}

static __always_inline void io_first_seen(void *ctx, struct hl_control *ctl, struct request *rq, bool issue)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 key = (__u64)rq, now = bpf_ktime_get_ns();
	struct io_state *io, fresh = {};
	struct mm_struct *mm = task->mm;
	struct hl_stats *st;
	struct hot_slot *h;
	struct verdict v;
	__u32 zero = 0;

	if (rq->__data_len == 0)
		return;
	io = bpf_map_lookup_elem(&inflight, &key);
	if (io) {
		/* This request, seen at insertion (its start sector may have
		 * moved since, by a front merge) or issued again after a
		 * requeue (at the same sector): */
		if (io->sector == rq->__sector || (issue && !io->issue_ts)) {
			if (issue)
				io->issue_ts = now;
			return;
		}
		/* Else the state of another request, which had this address
		 * and ended without its completion seen: it is lost, and this
		 * one starts afresh. */
		count_lost(ctl);
		bpf_map_delete_elem(&inflight_stacks, &key);
	}
	fresh.insert_ts = now;
	fresh.issue_ts = issue ? now : 0;
	fresh.sector = rq->__sector;
	fresh.bytes = rq->__data_len;
	fresh.op = rq->cmd_flags & 0xff;
	fresh.dev = rq->part ? rq->part->bd_dev : 0;
	fresh.pid = task->tgid;
	fresh.tid = task->pid;
	fresh.uid = (__u32)bpf_get_current_uid_gid();
	if (mm) {
		fresh.site = user_site(task);
		fresh.exe_ino = BPF_CORE_READ(task, mm, exe_file, f_inode, i_ino);
		fresh.exe_dev = BPF_CORE_READ(task, mm, exe_file, f_inode, i_sb, s_dev);
		fresh.start_code = mm->start_code;
		fresh.mmap_base = mm->mmap_base;
	}
	bpf_get_current_comm(fresh.comm, sizeof(fresh.comm));
	fresh.label_w0 = stable_addr(mm, fresh.site);
	fresh.label_w1 = kthread_word(task);
	fresh.label_w2 = who_word(fresh.exe_ino, fresh.uid);
	fresh.self = is_self(ctl, fresh.pid);
	if (fresh.self) { /* tracked only so its completion is not taken for a loss */
		bpf_map_update_elem(&inflight, &key, &fresh, BPF_ANY);
		return;
	}
	st = run_stats(ctl, VITAL_BLIO);
	if (!st)
		return;
	st->events++;
	st->weight += fresh.bytes;
	h = hot_slot_of(st, proc_key(mm), fresh.label_w0 ^ fresh.label_w1);
	if (!sketch_event(ctl, VITAL_BLIO, st, h, proc_key(mm), fresh.label_w0 ^ fresh.label_w1, 0,
			  fresh.label_w0, fresh.label_w1, fresh.label_w2, fresh.bytes, &v))
		return;
	fresh.est = v.est;
	fresh.gen = v.gen;
	if (!v.sampled && task_boosted(ctl, task))
		v.sampled = boost_take(ctl, v.copy);
	if (v.sampled) {
		struct io_stacks *stk = bpf_map_lookup_elem(&io_scratch, &zero);
		if (stk) {
			stk->kstack_bytes = bpf_get_stack(ctx, stk->kstack, sizeof(stk->kstack), 0);
			stk->ustack_bytes = stk->sp_bytes = 0;
			if (task->mm)
				take_ustack(ctx, task, stk->ustack, &stk->ustack_bytes, stk->sp_words, &stk->sp_bytes);
			fresh.sampled = bpf_map_update_elem(&inflight_stacks, &key, stk, BPF_ANY) == 0 ? 2 : 1;
		}
	}
	if (bpf_map_update_elem(&inflight, &key, &fresh, BPF_ANY) != 0)
		count_lost(ctl);
}

static __always_inline void io_merged(void *ctx, struct bio *bio)
{
	struct hl_control *ctl = get_control();
	struct task_struct *task;
	struct mm_struct *mm;
	struct hl_sample *s;
	struct hl_stats *st;
	struct hot_slot *h;
	struct verdict v;
	__u64 w0, w1, w2, proc;
	__u32 bytes = bio->bi_iter.bi_size;

	if (!bytes || !record_current(ctl, VITAL_BLIO))
		return;
	task = bpf_get_current_task_btf();
	if (task->plug && task->plug->rq_count)
		return; /* the plug's requests are tried first */
	st = run_stats(ctl, VITAL_BLIO);
	if (!st)
		return;
	mm = task->mm;
	proc = proc_key(mm);
	w0 = stable_addr(mm, mm ? user_site(task) : 0);
	w1 = kthread_word(task);
	w2 = current_who(task);
	if (count_event(st, &h, proc, w0 ^ w1, 0, bytes))
		return;
	s = current_event(ctx, ctl, VITAL_BLIO, st, h, proc, w0 ^ w1, 0, w0, w1, w2, bytes, &v);
	if (!s)
		return;
	s->f[0] = bio->bi_bdev ? bio->bi_bdev->bd_dev : 0;
	s->f[1] = bio->bi_iter.bi_sector;
	s->f[2] = bytes;
	s->f[3] = 0;
	s->f[4] = (bio->bi_opf & 0xff) | BLIO_MERGED;
	s->f[5] = 0;
	s->f[6] = 0;
	s->f[7] = 0;
	sample_submit(s, VITAL_BLIO, &v);
}

SEC("tp_btf/block_bio_backmerge")
int BPF_PROG(vital_blio_backmerge, struct bio *bio)
{
	io_merged(ctx, bio);
	return 0;
}

SEC("tp_btf/block_bio_frontmerge")
int BPF_PROG(vital_blio_frontmerge, struct bio *bio)
{
	io_merged(ctx, bio);
	return 0;
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(vital_blio_insert, struct request *rq)
{
	struct hl_control *ctl = get_control();

	if (vital_enabled(ctl, VITAL_BLIO))
		io_first_seen(ctx, ctl, rq, false);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(vital_blio_issue, struct request *rq)
{
	struct hl_control *ctl = get_control();

	if (vital_enabled(ctl, VITAL_BLIO))
		io_first_seen(ctx, ctl, rq, true);
	return 0;
}

/* Send the sample of the request keyed key, state io, if it was sampled,
 * and forget it: at its completion, or, merged (f[4] | BLIO_MERGED, its
 * completion not followed), when it was merged away into another. */
static __always_inline void io_end(struct hl_control *ctl, __u64 key, struct io_state *io,
				   blk_status_t error, unsigned int nr_bytes, bool merged)
{
	struct io_stacks *stk;
	struct hl_sample *s;
	struct verdict v;
	__u64 now;

	if (io->sampled && !io->self) {
		now = bpf_ktime_get_ns();
		v.gen = io->gen;
		v.copy = ctl->gen & 1;
		v.est = io->est;
		s = sample_begin(&v, VITAL_BLIO, io->label_w0, io->label_w1, io->label_w2, io->bytes);
		if (s) {
			s->pid = io->pid;
			s->tid = io->tid;
			s->uid = io->uid;
			s->exe_ino = io->exe_ino;
			s->exe_dev = io->exe_dev;
			s->start_code = io->start_code;
			s->mmap_base = io->mmap_base;
			__builtin_memcpy(s->comm, io->comm, sizeof(s->comm));
			s->f[0] = io->dev;
			s->f[1] = io->sector;
			s->f[2] = io->bytes;
			if (merged) {
				s->f[3] = s->f[5] = s->f[6] = s->f[7] = 0;
				s->f[4] = io->op | BLIO_MERGED;
			} else {
				s->f[3] = nr_bytes;
				s->f[4] = io->op;
				s->f[5] = io->issue_ts ? now - io->issue_ts : now - io->insert_ts;
				s->f[6] = error;
				s->f[7] = io->issue_ts && io->insert_ts < io->issue_ts ? io->issue_ts - io->insert_ts : 0;
			}
			stk = io->sampled == 2 ? bpf_map_lookup_elem(&inflight_stacks, &key) : NULL;
			if (stk) {
				s->kstack_bytes = stk->kstack_bytes;
				if (stk->kstack_bytes > 0)
					bpf_probe_read_kernel(s->stack, sizeof(stk->kstack), stk->kstack);
				put_ustack(s, stk->ustack, stk->ustack_bytes, stk->sp_words, stk->sp_bytes);
			}
			sample_submit(s, VITAL_BLIO, &v);
		}
		bpf_map_delete_elem(&inflight_stacks, &key);
	}
	bpf_map_delete_elem(&inflight, &key);
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(vital_blio_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	struct hl_control *ctl = get_control();
	__u64 key = (__u64)rq;
	struct io_state *io;

	if (!vital_enabled(ctl, VITAL_BLIO))
		return 0;
	io = bpf_map_lookup_elem(&inflight, &key);
	if (!io) {
		if (nr_bytes)
			count_lost(ctl); /* submitted before we started, or map full */
		return 0;
	}
	io_end(ctl, key, io, error, nr_bytes, false);
	return 0;
}

/* A request merged away into another, which completes for both: it never
 * completes itself. Seen before (inserted, then merged with a neighbour),
 * its sample goes now; not seen (merged as it was inserted, in its
 * submitter's context), it is an event as it would have been, then ends
 * so. Either way its state does not outlive it (the request's memory is
 * reused for the next, which would pass for it). */
SEC("tp_btf/block_rq_merge")
int BPF_PROG(vital_blio_rq_merge, struct request *rq)
{
	struct hl_control *ctl = get_control();
	__u64 key = (__u64)rq;
	struct io_state *io;

	if (!vital_enabled(ctl, VITAL_BLIO))
		return 0;
	io = bpf_map_lookup_elem(&inflight, &key);
	if (!io) {
		io_first_seen(ctx, ctl, rq, false);
		io = bpf_map_lookup_elem(&inflight, &key);
		if (!io)
			return 0;
	}
	io_end(ctl, key, io, 0, 0, true);
	return 0;
}
