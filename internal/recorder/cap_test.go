package recorder

import (
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/holter-dev/holter/internal/store"
)

// churnSamples are the samples the sketch's logarithmic sampling (t = 2)
// takes of v's events on a host with churn: n labels seen once or twice
// (new processes), and heavy labels of thousands of events each. Each
// sample has a user stack of its own label.
func churnSamples(v Vital, n, heavy int, rng *rand.Rand) ([]store.Sample, map[uint64]store.Stack) {
	counts := map[uint64]uint64{}
	var events []uint64
	for i := range n {
		label := uint64(1000 + i)
		events = append(events, label)
		if rng.IntN(3) == 0 {
			events = append(events, label)
		}
	}
	for h := range heavy {
		for range 1000 + rng.IntN(5000) {
			events = append(events, uint64(1+h))
		}
	}
	rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
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
// and checks from there: no vital stores more than the cap; what was taken
// is what was stored plus what was counted capped; the samples kept are
// the ones taken at the highest estimates (the heavy labels'); a vital
// under the cap keeps every sample; no stack is stored that no stored
// sample refers to.
func TestCapStoresCoarserAndCounts(t *testing.T) {
	const max = 50
	rng := rand.New(rand.NewPCG(1, 2))
	offered := map[Vital][]store.Sample{}
	stacks := map[uint64]store.Stack{}
	for _, c := range []struct {
		v            Vital
		churn, heavy int
	}{{Kmem, 4000, 5}, {Syscall, 2000, 20}, {Sched, 10, 2}} {
		s, st := churnSamples(c.v, c.churn, c.heavy, rng)
		offered[c.v] = s
		for id, x := range st {
			stacks[id] = x
		}
	}
	if len(offered[Sched]) > max {
		t.Fatalf("sched offers %d samples, meant to be under the cap %d", len(offered[Sched]), max)
	}

	// Interleave the vitals as the ring buffer does.
	var all []store.Sample
	for _, v := range []Vital{Kmem, Syscall, Sched} {
		all = append(all, offered[v]...)
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	c := sampleCap{max: max}
	var kept []store.Sample
	for _, s := range all {
		v, _ := vitalByName(s.Vital)
		if c.admit(v, s.EstCount) {
			kept = c.added(v, append(kept, s))
		}
	}
	// The next epoch starts from half the floors this one reached: a new
	// label's first sample is dropped, and counted, before symbolizing.
	var next sampleCap
	next.max = max
	c.carry(&next)
	if next.floor[Kmem] != c.floor[Kmem]/2 || next.floor[Sched] != 0 {
		t.Errorf("carried floors kmem %d, sched %d; want %d, 0", next.floor[Kmem], next.floor[Sched], c.floor[Kmem]/2)
	}
	if next.admit(Kmem, 1) || next.dropped[Kmem] != 1 || !next.admit(Sched, 1) {
		t.Errorf("next epoch: kmem's estimate 1 admitted or not counted (%d), or sched's refused", next.dropped[Kmem])
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
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.WriteEpoch(ctx, e); err != nil {
		t.Fatal(err)
	}

	for _, v := range []Vital{Kmem, Syscall, Sched} {
		res, err := st.Query(ctx, `SELECT count(s.vital)::UBIGINT, any_value(v.samples), any_value(v.capped),
				coalesce(min(s.est_count), 0)::UBIGINT
			FROM vitals v LEFT JOIN samples s USING (host, epoch, vital) WHERE v.vital = ?`, v.String())
		if err != nil {
			t.Fatal(err)
		}
		var got [4]uint64
		for i := range got {
			got[i] = res.Rows[0][i].(uint64)
		}
		stored, taken, capped, minKept := got[0], got[1], got[2], got[3]
		t.Logf("%s: taken %d, stored %d, capped %d, least estimate kept %d", v, taken, stored, capped, minKept)
		if stored > max {
			t.Errorf("%s stored %d samples, over the cap %d", v, stored, max)
		}
		if stored+capped != taken {
			t.Errorf("%s: stored %d + capped %d != taken %d: samples lost uncounted", v, stored, capped, taken)
		}
		if v == Sched {
			if capped != 0 {
				t.Errorf("sched, under the cap, had %d capped", capped)
			}
			continue
		}
		if capped == 0 || stored == 0 {
			t.Errorf("%s: %d stored, %d capped; want both, the epoch is far over the cap", v, stored, capped)
		}
		// Coarser sampling: every sample taken at an estimate as high as
		// the least kept was kept, every one below it dropped.
		above := uint64(0)
		for _, s := range offered[v] {
			if s.EstCount >= minKept {
				above++
			}
		}
		if above != stored {
			t.Errorf("%s: %d samples taken at estimates >= %d, %d stored", v, above, minKept, stored)
		}
		if minKept < 2 {
			t.Errorf("%s: a label's first sample (estimate 1) was kept over the cap", v)
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
