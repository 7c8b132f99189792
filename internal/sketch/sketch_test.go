package sketch

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// refAdd is the update written literally from the C specification, one row at
// a time with 64-bit old and new, as the reference for the unrolled HCA.Add.
func refAdd(c *[Rows][Width]uint32, seen *[SeenWords]uint64, hsh uint64, w uint32, shift uint) (bool, uint32) {
	// The seen array, bit by bit.
	x := Mix64(hsh ^ 0x9e3779b97f4a7c15)
	first := false
	for i := 0; i < SeenHashes; i++ {
		b := int((x >> (16 * i)) % SeenBits)
		if seen[b/64]>>(b%64)&1 == 0 {
			seen[b/64] |= 1 << (b % 64)
			first = true
		}
	}
	old, newv := ^uint64(0), ^uint64(0)
	for r := 0; r < Rows; r++ {
		idx := (hsh >> (16 * r)) & (Width - 1)
		o := uint64(c[r][idx])
		c[r][idx] += w
		n := o + uint64(w)
		if o < old {
			old = o
		}
		if n < newv {
			newv = n
		}
	}
	if newv > 0xffffffff {
		newv = 0xffffffff
	}
	return first || refLevel(newv, shift) > refLevel(old, shift), uint32(newv)
}

// refLevel is floor(log2(x)/shift) by repeated halving.
func refLevel(x uint64, shift uint) int {
	if x == 0 {
		return -1
	}
	if shift == 0 {
		shift = 1
	}
	lg := 0
	for x > 1 {
		x >>= 1
		lg++
	}
	return lg / int(shift)
}

// powersUpTo counts the powers t^0, t^1, ... that are <= n.
func powersUpTo(n uint64, shift uint) int {
	k := 0
	for p := uint64(1); p <= n; p <<= shift {
		k++
		if p > math.MaxUint64>>shift {
			break
		}
	}
	return k
}

func TestLevel(t *testing.T) {
	cases := []struct {
		x     uint64
		shift uint
		want  int
	}{
		{0, 1, -1}, {0, 3, -1}, {1, 1, 0}, {1, 5, 0}, {2, 1, 1}, {3, 1, 1}, {4, 1, 2},
		{3, 2, 0}, {4, 2, 1}, {15, 2, 1}, {16, 2, 2}, {7, 3, 0}, {8, 3, 1}, {63, 3, 1}, {64, 3, 2},
		{1000, 1, 9}, {1024, 1, 10}, {100000, 1, 16}, {100000, 2, 8}, {100000, 3, 5},
		{math.MaxUint32, 1, 31}, {math.MaxUint32, 3, 10}, {1 << 63, 1, 63}, {math.MaxUint64, 7, 9},
		{5, 0, 2}, // shift 0 is treated as 1, like the kernel
		{math.MaxUint64, 64, 0}, {1, 1000, 0},
	}
	for _, c := range cases {
		if got := Level(c.x, c.shift); got != c.want {
			t.Errorf("Level(%d, %d) = %d, want %d", c.x, c.shift, got, c.want)
		}
		if c.shift < 64 {
			if got := refLevel(c.x, c.shift); got != c.want {
				t.Errorf("refLevel(%d, %d) = %d, want %d", c.x, c.shift, got, c.want)
			}
		}
	}
}

// crosses must be exactly Level(new) > Level(old), including the shortcut.
func TestCrossesIsLevelComparison(t *testing.T) {
	for shift := uint(0); shift <= 6; shift++ {
		for old := uint64(0); old < 600; old++ {
			for newv := old; newv < 1200; newv++ {
				if got, want := crosses(old, newv, shift), Level(newv, shift) > Level(old, shift); got != want {
					t.Fatalf("crosses(%d, %d, %d) = %v, want %v", old, newv, shift, got, want)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		old := rng.Uint64() >> rng.UintN(64)
		newv := old + rng.Uint64()>>rng.UintN(64)
		if newv < old {
			newv = math.MaxUint64
		}
		shift := rng.UintN(8)
		if got, want := crosses(old, newv, shift), refLevel(newv, shift) > refLevel(old, shift); got != want {
			t.Fatalf("crosses(%d, %d, %d) = %v, want %v", old, newv, shift, got, want)
		}
	}
}

// HCA.Add against the literal transcription of the C, on a stream with
// collisions, heavy weights, wrapping counters and clamped estimates.
func TestAddMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 20 {
		var h HCA
		h.Reset(rng.Uint64())
		var ref [Rows][Width]uint32
		var refSeen [SeenWords]uint64
		labels := make([]Label, 3000)
		for i := range labels {
			labels[i] = Label{rng.Uint64(), rng.Uint64() & 0xff, uint64(trial)}
		}
		for i := range 20000 {
			l := labels[rng.IntN(len(labels))]
			w := uint32(1)
			switch rng.IntN(10) {
			case 0:
				w = rng.Uint32() // wraps counters, clamps estimates
			case 1, 2:
				w = rng.Uint32N(5000)
			case 3:
				w = 0
			}
			shift := rng.UintN(6)
			gs, ge := h.Add(l, w, shift)
			rs, re := refAdd(&ref, &refSeen, Hash(h.Seed, l), w, shift)
			if gs != rs || ge != re {
				t.Fatalf("trial %d event %d: Add = (%v, %d), reference (%v, %d)", trial, i, gs, ge, rs, re)
			}
		}
		if h.Counters != ref || h.Seen != refSeen {
			t.Fatalf("trial %d: counters or seen array differ from the reference", trial)
		}
	}
}

// Hand-checked cases of the update rule.
func TestAddRule(t *testing.T) {
	l := Label{1, 2, 3}
	var h HCA
	h.Reset(42)
	hsh := Hash(h.Seed, l)
	cell := func(r int) *uint32 { return &h.Counters[r][(hsh>>(16*r))&(Width-1)] }
	set := func(v ...uint32) {
		for r := range Rows {
			*cell(r) = v[r]
		}
	}
	type step struct {
		w       uint32
		shift   uint
		sampled bool
		est     uint32
	}
	check := func(name string, steps ...step) {
		t.Helper()
		for i, s := range steps {
			sampled, est := h.Add(l, s.w, s.shift)
			if sampled != s.sampled || est != s.est {
				t.Errorf("%s step %d: Add(w=%d, shift=%d) = (%v, %d), want (%v, %d)", name, i, s.w, s.shift, sampled, est, s.sampled, s.est)
			}
		}
	}
	set(0, 0, 0, 0)
	check("fresh", step{1, 1, true, 1}, step{1, 1, true, 2}, step{1, 1, false, 3}, step{1, 1, true, 4}, step{4, 1, true, 8}, step{7, 1, false, 15})
	set(5, 3, 9, 3) // the estimate is the minimum row
	check("min row", step{1, 1, true, 4}, step{1, 1, false, 5}, step{3, 1, true, 8})
	if *cell(0) != 10 || *cell(1) != 8 || *cell(2) != 14 || *cell(3) != 8 {
		t.Errorf("rows grew to %d %d %d %d, want 10 8 14 8", *cell(0), *cell(1), *cell(2), *cell(3))
	}
	set(3, 3, 3, 3) // t = 4: levels change at 4, 16, 64
	check("t=4", step{1, 2, true, 4}, step{11, 2, false, 15}, step{1, 2, true, 16}, step{0, 2, false, 16})
	set(0xfffffff0, 0xfffffff8, 0xfffffff0, 0xfffffff4) // the estimate clamps, the counters wrap
	check("clamp", step{0x20, 1, false, 0xffffffff})
	if *cell(0) != 0x10 || *cell(1) != 0x18 || *cell(3) != 0x14 {
		t.Errorf("counters did not wrap: %#x %#x %#x %#x", *cell(0), *cell(1), *cell(2), *cell(3))
	}
	check("after wrap", step{1, 1, false, 0x11}, step{0xf, 1, true, 0x20})
	set(0, 7, 7, 7) // one empty row makes the event the label's first
	check("one empty row", step{3, 3, true, 3})
}

func TestEstimate(t *testing.T) {
	var h HCA
	h.Reset(9)
	l := Label{7, 8, 9}
	if e := h.Estimate(l); e != 0 {
		t.Fatalf("empty Estimate = %d", e)
	}
	var total uint32
	for i := range 100 {
		w := uint32(i*i + 1)
		_, est := h.Add(l, w, 1)
		total += w
		if est != total || h.Estimate(l) != total {
			t.Fatalf("after %d events est %d, Estimate %d, want %d", i+1, est, h.Estimate(l), total)
		}
	}
	// Other labels only raise the estimate, and only where they collide.
	rng := rand.New(rand.NewPCG(5, 6))
	for range 5000 {
		h.Add(Label{rng.Uint64()}, 1, 1)
	}
	if e := h.Estimate(l); e < total {
		t.Fatalf("Estimate %d fell below the true count %d", e, total)
	}
}

// Test 1: a label alone is sampled exactly when its count is a power of t,
// that is floor(log2(n)/shift)+1 times in n events.
func TestLogarithmicGrowthAlone(t *testing.T) {
	for shift := uint(1); shift <= 4; shift++ {
		for _, n := range []int{1, 2, 3, 7, 8, 9, 15, 16, 17, 100, 1000, 4096, 65535, 65536, 100000} {
			var h HCA
			h.Reset(uint64(n)*31 + uint64(shift))
			l := Label{0xffffffff81234500, 0, 77}
			samples := 0
			for i := 1; i <= n; i++ {
				sampled, est := h.Add(l, 1, shift)
				if est != uint32(i) {
					t.Fatalf("shift %d: est %d after %d events", shift, est, i)
				}
				isPower := i&(i-1) == 0 && (bits.Len(uint(i))-1)%int(shift) == 0
				if sampled != isPower {
					t.Fatalf("shift %d: event %d sampled=%v, want %v (sampled iff the count is a power of t=%d)", shift, i, sampled, isPower, 1<<shift)
				}
				if sampled {
					samples++
				}
			}
			want := int(math.Floor(math.Log2(float64(n))/float64(shift))) + 1
			if samples != want || samples != powersUpTo(uint64(n), shift) {
				t.Errorf("shift %d, n %d: %d samples, want floor(log2(n)/shift)+1 = %d", shift, n, samples, want)
			}
		}
	}
}

// Test 1, continued: labels of very different counts sharing one HCA, in
// random order, each collect about log_t of their count, not a share
// proportional to their count.
func TestLogarithmicGrowthMixed(t *testing.T) {
	counts := []int{10, 1000, 100000}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, shift := range []uint{1, 2, 3} {
		mean := make([]float64, len(counts))
		const trials = 30
		for trial := range trials {
			var h HCA
			h.Reset(rng.Uint64())
			labels := make([]Label, len(counts))
			var stream []int
			for i, n := range counts {
				labels[i] = Label{uint64(0x400000 + 0x100*i), uint64(trial), 1000}
				for range n {
					stream = append(stream, i)
				}
			}
			rng.Shuffle(len(stream), func(a, b int) { stream[a], stream[b] = stream[b], stream[a] })
			samples := make([]int, len(counts))
			for _, i := range stream {
				if s, _ := h.Add(labels[i], 1, shift); s {
					samples[i]++
				}
			}
			for i, n := range counts {
				if e := h.Estimate(labels[i]); e != uint32(n) {
					t.Fatalf("label %d: estimate %d, want %d (collision in every row?)", i, e, n)
				}
				if want := powersUpTo(uint64(n), shift); samples[i] != want {
					t.Errorf("shift %d: label with %d events got %d samples, want %d", shift, n, samples[i], want)
				}
				mean[i] += float64(samples[i]) / trials
			}
		}
		for i, n := range counts {
			logt := math.Log2(float64(n)) / float64(shift)
			if mean[i] < logt || mean[i] > logt+1 {
				t.Errorf("shift %d: %d events: mean %.2f samples, want within [log_t n, log_t n + 1] = [%.2f, %.2f]", shift, n, mean[i], logt, logt+1)
			}
		}
		// 10^4 times the events buy only a few times the samples.
		if r := mean[2] / mean[0]; r > 6 {
			t.Errorf("shift %d: samples ratio %.1f for a count ratio of 10^4", shift, r)
		}
		t.Logf("shift %d: events %v -> mean samples %.2f", shift, counts, mean)
	}
}

// Test 2: weights. The counters grow by the weight and the estimate is the
// label's total weight, so a label with few heavy events reaches the same
// estimate and level as one with many light events of the same total.
//
// It does not collect as many samples: one event is sampled at most once, so
// the first heavy event, which lifts the estimate from 0 to w, stands for all
// Level(w)+1 levels up to w. Each later event adds at most the current count
// and so crosses at most one level (t >= 2), and every level up to the total
// is crossed once. Hence n events of weight w collect exactly
// 1 + Level(n*w) - Level(w) samples against 1 + Level(n*w) for n*w events of
// weight 1, and more than the 1 + Level(n) of n events of weight 1.
func TestWeights(t *testing.T) {
	heavy, light, few := Label{0xa000, 0, 1}, Label{0xb000, 0, 1}, Label{0xc000, 0, 1}
	for _, shift := range []uint{1, 2, 3} {
		for _, c := range []struct{ n, w int }{{100, 1000}, {10, 10000}, {1000, 3}, {7, 1 << 12}} {
			total := c.n * c.w
			var h HCA
			h.Reset(uint64(shift)<<32 | uint64(c.w))
			hh := Hash(h.Seed, heavy)
			cells := func() (v [Rows]uint32) {
				for r := range Rows {
					v[r] = h.Counters[r][(hh>>(16*r))&(Width-1)]
				}
				return v
			}
			var sHeavy, sLight, sFew int
			for i := 1; i <= c.n; i++ {
				before := cells()
				s, est := h.Add(heavy, uint32(c.w), shift)
				after := cells()
				for r := range Rows {
					if after[r]-before[r] != uint32(c.w) {
						t.Fatalf("row %d grew by %d, want the weight %d", r, after[r]-before[r], c.w)
					}
				}
				if est != uint32(i*c.w) {
					t.Fatalf("heavy est %d after %d events, want %d", est, i, i*c.w)
				}
				if s {
					sHeavy++
				}
			}
			for range total {
				if s, _ := h.Add(light, 1, shift); s {
					sLight++
				}
			}
			for range c.n {
				if s, _ := h.Add(few, 1, shift); s {
					sFew++
				}
			}
			eh, el := h.Estimate(heavy), h.Estimate(light)
			if eh != uint32(total) || el != uint32(total) {
				t.Fatalf("estimates %d and %d, want both %d", eh, el, total)
			}
			if Level(uint64(eh), shift) != Level(uint64(el), shift) {
				t.Errorf("heavy and light labels of the same total end on different levels")
			}
			if want := 1 + Level(uint64(total), shift) - Level(uint64(c.w), shift); sHeavy != want {
				t.Errorf("shift %d, %d x weight %d: %d samples, want %d", shift, c.n, c.w, sHeavy, want)
			}
			if want := 1 + Level(uint64(total), shift); sLight != want {
				t.Errorf("shift %d, %d x weight 1: %d samples, want %d", shift, total, sLight, want)
			}
			if sLight-sHeavy != Level(uint64(c.w), shift) {
				t.Errorf("shift %d: heavy %d vs light %d samples, want a difference of Level(w) = %d", shift, sHeavy, sLight, Level(uint64(c.w), shift))
			}
			if sHeavy < sFew {
				t.Errorf("shift %d: %d heavy events got %d samples, fewer than %d for as many light events", shift, c.n, sHeavy, sFew)
			}
			if shift == 1 {
				t.Logf("%d events of weight %d: est %d, %d samples; %d events of weight 1: est %d, %d samples; %d events of weight 1: %d samples",
					c.n, c.w, eh, sHeavy, total, el, sLight, c.n, sFew)
			}
		}
	}
}

// Test 4: swapping copies loses nothing and reseeds.
func TestSwap(t *testing.T) {
	next := uint64(100)
	s := New(DefaultShift, func() uint64 { next += 0x9e3779b97f4a7c15; return next })
	first := s.Active()
	seed0 := first.Seed
	rng := rand.New(rand.NewPCG(9, 10))
	before, after := Label{1, 1, 1}, Label{2, 2, 2}
	var sumBefore, sumAfter uint64
	var onlyBefore, onlyAfter uint32
	for range 5000 {
		w := rng.Uint32N(100) + 1
		l := Label{rng.Uint64N(50)}
		if rng.IntN(10) == 0 {
			l, onlyBefore = before, onlyBefore+w
		}
		s.Add(l, w)
		sumBefore += uint64(w)
	}
	done := s.Swap()
	if done != first {
		t.Fatal("Swap did not return the copy that was active")
	}
	if s.Active() == done || s.Active().Seed == seed0 {
		t.Fatal("Swap did not activate a freshly seeded other copy")
	}
	for range 3000 {
		w := rng.Uint32N(100) + 1
		l := Label{rng.Uint64N(50) + 1000}
		if rng.IntN(10) == 0 {
			l, onlyAfter = after, onlyAfter+w
		}
		s.Add(l, w)
		sumAfter += uint64(w)
	}
	active := s.Active()
	row0 := func(h *HCA) (sum uint64) {
		for _, c := range h.Counters[0] {
			sum += uint64(c)
		}
		return sum
	}
	if got := row0(done); got != sumBefore {
		t.Errorf("finished copy holds weight %d, want %d", got, sumBefore)
	}
	if got := row0(active); got != sumAfter {
		t.Errorf("active copy holds weight %d, want %d", got, sumAfter)
	}
	if row0(done)+row0(active) != sumBefore+sumAfter {
		t.Errorf("weight lost at the swap")
	}
	if e := done.Estimate(before); e < onlyBefore {
		t.Errorf("finished copy: estimate %d < true count %d", e, onlyBefore)
	}
	if e := active.Estimate(after); e < onlyAfter {
		t.Errorf("active copy: estimate %d < true count %d", e, onlyAfter)
	}
	if e := done.Estimate(after); e != 0 {
		t.Errorf("finished copy has estimate %d for a label added only after the swap", e)
	}
	if e := active.Estimate(before); e != 0 {
		t.Errorf("active copy has estimate %d for a label added only before the swap", e)
	}

	// The next swap hands back the second copy and reuses the first, reset.
	seed1 := active.Seed
	done2 := s.Swap()
	if done2 != active || s.Active() != first {
		t.Fatal("second Swap did not alternate the copies")
	}
	if row0(first) != 0 || first.Counters != ([Rows][Width]uint32{}) {
		t.Error("reused copy was not reset")
	}
	if first.Seed == seed0 || first.Seed == seed1 {
		t.Error("reused copy kept an old seed")
	}
	if row0(done2) != sumAfter {
		t.Error("second finished copy changed")
	}

	// The default seed source gives different seeds too.
	d := New(2, nil)
	if d.Shift() != 2 {
		t.Errorf("Shift() = %d", d.Shift())
	}
	s0 := d.Active().Seed
	if d.Swap().Seed != s0 || d.Active().Seed == s0 {
		t.Error("default seeds do not change at Swap")
	}
}

// Test 6: linear counting on the seen array.
func TestDistinctEstimate(t *testing.T) {
	fill := func(h *HCA, rng *rand.Rand, n int) {
		for i := range n {
			l := Label{rng.Uint64(), uint64(i), 5}
			for range 1 + rng.IntN(3) {
				h.Add(l, 1+rng.Uint32N(1000), DefaultShift)
			}
		}
	}
	var h HCA
	if e := h.DistinctEstimate(); e != 0 {
		t.Errorf("empty copy: %v", e)
	}
	for _, n := range []int{50, 200, 1000} {
		// The fixed case.
		rng := rand.New(rand.NewPCG(uint64(n), 11))
		h.Reset(rng.Uint64())
		fill(&h, rng, n)
		if e := h.DistinctEstimate(); math.Abs(e-float64(n)) > 0.1*float64(n) {
			t.Errorf("%d labels: estimate %.1f, off by more than 10%%", n, e)
		} else {
			t.Logf("%d labels: estimate %.1f", n, e)
		}
		// Over many seeds: unbiased, and nearly always within 10%.
		const trials = 1000
		within, sum := 0, 0.0
		for range trials {
			h.Reset(rng.Uint64())
			fill(&h, rng, n)
			e := h.DistinctEstimate()
			sum += e
			if math.Abs(e-float64(n)) <= 0.1*float64(n) {
				within++
			}
		}
		meanErr := sum/trials/float64(n) - 1
		t.Logf("%d labels: mean relative error %+.4f, %d/%d estimates within 10%%", n, meanErr, within, trials)
		if math.Abs(meanErr) > 0.01 || within < trials*94/100 {
			t.Errorf("%d labels: mean relative error %+.4f, %d/%d within 10%%", n, meanErr, within, trials)
		}
	}
	// Saturation.
	for i := range h.Seen {
		h.Seen[i] = ^uint64(0)
	}
	if e, want := h.DistinctEstimate(), float64(SeenBits)/SeenHashes*math.Log(SeenBits); math.Abs(e-want) > 1e-6 || math.Abs(e-242272) > 1 {
		t.Errorf("saturated seen array: %v, want %v", e, want)
	}
}

// The counters decode straight from the bytes of a BPF array map value.
func TestCountersLayout(t *testing.T) {
	var h HCA
	if n := binary.Size(h.Counters); n != 8192 {
		t.Fatalf("counters are %d bytes, want 8192 like struct hca", n)
	}
	raw := make([]byte, 8192)
	for r := range Rows {
		for i := range Width {
			binary.LittleEndian.PutUint32(raw[4*(r*Width+i):], uint32(r<<16|i)) // c[r][i]
		}
	}
	if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, &h.Counters); err != nil {
		t.Fatal(err)
	}
	for r := range Rows {
		for i := range Width {
			if h.Counters[r][i] != uint32(r<<16|i) {
				t.Fatalf("Counters[%d][%d] = %#x", r, i, h.Counters[r][i])
			}
		}
	}
}
