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
 *
 * First events. A label's counters can all be shared with other labels
 * already (the more labels an epoch has, the likelier: with n labels, a
 * row of w counters has a share e^(-n/w) of them still zero), and then its
 * first event may cross no power of t and go unsampled. So the HCA also
 * keeps a bit array, a Bloom filter of the labels that came this epoch
 * (SEEN_BITS bits, SEEN_HASHES bits a label): an event whose label is not
 * in it is sampled whatever its estimate (seen_first). It misses a label's
 * first event with probability (1 - e^(-kn/m))^k: for 500 labels an
 * epoch 1e-5, for 2000 7e-4, for 5000 (a busy build host's system calls
 * over 10 s) 9e-3, where the zero counters alone would miss 0.15, 0.92
 * and all. SEEN_BITS is at most 2^16: each bit index is 16 bits of the
 * label's hash.
 *
 * Hot labels. Each CPU keeps, per copy and vital, HOT_SLOTS labels it saw
 * last (struct hot_slot, beside the exact totals): the label's identity as
 * the program sees it before any hashing (its key), its hash, and how much
 * weight it may still gain before its estimate reaches the next power of
 * t. An event whose key is in its slot and whose weight keeps it below
 * that power only adds its weight to the slot (hot_hit): it could not be
 * sampled, so the hash, the counters and the label's own words are not
 * needed. The event that would reach the power goes into the sketch with
 * the weight its slot gathered (sketch_event), and is sampled as it would
 * have been without the slot. A storm — one label, millions of events —
 * costs a few loads and compares an event; a label seen once always goes
 * through the sketch. A slot taken by another label first adds what it
 * gathered to its own counters. What a slot holds at the epoch's end is in
 * the exact totals, not in the counters.
 */
#ifndef HOLTER_SKETCH_H
#define HOLTER_SKETCH_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define HCA_ROWS 4
#define HCA_WIDTH 512
#define HOT_SLOTS 8
#define SEEN_BITS 65536
#define SEEN_HASHES 3
#define MAX_STACK 64
#define SP_WORDS 16

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

/* Engine processes of the recorder's excluded from recording, at most. */
#define NR_ENGINE_TGIDS 4

/* The counters, and which labels came in this epoch (seen_first). */
struct hca {
	__u32 c[HCA_ROWS][HCA_WIDTH];
	__u64 seen[SEEN_BITS / 64];
};

/* Written by user space; read by every program. */
struct hl_control {
	__u64 gen;                 /* epoch generation; copy = gen & 1 */
	__u64 seed[2];             /* hash seed per copy, renewed each epoch */
	__u32 shift[NR_VITALS];    /* t = 1 << shift */
	/* 1 << thin[v]: the budget's thinning of vital v (see sketch_thinned);
	 * 0 when it is not thinned. */
	__u32 thin[NR_VITALS];
	__u32 enabled;             /* bit per vital */
	__u64 sched_min_ns;        /* scheduling delay that qualifies */
	__u64 blck_min_ns;         /* blocking time that qualifies */
	__u32 self_tgid;           /* the recorder: never recorded, or it would record itself recording */
	/* The recorder's database engine processes (internal/engine), as much
	 * its own as itself: never recorded either. Unused slots hold
	 * self_tgid (never 0, the idle task's). */
	__u32 engine_tgid[NR_ENGINE_TGIDS];
	__u32 boost_max;           /* 0: no process is boosted; else samples per epoch boosts may add (see boosted) */
	/* Nonzero while the context-switch and sys_exit programs both run,
	 * new each time either is attached: the on_cpu records filled in this
	 * generation serve (see struct on_cpu). */
	__u64 on_cpu_gen;
};

/* One hot label of a CPU (see the top of this file). Empty when left is 0. */
struct hot_slot {
	__u64 key[3];
	__u64 hash;     /* its hash under the copy's seed */
	__u32 left;     /* weight it may gain before its estimate reaches the next power of t */
	__u32 pending;  /* weight gathered here since it last went into the sketch */
};

/* Exact per-epoch totals, per CPU, per copy and vital, and the CPU's hot
 * labels of the vital. */
struct hl_stats {
	__u64 events;
	__u64 weight;
	__u64 samples;
	__u64 lost_ringbuf;  /* sampled, but the ring buffer was full */
	__u64 lost_state;    /* event seen without its start (e.g. map full) */
	__u64 no_stack;      /* sampled without a stack */
	__u64 secondary;     /* vital-specific: kmem pages freed, sock bytes received */
	__u64 runs;          /* program runs, events or not: what the vital's programs cost is per run */
	__u64 sketched;      /* events that went into the sketch (past their hot slot) */
	__u64 thinned;       /* events the budget's thinning left out of the sketch (counted here) */
	struct hot_slot hot[HOT_SLOTS];
};

/*
 * A sample as it goes into the ring buffer: the header, then the kernel
 * stack's frames and the user stack's, kstack_bytes and ustack_bytes of
 * them (a negative count is bpf_get_stack's error), then sp_bytes of the
 * words at the user stack pointer, so a record is as long as its stacks.
 * The user stack's addresses are the process's; start_code and mmap_base,
 * its layout, let user space symbolise them after the process is gone by
 * a process of the same executable (internal/symbol).
 *
 * The words at the stack pointer are there for a sample taken in a system
 * call: the C library's wrappers keep no frame pointer, so the
 * frame-pointer walk goes from the wrapper (frame 0) to its caller's
 * caller, or stops there when the wrapper has the frame pointer's register
 * in use. The return address into the caller is among the first words at
 * the stack pointer (the first, or a few up when the wrapper saved
 * registers); user space tells it by the call instruction before it
 * (internal/recorder's wrapperCaller). SP_WORDS is 16 because glibc's
 * open() keeps 15 words of its own below the return address (two saved
 * registers and 0x68 bytes of locals); with 8, a loop around a failing
 * open was a stack of [open] alone, its caller lost. 16 cover 93 % of
 * the C library's functions that make a system call.
 */
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
	__u64 start_code;
	__u64 mmap_base;
	char comm[16];
	__u64 f[8];    /* vital-specific fields, see each program */
	__s32 kstack_bytes;
	__s32 ustack_bytes;
	__u32 sp_bytes;
	__u32 pad;
	__u64 stack[2 * MAX_STACK + SP_WORDS];
};

#define SAMPLE_HEADER_BYTES (sizeof(struct hl_sample) - (2 * MAX_STACK + SP_WORDS) * sizeof(__u64))

/* A global variable (.bss), not a map value: a program reaches it by its
 * address, with no lookup and no null check on every event. */
struct hl_control control;

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
 * Where samples are built before they go into the ring buffer, as long as
 * their stacks: per CPU, one per nesting depth, since a program can be
 * interrupted by another that samples (a page allocated in an interrupt
 * while a system call's sample is built; the cpu vital's perf event).
 */
#define SCRATCH_DEPTH 4

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SCRATCH_DEPTH);
	__type(key, __u32);
	__type(value, struct hl_sample);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} scratch_depth SEC(".maps");

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
 * sample. 2 MiB holds ~1650 samples of the largest size (pollInterval). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 2 << 20);
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

/* How much weight an estimate of est may gain before it reaches the next
 * power of t = 1 << shift (est >= 1); the estimates stop at 2^32 - 1. */
static __always_inline __u32 room_below_next(__u64 est, __u32 shift)
{
	__u64 next;

	if (shift == 0)
		shift = 1;
	next = (__u64)(level(est, shift) + 1) * shift;
	if (next >= 32)
		return 0xffffffffULL - est;
	return (1ULL << next) - est;
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
	return &control;
}

static __always_inline bool vital_enabled(struct hl_control *ctl, __u32 vital)
{
	return ctl->enabled & (1u << vital);
}

/* Process tgid is the recorder or one of its engine processes. */
static __always_inline bool is_self(struct hl_control *ctl, __u32 tgid)
{
	return tgid == ctl->self_tgid || tgid == ctl->engine_tgid[0] || tgid == ctl->engine_tgid[1] ||
	       tgid == ctl->engine_tgid[2] || tgid == ctl->engine_tgid[3];
}

/* The vital is recorded and the current task is not the recorder's. */
static __always_inline bool record_current(struct hl_control *ctl, __u32 vital)
{
	return vital_enabled(ctl, vital) && !is_self(ctl, bpf_get_current_pid_tgid() >> 32);
}

static __always_inline struct hl_stats *stats_of(__u32 copy, __u32 vital)
{
	__u32 key = copy * NR_VITALS + vital;
	return bpf_map_lookup_elem(&stats, &key);
}

/* The active copy's totals of vital on this CPU, with the run counted. */
static __always_inline struct hl_stats *run_stats(struct hl_control *ctl, __u32 vital)
{
	struct hl_stats *st = stats_of(ctl->gen & 1, vital);

	if (st)
		st->runs++;
	return st;
}

/* Whether the label hashed to hsh is new in h this epoch; marks it seen.
 * Its bits come from a second mix of the hash, independent of the rows'
 * indices. */
static __always_inline bool seen_first(struct hca *h, __u64 hsh)
{
	__u64 x = mix64(hsh ^ 0x9e3779b97f4a7c15ULL);
	bool first = false;

#pragma unroll
	for (int i = 0; i < SEEN_HASHES; i++) {
		__u32 b = (x >> (16 * i)) & (SEEN_BITS - 1);
		__u64 m = 1ULL << (b & 63);

		if (!(h->seen[b >> 6] & m)) {
			h->seen[b >> 6] |= m;
			first = true;
		}
	}
	return first;
}

/* seen_first without marking. */
static __always_inline bool seen_new(struct hca *h, __u64 hsh)
{
	__u64 x = mix64(hsh ^ 0x9e3779b97f4a7c15ULL);

#pragma unroll
	for (int i = 0; i < SEEN_HASHES; i++) {
		__u32 b = (x >> (16 * i)) & (SEEN_BITS - 1);

		if (!(h->seen[b >> 6] & (1ULL << (b & 63))))
			return true;
	}
	return false;
}

/* A label hash's counter in row r: each row takes its own 16 bits. */
static __always_inline __u32 hca_index(__u64 hsh, int r)
{
	return (hsh >> (16 * r)) & (HCA_WIDTH - 1);
}

/* The slot of the label keyed k0, k1 (and a third word, which the slot
 * compares but does not choose by). */
static __always_inline struct hot_slot *hot_slot_of(struct hl_stats *st, __u64 k0, __u64 k1)
{
	__u64 x = k0 ^ k1;

	return &st->hot[(x ^ (x >> 8) ^ (x >> 16)) & (HOT_SLOTS - 1)];
}

static __always_inline bool hot_is(struct hot_slot *h, __u64 k0, __u64 k1, __u64 k2)
{
	return h->key[0] == k0 && h->key[1] == k1 && h->key[2] == k2;
}

/* The event's label is hot on this CPU and its weight keeps it below its
 * next power of t: the slot takes the weight, and nothing else is done. */
static __always_inline bool hot_hit(struct hot_slot *h, __u64 k0, __u64 k1, __u64 k2, __u32 weight)
{
	if (weight >= h->left || !hot_is(h, k0, k1, k2))
		return false;
	h->left -= weight;
	h->pending += weight;
	return true;
}

/*
 * Account one event in the active copy's HCA and decide whether it is
 * sampled: the event of the label keyed k0..k2 (its words w0..w2) that its
 * hot slot h did not take. The slot is the label's afterwards. Returns
 * false when the recorder is not configured.
 *
 * The counters are read and written back, not added to atomically. A
 * locked add is a full barrier that waits for the CPU's pending stores:
 * where the page allocator has just written the page it hands out, four
 * of them made mm_page_alloc's program cost 640-660 ns an event on the
 * demo system of internal/requests, against 460-500 ns this way. Two CPUs
 * updating one counter at the same instant lose one weight from it: the
 * estimate reads a little low and a sample may come an event later.
 */
static __always_inline bool sketch_event(struct hl_control *ctl, __u32 vital, struct hl_stats *st, struct hot_slot *h,
					 __u64 k0, __u64 k1, __u64 k2,
					 __u64 w0, __u64 w1, __u64 w2,
					 __u32 weight, struct verdict *v)
{
	__u64 gen = ctl->gen;
	__u32 copy = gen & 1;
	__u32 key = copy * NR_VITALS + vital;
	__u64 hsh, old = ~0ULL, new, add = weight;
	struct hca *hc;
	__u32 shift;

	if (vital >= NR_VITALS)
		return false;
	shift = ctl->shift[vital];
	hc = bpf_map_lookup_elem(&hcas, &key);
	if (!hc)
		return false;
	st->sketched++;

	if (hot_is(h, k0, k1, k2)) {
		add += h->pending;
	} else if (h->pending) {
		/* Below its next power: the slot's label cannot be sampled by it. */
#pragma unroll
		for (int r = 0; r < HCA_ROWS; r++)
			hc->c[r][hca_index(h->hash, r)] += h->pending;
	}
	hsh = label_hash(ctl->seed[copy], w0, w1, w2);
#pragma unroll
	for (int r = 0; r < HCA_ROWS; r++) {
		__u32 idx = hca_index(hsh, r);
		__u64 o = hc->c[r][idx];

		hc->c[r][idx] = o + add;
		if (o < old)
			old = o;
	}
	/* The least row after the add is the least before it, plus add. */
	new = old + add;
	if (new > 0xffffffffULL)
		new = 0xffffffffULL;

	h->key[0] = k0;
	h->key[1] = k1;
	h->key[2] = k2;
	h->hash = hsh;
	h->pending = 0;
	h->left = room_below_next(new, shift);

	v->copy = copy;
	v->gen = gen;
	v->est = new;
	v->sampled = seen_first(hc, hsh) || level(new, shift) > level(old, shift);
	return true;
}

/*
 * The budget's thinning (control.thin[vital] = n > 0): of a thinned vital's
 * events that go to the sketch, those that would not be sampled (their
 * label is not new, and its estimate, read and not written, would not
 * reach the next power of t) enter it 1 in 2^n, with their weight multiplied by 2^n, so the
 * estimates stay unbiased; the others are counted in thinned. The events
 * that would be sampled, the first of a rare label's above all, always
 * enter. Returns the weight the event enters with, 0 if it does not.
 */
static __always_inline __u32 sketch_thinned(struct hl_control *ctl, __u32 vital, struct hl_stats *st,
					    __u64 w0, __u64 w1, __u64 w2, __u32 weight)
{
	__u32 copy = ctl->gen & 1;
	__u32 key = copy * NR_VITALS + vital;
	__u32 thin, shift;
	struct hca *hc;
	__u64 hsh, old = ~0ULL, w;

	if (vital >= NR_VITALS)
		return weight;
	thin = ctl->thin[vital];
	if (!thin || thin > 16)
		return weight;
	hc = bpf_map_lookup_elem(&hcas, &key);
	if (!hc)
		return weight;
	shift = ctl->shift[vital];
	hsh = label_hash(ctl->seed[copy], w0, w1, w2);
#pragma unroll
	for (int r = 0; r < HCA_ROWS; r++) {
		__u64 o = hc->c[r][hca_index(hsh, r)];
		if (o < old)
			old = o;
	}
	if (level(old + weight, shift) > level(old, shift) || seen_new(hc, hsh))
		return weight;
	if (bpf_get_prandom_u32() & ((1u << thin) - 1)) {
		st->thinned++;
		return 0;
	}
	w = (__u64)weight << thin;
	return w > 0xffffffffULL ? 0xffffffff : w;
}

/* A user address as it is in every process of one program: the offset in
 * the executable's text, or else the distance below the base the kernel
 * maps shared libraries down from (mmap_base), which address-space
 * randomisation moves but whose layout below stays the same from run to
 * run of the same program; the top two bits say which. No site (0) stays
 * 0. */
static __always_inline __u64 stable_addr_in(__u64 code, __u64 end_code, __u64 base, __u64 a)
{
	if (a >= code && a < end_code)
		return (a - code) | (1ULL << 62);
	if (a < base)
		return (base - a) | (2ULL << 62);
	return (a - base) | (3ULL << 62);
}

/* stable_addr_in the memory map mm, which a kernel thread has none of. */
static __always_inline __u64 stable_addr(struct mm_struct *mm, __u64 a)
{
	if (!mm || !a)
		return a;
	return stable_addr_in(mm->start_code, mm->end_code, mm->mmap_base, a);
}

/* A user stack pointer as a depth, the same from run to run: below the top
 * of the main stack (top: the memory map's start_stack, 0 for a task
 * without one); on any other stack (a thread's, or a goroutine's in
 * the Go heap) whose top is not known, its offset in an 8 KiB window, so
 * that the stacks of a program's many threads and goroutines make a few
 * labels, not one each. */
#define MAIN_STACK_MAX (128ULL << 20)
#define OTHER_STACK_WINDOW 0x2000ULL

static __always_inline __u64 stack_depth(__u64 top, __u64 sp)
{
	if (!top)
		return sp;
	if (sp <= top && top - sp < MAIN_STACK_MAX)
		return top - sp;
	return (sp & (OTHER_STACK_WINDOW - 1)) | (2ULL << 62);
}

#define PF_KTHREAD_FLAG 0x00200000

/* The second label word of events that have no user-space site: the
 * thread, for a kernel thread (kworkers, kswapd: few, and long-lived);
 * 0 for a user task (one that is exiting has let its memory map go). */
static __always_inline __u64 kthread_word(struct task_struct *task)
{
	return task->flags & PF_KTHREAD_FLAG ? task->pid : 0;
}

/* The process in a hot slot's key: where its shared libraries are
 * mapped, which exec randomises (kernel threads, which map none, are 0). */
static __always_inline __u64 proc_key(struct mm_struct *mm)
{
	return mm ? mm->mmap_base : 0;
}

/* The "who" word of the current task: its executable and user. Plain
 * loads through the trusted task pointer (the verifier guards them) rather
 * than probe-read helpers. */
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

/* A sample being built, in this CPU's scratch at the current depth;
 * sample_end gives the depth back. NULL when sampling is nested deeper
 * than SCRATCH_DEPTH (counted as lost). */
static __always_inline struct hl_sample *scratch_take(void)
{
	__u32 zero = 0, d;
	__u32 *depth = bpf_map_lookup_elem(&scratch_depth, &zero);

	if (!depth)
		return NULL;
	d = *depth;
	if (d >= SCRATCH_DEPTH)
		return NULL;
	*depth = d + 1;
	return bpf_map_lookup_elem(&scratch, &d);
}

static __always_inline void scratch_give(void)
{
	__u32 zero = 0;
	__u32 *depth = bpf_map_lookup_elem(&scratch_depth, &zero);

	if (depth && *depth > 0)
		*depth -= 1;
}

/* Start a sample of a sampled event: the parts common to every vital but
 * the identity of the task it is charged to (ident_from_task) and the
 * stacks. Its time is read on the TAI clock, the wall clock plus whole
 * seconds: converted later, a monotonic time would be shifted by a step of
 * the wall clock in between, against the spans it is joined with. */
static __always_inline struct hl_sample *sample_begin(struct verdict *v, __u32 vital,
						   __u64 w0, __u64 w1, __u64 w2,
						   __u32 weight)
{
	struct hl_sample *s = scratch_take();
	struct hl_stats *st;

	if (!s) {
		st = stats_of(v->copy, vital);
		if (st)
			st->lost_ringbuf++;
		return NULL;
	}
	s->kind = RECORD_SAMPLE;
	s->vital = vital;
	s->gen = v->gen;
	s->ts = bpf_ktime_get_tai_ns();
	s->label = label_hash(0, w0, w1, w2);
	s->weight = weight;
	s->est = v->est;
	s->start_code = 0;
	s->mmap_base = 0;
	__builtin_memset(s->f, 0, sizeof(s->f));
	s->kstack_bytes = 0;
	s->ustack_bytes = 0;
	s->sp_bytes = 0;
	return s;
}

/* The identity of the task a sample is charged to, when it is not the
 * current one (probe reads: the pointers are not all trusted). */
static __always_inline void ident_from_task(struct hl_sample *s, struct task_struct *task)
{
	s->pid = BPF_CORE_READ(task, tgid);
	s->tid = BPF_CORE_READ(task, pid);
	s->uid = BPF_CORE_READ(task, cred, uid.val);
	s->exe_ino = BPF_CORE_READ(task, mm, exe_file, f_inode, i_ino);
	s->exe_dev = BPF_CORE_READ(task, mm, exe_file, f_inode, i_sb, s_dev);
	s->start_code = BPF_CORE_READ(task, mm, start_code);
	s->mmap_base = BPF_CORE_READ(task, mm, mmap_base);
	BPF_CORE_READ_STR_INTO(&s->comm, task, comm);
}

/* ident_from_task for the current task: plain loads through the trusted
 * task pointer and helpers, a fifth of the probe reads' cost (~100 ns
 * against ~500 on the test machine). */
static __always_inline void ident_from_current(struct hl_sample *s, struct task_struct *task)
{
	struct mm_struct *mm = task->mm;

	s->pid = task->tgid;
	s->tid = task->pid;
	s->uid = (__u32)bpf_get_current_uid_gid();
	s->exe_ino = 0;
	s->exe_dev = 0;
	if (mm) {
		if (mm->exe_file) {
			s->exe_ino = mm->exe_file->f_inode->i_ino;
			s->exe_dev = mm->exe_file->f_inode->i_sb->s_dev;
		}
		s->start_code = mm->start_code;
		s->mmap_base = mm->mmap_base;
	}
	bpf_get_current_comm(s->comm, sizeof(s->comm));
}

/* Whether a vital's samples carry the kernel stack. Walking it costs more
 * than anything else a sample does (3.8 of the 5.5 µs a signal's sample
 * took on the test machine), and at a system call's exit, at a user page
 * fault and in a socket's send or receive it is the same few frames of
 * entry and exit every time: those vitals' samples have the user stack
 * only. */
static __always_inline bool vital_kstack(__u32 vital)
{
	return vital != VITAL_SYSCALL && vital != VITAL_UMEM && vital != VITAL_SOCK;
}

#define NR_EXECVE 59
#define NR_EXECVEAT 322

/* Linux 6.2+; weak, so that the programs load without it (task_regs). */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

/* How far a task's user registers (task_pt_regs) are from its kernel
 * stack (task->stack): the same for every task of a kernel build (its
 * THREAD_SIZE and padding), learnt from bpf_task_pt_regs at the first
 * need, so that task_regs needs no helper call (a call and a return
 * through the kernel's return thunk) after it. */
__u64 pt_regs_offset;

/* The address of task's user registers, as bpf_task_pt_regs gives it;
 * 0 if it gives none. */
static __always_inline __u64 task_regs_addr(struct task_struct *task)
{
	__u64 off = pt_regs_offset, regs;

	if (!off) {
		regs = (__u64)bpf_task_pt_regs(task);
		if (!regs)
			return 0;
		off = regs - (__u64)task->stack;
		pt_regs_offset = off;
	}
	return (__u64)task->stack + off;
}

static __always_inline struct pt_regs *task_regs(struct task_struct *task)
{
	__u64 regs;

	if (!bpf_rdonly_cast)
		return (struct pt_regs *)bpf_task_pt_regs(task);
	regs = task_regs_addr(task);
	return regs ? bpf_rdonly_cast((void *)regs, bpf_core_type_id_kernel(struct pt_regs)) : NULL;
}

/* The system call a task woke in on this CPU, which the context-switch
 * program hands to the syscall vital (sched.bpf.h). */
struct woke {
	__u64 sp;
	__u64 slept_ts;
	__s64 nr;
	__u32 tid;
	__u32 pad;
};

/*
 * The task running on a CPU: what a system call's exit and a user page
 * fault need of it on their hot paths (vital_sys_exit, vital_umem_fault),
 * filled at the first of them after a context switch, so that those after
 * it make no helper call for the current task and load nothing through
 * its mm. The context-switch program empties it (regs 0) at every switch.
 * A record serves while control.on_cpu_gen is the gen it was filled in
 * (the context-switch and sys_exit programs have run all along since),
 * for an event whose user registers are at regs, the task's own (no two
 * live tasks share a kernel stack). exec changes a task's memory map
 * without a switch: the exit of execve, before any fault of the new
 * program, fills the record again.
 */
struct on_cpu {
	__u64 regs;
	__u64 gen;
	/* of the task's memory map, 0 without one: */
	__u64 proc;         /* proc_key (its mmap_base) */
	__u64 start_stack;
	__u64 start_code;
	__u64 end_code;
	__u32 tgid;
	__u32 pid;
	struct woke woke;   /* the system call the task woke in (sched.bpf.h); tid 0 when none */
	/* the task on the CPU returned from a system call since it was
	 * switched in (sys_exit sets it, the context switch reads and clears
	 * it): its next sleep is in another call */
	__u32 returned;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct on_cpu);
} on_cpus SEC(".maps");

static __always_inline struct on_cpu *on_cpu_here(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&on_cpus, &zero);
}

/* The current task's record, filled from it unless it serves the event
 * whose user registers are at regs. */
static __always_inline struct on_cpu *on_cpu_current(struct hl_control *ctl, __u64 regs, bool exec)
{
	struct on_cpu *c = on_cpu_here();
	__u64 gen = ctl->on_cpu_gen;
	struct task_struct *t;
	struct mm_struct *mm;

	if (!c || (gen && c->gen == gen && c->regs == regs && !exec))
		return c;
	t = bpf_get_current_task_btf();
	mm = t->mm;
	c->regs = task_regs_addr(t);
	c->gen = gen;
	c->tgid = t->tgid;
	c->pid = t->pid;
	c->proc = proc_key(mm);
	c->start_stack = mm ? mm->start_stack : 0;
	c->start_code = mm ? mm->start_code : 0;
	c->end_code = mm ? mm->end_code : 0;
	return c;
}

/* stable_addr in the memory map of the task of c. */
static __always_inline __u64 on_cpu_stable_addr(struct on_cpu *c, __u64 a)
{
	if (!c->proc || !a)
		return a;
	return stable_addr_in(c->start_code, c->end_code, c->proc, a);
}

/* The user-space PC at which the current task entered the kernel: the
 * "site" of an event caused by a system call or fault; 0 for kernel
 * threads, and in execve, whose registers are the old program's while the
 * memory map is already the new one's. */
static __always_inline __u64 user_site(struct task_struct *task)
{
	struct pt_regs *regs;
	__u64 nr;

	if (!task->mm)
		return 0;
	regs = task_regs(task);
	if (!regs)
		return 0;
	nr = regs->orig_ax;
	if (nr == NR_EXECVE || nr == NR_EXECVEAT)
		return 0;
	return regs->ip;
}

/* Where the user stack's frames go: after the kernel stack's. */
static __always_inline __u64 *ustack_at(struct hl_sample *s)
{
	__u32 k = s->kstack_bytes > 0 ? (__u32)s->kstack_bytes / 8 : 0;

	if (k > MAX_STACK)
		k = MAX_STACK;
	return &s->stack[k];
}

/* Where the words at the user stack pointer go: after the user stack's
 * frames. */
static __always_inline __u64 *sp_words_at(struct hl_sample *s)
{
	__u32 u = s->ustack_bytes > 0 ? (__u32)s->ustack_bytes / 8 : 0;

	if (u > MAX_STACK)
		u = MAX_STACK;
	return ustack_at(s) + u;
}

/* Read the SP_WORDS words at the user stack pointer into w when the user
 * registers regs are a system call's (or an exception's that has an error
 * code, a page fault's, which user space tells apart); returns the bytes
 * read, 0 if none. Only where a user stack is taken: it is for that
 * stack's caller of frame 0 (see struct hl_sample). */
static __always_inline __u32 read_sp_words(struct pt_regs *regs, __u64 *w)
{
	if (!regs || (__s64)regs->orig_ax < 0)
		return 0;
	if (bpf_probe_read_user(w, SP_WORDS * sizeof(__u64), (void *)regs->sp))
		return 0;
	return SP_WORDS * sizeof(__u64);
}

/* sp_bytes's top bit: the user stack was mended (mend_ustack), which user
 * space checks frame by frame. */
#define SP_MENDED (1u << 31)
/* How far above the stack pointer a mended walk may go (a thread's stack
 * is 8 MiB at most by default), and how many frames it adds. */
#define MEND_REACH (8ULL << 20)
#define MEND_FRAMES 24

/* Whether a could be a return address of the task whose user stack
 * pointer is sp: in user space, and not on its stack. */
static __always_inline bool user_code_like(__u64 a, __u64 sp)
{
	return a >= 0x10000 && a < (1ULL << 47) && (a + MEND_REACH < sp || a >= sp + MEND_REACH);
}

/* A C library wrapper that saves the frame pointer's register and uses it
 * for its own ends (glibc's open) leaves the frame-pointer walk of a system
 * call with the wrapper alone, or with one frame read through whatever the
 * register held. Its caller's frame pointer is still saved below the
 * caller's return address among the words at the stack pointer w: the
 * highest pair of a word pointing up the stack above both and one that
 * looks like code. The walk is done again from there: frame 1 the return
 * address, and the frame-pointer chain above it. Returns whether it was;
 * user space keeps the mended frames only up to the first that does not
 * follow a call instruction. */
static __always_inline bool mend_ustack(__u64 *frames, __s32 *bytes, __u64 sp, const __u64 *w)
{
	__u64 fp = 0, pair[2];
	int i, j, n = 2;

	if (*bytes != sizeof(__u64) && (*bytes != 2 * sizeof(__u64) || user_code_like(frames[1], sp)))
		return false;
	for (i = SP_WORDS - 2; i >= 0; i--) {
		if (w[i] >= sp + (i + 2) * sizeof(__u64) && w[i] < sp + MEND_REACH && !(w[i] & 7) &&
		    user_code_like(w[i + 1], sp)) {
			fp = w[i];
			frames[1] = w[i + 1];
			break;
		}
	}
	if (!fp)
		return false;
	for (j = 0; j < MEND_FRAMES; j++) {
		if (bpf_probe_read_user(pair, sizeof(pair), (void *)fp) || !user_code_like(pair[1], sp))
			break;
		frames[n++] = pair[1];
		if (pair[0] <= fp || pair[0] >= sp + MEND_REACH)
			break;
		fp = pair[0];
	}
	*bytes = n * sizeof(__u64);
	return true;
}

/* Take the current task's user stack into frames (bytes of them, or
 * bpf_get_stack's error) and the words at its stack pointer into words
 * (sp_bytes of them, with SP_MENDED when the stack was mended). */
static __always_inline void take_ustack(void *ctx, struct task_struct *task, __u64 *frames, __s32 *bytes,
					__u64 *words, __u32 *sp_bytes)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);

	*bytes = bpf_get_stack(ctx, frames, MAX_STACK * sizeof(__u64), BPF_F_USER_STACK);
	*sp_bytes = *bytes > 0 ? read_sp_words(regs, words) : 0;
	if (*sp_bytes && mend_ustack(frames, bytes, regs->sp, words))
		*sp_bytes |= SP_MENDED;
}

/* Take the current task's stacks into s, as a sample of vital needs them:
 * the kernel stack, then the user stack after it and the words at its
 * stack pointer, when the task has a user space. A page fault (umem) is
 * never in a system call. */
static __always_inline void take_stacks(void *ctx, struct hl_sample *s, struct task_struct *task, __u32 vital)
{
	__u64 *words;
	__u32 sp;

	if (vital_kstack(vital))
		s->kstack_bytes = bpf_get_stack(ctx, s->stack, MAX_STACK * sizeof(__u64), 0);
	if (!task->mm)
		return;
	if (vital == VITAL_UMEM) {
		s->ustack_bytes = bpf_get_stack(ctx, ustack_at(s), MAX_STACK * sizeof(__u64), BPF_F_USER_STACK);
		return;
	}
	/* The words are read past the longest user stack, then put after
	 * the frames, whose number mending may change. */
	words = ustack_at(s) + MAX_STACK;
	take_ustack(ctx, task, ustack_at(s), &s->ustack_bytes, words, &sp);
	if (sp && bpf_probe_read_kernel(sp_words_at(s), SP_WORDS * sizeof(__u64), words) == 0)
		s->sp_bytes = sp;
}

/* Copy a user stack taken earlier (n bytes of frames, or an error) into s,
 * after its kernel stack, with the words at its stack pointer (sp bytes of
 * them, as read_sp_words read them). */
static __always_inline void put_ustack(struct hl_sample *s, const __u64 *frames, __s32 n,
				       const __u64 *words, __u32 sp)
{
	s->ustack_bytes = n;
	if (n <= 0)
		return;
	if (n > MAX_STACK * sizeof(__u64))
		n = MAX_STACK * sizeof(__u64);
	bpf_probe_read_kernel(ustack_at(s), n, frames);
	if ((sp & ~SP_MENDED) == SP_WORDS * sizeof(__u64) &&
	    bpf_probe_read_kernel(sp_words_at(s), SP_WORDS * sizeof(__u64), words) == 0)
		s->sp_bytes = sp;
}

/* Send s, as long as its stacks, and give its scratch back. */
static __always_inline void sample_submit(struct hl_sample *s, __u32 vital, struct verdict *v)
{
	struct hl_stats *st = stats_of(v->copy, vital);
	__u64 k = s->kstack_bytes > 0 ? s->kstack_bytes : 0;
	__u64 u = s->ustack_bytes > 0 ? s->ustack_bytes : 0;
	__u64 w = s->sp_bytes & ~SP_MENDED;
	__u64 size;

	if (k > MAX_STACK * sizeof(__u64))
		k = MAX_STACK * sizeof(__u64);
	if (u > MAX_STACK * sizeof(__u64))
		u = MAX_STACK * sizeof(__u64);
	if (w > SP_WORDS * sizeof(__u64))
		w = SP_WORDS * sizeof(__u64);
	size = SAMPLE_HEADER_BYTES + k + u + w;
	if (size > sizeof(*s))
		size = sizeof(*s);
	if (st) {
		if (!k && !u)
			st->no_stack++;
		if (bpf_ringbuf_output(&samples, s, size, BPF_RB_NO_WAKEUP) == 0)
			st->samples++;
		else
			st->lost_ringbuf++;
	}
	scratch_give();
}

/*
 * Account an event of the current task that its hot slot did not take
 * (hot_hit): the sketch, the budget's thinning, and when it is sampled,
 * its sample with identity and both stacks filled in, for the caller to
 * add its fields and pass to sample_submit. The caller counted it in the
 * exact totals.
 */
static __always_inline struct hl_sample *current_event(void *ctx, struct hl_control *ctl, __u32 vital,
						       struct hl_stats *st, struct hot_slot *h,
						       __u64 k0, __u64 k1, __u64 k2,
						       __u64 w0, __u64 w1, __u64 w2, __u32 weight,
						       struct verdict *v)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct hl_sample *s;
	__u32 w = sketch_thinned(ctl, vital, st, w0, w1, w2, weight);

	if (!w || !sketch_event(ctl, vital, st, h, k0, k1, k2, w0, w1, w2, w, v) || !v->sampled)
		return NULL;
	s = sample_begin(v, vital, w0, w1, w2, weight);
	if (!s)
		return NULL;
	ident_from_current(s, task);
	take_stacks(ctx, s, task, vital);
	return s;
}

/* Count an event of weight in the exact totals st; true when its label,
 * keyed k0..k2, is hot here and nothing more need be done (hot_hit). */
static __always_inline bool count_event(struct hl_stats *st, struct hot_slot **h,
					__u64 k0, __u64 k1, __u64 k2, __u32 weight)
{
	st->events++;
	st->weight += weight;
	*h = hot_slot_of(st, k0, k1);
	return hot_hit(*h, k0, k1, k2, weight);
}

/* Small per-task marks for events that begin and end in the same task. */
struct task_marks {
	__u64 lock_ts;
	__u64 lock_addr;
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
