/* SPDX-License-Identifier: GPL-2.0 */
/*
 * blio — disk I/O (Chopstix §4.2). A request is charged to the task that
 * submitted it: its context (pid, stacks, the user-space site) is taken
 * when the request is first seen — at insertion into the I/O scheduler, or
 * at issue when it bypasses the scheduler — since completion runs in
 * interrupt context. At completion the request is one event, weighted by
 * the bytes completed, labelled by the process and the site.
 *
 * Fields: f[0] device (kernel dev_t), f[1] sector, f[2] bytes requested,
 * f[3] bytes completed, f[4] op (REQ_OP_*), f[5] latency ns (issue to
 * completion), f[6] error (blk_status_t), f[7] queue ns (insert to issue).
 */
struct io_state {
	__u64 insert_ts;
	__u64 issue_ts;
	__u64 site;
	__u64 sector;
	__u64 exe_ino;
	__u32 pid;
	__u32 tid;
	__u32 uid;
	__u32 exe_dev;
	__u32 bytes;
	__u32 op;
	__u32 dev;
	char comm[16];
	__s32 kstack_bytes;
	__s32 ustack_bytes;
	__u64 kstack[MAX_STACK];
	__u64 ustack[MAX_STACK];
};

#define MAX_INFLIGHT 4096

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_INFLIGHT);
	__type(key, __u64);
	__type(value, struct io_state);
} inflight SEC(".maps");

/* Scratch for building an io_state: too big for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct io_state);
} io_scratch SEC(".maps");

static __always_inline void io_first_seen(void *ctx, struct request *rq, __u64 now, bool issue)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 key = (__u64)rq;
	struct io_state *io;
	__u32 zero = 0;

	io = bpf_map_lookup_elem(&inflight, &key);
	if (io) {
		if (issue)
			io->issue_ts = now;
		return;
	}
	io = bpf_map_lookup_elem(&io_scratch, &zero);
	if (!io)
		return;
	io->insert_ts = now;
	io->issue_ts = issue ? now : 0;
	io->sector = rq->__sector;
	io->bytes = rq->__data_len;
	io->op = rq->cmd_flags & 0xff;
	io->dev = rq->part ? rq->part->bd_dev : 0;
	io->pid = task->tgid;
	io->tid = task->pid;
	io->uid = (__u32)bpf_get_current_uid_gid();
	io->exe_ino = BPF_CORE_READ(task, mm, exe_file, f_inode, i_ino);
	io->exe_dev = BPF_CORE_READ(task, mm, exe_file, f_inode, i_sb, s_dev);
	bpf_get_current_comm(io->comm, sizeof(io->comm));
	io->kstack_bytes = bpf_get_stack(ctx, io->kstack, sizeof(io->kstack), 0);
	io->ustack_bytes = bpf_get_stack(ctx, io->ustack, sizeof(io->ustack), BPF_F_USER_STACK);
	io->site = io->ustack_bytes > 0 ? io->ustack[0] : 0;
	if (bpf_map_update_elem(&inflight, &key, io, BPF_NOEXIST) != 0) {
		struct hl_control *ctl = get_control();
		struct hl_stats *st = ctl ? stats_of(ctl->gen & 1, VITAL_BLIO) : NULL;
		if (st)
			st->lost_state++;
	}
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(vital_blio_insert, struct request *rq)
{
	struct hl_control *ctl = get_control();

	if (vital_enabled(ctl, VITAL_BLIO))
		io_first_seen(ctx, rq, bpf_ktime_get_ns(), false);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(vital_blio_issue, struct request *rq)
{
	struct hl_control *ctl = get_control();

	if (vital_enabled(ctl, VITAL_BLIO))
		io_first_seen(ctx, rq, bpf_ktime_get_ns(), true);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(vital_blio_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	struct hl_control *ctl = get_control();
	__u64 key = (__u64)rq, now, who;
	struct io_state *io;
	struct verdict v;
	struct hl_sample *s;
	__u32 weight;

	if (!vital_enabled(ctl, VITAL_BLIO))
		return 0;
	io = bpf_map_lookup_elem(&inflight, &key);
	if (!io) {
		struct hl_stats *st = stats_of(ctl->gen & 1, VITAL_BLIO);
		if (st)
			st->lost_state++;  /* submitted before we started, or map full */
		return 0;
	}
	now = bpf_ktime_get_ns();
	weight = nr_bytes ? nr_bytes : 1;
	who = who_word(io->exe_ino, io->uid);
	if (sketch_update(ctl, VITAL_BLIO, io->pid, io->site, who, weight, &v) && v.sampled) {
		s = sample_begin(&v, VITAL_BLIO, io->pid, io->site, who, weight, now);
		if (s) {
			s->pid = io->pid;
			s->tid = io->tid;
			s->uid = io->uid;
			s->exe_ino = io->exe_ino;
			s->exe_dev = io->exe_dev;
			__builtin_memcpy(s->comm, io->comm, sizeof(s->comm));
			s->f[0] = io->dev;
			s->f[1] = io->sector;
			s->f[2] = io->bytes;
			s->f[3] = nr_bytes;
			s->f[4] = io->op;
			s->f[5] = io->issue_ts ? now - io->issue_ts : now - io->insert_ts;
			s->f[6] = error;
			s->f[7] = io->issue_ts && io->insert_ts < io->issue_ts ? io->issue_ts - io->insert_ts : 0;
			s->kstack_bytes = io->kstack_bytes;
			s->ustack_bytes = io->ustack_bytes;
			if (io->kstack_bytes > 0)
				bpf_probe_read_kernel(s->kstack, sizeof(s->kstack), io->kstack);
			if (io->ustack_bytes > 0)
				bpf_probe_read_kernel(s->ustack, sizeof(s->ustack), io->ustack);
			note_stack(s, VITAL_BLIO, v.copy);
			bpf_ringbuf_submit(s, 0);
		}
	}
	bpf_map_delete_elem(&inflight, &key);
	return 0;
}
