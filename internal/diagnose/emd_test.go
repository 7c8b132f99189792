package diagnose

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"testing"
)

// TestEMDAgainstScipy checks Wasserstein and EMD against
// scipy.stats.wasserstein_distance on the fixtures of testdata/gen_emd.py.
func TestEMDAgainstScipy(t *testing.T) {
	raw, err := os.ReadFile("testdata/emd.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []struct {
			Name              string
			Target, Reference Sample
			W1, Scale, EMD    float64
		}
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) < 10 {
		t.Fatalf("only %d fixture cases", len(fx.Cases))
	}
	for _, c := range fx.Cases {
		t.Run(c.Name, func(t *testing.T) {
			w, err := Wasserstein(c.Target, c.Reference)
			if err != nil {
				t.Fatal(err)
			}
			if !near(w, c.W1, 1e-9) {
				t.Errorf("Wasserstein = %.17g, scipy %.17g", w, c.W1)
			}
			// The distance is symmetric.
			if w2, _ := Wasserstein(c.Reference, c.Target); !near(w2, w, 1e-12) {
				t.Errorf("Wasserstein(reference, target) = %v, other way %v", w2, w)
			}
			d, scale, err := EMD(c.Target, c.Reference)
			if err != nil {
				t.Fatal(err)
			}
			if !near(d, c.EMD, 1e-9) || !near(scale, c.Scale, 1e-12) {
				t.Errorf("EMD = %.17g scale %v, scipy %.17g scale %v", d, scale, c.EMD, c.Scale)
			}
		})
	}
}

// near reports whether a and b agree to a relative tolerance (absolute
// near zero).
func near(a, b, tol float64) bool {
	return math.Abs(a-b) <= tol*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func TestEMDScaleInvariant(t *testing.T) {
	// The paper's scaling makes metrics of any unit comparable: the same
	// shapes in microseconds and in seconds have the same distance.
	tg := Sample{Values: []float64{1, 2, 2, 9}}
	rf := Sample{Values: []float64{3, 3, 4}}
	d1, _, err := EMD(tg, rf)
	if err != nil {
		t.Fatal(err)
	}
	mul := func(s Sample, k float64) Sample {
		v := make([]float64, len(s.Values))
		for i := range v {
			v[i] = s.Values[i] * k
		}
		return Sample{Values: v}
	}
	d2, scale, err := EMD(mul(tg, 1e-6), mul(rf, 1e-6))
	if err != nil {
		t.Fatal(err)
	}
	if !near(d1, d2, 1e-12) || !near(scale, 3.5e-6, 1e-12) {
		t.Fatalf("EMD %v at unit scale, %v (scale %v) in millionths", d1, d2, scale)
	}
	// By hand: the larger mean is 3.5; W = ∫|F_t - F_r| = 0.25·1 + 0.75·1 +
	// 0.75·(1/3)... computed piecewise: [1,2):.25 [2,3):.75 [3,4):.75-2/3
	// [4,9):.25 -> .25 + .75 + 1/12 + 1.25 = 2.3333.
	if want := (0.25 + 0.75 + 1.0/12 + 1.25) / 3.5; !near(d1, want, 1e-12) {
		t.Fatalf("EMD = %v, by hand %v", d1, want)
	}
}

func TestEMDBadInput(t *testing.T) {
	ok := Sample{Values: []float64{1, 2}}
	for _, c := range []struct {
		name string
		s    Sample
		want error
	}{
		{"empty", Sample{}, ErrEmpty},
		{"zero weights", Sample{Values: []float64{1, 2}, Weights: []float64{0, 0}}, ErrEmpty},
		{"NaN value", Sample{Values: []float64{1, math.NaN()}}, ErrNotFinite},
		{"infinite value", Sample{Values: []float64{math.Inf(1)}}, ErrNotFinite},
		{"NaN weight", Sample{Values: []float64{1}, Weights: []float64{math.NaN()}}, ErrNotFinite},
		{"negative weight", Sample{Values: []float64{1, 2}, Weights: []float64{1, -1}}, ErrBadWeights},
		{"short weights", Sample{Values: []float64{1, 2}, Weights: []float64{1}}, ErrBadWeights},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := EMD(c.s, ok); !errors.Is(err, c.want) {
				t.Errorf("EMD(bad, ok): %v, want %v", err, c.want)
			}
			if _, _, err := EMD(ok, c.s); !errors.Is(err, c.want) {
				t.Errorf("EMD(ok, bad): %v, want %v", err, c.want)
			}
		})
	}
	// Means of zero: identical distributions are at distance 0, different
	// ones cannot be scaled.
	zero := Sample{Values: []float64{-1, 1}}
	if d, _, err := EMD(zero, zero); err != nil || d != 0 {
		t.Errorf("identical zero-mean samples: %v, %v", d, err)
	}
	if _, _, err := EMD(zero, Sample{Values: []float64{-2, 2}}); !errors.Is(err, ErrZeroScale) {
		t.Errorf("different zero-mean samples: %v, want ErrZeroScale", err)
	}
}

func TestRank(t *testing.T) {
	n := func(vals ...float64) Sample { return Sample{Values: vals} }
	metrics := []Metric{
		{Name: "same", Target: n(1, 2, 3, 4), Reference: n(1, 2, 3, 4)},
		{Name: "io size", Target: n(4, 4, 4, 128), Reference: n(128, 128, 128, 128)},
		{Name: "delay", Target: n(10, 11, 12, 13), Reference: n(9, 10, 11, 12)},
		{Name: "rare", Target: n(1), Reference: n(1, 2, 3, 4)},
		{Name: "broken", Target: n(1, 2, math.NaN(), 4), Reference: n(1, 2, 3, 4)},
		{Name: "same too", Target: n(5, 5, 5, 5), Reference: n(5, 5, 5, 5)},
	}
	ranked, skipped, err := Rank(metrics, &RankOptions{MinSamples: 4, Bins: 4})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range ranked {
		names = append(names, r.Name)
	}
	// io size: W = 0.75·124 = 93 over 128; delay: 1 over 11.5; the two
	// identical ones tie at 0 and go by name.
	want := []string{"io size", "delay", "same", "same too"}
	if len(names) != len(want) {
		t.Fatalf("ranked %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("ranked %q, want %q", names, want)
		}
	}
	if !near(ranked[0].EMD, 93.0/128, 1e-12) || !near(ranked[1].EMD, 1/11.5, 1e-12) {
		t.Errorf("distances %v, %v; want %v, %v", ranked[0].EMD, ranked[1].EMD, 93.0/128, 1/11.5)
	}
	if len(skipped) != 2 || skipped[0].Name != "rare" || !errors.Is(skipped[0].Err, ErrTooFewSamples) ||
		skipped[1].Name != "broken" || !errors.Is(skipped[1].Err, ErrNotFinite) {
		t.Errorf("skipped %+v", skipped)
	}

	h := ranked[0].Histogram
	wantEdges := []float64{4, 35, 66, 97, 128}
	for i, e := range wantEdges {
		if h.Edges[i] != e {
			t.Fatalf("edges %v, want %v", h.Edges, wantEdges)
		}
	}
	if h.Target[0] != 0.75 || h.Target[3] != 0.25 || h.Reference[3] != 1 || h.Reference[0] != 0 {
		t.Errorf("histogram target %v reference %v", h.Target, h.Reference)
	}
	if h := ranked[3].Histogram; len(h.Edges) != 2 || h.Edges[0] != 5 || h.Edges[1] != 5 || h.Target[0] != 1 {
		t.Errorf("degenerate histogram %+v", h)
	}

	if _, _, err := Rank([]Metric{metrics[0], metrics[0]}, nil); err == nil {
		t.Error("duplicate metric names accepted")
	}
	if _, _, err := Rank(metrics, &RankOptions{Bins: -1}); err == nil {
		t.Error("negative bins accepted")
	}
}

// TestRankNoise: Noise is the EMD between the reference's halves, Denoise
// ranks by what exceeds it, and a metric's own MinSamples replaces the
// option's.
func TestRankNoise(t *testing.T) {
	n := func(vals ...float64) Sample { return Sample{Values: vals} }
	metrics := []Metric{
		// The reference's halves differ more than the target differs
		// from it: its own variation explains the difference.
		{Name: "bursty", Target: n(9, 9, 9, 9), Reference: n(1, 1, 9, 9)},
		// A steady reference and a target that moved.
		{Name: "moved", Target: n(6, 6, 6, 6), Reference: n(4, 4, 4, 4)},
		{Name: "per epoch", Target: n(2, 2), Reference: n(1, 1), MinSamples: 2},
		// A reference near zero that comes in bursts, and a target far
		// above it: its variation is small beside the rise.
		{Name: "rose", Target: n(100, 100, 100, 100), Reference: n(0, 0, 4, 4)},
	}
	ranked, skipped, err := Rank(metrics, &RankOptions{MinSamples: 4})
	if err != nil || len(skipped) != 0 {
		t.Fatal(err, skipped)
	}
	byName := map[string]Ranked{}
	for _, r := range ranked {
		byName[r.Name] = r
	}
	// bursty: W(target, reference) = 0.5·8 = 4 over the larger mean 9;
	// halves {1, 1} and {9, 9}: W = 8 over the same 9. moved: 2 over 6,
	// halves equal. per epoch: 1 over 2. rose: 98 over 100; halves {0, 0}
	// and {4, 4}: W = 4, over the same 100 (over their own mean 4 it
	// would be 1, and bury the rise).
	if b := byName["bursty"]; !near(b.EMD, 4.0/9, 1e-12) || !near(b.Noise, 8.0/9, 1e-12) || b.Score != b.EMD {
		t.Errorf("bursty %+v", b)
	}
	if m := byName["moved"]; !near(m.EMD, 2.0/6, 1e-12) || m.Noise != 0 {
		t.Errorf("moved %+v", m)
	}
	if r := byName["rose"]; !near(r.EMD, 0.98, 1e-12) || !near(r.Noise, 0.04, 1e-12) {
		t.Errorf("rose %+v", r)
	}
	if ranked[0].Name != "rose" || ranked[1].Name != "per epoch" || ranked[2].Name != "bursty" {
		t.Errorf("by EMD: %s, %s, %s", ranked[0].Name, ranked[1].Name, ranked[2].Name)
	}
	ranked, _, err = Rank(metrics, &RankOptions{MinSamples: 4, Denoise: true})
	if err != nil {
		t.Fatal(err)
	}
	if ranked[0].Name != "rose" || !near(ranked[0].Score, 0.94, 1e-12) || ranked[1].Name != "per epoch" ||
		ranked[2].Name != "moved" || ranked[3].Name != "bursty" || ranked[3].Score != 0 {
		t.Errorf("denoised: %+v", ranked)
	}
}

// TestRankCounts: a sample whose equal values are merged (Counts) ranks as
// the sample with every measurement listed — the same EMD, noise, means and
// numbers of measurements — and counts of the wrong length are refused.
func TestRankCounts(t *testing.T) {
	// Time order: the first half is small values, the second large ones.
	target := Sample{Values: []float64{1, 1, 1, 2, 5, 5, 5, 5}, Weights: []float64{1, 1, 1, 2, 1, 1, 1, 1}}
	reference := Sample{Values: []float64{1, 1, 2, 2, 2, 3, 3, 3, 3, 3}}
	merged := func(s Sample, counts []int) Sample {
		var m Sample
		i := 0
		for _, c := range counts {
			w := 0.0
			for k := i; k < i+c; k++ {
				w += s.weight(k)
			}
			m.Values, m.Weights, m.Counts = append(m.Values, s.Values[i]), append(m.Weights, w), append(m.Counts, c)
			i += c
		}
		return m
	}
	want, _, err := Rank([]Metric{{Name: "m", Target: target, Reference: reference}}, &RankOptions{MinSamples: 8})
	if err != nil || len(want) != 1 {
		t.Fatal(want, err)
	}
	got, skipped, err := Rank([]Metric{{Name: "m", Target: merged(target, []int{3, 1, 4}), Reference: merged(reference, []int{2, 3, 5})}},
		&RankOptions{MinSamples: 8})
	if err != nil || len(got) != 1 {
		t.Fatal(got, skipped, err)
	}
	g, w := got[0], want[0]
	if math.Abs(g.EMD-w.EMD) > 1e-12 || math.Abs(g.Noise-w.Noise) > 1e-12 || g.Noise == 0 || g.TargetN != 8 || g.ReferenceN != 10 ||
		math.Abs(g.TargetMean-w.TargetMean) > 1e-12 {
		t.Errorf("merged %+v, listed %+v", g, w)
	}
	if _, _, err := EMD(Sample{Values: []float64{1, 2}, Counts: []int{1}}, reference); !errors.Is(err, ErrBadWeights) {
		t.Errorf("counts of the wrong length: %v", err)
	}
}

// TestHistogramLogBins checks that values spanning decades are binned by
// ratio, so a long tail does not leave all but the first bin empty, and
// that a narrow range keeps equal widths.
func TestHistogramLogBins(t *testing.T) {
	wide := Sample{Values: []float64{1e3, 2e3, 1e4, 1e5, 1e6}}
	h := histogram(wide, wide, 3)
	if !h.Log || len(h.Edges) != 4 || math.Abs(h.Edges[1]-1e4) > 1e-6 || math.Abs(h.Edges[2]-1e5) > 1e-4 {
		t.Fatalf("1e3..1e6 in 3 bins: log %v, edges %v", h.Log, h.Edges)
	}
	// 1e3 and 2e3 in the first bin, 1e4 in the second, 1e5 and 1e6 in the third.
	want := []float64{0.4, 0.2, 0.4}
	for k, w := range want {
		if math.Abs(h.Target[k]-w) > 1e-9 {
			t.Errorf("bin %d holds %v, want %v (%v)", k, h.Target[k], w, h.Target)
		}
	}
	narrow := Sample{Values: []float64{10, 20, 30}}
	if h := histogram(narrow, narrow, 2); h.Log || h.Edges[1] != 20 {
		t.Errorf("10..30 in 2 bins: log %v, edges %v", h.Log, h.Edges)
	}
	negative := Sample{Values: []float64{-5, 1, 1e6}}
	if h := histogram(negative, negative, 2); h.Log {
		t.Errorf("a range through 0 is binned by ratio: %v", h.Edges)
	}
}
