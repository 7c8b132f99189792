/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The recorder's in-kernel sketch (Chopstix §4.1): every vital-sign event
 * has a label and a weight; the label hashes into a hash counter array
 * (HCA), the counters grow by the weight, and the event is sampled when
 * its estimated count crosses the next power of the threshold t = 2^shift.
 *
 * We generalise the paper's single-row HCA to HCA_ROWS rows (a count-min
 * sketch): the estimate is the minimum over the rows, so an event is missed
 * only if it collides in every row. The Go twin in internal/sketch is
 * bit-exact with this file; change both together.
 *
 * Two copies of each HCA (and of the exact per-epoch totals) exist; the
 * copy in use is the parity of the epoch generation that user space bumps
 * at each epoch boundary, so no event is lost at the swap.
 */
#ifndef HOLTER_SKETCH_H
#define HOLTER_SKETCH_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define HCA_ROWS 4
#define HCA_WIDTH 512
#define MAX_STACK 64

enum vital {
	VITAL_CPU = 0,
	VITAL_SCHED = 1,
	VITAL_BLCK = 2,
	VITAL_BLIO = 3,
	VITAL_L2 = 4,
	VITAL_KMEM = 5,
	VITAL_UMEM = 6,
	VITAL_SYSCALL = 7,
	VITAL_SIGNAL = 8,
	VITAL_SOCK = 9,
	VITAL_LOCK = 10,
	NR_VITALS = 11,
};

enum record_kind {
	RECORD_SAMPLE = 1,
};

struct hca {
	__u32 c[HCA_ROWS][HCA_WIDTH];
};

/* Written by user space; read by every program. */
struct hl_control {
	__u64 gen;                 /* epoch generation; copy = gen & 1 */
	__u64 seed[2];             /* hash seed per copy, renewed each epoch */
	__u32 shift[NR_VITALS];    /* t = 1 << shift */
	__u32 enabled;             /* bit per vital */
	__u64 sched_min_ns;        /* scheduling delay that qualifies */
	__u64 blck_min_ns;         /* blocking time that qualifies */
	__u32 self_tgid;           /* the recorder: never recorded, or it would record itself recording */
	__u32 boost_max;           /* 0: no process is boosted; else samples per epoch boosts may add (see boosted) */
};

/* Exact per-epoch totals, per CPU, per copy and vital. */
struct hl_stats {
	__u64 events;
	__u64 weight;
	__u64 samples;
	__u64 lost_ringbuf;  /* sampled, but the ring buffer was full */
	__u64 lost_state;    /* event seen without its start (e.g. map full) */
	__u64 no_stack;      /* sampled without a stack */
	__u64 secondary;     /* vital-specific: kmem pages freed, sock bytes received */
};

struct hl_sample {
	__u32 kind;
	__u32 vital;
	__u64 gen;
	__u64 ts;
	__u64 label;   /* seed-free label hash, stable across epochs */
	__u32 weight;
	__u32 est;
	__u32 pid;     /* tgid */
	__u32 tid;
	__u32 uid;
	__u32 exe_dev;
	__u64 exe_ino;
	char comm[16];
	__u64 f[8];    /* vital-specific fields, see each program */
	__s32 kstack_bytes;  /* < 0: error from bpf_get_stack */
	__s32 ustack_bytes;
	__u64 kstack[MAX_STACK];
	__u64 ustack[MAX_STACK];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hl_control);
} control SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * NR_VITALS);
	__type(key, __u32);
	__type(value, struct hca);
} hcas SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * NR_VITALS);
	__type(key, __u32);
	__type(value, struct hl_stats);
} stats SEC(".maps");

/*
 * Boosted processes (`holter run`): the process trees whose block requests
 * are all sampled, up to control.boost_max such samples per epoch over all
 * CPUs (boost_taken counts them per copy), rather than when their label's
 * count crosses a power of the threshold. The sampling decision is the only
 * thing a boost changes: the sketch counts as ever, and a sample stands for
 * the events of its label since the previous one (the store weighs it so),
 * so a boosted label's samples are each one event and the rest of its
 * label's events stay accounted for. Keyed by process id; the value bounds
 * the process's start (task start_boottime, as /proc/PID/stat gives it to a
 * clock tick), so a process that reuses the id of an ended one is not
 * boosted.
 */
struct boost {
	__u64 start_min;
	__u64 start_max;
};

#define MAX_BOOSTED 64
#define BOOST_DEPTH 8

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_BOOSTED);
	__type(key, __u32);
	__type(value, struct boost);
} boosted SEC(".maps");

/* Samples taken for boosts this epoch, per copy; user space clears a copy's
 * count with its other totals. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} boost_taken SEC(".maps");

/* Whether a boost may sample one more event in this epoch copy; counts it
 * if so. */
static __always_inline bool boost_take(struct hl_control *ctl, __u32 copy)
{
	__u64 *taken = bpf_map_lookup_elem(&boost_taken, &copy);

	if (!taken || *taken >= ctl->boost_max)
		return false;
	__sync_fetch_and_add(taken, 1);
	return true;
}

/* The task is a boosted process or descends from one within BOOST_DEPTH
 * generations. */
static __always_inline bool task_boosted(struct hl_control *ctl, struct task_struct *task)
{
	if (!ctl->boost_max)
		return false;
	for (int i = 0; i < BOOST_DEPTH && task; i++) {
		__u32 tgid = BPF_CORE_READ(task, tgid);
		struct boost *b = bpf_map_lookup_elem(&boosted, &tgid);

		if (b) {
			__u64 start = BPF_CORE_READ(task, group_leader, start_boottime);
			if (start >= b->start_min && start < b->start_max)
				return true;
		}
		if (tgid <= 1)
			break;
		task = BPF_CORE_READ(task, real_parent);
	}
	return false;
}

/* Samples are submitted without waking the reader, which polls every
 * 100 ms (internal/recorder): a wake-up per sample cost more than the
 * sample. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} samples SEC(".maps");

static __always_inline __u64 mix64(__u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static __always_inline __u64 label_hash(__u64 seed, __u64 w0, __u64 w1, __u64 w2)
{
	return mix64(mix64(mix64(seed ^ w0) ^ w1) ^ w2);
}

/* floor(log2(x)) for x >= 1, without loops the verifier must unroll. */
static __always_inline __s32 log2_u64(__u64 x)
{
	__s32 r = 0;
	if (x >> 32) { x >>= 32; r += 32; }
	if (x >> 16) { x >>= 16; r += 16; }
	if (x >> 8) { x >>= 8; r += 8; }
	if (x >> 4) { x >>= 4; r += 4; }
	if (x >> 2) { x >>= 2; r += 2; }
	if (x >> 1) { r += 1; }
	return r;
}

static __always_inline __s32 level(__u64 x, __u32 shift)
{
	if (x == 0)
		return -1;
	if (shift == 0)
		shift = 1;
	return (__u32)log2_u64(x) / shift;
}

/* The "who" word every label carries: the executable and the user. */
static __always_inline __u64 who_word(__u64 exe_ino, __u32 uid)
{
	return ((__u64)uid << 40) ^ exe_ino;
}

struct verdict {
	__u32 copy;
	__u32 est;
	__u64 gen;
	bool sampled;
};

static __always_inline struct hl_control *get_control(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&control, &zero);
}

static __always_inline bool vital_enabled(struct hl_control *ctl, __u32 vital)
{
	return ctl && (ctl->enabled & (1u << vital));
}

/* The vital is recorded and the current task is not the recorder. */
static __always_inline bool record_current(struct hl_control *ctl, __u32 vital)
{
	return vital_enabled(ctl, vital) && (bpf_get_current_pid_tgid() >> 32) != ctl->self_tgid;
}

/*
 * Account one event in the active copy's HCA and, unless the caller counted
 * it already (counted), in its totals; decide whether it is sampled.
 * Returns false when the recorder is not configured.
 *
 * The counters are read and written back, not added to atomically. A
 * locked add is a full barrier that waits for the CPU's pending stores:
 * where the page allocator has just written the page it hands out, four
 * of them made mm_page_alloc's program cost 640-660 ns an event on the
 * demo system of internal/requests, against 460-500 ns this way (a page
 * fault's, 300 against 270 ns). Two CPUs updating one counter at the same
 * instant lose one weight from it: the estimate reads a little low and a
 * sample may come an event later. bench/coverage.sh missed as many rare
 * labels either way (kmem 10.2-11.6 % against 9.2-12.6 % under process
 * churn, syscall 0.6 % against 0.6 %). The exact totals are per CPU.
 */
/* A label hash's counter in row r: each row takes its own 16 bits. */
static __always_inline __u32 hca_index(__u64 hsh, int r)
{
	return (hsh >> (16 * r)) & (HCA_WIDTH - 1);
}

static __always_inline bool sketch_add(struct hl_control *ctl, __u32 vital,
				       __u64 w0, __u64 w1, __u64 w2,
				       __u32 weight, bool counted, struct verdict *v)
{
	__u64 gen = ctl->gen;
	__u32 copy = gen & 1;
	__u32 key = copy * NR_VITALS + vital;
	struct hca *h;
	struct hl_stats *st;
	__u64 hsh, old = ~0ULL, new;
	__u32 shift;

	if (vital >= NR_VITALS)
		return false;
	shift = ctl->shift[vital];
	h = bpf_map_lookup_elem(&hcas, &key);
	st = bpf_map_lookup_elem(&stats, &key);
	if (!h || !st)
		return false;

	hsh = label_hash(ctl->seed[copy], w0, w1, w2);
#pragma unroll
	for (int r = 0; r < HCA_ROWS; r++) {
		__u32 idx = hca_index(hsh, r);
		__u64 o = h->c[r][idx];

		h->c[r][idx] = o + weight;
		if (o < old)
			old = o;
	}
	/* The least row after the add is the least before it, plus weight. */
	new = old + weight;
	if (new > 0xffffffffULL)
		new = 0xffffffffULL;

	if (!counted) {
		st->events++;
		st->weight += weight;
	}
	v->copy = copy;
	v->gen = gen;
	v->est = new;
	v->sampled = level(new, shift) > level(old, shift);
	return true;
}

/*
 * Whether an event of weight would be sampled were it added now: the
 * label's estimate in the active copy (read, not written) would reach a
 * new power of t. A program that adds only some of its events to the
 * sketch asks this first, so that the events that cross a power, the
 * first of a rare label's above all, are never among those left out.
 */
static __always_inline bool sketch_would_sample(struct hl_control *ctl, __u32 vital,
						__u64 w0, __u64 w1, __u64 w2, __u32 weight)
{
	__u32 copy = ctl->gen & 1;
	__u32 key = copy * NR_VITALS + vital;
	struct hca *h;
	__u64 hsh, old = ~0ULL;

	if (vital >= NR_VITALS)
		return false;
	h = bpf_map_lookup_elem(&hcas, &key);
	if (!h)
		return false;
	hsh = label_hash(ctl->seed[copy], w0, w1, w2);
#pragma unroll
	for (int r = 0; r < HCA_ROWS; r++) {
		__u64 o = h->c[r][hca_index(hsh, r)];
		if (o < old)
			old = o;
	}
	return level(old + weight, ctl->shift[vital]) > level(old, ctl->shift[vital]);
}

/* Account one event in the active copy's HCA and totals. */
static __always_inline bool sketch_update(struct hl_control *ctl, __u32 vital,
					  __u64 w0, __u64 w1, __u64 w2,
					  __u32 weight, struct verdict *v)
{
	return sketch_add(ctl, vital, w0, w1, w2, weight, false, v);
}

static __always_inline struct hl_stats *stats_of(__u32 copy, __u32 vital)
{
	__u32 key = copy * NR_VITALS + vital;
	return bpf_map_lookup_elem(&stats, &key);
}

/* Reserve a sample record and fill the parts common to every vital except
 * the identity of the task it is charged to (see ident_from_task). Its time
 * is read on the TAI clock, the wall clock plus whole seconds: converted
 * later, a monotonic time would be shifted by a step of the wall clock in
 * between, against the spans it is joined with. */
static __always_inline struct hl_sample *sample_begin(struct verdict *v, __u32 vital,
						   __u64 w0, __u64 w1, __u64 w2,
						   __u32 weight)
{
	struct hl_sample *s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	struct hl_stats *st = stats_of(v->copy, vital);

	if (!s) {
		if (st)
			st->lost_ringbuf++;
		return NULL;
	}
	if (st)
		st->samples++;
	s->kind = RECORD_SAMPLE;
	s->vital = vital;
	s->gen = v->gen;
	s->ts = bpf_ktime_get_tai_ns();
	s->label = label_hash(0, w0, w1, w2);
	s->weight = weight;
	s->est = v->est;
	__builtin_memset(s->f, 0, sizeof(s->f));
	s->kstack_bytes = 0;
	s->ustack_bytes = 0;
	return s;
}

static __always_inline void ident_from_task(struct hl_sample *s, struct task_struct *task)
{
	s->pid = BPF_CORE_READ(task, tgid);
	s->tid = BPF_CORE_READ(task, pid);
	s->uid = BPF_CORE_READ(task, cred, uid.val);
	s->exe_ino = BPF_CORE_READ(task, mm, exe_file, f_inode, i_ino);
	s->exe_dev = BPF_CORE_READ(task, mm, exe_file, f_inode, i_sb, s_dev);
	BPF_CORE_READ_STR_INTO(&s->comm, task, comm);
}

/* The user-space PC at which the current task entered the kernel: the
 * "site" of an event caused by a system call or fault; 0 for kernel threads. */
static __always_inline __u64 user_site(struct task_struct *task)
{
	struct pt_regs *regs;

	if (!task->mm)
		return 0;
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	return regs ? regs->ip : 0;
}

/* Runs on every event of the hot vitals: plain loads through the trusted
 * task pointer (the verifier guards them) rather than probe-read helpers. */
static __always_inline __u64 current_who(struct task_struct *task)
{
	struct mm_struct *mm = task->mm;
	__u64 ino = 0;

	if (mm && mm->exe_file)
		ino = mm->exe_file->f_inode->i_ino;
	return who_word(ino, (__u32)bpf_get_current_uid_gid());
}

static __always_inline __u32 clamp_weight(__u64 w)
{
	if (w == 0)
		return 1;
	return w > 0xffffffffULL ? 0xffffffff : w;
}

static __always_inline void note_stack(struct hl_sample *s, __u32 vital, __u32 copy)
{
	if (s->kstack_bytes <= 0 && s->ustack_bytes <= 0) {
		struct hl_stats *st = stats_of(copy, vital);
		if (st)
			st->no_stack++;
	}
}

/*
 * Account an event of the current task; when it is sampled, return its
 * sample with identity and both stacks filled in, for the caller to add
 * its fields and pass to sample_submit.
 */
static __always_inline struct hl_sample *current_event_add(void *ctx, struct hl_control *ctl, __u32 vital,
							   __u64 w0, __u64 w1, __u64 w2, __u32 weight,
							   bool counted, struct verdict *v)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct hl_sample *s;

	if (!sketch_add(ctl, vital, w0, w1, w2, weight, counted, v) || !v->sampled)
		return NULL;
	s = sample_begin(v, vital, w0, w1, w2, weight);
	if (!s)
		return NULL;
	ident_from_task(s, task);
	s->kstack_bytes = bpf_get_stack(ctx, s->kstack, sizeof(s->kstack), 0);
	s->ustack_bytes = task->mm ? bpf_get_stack(ctx, s->ustack, sizeof(s->ustack), BPF_F_USER_STACK) : 0;
	return s;
}

/* current_event_add for an event not yet counted in the vital's totals. */
static __always_inline struct hl_sample *current_event(void *ctx, struct hl_control *ctl, __u32 vital,
						       __u64 w0, __u64 w1, __u64 w2, __u32 weight,
						       struct verdict *v)
{
	return current_event_add(ctx, ctl, vital, w0, w1, w2, weight, false, v);
}

static __always_inline void sample_submit(struct hl_sample *s, __u32 vital, struct verdict *v)
{
	note_stack(s, vital, v->copy);
	bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
}

/* Small per-task marks for events that begin and end in the same task. */
struct task_marks {
	__u64 sys_ts;
	__u64 sys_arg0;
	__u64 sys_sp;
	__u64 lock_ts;
	__u64 lock_addr;
	__s64 sys_nr;
	__u32 lock_flags;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_marks);
} task_marks SEC(".maps");

#endif
