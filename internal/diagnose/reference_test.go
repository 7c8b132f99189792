package diagnose

import (
	"math"
	"testing"
)

// outlierCatalog: sched in {noop, deadline} and 40 sizes. Deadline is
// within ±4% of noop at every size but one, s17, where it delivers half.
func outlierCatalog(t *testing.T, opts *ProfileOptions) *Catalog {
	t.Helper()
	noop, deadline := make([]float64, 40), make([]float64, 40)
	for i := range noop {
		noop[i] = 100 + 5*float64(i)
		deadline[i] = noop[i] * (1 + 0.04*math.Sin(float64(i)))
	}
	deadline[17] = noop[17] / 2
	return schedCatalog(t, opts, noop, deadline)
}

func TestAnomaliesEmpirical(t *testing.T) {
	// With single-parameter references and unsmoothed profiles, Eq. 2 is a
	// rank: of the 40 noop -> deadline deviations deadline-s17's is the
	// lowest (p = 1/40) and deadline-s11's (-4%) the next (2/40); the
	// mirrored profile ranks noop-s33 and noop-s14 the same way. Size
	// changes have two samples each, so p >= 1/2. The lowest of n samples
	// always gets 1/n, which is why profiles are smoothed by default.
	c := outlierCatalog(t, &ProfileOptions{Empirical: true})
	found, err := c.Anomalies(&AnomalyOptions{ScoreOptions: ScoreOptions{MaxChanges: 1}})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		target, ref string
		p           float64
	}{
		{"deadline-s17", "noop-s17", 1.0 / 40},
		{"noop-s33", "deadline-s33", 1.0 / 40},
		{"deadline-s11", "noop-s11", 2.0 / 40},
		{"noop-s14", "deadline-s14", 2.0 / 40},
	}
	if len(found) != len(want) {
		t.Fatalf("anomalies %+v", found)
	}
	for i, w := range want {
		if f := found[i]; f.Target != w.target || f.Reference != w.ref || !near(f.PValue, w.p, 1e-12) {
			t.Errorf("anomaly %d: %+v, want %+v", i, f, w)
		}
	}
	// A stricter threshold leaves nothing.
	found, err = c.Anomalies(&AnomalyOptions{ScoreOptions: ScoreOptions{MaxChanges: 1}, Threshold: 0.02})
	if err != nil || len(found) != 0 {
		t.Fatalf("threshold 0.02: %+v, %v", found, err)
	}
}

func TestAnomaliesAllSyntheses(t *testing.T) {
	// Smoothed profiles and references differing in several parameters:
	// whichever synthesis, the outlier tops the list.
	c := outlierCatalog(t, nil)
	target := c.Runs()[2*17+1]
	for _, syn := range []Synthesis{Bounding, BoundingMonteCarlo, Convolution} {
		s, err := c.BestReference(target, &ScoreOptions{Synthesis: syn, MonteCarlo: &BoundOptions{Samples: 2000}})
		if err != nil {
			t.Fatal(err)
		}
		if s.PValue > 0.05 {
			t.Errorf("%v: best reference %s with p %v", syn, s.Reference, s.PValue)
		}
	}
	found, err := c.Anomalies(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Smoothed, the ±4% scatter of the other pairs is expected and only the
	// halving stands out.
	if len(found) != 1 || found[0].Target != "deadline-s17" || found[0].Reference != "noop-s17" {
		t.Fatalf("anomalies %+v", found)
	}
	// Convolution assumes independence and so is never more conservative
	// than the bound on the same pair.
	ref := c.Runs()[0] // noop-s0: differs in sched and size
	b, err := c.Score(ref, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Score(ref, target, &ScoreOptions{Synthesis: Convolution})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Changes) != 2 || len(b.Split) != 2 || v.PValue > b.PValue {
		t.Errorf("bound %+v, convolution %+v", b, v)
	}
}
