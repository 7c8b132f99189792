package sketch

import (
	"math/rand/v2"
	"testing"
)

// TestHotSamplesALoneLabelAsAddDoes: a label alone in its counters is
// sampled through the hot slots at exactly the events HCA.Add samples it
// at, whatever the weights, and with the same estimates.
func TestHotSamplesALoneLabelAsAddDoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 1))
	for shift := range uint(5) {
		var plain, hot HCA
		plain.Reset(7)
		hot.Reset(7)
		var slots Hot
		l, key := Label{1, 2, 3}, [3]uint64{4, 5, 6}
		hits, samples := 0, 0
		for i := range 100000 {
			w := uint32(1)
			if rng.IntN(10) == 0 {
				w = rng.Uint32N(100)
			}
			s1, e1 := plain.Add(l, w, shift)
			s2, e2, hit := hot.AddHot(&slots, key, l, w, shift)
			if s1 != s2 || (s2 && e1 != e2) {
				t.Fatalf("t=2^%d, event %d of weight %d: Add says sampled=%v est=%d, AddHot sampled=%v est=%d",
					shift, i, w, s1, e1, s2, e2)
			}
			if hit {
				hits++
			}
			if s1 {
				samples++
			}
		}
		t.Logf("t=2^%d: %d samples, %d of 100000 events taken by the slot", shift, samples, hits)
		if hits < 99000 {
			t.Errorf("t=2^%d: the slot took %d of 100000 events of one label", shift, hits)
		}
	}
}

// TestHotLosesNoWeight: whatever the labels and their slots, the counters
// plus what the slots still hold are the counters HCA.Add leaves.
func TestHotLosesNoWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 2))
	var plain, hot HCA
	plain.Reset(9)
	hot.Reset(9)
	var slots Hot
	for range 200000 {
		i := uint64(rng.IntN(40))
		if rng.IntN(3) > 0 {
			i = 0
		}
		l, key := Label{i, i * 7, 1}, [3]uint64{i % 3, i << 8, 0}
		w := 1 + rng.Uint32N(50)
		plain.Add(l, w, 1)
		hot.AddHot(&slots, key, l, w, 1)
	}
	for _, s := range slots {
		for r := range Rows {
			hot.Counters[r][(s.Hash>>(16*r))&(Width-1)] += s.Pending
		}
	}
	if hot.Counters != plain.Counters {
		t.Error("counters through the hot slots, with what the slots hold, differ from HCA.Add's")
	}
}
