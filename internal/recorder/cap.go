package recorder

import (
	"github.com/holter-dev/holter/internal/store"
)

// DefaultMaxSamples is a cap that keeps a churning host's day in some
// 40 MB (the cap is off unless asked for: Config.MaxSamples).
// Stored, a sample takes some 75 bytes and a new stack some 90
// (bench/footprint.sh on hosts with churn): ten vitals at the cap for 1440
// one-minute epochs a day is 43 MB of samples, and their new stacks, half
// as many on those hosts, 26 MB more at most; not every vital is at the
// cap, and stacks repeat over a day.
const DefaultMaxSamples = 40

// maxFloor is past every estimate the sketch gives (32-bit counters).
const maxFloor = 1 << 32

// sampleCap bounds the samples each vital keeps in one epoch. The sketch
// samples a label when its estimated count crosses a power of the
// threshold t, so a label that counted c events has a sample at each power
// of t up to c, its first event included: under process churn every new
// label costs a sample. Over the cap, a vital's samples are kept from a
// floor up: only those taken when their label's estimate had reached the
// floor, a power of two doubled until the epoch's samples fit, which is
// the same logarithmic sampling started higher, so the labels that counted
// most keep theirs. What falls below the floor is counted, never lost
// silently; it is dropped before its stacks are symbolized, so the cap
// also bounds the epoch's user-space work and memory. If the samples at
// the highest floor are still too many, the epoch's later ones are
// dropped and counted too.
type sampleCap struct {
	max     int // per vital and epoch; 0: no cap
	floor   [numVitals]uint64
	kept    [numVitals]int
	dropped [numVitals]uint64
}

// carry starts the next epoch's cap from half of each floor this one
// reached: a host with churn now likely has it next minute too, and the
// samples below the floor are then dropped before they are symbolized
// rather than after; a floor no longer needed halves away epoch by epoch.
// The next epoch's floor only rises further if that one is over the cap
// (so it may store fewer than max samples, never more).
func (c *sampleCap) carry(next *sampleCap) {
	for v, f := range c.floor {
		if f >= 4 {
			next.floor[v] = max(next.floor[v], f/2)
		}
	}
}

// admit tells whether a sample of vital v, taken at estimate est, may be
// kept, counting it dropped otherwise.
func (c *sampleCap) admit(v Vital, est uint64) bool {
	if c.max <= 0 {
		return true
	}
	if est < c.floor[v] || (c.floor[v] >= maxFloor && c.kept[v] >= c.max) {
		c.dropped[v]++
		return false
	}
	return true
}

// added records that a sample of v was appended to samples, and raises
// v's floor while v has more than max, removing from samples those of v
// below it. It returns samples, shortened.
func (c *sampleCap) added(v Vital, samples []store.Sample) []store.Sample {
	c.kept[v]++
	if c.max <= 0 || c.kept[v] <= c.max {
		return samples
	}
	name := v.String()
	for c.kept[v] > c.max && c.floor[v] < maxFloor {
		c.floor[v] = max(2*c.floor[v], 2)
		out := samples[:0]
		for _, s := range samples {
			if s.Vital == name && s.EstCount < c.floor[v] {
				c.kept[v]--
				c.dropped[v]++
				continue
			}
			out = append(out, s)
		}
		clear(samples[len(out):]) // the dropped samples' maps go now
		samples = out
	}
	if c.kept[v] > c.max { // the highest floor: the newest goes
		samples = samples[:len(samples)-1]
		c.kept[v]--
		c.dropped[v]++
	}
	return samples
}

// usedStacks keeps the stacks and executables the kept samples refer to:
// those of samples the cap dropped after they were symbolized go.
func usedStacks(samples []store.Sample, stacks map[uint64]store.Stack, exes map[string]store.Executable) {
	used := make(map[uint64]bool, len(stacks))
	usedExe := make(map[string]bool, len(exes))
	for _, s := range samples {
		used[s.KStackID] = true
		used[s.UStackID] = true
		usedExe[s.Exe] = true
	}
	for id := range stacks {
		if !used[id] {
			delete(stacks, id)
		}
	}
	for path := range exes {
		if !usedExe[path] {
			delete(exes, path)
		}
	}
}
