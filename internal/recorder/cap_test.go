package recorder

import (
	"cmp"
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/storetest"
)

// churnSamples are the samples the sketch's logarithmic sampling (t = 2)
// takes of v's events on a host with churn: n labels seen once or twice
// (new processes), and heavy labels of thousands of events each. Each
// sample has a user stack of its own label.
func churnSamples(v Vital, n, heavy int, rng *rand.Rand, base uint64) ([]store.Sample, map[uint64]store.Stack) {
	var events []uint64
	for i := range n {
		label := base + uint64(1000+i)
		events = append(events, label)
		if rng.IntN(3) == 0 {
			events = append(events, label)
		}
	}
	for h := range heavy {
		for range 1000 + rng.IntN(5000) {
			events = append(events, base+uint64(1+h))
		}
	}
	rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	return logSamples(v, events)
}

// logSamples are the samples the sketch's logarithmic sampling (t = 2)
// takes of v's events, one label each, in their order: a label's sample
// at each power of two its count crosses, its first event included.
func logSamples(v Vital, events []uint64) ([]store.Sample, map[uint64]store.Stack) {
	counts := map[uint64]uint64{}
	var out []store.Sample
	stacks := map[uint64]store.Stack{}
	for i, label := range events {
		old := counts[label]
		counts[label]++
		if old != 0 && bits.Len64(old) == bits.Len64(old+1) {
			continue // no power of two crossed
		}
		stack := store.Stack{ID: label, Kind: "user", Frames: []string{"f"}, Modules: []string{"m"}}
		stacks[label] = stack
		out = append(out, store.Sample{TsNs: int64(i), Vital: v.String(), LabelHash: label, Weight: 1,
			EstCount: old + 1, Comm: "c", Exe: "/bin/x", UStackID: label})
	}
	return out, stacks
}

// TestCapStoresCoarserAndCounts feeds the cap an epoch of churn far over
// it for two vitals and one under it, writes the epoch into a real store
// and checks from there: the epoch stores no more than the cap; what was
// taken is what was stored plus what was counted capped; every label keeps
// its first sample; the others kept are the ones taken at the highest
// estimates (the heavy labels'), and the vital with few samples keeps all
// of them; no stack is stored that no stored sample refers to.
func TestCapStoresCoarserAndCounts(t *testing.T) {
	const max = 3000
	rng := rand.New(rand.NewPCG(1, 2))
	offered := map[Vital][]store.Sample{}
	stacks := map[uint64]store.Stack{}
	for _, c := range []struct {
		v            Vital
		churn, heavy int
	}{{Kmem, 600, 100}, {Syscall, 400, 150}, {Sched, 10, 2}} {
		s, st := churnSamples(c.v, c.churn, c.heavy, rng, uint64(c.v)<<32)
		offered[c.v] = s
		for id, x := range st {
			stacks[id] = x
		}
	}

	// Interleave the vitals as the ring buffer does.
	var all []store.Sample
	for _, v := range []Vital{Kmem, Syscall, Sched} {
		all = append(all, offered[v]...)
	}
	if len(all) < max*13/10 {
		t.Fatalf("%d samples offered, meant to be far over the cap %d", len(all), max)
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	slices.SortStableFunc(all, func(a, b store.Sample) int { return cmp.Compare(a.TsNs, b.TsNs) }) // each vital's in time order
	c := newSampleCap(max)
	var kept []store.Sample
	for _, s := range all {
		v, _ := vitalByName(s.Vital)
		if c.admit(v, s.LabelHash, s.EstCount, anySample) {
			kept = c.added(append(kept, s))
		}
	}
	if len(kept) > max {
		t.Fatalf("%d samples kept, over the cap %d", len(kept), max)
	}
	// The next epoch starts from half the floors this one reached: a
	// known label's sample under it is dropped, and counted, before
	// symbolizing; a new label's first is not.
	next := newSampleCap(max)
	c.carry(&next)
	if next.floor[Kmem] != c.floor[Kmem]/2 || next.floor[Sched] != 0 || next.floor[Kmem] < 2 {
		t.Errorf("carried floors kmem %d, sched %d; want %d (>= 2), 0", next.floor[Kmem], next.floor[Sched], c.floor[Kmem]/2)
	}
	if !next.admit(Kmem, 7, 1, anySample) {
		t.Errorf("next epoch: a new kmem label's first sample refused")
	}
	next.added(make([]store.Sample, 1))
	if next.admit(Kmem, 7, 1, anySample) || next.dropped[Kmem] != 1 || !next.admit(Sched, 7, 1, anySample) {
		t.Errorf("next epoch: kmem's second sample at estimate 1 admitted or not counted (%d), or sched's first refused", next.dropped[Kmem])
	}

	exes := map[string]store.Executable{"/bin/x": {Path: "/bin/x"}, "/bin/unused": {Path: "/bin/unused"}}
	usedStacks(kept, stacks, exes)

	e := &store.Epoch{Host: "h", Epoch: 1, StartNs: 0, EndNs: 60e9, Samples: kept, Executables: []store.Executable{exes["/bin/x"]}}
	for id := range stacks {
		e.Stacks = append(e.Stacks, stacks[id])
	}
	if _, ok := exes["/bin/unused"]; ok {
		t.Errorf("an executable no kept sample refers to is still there")
	}
	for _, v := range []Vital{Kmem, Syscall, Sched} {
		e.Vitals = append(e.Vitals, store.Vital{Name: v.String(), Samples: uint64(len(offered[v])), Capped: c.dropped[v]})
	}
	st := storetest.Open(t)
	ctx := context.Background()
	if err := st.WriteEpoch(ctx, e); err != nil {
		t.Fatal(err)
	}

	for _, v := range []Vital{Kmem, Syscall, Sched} {
		res, err := st.Query(ctx, `SELECT count(s.vital)::UBIGINT, any_value(v.samples), any_value(v.capped),
				count(DISTINCT s.label_hash)::UBIGINT
			FROM vitals v LEFT JOIN samples s USING (host, epoch, vital) WHERE v.vital = ?`, v.String())
		if err != nil {
			t.Fatal(err)
		}
		var got [4]uint64
		for i := range got {
			got[i] = res.Rows[0][i].(uint64)
		}
		stored, taken, capped, labels := got[0], got[1], got[2], got[3]
		offeredLabels := map[uint64]bool{}
		for _, s := range offered[v] {
			offeredLabels[s.LabelHash] = true
		}
		t.Logf("%s: taken %d, stored %d, capped %d, labels %d of %d", v, taken, stored, capped, labels, len(offeredLabels))
		if stored+capped != taken {
			t.Errorf("%s: stored %d + capped %d != taken %d: samples lost uncounted", v, stored, capped, taken)
		}
		if labels != uint64(len(offeredLabels)) {
			t.Errorf("%s: %d of %d labels stored: a label's first sample was dropped while the firsts fit", v, labels, len(offeredLabels))
		}
		if v == Sched {
			if capped != 0 {
				t.Errorf("sched, the smallest, had %d capped", capped)
			}
			continue
		}
		if capped == 0 {
			t.Errorf("%s: nothing capped; the epoch is far over the cap", v)
		}
		// Coarser sampling: every non-first sample taken at an estimate
		// as high as the least such kept was kept, every one below dropped.
		res, err = st.Query(ctx, `SELECT coalesce(min(est_count), 0)::UBIGINT, count(*)::UBIGINT FROM
			(SELECT est_count, row_number() OVER (PARTITION BY label_hash ORDER BY ts_ns) AS k FROM samples WHERE vital = ?)
			WHERE k > 1`, v.String())
		if err != nil {
			t.Fatal(err)
		}
		minKept, others := res.Rows[0][0].(uint64), res.Rows[0][1].(uint64)
		above, firstSeen := uint64(0), map[uint64]bool{}
		for _, s := range offered[v] {
			if !firstSeen[s.LabelHash] {
				firstSeen[s.LabelHash] = true
			} else if s.EstCount >= minKept {
				above++
			}
		}
		if others > 0 && above != others {
			t.Errorf("%s: %d later samples taken at estimates >= %d, %d stored", v, above, minKept, others)
		}
	}
	res, err := st.Query(ctx, `SELECT count(*) FROM stacks WHERE stack_id NOT IN
		(SELECT ustack_id FROM samples WHERE ustack_id IS NOT NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	orphans := res.Rows[0][0]
	if fmt.Sprint(orphans) != "0" {
		t.Errorf("%v stacks stored that no stored sample refers to", orphans)
	}
}

// TestCapSharesFirstsAndHeavy: when the labels' first samples alone are
// more than the cap, they keep half of it, a uniform sample of the
// epoch's (not its start's), and the heavy labels keep the other half,
// from their highest estimates down; every sample is kept or counted.
func TestCapSharesFirstsAndHeavy(t *testing.T) {
	const limit = 50
	rng := rand.New(rand.NewPCG(3, 4))
	s, _ := churnSamples(Kmem, 400, 3, rng, 0)
	c := newSampleCap(limit)
	var kept []store.Sample
	for _, x := range s {
		if c.admit(Kmem, x.LabelHash, x.EstCount, anySample) {
			kept = c.added(append(kept, x))
		}
	}
	if len(kept) != limit || uint64(len(kept))+c.dropped[Kmem] != uint64(len(s)) {
		t.Errorf("kept %d (want %d), dropped %d, offered %d", len(kept), limit, c.dropped[Kmem], len(s))
	}
	seen := map[uint64]bool{}
	firsts, heavyLater, late := 0, 0, 0
	var leastHeavy uint64 = 1 << 40
	for _, x := range kept {
		if !seen[x.LabelHash] {
			seen[x.LabelHash] = true
			firsts++
			if x.LabelHash >= 1000 && x.TsNs >= s[len(s)/2].TsNs {
				late++
			}
			continue
		}
		if x.LabelHash >= 1000 {
			t.Errorf("once-or-twice label %d kept a second sample while firsts were dropped", x.LabelHash)
		}
		heavyLater++
		leastHeavy = min(leastHeavy, x.EstCount)
	}
	t.Logf("kept %d firsts (%d of the once-labels' from the epoch's second half) and %d later samples of the heavy labels (estimates >= %d)",
		firsts, late, heavyLater, leastHeavy)
	// Firsts that came while there was room stay until the others want
	// it: about half and half.
	if firsts < limit/2-1 || heavyLater < limit/3 {
		t.Errorf("kept %d firsts and %d later samples; want about half and half of %d", firsts, heavyLater, limit)
	}
	// The firsts kept are a sample of the whole epoch's: those offered in
	// its second half keep about half their places.
	if late < limit/8 {
		t.Errorf("%d of %d firsts kept came in the epoch's second half: the reservoir favours the first to come", late, firsts)
	}
	// The heavy labels keep samples from a floor up: none of their first
	// few powers of two.
	if leastHeavy < 8 {
		t.Errorf("a heavy label's sample at estimate %d kept: the others were not sampled more coarsely", leastHeavy)
	}
	// Folded, each label kept weighs what it counted: its kept samples'
	// highest estimate is the highest taken, kept or not.
	c.fold(kept)
	taken, weighs := topEstimates(s), topEstimates(kept)
	for l, w := range weighs {
		if w != taken[l] {
			t.Errorf("label %d weighs %d after the fold, counted %d", l, w, taken[l])
		}
	}
}

// TestCapKeepsHeavyLabelsOfALateStart: on a host with churn, the epoch's
// first samples are thousands and the firsts' half keeps a few of them;
// labels that start late and grow heavy — a process blocked on a peer from
// the epoch's middle on — may lose their first to the reservoir, and must
// still keep their later samples as heavy labels do, each weighing what
// it counted once folded. Before, such a label's every later sample was
// drawn as a first again and most heavy labels kept nothing.
func TestCapKeepsHeavyLabelsOfALateStart(t *testing.T) {
	const limit, churn, heavy = 100, 4000, 6
	rng := rand.New(rand.NewPCG(7, 8))
	var events []uint64
	for i := range churn {
		events = append(events, uint64(1000+i))
	}
	var late []uint64
	for h := range heavy {
		for range 2000 + rng.IntN(2000) {
			late = append(late, uint64(1+h))
		}
	}
	for i := range churn {
		late = append(late, uint64(1000+churn+i))
	}
	rng.Shuffle(len(late), func(i, j int) { late[i], late[j] = late[j], late[i] })
	s, _ := logSamples(Blck, append(events, late...))
	c := newSampleCap(limit)
	var kept []store.Sample
	for _, x := range s {
		if c.admit(Blck, x.LabelHash, x.EstCount, anySample) {
			kept = c.added(append(kept, x))
		}
	}
	if len(kept) > limit || uint64(len(kept))+c.dropped[Blck] != uint64(len(s)) {
		t.Errorf("kept %d (cap %d), dropped %d, offered %d", len(kept), limit, c.dropped[Blck], len(s))
	}
	c.fold(kept)
	counted, weighs := topEstimates(s), topEstimates(kept)
	for h := range heavy {
		l := uint64(1 + h)
		if weighs[l] != counted[l] {
			t.Errorf("heavy label %d (%d events) weighs %d once folded", l, counted[l], weighs[l])
		}
	}
	t.Logf("kept %d of %d samples; floor %d", len(kept), len(s), c.floor[Blck])
}

// TestCapKeepsResourceWaitsOverWaitsForWork: blck's heaviest labels are
// waits for work (a sleep or poll call site shared by every process that
// sleeps there), far heavier than one thread blocked on a peer all epoch
// long. Under the cap the waits for work keep no sample but their firsts,
// and the blocked thread's label keeps its later samples, weighing what it
// counted once folded; before, the floor rose over it to fit the idle
// labels' and it kept nothing.
func TestCapKeepsResourceWaitsOverWaitsForWork(t *testing.T) {
	const limit, idle = 40, 20
	rng := rand.New(rand.NewPCG(9, 10))
	var events []uint64
	for i := range 400 {
		events = append(events, uint64(1000+i)) // churn: firsts
	}
	for l := range idle {
		for range 20000 + rng.IntN(20000) {
			events = append(events, uint64(100+l))
		}
	}
	for range 3000 {
		events = append(events, 1) // the thread blocked on a peer
	}
	rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	s, _ := logSamples(Blck, events)
	forWork := func(label uint64) bool { return label >= 100 && label < 1000 }
	kind := func(label uint64) capKind {
		if forWork(label) {
			return waitsForWork
		}
		return anySample
	}
	c := newSampleCap(limit)
	var kept []store.Sample
	for _, x := range s {
		if c.admit(Blck, x.LabelHash, x.EstCount, kind(x.LabelHash)) {
			kept = c.added(append(kept, x))
		}
	}
	if len(kept) > limit || uint64(len(kept))+c.dropped[Blck] != uint64(len(s)) {
		t.Errorf("kept %d (cap %d), dropped %d, offered %d", len(kept), limit, c.dropped[Blck], len(s))
	}
	perLabel := map[uint64]int{}
	for _, x := range kept {
		perLabel[x.LabelHash]++
	}
	for l, n := range perLabel {
		if forWork(l) && n > 1 {
			t.Errorf("wait for work %d kept %d samples, want its first at most", l, n)
		}
	}
	c.fold(kept)
	counted, weighs := topEstimates(s), topEstimates(kept)
	if weighs[1] != counted[1] {
		t.Errorf("the thread blocked on a peer (%d µs) weighs %d once folded", counted[1], weighs[1])
	}
	t.Logf("kept %d of %d samples, %d of the blocked thread's; floor %d", len(kept), len(s), perLabel[1], c.floor[Blck])
}

// topEstimates is each label's highest estimate among samples.
func topEstimates(samples []store.Sample) map[uint64]uint64 {
	top := map[uint64]uint64{}
	for _, x := range samples {
		top[x.LabelHash] = max(top[x.LabelHash], x.EstCount)
	}
	return top
}

// TestDayBudgetHoldsADay runs the storage budget through two days of
// one-minute epochs on a host that offers far more than it, then a quiet
// spell and a burst: any 24 hours spend at most the day's budget, a host
// over it is held near the rate, and what a quiet spell banks lets a burst
// keep more.
func TestDayBudgetHoldsADay(t *testing.T) {
	const perDay = 12_000_000
	b := newDayBudget(perDay)
	rng := rand.New(rand.NewPCG(5, 6))
	var spent []float64 // per epoch
	epoch := func(offered int) int {
		n := min(offered, b.allowance())
		samples := make([]store.Sample, n)
		stacks := map[uint64]store.Stack{}
		for i := range n / 3 { // a new stack every third sample
			stacks[rng.Uint64()] = store.Stack{Frames: []string{"some_function_name", "caller"}, Modules: []string{"/usr/lib/libx.so", "/bin/y"}}
			_ = i
		}
		before := b.spent
		b.spend(samples, stacks, time.Minute)
		spent = append(spent, b.spent-before)
		return n
	}
	for range 2 * 1440 {
		epoch(5000)
	}
	for i := 0; i+1440 <= len(spent); i += 60 {
		sum := 0.0
		for _, x := range spent[i : i+1440] {
			sum += x
		}
		if sum > perDay {
			t.Fatalf("the 24 hours from epoch %d spent %.0f bytes, over the budget %d", i, sum, perDay)
		}
		if i >= 1440 && sum < 0.8*perDay*7/8 {
			t.Errorf("the 24 hours from epoch %d spent %.0f bytes: a host over the budget should be held near its rate", i, sum)
		}
	}
	busy := epoch(5000)
	for range 240 { // four quiet hours
		epoch(0)
	}
	burst := epoch(1 << 20)
	t.Logf("busy epoch %d samples, burst after four quiet hours %d (%.0f bytes a sample)", busy, burst, b.perSample)
	if burst < 20*busy {
		t.Errorf("a burst after a quiet spell kept %d samples, a busy epoch %d: the quiet spell banked nothing", burst, busy)
	}
}

// TestDayBudgetResumes: a recorder started again goes on from the bank
// the last one left, refilled at the rate for the time between, never
// from more than a full bank.
func TestDayBudgetResumes(t *testing.T) {
	b := newDayBudget(12_000_000)
	hour := b.rate() * float64(time.Hour)
	b.resume(1000, time.Hour)
	if b.tokens != 1000+hour {
		t.Errorf("resumed from 1000 bytes an hour ago: %.0f, want %.0f", b.tokens, 1000+hour)
	}
	b.resume(1000, 30*24*time.Hour)
	if b.tokens != b.capacity() {
		t.Errorf("resumed a month later: %.0f, want the capacity %.0f", b.tokens, b.capacity())
	}
	if n := *b.bank(); n != int64(b.capacity()) {
		t.Errorf("bank %d, want %.0f", n, b.capacity())
	}
	if (&dayBudget{}).bank() != nil {
		t.Errorf("no budget has a bank")
	}
}

// BenchmarkCapUnderChurn: an epoch of a churning host, 50 000 labels'
// first samples and a few heavy labels, through a cap of 1500 samples (a
// bank's epoch at the default storage budget): the reservoir drops a kept
// first for most of the firsts past the cap.
func BenchmarkCapUnderChurn(b *testing.B) {
	s, _ := churnSamples(Kmem, 50_000, 5, rand.New(rand.NewPCG(5, 6)), 0)
	b.ResetTimer()
	for range b.N {
		c := newSampleCap(1500)
		var kept []store.Sample
		for _, x := range s {
			if c.admit(Kmem, x.LabelHash, x.EstCount, anySample) {
				kept = c.added(append(kept, x))
			}
		}
	}
}

// TestCapKeepsAFailingLoopAmongBlockedCalls offers the cap an epoch of
// syscall samples as a host with churn gives them: new processes' calls
// (firsts), threads' calls that block for seconds (weighed by the µs they
// slept: estimates in the millions), and a loop retrying a call that fails
// at once, 140 000 times (weighed one each). The loop keeps samples, and
// weighs its count once folded; the blocked calls keep theirs too.
func TestCapKeepsAFailingLoopAmongBlockedCalls(t *testing.T) {
	const limit, blocked, loop = 40, 30, 1
	rng := rand.New(rand.NewPCG(11, 12))
	type offer struct {
		s    store.Sample
		kind capKind
	}
	var offers []offer
	add := func(label, est uint64, kind capKind) {
		offers = append(offers, offer{store.Sample{Vital: Syscall.String(), LabelHash: label, EstCount: est}, kind})
	}
	for i := range 400 {
		add(uint64(1000+i), 1, anySample)
	}
	for l := range blocked {
		for est := uint64(1); est < 1_000_000+uint64(rng.IntN(4_000_000)); est *= 2 {
			add(uint64(100+l), est, anySample)
		}
	}
	for est := uint64(1); est <= 140_000; est *= 2 {
		add(loop, est, failedCall)
	}
	rng.Shuffle(len(offers), func(i, j int) { offers[i], offers[j] = offers[j], offers[i] })
	for i := range offers {
		offers[i].s.TsNs = int64(i)
	}
	var all []store.Sample
	c := newSampleCap(limit)
	var kept []store.Sample
	for _, o := range offers {
		all = append(all, o.s)
		if c.admit(Syscall, o.s.LabelHash, o.s.EstCount, o.kind) {
			kept = c.added(append(kept, o.s))
		}
	}
	if len(kept) > limit || uint64(len(kept))+c.dropped[Syscall] != uint64(len(offers)) {
		t.Errorf("kept %d (cap %d), dropped %d, offered %d", len(kept), limit, c.dropped[Syscall], len(offers))
	}
	perLabel := map[uint64]int{}
	blockedKept := 0
	for _, x := range kept {
		perLabel[x.LabelHash]++
		if x.LabelHash >= 100 && x.LabelHash < 1000 {
			blockedKept++
		}
	}
	if perLabel[loop] == 0 || blockedKept == 0 {
		t.Fatalf("the failing loop kept %d samples, the blocked calls %d", perLabel[loop], blockedKept)
	}
	c.fold(kept)
	if counted, weighs := topEstimates(all)[loop], topEstimates(kept)[loop]; weighs != counted {
		t.Errorf("the failing loop (%d calls sampled) weighs %d once folded", counted, weighs)
	}
	t.Logf("kept %d of %d: the loop %d, the blocked calls %d; floors: syscall %d, failed calls %d",
		len(kept), len(offers), perLabel[loop], blockedKept, c.floor[Syscall], c.floor[failedCalls])
}
