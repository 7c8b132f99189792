package recorder

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// DefaultStorageBudget is the bytes a day the recorder's samples and their
// new stacks may take in the store at defaults (`holter record
// --storage-budget`), as the recorder estimates them (sampleRowBytes,
// stackBytes: within some 20 % of what DuckDB stores for a day's worth;
// more, per sample, for a few minutes' worth): with the rollups, vitals
// and findings (some 2–3 MB a day) a day's store stays within 16 MB,
// Chopstix's figure (seed 000, §5), on any host.
const DefaultStorageBudget = 10_000_000

// maxFloor is past every estimate the sketch gives (32-bit counters).
const maxFloor = 1 << 32

// sampleCap bounds the samples one epoch keeps, all vitals together, and
// spends what it may keep on both ends of the sketch's promise. The sketch
// samples a label when its estimated count crosses a power of the
// threshold t, its first event included, so a label that counted c events
// has a sample at each power of t up to c. Over the cap:
//   - half of the samples go to labels' first samples of the epoch (the
//     rare events the sketch exists for), the other half to the others
//     (the heavy labels an incident is usually made of); a half the one
//     kind does not use is the other's;
//   - the firsts kept, when more come than their half, are a uniform
//     sample of all the epoch's firsts (a reservoir), not the first to
//     come;
//   - the others are kept from a floor up: the vital that keeps the most
//     is sampled more coarsely, only the samples taken when their label's
//     estimate had reached its floor kept, a power of two doubled until
//     the epoch fits — the logarithmic sampling started higher, so the
//     labels that counted most keep theirs. A label's first is the first
//     sample taken of it, kept or not: a heavy label whose first lost its
//     place among the firsts keeps its later samples by the floor, as any
//     heavy label does, rather than each of them drawn as a first again
//     (on a host with churn, thousands of firsts an epoch, a process
//     blocked all epoch long kept no sample of it);
//   - a blck sample of a wait for work (a sleep, a poll, a child, a pipe,
//     a kernel worker's queue: findings.WaitsForWork), and a syscall
//     sample of a call that waits for work (findings.CallWaitsForWork,
//     weighed by its latency), is kept only as its label's first: what is
//     waited for in those is no incident's cause (Rule #5 leaves them
//     out), and their labels, each a call site of every process that
//     sleeps or polls there, are the heaviest of their vital; sampled
//     from a floor up with the others, they held it above every single
//     thread blocked on a peer or a disk, and every loop of short calls.
//     Their first, once folded, still weighs all they counted;
//   - a syscall sample of a call that failed (findings.FailedCall) is
//     sampled from a floor of its own, against the other failing calls':
//     a fast call weighs 1 and a blocked one the µs it slept, so a loop
//     retrying a call that fails at once, tens of thousands of calls a
//     second and the incident itself (the failing-syscall detector), was
//     lighter than any blocked call and held under the vital's floor.
//
// What is dropped is counted per vital, never lost silently, and mostly
// dropped before its stacks are symbolized, so the cap also bounds the
// epoch's user-space work and memory.
type sampleCap struct {
	max int // samples the epoch may keep; negative: every one
	// floor, kept and firsts (kept samples that are their label's first
	// this epoch) are by class: a vital's, or failed calls'.
	floor   [numCapClasses]uint64
	kept    [numCapClasses]int
	firsts  [numCapClasses]int
	dropped [numVitals]uint64
	// entries tell, for each kept sample in the order of the samples
	// slice, its class and whether it is its label's first: beside each
	// sample rather than a set of their keys, because under churn most
	// samples are firsts and the reservoir drops one of them at a time.
	entries []capEntry
	// offered counts the labels' first samples offered this epoch, kept
	// or not. Of the sample admit last let in, for added: class is its
	// class, isFirst says it is its label's first, swap that it is to
	// take the place of a random kept first (the reservoir).
	offered       int
	class         capClass
	isFirst, swap bool
	// top is each label's highest estimate among the samples taken this
	// epoch, kept or not (see fold); a label not in it has had none.
	top map[capLabel]uint64
}

type capLabel struct {
	v     Vital
	label uint64
}

// capKind is what the recorder knows of a sample before it admits it.
type capKind uint8

const (
	anySample    capKind = iota
	waitsForWork         // a wait for work: kept as its label's first only
	failedCall           // a syscall that failed: a floor of its own
)

// capClass is what a floor is kept for: a vital (its index), or the
// syscall vital's failed calls.
type capClass uint8

const (
	failedCalls   = capClass(numVitals)
	numCapClasses = numVitals + 1
)

func classOf(v Vital, kind capKind) capClass {
	if v == Syscall && kind == failedCall {
		return failedCalls
	}
	return capClass(v)
}

// vital is the vital whose samples the class holds.
func (k capClass) vital() Vital {
	if k == failedCalls {
		return Syscall
	}
	return Vital(k)
}

type capEntry struct {
	class capClass
	first bool
}

func newSampleCap(max int) sampleCap {
	return sampleCap{max: max, top: map[capLabel]uint64{}}
}

// counts are the samples kept, and of them the firsts.
func (c *sampleCap) counts() (total, firsts int) {
	for v := range c.kept {
		total += c.kept[v]
		firsts += c.firsts[v]
	}
	return total, firsts
}

// half is the firsts' share of the cap when the others want the rest.
func (c *sampleCap) half() int { return (c.max + 1) / 2 }

// carry starts the next epoch's floors from half of each this one
// reached: a host with churn now likely has it next minute too, and the
// samples below the floor are then dropped before they are symbolized
// rather than after; a floor no longer needed halves away epoch by epoch.
func (c *sampleCap) carry(next *sampleCap) {
	for v, f := range c.floor {
		if f >= 4 {
			next.floor[v] = max(next.floor[v], f/2)
		}
	}
}

// admit tells whether a sample of vital v's label, taken at estimate est,
// may be kept, counting it dropped otherwise. A label's first sample of
// the epoch passes any floor; the others of a wait for work none.
func (c *sampleCap) admit(v Vital, label, est uint64, kind capKind) bool {
	if c.max < 0 {
		return true
	}
	k := capLabel{v, label}
	top, taken := c.top[k]
	c.top[k] = max(top, est)
	c.isFirst = !taken
	c.class = classOf(v, kind)
	total, firsts := c.counts()
	if c.isFirst {
		c.offered++
		if total < c.max || (firsts < c.half() && total > firsts) {
			return true // room, or made by sampling the others more coarsely
		}
		// The firsts have their share: the offered-th takes the place
		// of a random one with probability firsts/offered.
		if firsts > 0 && rand.IntN(c.offered) < firsts {
			c.swap = true
			return true
		}
	} else if kind != waitsForWork && est >= c.floor[c.class] && (total < c.max || total > firsts || firsts > c.half()) {
		return true
	}
	c.dropped[v]++
	return false
}

// coarsest is the class that keeps the most samples besides its labels'
// first ones, the one to sample more coarsely; false if none keeps any.
func (c *sampleCap) coarsest() (capClass, bool) {
	best, most := capClass(0), 0
	for k := range c.kept {
		if n := c.kept[k] - c.firsts[k]; n > most {
			best, most = capClass(k), n
		}
	}
	return best, most > 0
}

// added records that the sample admit just let in was appended to
// samples and brings the epoch back under the cap. It returns samples,
// shortened.
func (c *sampleCap) added(samples []store.Sample) []store.Sample {
	if c.max < 0 {
		return samples
	}
	c.kept[c.class]++
	if c.isFirst {
		c.firsts[c.class]++
	}
	c.entries = append(c.entries, capEntry{c.class, c.isFirst})
	swap := c.swap && c.isFirst
	c.isFirst, c.swap = false, false
	for {
		total, firsts := c.counts()
		if total <= c.max {
			return samples
		}
		switch {
		case swap || firsts > c.half() || total == firsts:
			// A random kept first goes (never the one just come, when
			// it takes another's place).
			n := firsts
			if swap {
				n--
			}
			swap = false
			samples = c.dropFirst(samples, rand.IntN(n))
		default:
			samples = c.coarser(samples)
		}
	}
}

// fold gives each label's last kept sample the highest estimate the
// label reached among the epoch's samples, kept or not. A sample stands
// for the weight its label gathered since its previous sample (the
// difference of their estimates: findings.Load), so the samples the cap
// dropped leave their weight to the label's kept one instead of taking it
// away: a heavy label sampled coarsely still weighs what it counted, and
// the labels kept are not scaled up to the vital's exact total in its
// place. A label none of whose samples was kept is gone with its weight
// (counted in capped).
func (c *sampleCap) fold(samples []store.Sample) {
	if c.max < 0 || len(c.top) == 0 {
		return
	}
	last := make(map[capLabel]int, len(samples))
	for i := range samples {
		v, _ := vitalByName(samples[i].Vital)
		k := capLabel{v, samples[i].LabelHash}
		if j, ok := last[k]; !ok || samples[i].TsNs >= samples[j].TsNs {
			last[k] = i
		}
	}
	for k, i := range last {
		if top := c.top[k]; top > samples[i].EstCount {
			samples[i].EstCount = top
		}
	}
}

// dropFirst removes the k-th kept first sample.
func (c *sampleCap) dropFirst(samples []store.Sample, k int) []store.Sample {
	for i, e := range c.entries {
		if !e.first {
			continue
		}
		if k > 0 {
			k--
			continue
		}
		c.kept[e.class]--
		c.firsts[e.class]--
		c.dropped[e.class.vital()]++
		c.entries = slices.Delete(c.entries, i, i+1)
		return slices.Delete(samples, i, i+1) // the dropped sample's map goes now
	}
	return samples
}

// coarser raises the floor of the class that keeps the most samples
// besides firsts and removes those of them below it.
func (c *sampleCap) coarser(samples []store.Sample) []store.Sample {
	w, _ := c.coarsest()
	c.floor[w] = max(2*c.floor[w], 2)
	out, entries := samples[:0], c.entries[:0]
	for i, s := range samples {
		if e := c.entries[i]; !e.first && e.class == w && s.EstCount < c.floor[w] {
			c.kept[w]--
			c.dropped[w.vital()]++
			continue
		}
		out, entries = append(out, s), append(entries, c.entries[i])
	}
	clear(samples[len(out):]) // the dropped samples' maps go now
	c.entries = entries
	return samples[:len(out)]
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

// dayBudget is the store's budget of bytes a day for samples and their
// stacks (Config.StorageBudget), a token bucket: it fills at 7/8 of the
// budget a day up to an eighth of it, and each epoch may keep the samples
// a quarter of its tokens pay for (sampleCap). A quiet host banks what it
// does not spend and an incident's epochs spend the bank in detail, each a
// quarter of what is left; a host that is never quiet is held to the rate.
// Any 24 hours spend at most the budget.
type dayBudget struct {
	perDay float64 // bytes; 0: no budget
	tokens float64
	// perSample is what a stored sample has cost lately, its row and its
	// share of the new stacks (a moving mean, from the samples spent).
	perSample float64
	// known are stacks already paid for (bounded: when full it starts
	// again, and a stack is paid for twice rather than never).
	known map[uint64]struct{}
	// spent and dropped are totals since the start, for the status.
	spent float64
}

// Bytes a stored sample row and a stored stack cost, as DuckDB compresses
// them: measured on a store of 145 575 samples and 60 830 stacks from a
// busy host, copied alone into a file: 52 bytes a sample row (sorted by
// vital and label), and 82 a stack, whose frames' and modules' text
// averaged 375 bytes (stackBytes counts a fifth of it, and 16 more).
const (
	sampleRowBytes   = 52
	stackBaseBytes   = 16
	maxKnownStacks   = 1 << 16
	initialPerSample = 200 // a first epoch's stacks are all new: the recorder learns down from here
)

func newDayBudget(perDay int64) *dayBudget {
	b := &dayBudget{perDay: float64(perDay), perSample: initialPerSample, known: map[uint64]struct{}{}}
	b.tokens = b.capacity()
	return b
}

func (b *dayBudget) capacity() float64 { return b.perDay / 8 }

func (b *dayBudget) rate() float64 { return b.perDay * 7 / 8 / float64(24*time.Hour) } // bytes a ns

// Bank is a storage budget's state kept in the store (store.Epoch's
// StorageBank): the bytes it had left, at a time.
type Bank struct {
	Bytes int64
	At    time.Time
}

// resume starts the bucket from what an earlier recorder left, d ago.
func (b *dayBudget) resume(left int64, d time.Duration) {
	b.tokens = min(b.capacity(), float64(max(left, 0))+b.rate()*float64(max(d, 0)))
}

// bank is what is left, for the store; nil without a budget.
func (b *dayBudget) bank() *int64 {
	if b == nil || b.perDay <= 0 {
		return nil
	}
	n := int64(max(b.tokens, 0))
	return &n
}

// allowance is the samples the next epoch may keep; -1 without a budget.
func (b *dayBudget) allowance() int {
	if b == nil || b.perDay <= 0 {
		return -1
	}
	return int(max(b.tokens, 0) / 4 / b.perSample)
}

// spend takes what an epoch of length d stores out of the bucket and
// refills it for d.
func (b *dayBudget) spend(samples []store.Sample, stacks map[uint64]store.Stack, d time.Duration) {
	if b == nil || b.perDay <= 0 {
		return
	}
	cost := float64(len(samples) * sampleRowBytes)
	for id, st := range stacks {
		if _, ok := b.known[id]; ok {
			continue
		}
		if len(b.known) >= maxKnownStacks {
			clear(b.known)
		}
		b.known[id] = struct{}{}
		cost += stackBytes(st)
	}
	if len(samples) > 0 {
		b.perSample = 0.7*b.perSample + 0.3*cost/float64(len(samples))
	}
	b.spent += cost
	// An epoch that cost more than its samples were thought to leaves a
	// debt (negative tokens) that the next epochs pay before they keep
	// any: over a day the budget holds all the same.
	b.tokens = min(b.capacity(), b.tokens-cost+b.rate()*float64(d))
}

// stackBytes is what a new stack adds to the store: its frames' and
// modules' text, which DuckDB's string compression takes to a fifth or
// less (the modules repeat).
func stackBytes(st store.Stack) float64 {
	n := 0
	for i := range st.Frames {
		n += len(st.Frames[i]) + len(st.Modules[i])
	}
	return stackBaseBytes + float64(n)/5
}
