package sketch

import (
	"math"
	"math/bits"
	"math/rand/v2"
)

// Geometry of one hash counter array, identical to HCA_ROWS and HCA_WIDTH in
// bpf/sketch.h. Row r indexes its counters with the bits of the label hash
// from bit 16r up, so Width must be a power of two no larger than 1<<16; Rows
// is fixed at 4 (the update is unrolled, like the kernel's).
// Simulate can model other geometries.
const (
	Rows  = 4
	Width = 512
)

// The bit array of the labels an epoch has seen (SEEN_BITS and SEEN_HASHES
// in bpf/sketch.h): a Bloom filter with SeenHashes bits a label, so that a
// label's first event is sampled even when its counters are all shared.
const (
	SeenBits   = 65536
	SeenHashes = 3
	SeenWords  = SeenBits / 64
)

// DefaultShift is the default threshold exponent: t = 1<<DefaultShift = 2, so
// a label is sampled when its estimated count reaches 1, 2, 4, 8, ... It is the
// smallest threshold there is, and it meets the coverage bar (a label with
// 0.1% of an epoch's events is missed with probability <= 1e-3) with a wide
// margin, about 5e-5 in simulation; t = 4 and t = 8 cut the samples to about
// 54% and 39% but miss such a label about 4e-4 and 1e-3 of the time.
const DefaultShift = 1

// Compile-time checks of the geometry the kernel relies on.
var (
	_ = [1]struct{}{}[Width&(Width-1)] // Width is a power of two
	_ = [1]struct{}{}[Width>>17]       // Width <= 1<<16
	_ = [1]struct{}{}[Rows-4]          // Rows == 4: addHash is unrolled like the kernel's loop
)

// Label identifies an event type of a vital sign, for example a code address,
// an executable and a user. It is hashed, never interpreted.
type Label [3]uint64

// Mix64 is the 64-bit finaliser used by the label hash (mix64 in
// bpf/sketch.h).
func Mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Hash is the label hash under an epoch seed (label_hash in bpf/sketch.h).
// The kernel also tags each sample with Hash(0, l), which does not change from
// one epoch to the next.
func Hash(seed uint64, l Label) uint64 {
	return Mix64(Mix64(Mix64(seed^l[0])^l[1]) ^ l[2])
}

// Level is floor(log2(x)/shift) for x >= 1 and -1 for x == 0: the exponent
// of the highest power of t = 1<<shift not above x. A shift of 0 is treated
// as 1, as the kernel does.
func Level(x uint64, shift uint) int {
	if x == 0 {
		return -1
	}
	if shift == 0 {
		shift = 1
	}
	if shift >= 64 {
		return 0
	}
	return (bits.Len64(x) - 1) / int(shift)
}

// crosses reports whether Level(newv, shift) > Level(old, shift) for
// old <= newv, the sampling decision. Values with the same highest set bit
// (or both zero) are on the same level, which spares the division for almost
// every event.
func crosses(old, newv uint64, shift uint) bool {
	if bits.Len64(old) == bits.Len64(newv) {
		return false
	}
	return Level(newv, shift) > Level(old, shift)
}

// decide is the sampling decision shared by every counter geometry, given
// the minimum over the rows of the label's counters before the event. The
// kernel computes new = min_r(old_r + w) in 64 bits, where adding w keeps the
// order of the rows, so new = old + w; it clamps new to 32 bits for the
// estimate and samples the event when new is on a higher level than old.
func decide(old, weight uint32, shift uint) (sampled bool, est uint32) {
	newv := uint64(old) + uint64(weight)
	if newv > math.MaxUint32 {
		newv = math.MaxUint32
	}
	return crosses(uint64(old), newv, shift), uint32(newv)
}

// sameLevel is the shortcut of decide for almost every event: when old and
// old+weight have the same highest set bit they are on the same level, and
// old+weight < 1<<32 needs no clamping.
func sameLevel(old, weight uint32) bool {
	return bits.Len32(old) == bits.Len64(uint64(old)+uint64(weight))
}

// HCA is one copy of a hash counter array: the counters exactly as the kernel
// lays out struct hca (c[row][index], native-endian uint32, 8 KiB), so the
// value of a BPF array map element can be decoded straight into Counters, plus
// the seed the copy was hashed with (which the kernel keeps elsewhere).
//
// An HCA is not safe for concurrent use. The kernel updates its counters
// with plain loads and stores, not atomics (see sketch_add in bpf/sketch.h),
// so two CPUs updating one counter at once can lose a weight; the Go twin is
// for a single goroutine.
type HCA struct {
	Counters [Rows][Width]uint32
	Seen     [SeenWords]uint64
	Seed     uint64
}

// seenSalt makes the bits of a label in the seen array independent of its
// counters' indices (seen_first in bpf/sketch.h).
const seenSalt = 0x9e3779b97f4a7c15

// seenFirst reports whether the label hashed to hsh is new in seen, and
// marks it seen.
func seenFirst(seen []uint64, hsh uint64) bool {
	x := Mix64(hsh ^ seenSalt)
	first := false
	for i := range SeenHashes {
		b := (x >> (16 * i)) & (SeenBits - 1)
		if m := uint64(1) << (b & 63); seen[b>>6]&m == 0 {
			seen[b>>6] |= m
			first = true
		}
	}
	return first
}

// Add accounts one event of label l with the given weight and reports whether
// it is sampled, and the label's estimated count after the event. Each row's
// counter at the label's index grows by weight (wrapping at 32 bits, as the
// kernel's do); the estimate before and after the event is the minimum over
// the rows, the one after clamped to 0xffffffff; the event is sampled when that
// estimate reaches a new power of t = 1<<shift, i.e. when
// Level(after, shift) > Level(before, shift), or when the label is new in
// the copy's seen array.
func (h *HCA) Add(l Label, weight uint32, shift uint) (sampled bool, est uint32) {
	return h.addHash(Hash(h.Seed, l), weight, shift)
}

// addHash is Add for a label already hashed under h.Seed. It is the kernel's
// unrolled loop over the four rows.
func (h *HCA) addHash(hsh uint64, weight uint32, shift uint) (sampled bool, est uint32) {
	c0 := &h.Counters[0][hsh&(Width-1)]
	c1 := &h.Counters[1][(hsh>>16)&(Width-1)]
	c2 := &h.Counters[2][(hsh>>32)&(Width-1)]
	c3 := &h.Counters[3][(hsh>>48)&(Width-1)]
	old := min(*c0, *c1, *c2, *c3)
	*c0 += weight
	*c1 += weight
	*c2 += weight
	*c3 += weight
	first := seenFirst(h.Seen[:], hsh)
	if sameLevel(old, weight) {
		return first, old + weight
	}
	sampled, est = decide(old, weight, shift)
	return sampled || first, est
}

// Estimate is the estimated count of label l: the minimum over the rows of
// its counters. It is never below the label's true total weight in this copy
// (barring 32-bit wrap-around) and exceeds it only if the label collides with
// other labels in every row.
func (h *HCA) Estimate(l Label) uint32 {
	hsh := Hash(h.Seed, l)
	est := uint32(math.MaxUint32)
	for r := range Rows {
		est = min(est, h.Counters[r][(hsh>>(16*r))&(Width-1)])
	}
	return est
}

// DistinctEstimate estimates the number of distinct labels added to this
// copy from its seen array, by linear counting: -(m/k) ln(zeros/m), m bits,
// k a label, zeros the bits still clear. The estimate is good up to a few
// times m/k (about 20 000 labels). When no bit is clear the result is the
// value for a single one, (m/k) ln m (about 242 000): read it as "at least
// about that many".
func (h *HCA) DistinctEstimate() float64 {
	zeros := 0
	for _, w := range h.Seen {
		zeros += 64 - bits.OnesCount64(w)
	}
	if zeros == 0 {
		zeros = 1
	}
	return -float64(SeenBits) / SeenHashes * math.Log(float64(zeros)/SeenBits)
}

// Reset zeroes the counters and sets the seed for a new epoch.
func (h *HCA) Reset(seed uint64) {
	h.Counters = [Rows][Width]uint32{}
	h.Seen = [SeenWords]uint64{}
	h.Seed = seed
}

// Sketch is the double-buffered HCA of one vital sign: events go into the
// active copy, and at an epoch boundary Swap activates the other copy, reset
// and freshly seeded, and hands back the finished one, as the kernel and user
// space do with the two copies of each BPF map entry.
//
// A Sketch is not safe for concurrent use.
type Sketch struct {
	copies [2]HCA
	active int
	shift  uint
	seed   func() uint64
}

// New returns a Sketch with threshold t = 1<<shift (a shift of 0 is treated
// as 1) whose active copy is empty and seeded with seed(). seed is called
// again at every Swap and should return a fresh value each time, so that
// labels which collide in one epoch are unlikely to collide in the next; if
// seed is nil, random seeds from math/rand/v2 are used.
func New(shift uint, seed func() uint64) *Sketch {
	if seed == nil {
		seed = rand.Uint64
	}
	s := &Sketch{shift: shift, seed: seed}
	s.copies[0].Seed = seed()
	return s
}

// Add accounts one event in the active copy; see HCA.Add.
func (s *Sketch) Add(l Label, weight uint32) (sampled bool, est uint32) {
	return s.copies[s.active].Add(l, weight, s.shift)
}

// Swap ends the epoch: it resets the inactive copy with a new seed, makes it
// active and returns the copy that was active until now. The returned HCA
// belongs to the Sketch and stays unchanged only until the next Swap, which
// resets it and makes it active again; copy it if it must live longer.
func (s *Sketch) Swap() *HCA {
	done := &s.copies[s.active]
	s.active ^= 1
	s.copies[s.active].Reset(s.seed())
	return done
}

// Active returns the copy that Add currently updates.
func (s *Sketch) Active() *HCA { return &s.copies[s.active] }

// Shift returns the threshold exponent the Sketch was created with.
func (s *Sketch) Shift() uint { return s.shift }
