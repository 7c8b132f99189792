package sketch

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Golden values, computed independently with Python's big integers (mask
// each product to 64 bits). Mix64(0) = 0 can be checked by eye.
func TestGolden(t *testing.T) {
	mix := []struct{ x, want uint64 }{
		{0x0, 0x0000000000000000},
		{0x1, 0xb456bcfc34c2cb2c},
		{0x2, 0x3abf2a20650683e7},
		{0xdeadbeef, 0xd24bd59f862a1dac},
		{0xffffffffffffffff, 0x64b5720b4b825f21},
		{0x0123456789abcdef, 0x87cbfbfe89022cea},
	}
	for _, c := range mix {
		if got := Mix64(c.x); got != c.want {
			t.Errorf("Mix64(%#x) = %#016x, want %#016x", c.x, got, c.want)
		}
	}
	hash := []struct {
		seed uint64
		l    Label
		want uint64
	}{
		{0x0, Label{0x0, 0x0, 0x0}, 0x0000000000000000},
		{0x1, Label{0x2, 0x3, 0x4}, 0x287a60b1e2b8325e},
		{0x9e3779b97f4a7c15, Label{0xffffffff81000000, 0x0, 0x3e80000001092}, 0x1cabdeb1abfa7d8b},
		{0xffffffffffffffff, Label{0xffffffffffffffff, 0xffffffffffffffff, 0xffffffffffffffff}, 0x3b8d08f7c738fb7a},
	}
	for _, c := range hash {
		if got := Hash(c.seed, c.l); got != c.want {
			t.Errorf("Hash(%#x, %#x) = %#016x, want %#016x", c.seed, c.l, got, c.want)
		}
	}
}

// cTwin is the kernel's logic as plain C (the specification of bpf/sketch.h),
// driven by commands on stdin:
//
//	M x                      -> mix64(x)
//	H seed w0 w1 w2          -> label_hash(seed, w0, w1, w2)
//	L x shift                -> level(x, shift)
//	R seed                   zero the HCA and the hot slots and set the seed
//	A w0 w1 w2 weight shift  -> "sampled est" of the update
//	K k0 k1 k2 w0 w1 w2 weight shift
//	                         -> "sampled est hit" of the update through the hot slots
//	D                        -> the 2048 counters, row by row, then the seen array
//	S                        -> the hot slots: key, hash, left, pending each
const cTwin = `
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef uint64_t __u64;
typedef uint32_t __u32;

#define HCA_ROWS 4
#define HCA_WIDTH 512
#define HOT_SLOTS 8
#define SEEN_BITS 65536
#define SEEN_HASHES 3
struct hca { __u32 c[HCA_ROWS][HCA_WIDTH]; __u64 seen[SEEN_BITS / 64]; };
struct hot_slot { __u64 key[3]; __u64 hash; __u32 left; __u32 pending; };

static inline __u64 mix64(__u64 x) {
	x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33; return x;
}

static inline __u64 label_hash(__u64 seed, __u64 w0, __u64 w1, __u64 w2) {
	return mix64(mix64(mix64(seed ^ w0) ^ w1) ^ w2);
}

static int level(__u64 x, __u32 shift) {
	int lg = 0;
	if (x == 0)
		return -1;
	if (shift == 0)
		shift = 1;
	while (x >>= 1)
		lg++;
	return lg / (int)shift;
}

static struct hca h;

static int seen_first(__u64 hsh) {
	__u64 x = mix64(hsh ^ 0x9e3779b97f4a7c15ULL);
	int first = 0;
	for (int i = 0; i < SEEN_HASHES; i++) {
		__u32 b = (x >> (16 * i)) & (SEEN_BITS - 1);
		__u64 m = 1ULL << (b & 63);
		if (!(h.seen[b >> 6] & m)) {
			h.seen[b >> 6] |= m;
			first = 1;
		}
	}
	return first;
}

static __u32 room_below_next(__u64 est, __u32 shift) {
	__u64 next;
	if (shift == 0)
		shift = 1;
	next = (__u64)(level(est, shift) + 1) * shift;
	if (next >= 32)
		return 0xffffffffULL - est;
	return (1ULL << next) - est;
}

static struct hot_slot hot[HOT_SLOTS];
static __u64 seed;

/* hot_slot_of, hot_hit and sketch_event of bpf/sketch.h */
static void keyed(__u64 k0, __u64 k1, __u64 k2, __u64 w0, __u64 w1, __u64 w2, __u32 weight, __u32 shift) {
	__u64 x = k0 ^ k1;
	struct hot_slot *s = &hot[(x ^ (x >> 8) ^ (x >> 16)) & (HOT_SLOTS - 1)];
	int same = s->key[0] == k0 && s->key[1] == k1 && s->key[2] == k2;
	__u64 hsh, old = ~0ULL, new, add = weight;
	if (weight < s->left && same) {
		s->left -= weight;
		s->pending += weight;
		printf("0 0 1\n");
		return;
	}
	if (same) {
		add += s->pending;
	} else if (s->pending) {
		for (int r = 0; r < HCA_ROWS; r++)
			h.c[r][(s->hash >> (16 * r)) & (HCA_WIDTH - 1)] += s->pending;
	}
	hsh = label_hash(seed, w0, w1, w2);
	for (int r = 0; r < HCA_ROWS; r++) {
		__u32 idx = (hsh >> (16 * r)) & (HCA_WIDTH - 1);
		__u64 o = h.c[r][idx];
		h.c[r][idx] = o + add;
		if (o < old)
			old = o;
	}
	new = old + add;
	if (new > 0xffffffffULL)
		new = 0xffffffffULL;
	s->key[0] = k0;
	s->key[1] = k1;
	s->key[2] = k2;
	s->hash = hsh;
	s->pending = 0;
	s->left = room_below_next(new, shift);
	printf("%d %u 0\n", seen_first(hsh) || level(new, shift) > level(old, shift), (__u32)new);
}

int main(void) {
	char op[4];
	unsigned long long a, b, c, d, e;
	while (scanf("%3s", op) == 1) {
		switch (op[0]) {
		case 'M':
			if (scanf("%llu", &a) != 1) return 2;
			printf("%llu\n", (unsigned long long)mix64(a));
			break;
		case 'H':
			if (scanf("%llu %llu %llu %llu", &a, &b, &c, &d) != 4) return 2;
			printf("%llu\n", (unsigned long long)label_hash(a, b, c, d));
			break;
		case 'L':
			if (scanf("%llu %llu", &a, &b) != 2) return 2;
			printf("%d\n", level(a, (__u32)b));
			break;
		case 'R':
			if (scanf("%llu", &a) != 1) return 2;
			memset(&h, 0, sizeof(h));
			memset(hot, 0, sizeof(hot));
			seed = a;
			break;
		case 'K': {
			unsigned long long k[3], w[3], weight, shift;
			if (scanf("%llu %llu %llu %llu %llu %llu %llu %llu", &k[0], &k[1], &k[2], &w[0], &w[1], &w[2], &weight, &shift) != 8) return 2;
			keyed(k[0], k[1], k[2], w[0], w[1], w[2], (__u32)weight, (__u32)shift);
			break;
		}
		case 'S':
			for (int i = 0; i < HOT_SLOTS; i++)
				printf("%llu %llu %llu %llu %u %u%c", (unsigned long long)hot[i].key[0], (unsigned long long)hot[i].key[1],
				       (unsigned long long)hot[i].key[2], (unsigned long long)hot[i].hash, hot[i].left, hot[i].pending,
				       i == HOT_SLOTS - 1 ? '\n' : ' ');
			break;
		case 'A': {
			if (scanf("%llu %llu %llu %llu %llu", &a, &b, &c, &d, &e) != 5) return 2;
			__u32 weight = (__u32)d, shift = (__u32)e;
			__u64 hsh = label_hash(seed, a, b, c), old = ~0ULL, new = ~0ULL;
			for (int r = 0; r < HCA_ROWS; r++) {
				__u32 idx = (hsh >> (16 * r)) & (HCA_WIDTH - 1);
				__u64 o = __atomic_fetch_add(&h.c[r][idx], weight, __ATOMIC_RELAXED);
				__u64 n = o + weight;
				if (o < old) old = o;
				if (n < new) new = n;
			}
			if (new > 0xffffffffULL)
				new = 0xffffffffULL;
			printf("%d %u\n", seen_first(hsh) || level(new, shift) > level(old, shift), (__u32)new);
			break;
		}
		case 'D':
			for (int r = 0; r < HCA_ROWS; r++)
				for (int i = 0; i < HCA_WIDTH; i++)
					printf("%u ", h.c[r][i]);
			for (int i = 0; i < SEEN_BITS / 64; i++)
				printf("%llu%c", (unsigned long long)h.seen[i], i == SEEN_BITS / 64 - 1 ? '\n' : ' ');
			break;
		default:
			return 3;
		}
	}
	return 0;
}
`

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// inCI reports whether the tests run in continuous integration, where a
// missing compiler is a failure rather than a reason to skip.
func inCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "0" && v != "false"
}

// buildCTwin compiles cTwin with gcc and returns the path of the program.
func buildCTwin(t *testing.T) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		if inCI() {
			t.Fatalf("gcc not found and CI=%q: the bit-exactness test against C cannot be skipped in CI", os.Getenv("CI"))
		}
		t.Skip("gcc not found; skipping the comparison with the C twin")
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "twin.c"), filepath.Join(dir, "twin")
	if err := os.WriteFile(src, []byte(cTwin), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gcc, "-std=gnu11", "-O2", "-Wall", "-Werror", "-o", bin, src).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// TestAgainstC runs the same inputs through the C twin and the Go package:
// Mix64 and Hash on 1000 random labels and seeds, Level, and long update
// streams with collisions, zero and huge weights (wrapping counters, clamped
// estimates) and every shift from 0 to 6, comparing each verdict and the
// final counters; then streams through hot slots (storms of one label
// among others that share its slot), comparing each verdict, the slots and
// the counters.
func TestAgainstC(t *testing.T) {
	bin := buildCTwin(t)
	rng := rand.New(rand.NewPCG(2008, 1))
	var in bytes.Buffer
	var want []string // the Go side's answers, line by line

	edge := []uint64{0, 1, 2, 0xffffffff, 1 << 32, 1 << 63, ^uint64(0)}
	// weight is an event's weight: mostly 1, sometimes 0, up to most, or
	// huge (wrapping counters, clamping estimates).
	weight := func(most uint32) uint32 {
		switch rng.IntN(20) {
		case 0:
			return rng.Uint32()
		case 1:
			return 0
		case 2, 3, 4:
			return rng.Uint32N(most)
		}
		return 1
	}
	word := func() uint64 {
		if rng.IntN(20) == 0 {
			return edge[rng.IntN(len(edge))]
		}
		return rng.Uint64() >> rng.UintN(64)
	}
	for range 1000 {
		x := word()
		fmt.Fprintf(&in, "M %d\n", x)
		want = append(want, strconv.FormatUint(Mix64(x), 10))
		seed, l := word(), Label{word(), word(), word()}
		fmt.Fprintf(&in, "H %d %d %d %d\n", seed, l[0], l[1], l[2])
		want = append(want, strconv.FormatUint(Hash(seed, l), 10))
	}
	for range 1000 {
		x, shift := word(), rng.UintN(8)
		fmt.Fprintf(&in, "L %d %d\n", x, shift)
		want = append(want, strconv.Itoa(Level(x, shift)))
	}
	dumpCounters := func(h *HCA) {
		in.WriteString("D\n")
		var dump []string
		for r := range Rows {
			for _, c := range h.Counters[r] {
				dump = append(dump, strconv.FormatUint(uint64(c), 10))
			}
		}
		for _, w := range h.Seen {
			dump = append(dump, strconv.FormatUint(w, 10))
		}
		want = append(want, strings.Join(dump, " "))
	}
	for epoch := range 8 {
		var h HCA
		h.Reset(word())
		fmt.Fprintf(&in, "R %d\n", h.Seed)
		labels := make([]Label, 100+rng.IntN(4000))
		for i := range labels {
			labels[i] = Label{word(), uint64(epoch), word()}
		}
		for range 20000 {
			l := labels[rng.IntN(len(labels))]
			w := weight(100000)
			shift := rng.UintN(7)
			fmt.Fprintf(&in, "A %d %d %d %d %d\n", l[0], l[1], l[2], w, shift)
			sampled, est := h.Add(l, w, shift)
			want = append(want, fmt.Sprintf("%d %d", b2i(sampled), est))
		}
		dumpCounters(&h)
		// The same epoch's labels again, through hot slots of their own: keys
		// that share slots, and runs of one label, as programs see them.
		h.Reset(word())
		var hot Hot
		fmt.Fprintf(&in, "R %d\n", h.Seed)
		keys := make([][3]uint64, 1+rng.IntN(12))
		for i := range keys {
			keys[i] = [3]uint64{rng.Uint64N(3), rng.Uint64N(64) << 8, rng.Uint64N(2)}
		}
		for range 20000 {
			i := rng.IntN(len(keys))
			if rng.IntN(4) > 0 {
				i = 0 // a storm of one label
			}
			k, l := keys[i], Label{keys[i][0], keys[i][1], keys[i][2] ^ uint64(epoch)}
			w := weight(1000)
			shift := uint(epoch % 4)
			fmt.Fprintf(&in, "K %d %d %d %d %d %d %d %d\n", k[0], k[1], k[2], l[0], l[1], l[2], w, shift)
			sampled, est, hit := h.AddHot(&hot, k, l, w, shift)
			want = append(want, fmt.Sprintf("%d %d %d", b2i(sampled), est, b2i(hit)))
		}
		in.WriteString("S\n")
		var slots []string
		for _, s := range hot {
			slots = append(slots, fmt.Sprintf("%d %d %d %d %d %d", s.Key[0], s.Key[1], s.Key[2], s.Hash, s.Left, s.Pending))
		}
		want = append(want, strings.Join(slots, " "))
		dumpCounters(&h)
	}

	cmd := exec.Command(bin)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("C twin: %v\n%s", err, stderr.Bytes())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	i := 0
	for sc.Scan() {
		if i >= len(want) {
			t.Fatalf("C twin printed more than the %d expected lines", len(want))
		}
		if got := sc.Text(); got != want[i] {
			g, w := got, want[i]
			if len(g) > 200 {
				g, w = g[:200]+"...", w[:min(200, len(w))]+"..."
			}
			t.Fatalf("line %d: C says %q, Go says %q", i+1, g, w)
		}
		i++
	}
	if i != len(want) {
		t.Fatalf("C twin printed %d lines, want %d", i, len(want))
	}
	t.Logf("%d answers identical between C and Go", i)
}
