package diagnose

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

func TestDeviation(t *testing.T) {
	for _, c := range []struct{ old, new, want float64 }{
		{100, 80, -0.2}, {80, 100, 0.2}, {50, 100, 0.5}, {100, 50, -0.5}, {7, 7, 0},
	} {
		if got := Deviation(c.old, c.new); !near(got, c.want, 1e-15) {
			t.Errorf("Deviation(%v, %v) = %v, want %v", c.old, c.new, got, c.want)
		}
		// The ratio representation of §2.2 maps back onto the deviation.
		if got := ratioOfDeviation(Deviation(c.old, c.new)); !near(got, c.new/c.old, 1e-15) {
			t.Errorf("ratio of deviation %v->%v = %v", c.old, c.new, got)
		}
	}
}

// schedCatalog builds runs with parameter sched in {noop, deadline} and
// size in s0, s1, ...: at size i noop runs at noop[i], deadline at
// deadline[i].
func schedCatalog(t *testing.T, opts *ProfileOptions, noop, deadline []float64) *Catalog {
	t.Helper()
	var runs []Run
	for i := range noop {
		size := fmt.Sprintf("s%d", i)
		runs = append(runs,
			Run{ID: "noop-" + size, Params: map[string]string{"sched": "noop", "size": size}, Perf: noop[i]},
			Run{ID: "deadline-" + size, Params: map[string]string{"sched": "deadline", "size": size}, Perf: deadline[i]})
	}
	c, err := NewCatalog(runs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestChangeProfileEmpirical(t *testing.T) {
	// Noop at 100, deadline at 110, 105, 100, 95 and 50.
	c := schedCatalog(t, &ProfileOptions{Empirical: true}, []float64{100, 100, 100, 100, 100}, []float64{110, 105, 100, 95, 50})
	if n := len(c.Profiles()); n != 2+5*4 {
		t.Fatalf("%d profiles, want 22 (sched both ways, 20 ordered size changes)", n)
	}
	p := c.Profile(Change{"sched", "noop", "deadline"})
	if p == nil {
		t.Fatal("no profile for noop -> deadline")
	}
	// Eq. 1 by hand: 10/110, 5/105, 0, -5/100, -50/100.
	want := []float64{10.0 / 110, 5.0 / 105, 0, -0.05, -0.5}
	for i, d := range want {
		if !near(p.Deviations[i], d, 1e-15) {
			t.Fatalf("deviations %v, want %v", p.Deviations, want)
		}
	}
	if p.Pairs[4] != (Pair{Old: "noop-s4", New: "deadline-s4"}) {
		t.Errorf("pair 4 is %+v", p.Pairs[4])
	}
	// Eq. 2 on the sample: the share of deviations at or below δ.
	for _, c := range []struct{ dev, want float64 }{
		{-0.6, 0}, {-0.5, 0.2}, {-0.3, 0.2}, {-0.01, 0.4}, {0, 0.6}, {0.05, 0.8}, {0.5, 1}, {-1, 0}, {1, 1},
	} {
		if got := p.PValue(c.dev); !near(got, c.want, 1e-15) {
			t.Errorf("PValue(%v) = %v, want %v", c.dev, got, c.want)
		}
	}
	// The opposite change mirrors the deviations (§2.1).
	r := c.Profile(Change{"sched", "deadline", "noop"})
	if got := r.PValue(-0.04); got != 0.4 {
		t.Errorf("deadline -> noop PValue(-0.04) = %v, want 0.4", got)
	}
	// A size change has one pair per scheduler.
	if s := c.Profile(Change{"size", "s0", "s4"}); s == nil || len(s.Pairs) != 2 ||
		s.Pairs[0] != (Pair{"noop-s0", "noop-s4"}) || s.Pairs[1] != (Pair{"deadline-s0", "deadline-s4"}) {
		t.Errorf("size s0 -> s4 profile %+v", s)
	}

	// A single change is scored by Eq. 2 on its profile.
	runs := c.Runs()
	s, err := c.Score(runs[4], runs[5], nil) // noop-s2 -> deadline-s2, ratio 1
	if err != nil {
		t.Fatal(err)
	}
	if !near(s.PValue, 0.6, 1e-15) || s.Ratio != 1 || len(s.Changes) != 1 || s.Changes[0] != (Change{"sched", "noop", "deadline"}) {
		t.Errorf("score %+v", s)
	}
}

func TestChangeProfileSmoothed(t *testing.T) {
	// One pair with ratio 1 and a kernel of 0.1: the p-value of a ratio
	// e^-0.2 is Φ(-2).
	runs := []Run{
		{ID: "a", Params: map[string]string{"v": "1"}, Perf: 10},
		{ID: "b", Params: map[string]string{"v": "2"}, Perf: 10},
	}
	c, err := NewCatalog(runs, &ProfileOptions{Bandwidth: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Profile(Change{"v", "1", "2"})
	const phiMinus2 = 0.022750131948179195
	if got := p.RatioPValue(math.Exp(-0.2)); !near(got, phiMinus2, 1e-12) {
		t.Errorf("RatioPValue = %v, want Φ(-2) = %v", got, phiMinus2)
	}
	if got := p.PValue(math.Exp(-0.2) - 1); !near(got, phiMinus2, 1e-12) {
		t.Errorf("PValue(deviation) = %v, want Φ(-2)", got)
	}
	// π(x) = φ(ln x / h) / (h x).
	if got, want := p.RatioDensity(2), math.Exp(-math.Pow(math.Log(2)/0.1, 2)/2)/(0.1*math.Sqrt(2*math.Pi)*2); !near(got, want, 1e-12) {
		t.Errorf("RatioDensity(2) = %v, want %v", got, want)
	}
	// Default bandwidth: identical ratios get the floor.
	c, err = NewCatalog(runs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bw := c.Profile(Change{"v", "2", "1"}).Bandwidth(); bw != MinBandwidth {
		t.Errorf("bandwidth %v, want MinBandwidth", bw)
	}
	// Silverman's rule on ln ratios ±0.1, ±0.3: sd = 0.2582, IQR/1.34 = 0.2239.
	d, err := NewDistribution([]float64{math.Exp(-0.3), math.Exp(-0.1), math.Exp(0.1), math.Exp(0.3)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := 0.9 * (0.3 / 1.34) * math.Pow(4, -0.2); !near(d.Bandwidth(), want, 1e-12) {
		t.Errorf("Silverman bandwidth %v, want %v", d.Bandwidth(), want)
	}
}

func TestCatalogErrors(t *testing.T) {
	ok := Run{ID: "a", Params: map[string]string{"x": "1"}, Perf: 1}
	for _, c := range []struct {
		name string
		runs []Run
	}{
		{"empty ID", []Run{{Params: map[string]string{"x": "1"}, Perf: 1}}},
		{"duplicate ID", []Run{ok, ok}},
		{"zero perf", []Run{ok, {ID: "b", Params: map[string]string{"x": "2"}, Perf: 0}}},
		{"NaN perf", []Run{ok, {ID: "b", Params: map[string]string{"x": "2"}, Perf: math.NaN()}}},
		{"other params", []Run{ok, {ID: "b", Params: map[string]string{"y": "2"}, Perf: 1}}},
		{"more params", []Run{ok, {ID: "b", Params: map[string]string{"x": "2", "y": "2"}, Perf: 1}}},
	} {
		if _, err := NewCatalog(c.runs, nil); !errors.Is(err, ErrBadRun) {
			t.Errorf("%s: %v, want ErrBadRun", c.name, err)
		}
	}
	if _, err := NewCatalog(nil, &ProfileOptions{Bandwidth: 0.1, Empirical: true}); err == nil {
		t.Error("Bandwidth with Empirical accepted")
	}

	c, err := NewCatalog([]Run{ok, {ID: "b", Params: map[string]string{"x": "2"}, Perf: 2}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Score(ok, ok, nil); !errors.Is(err, ErrSameCondition) {
		t.Errorf("same condition: %v", err)
	}
	other := Run{ID: "c", Params: map[string]string{"x": "3"}, Perf: 1}
	if _, err := c.Score(ok, other, nil); !errors.Is(err, ErrNoProfile) {
		t.Errorf("unprofiled change: %v", err)
	}
	if _, err := c.Score(ok, Run{ID: "d", Params: map[string]string{"z": "1"}, Perf: 1}, nil); !errors.Is(err, ErrBadRun) {
		t.Errorf("foreign parameters: %v", err)
	}
	if _, err := c.BestReference(other, nil); !errors.Is(err, ErrNoReference) {
		t.Errorf("best reference without profile: %v", err)
	}
}
