package findings

import (
	"math"
	"testing"
)

func TestEWMAByHand(t *testing.T) {
	// Alpha 0.5, k 2, warm-up 2, no floor. Series 10, 10, 10, 12, 30:
	// after 10, 10, 10 the mean is 10 and the variance 0; 12 deviates by 2
	// from a (floored) zero sigma and is flagged. Then mean = 11 and
	// variance = 0.5 * (0 + 0.5*4) = 1, sigma 1; 30 deviates by 19 > 2.
	e := EWMA{Alpha: 0.5, K: 2, Warmup: 2, MinRelative: 1e-300}
	got, err := e.Detect([]float64{10, 10, 10, 12, 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Index != 3 || got[0].Z < 1e100 || got[1].Index != 4 {
		t.Fatalf("anomalies %+v", got)
	}
	if a := got[1]; a.Mean != 11 || math.Abs(a.Sigma-1) > 1e-9 || math.Abs(a.Z-19) > 1e-9 {
		t.Fatalf("second anomaly %+v, want mean 11, sigma 1, z 19", a)
	}
}

func TestEWMACases(t *testing.T) {
	nan := math.NaN()
	cases := []struct {
		name string
		e    EWMA
		xs   []float64
		want []int
	}{
		{"steady series flags nothing", EWMA{}, []float64{100, 101, 99, 100, 102, 98, 100, 101}, nil},
		{"spike after warm-up", EWMA{}, []float64{100, 101, 99, 100, 102, 98, 500, 100}, []int{6}},
		{"spike during warm-up is not judged", EWMA{}, []float64{100, 500, 100, 100, 100, 100}, nil},
		{"drop is flagged too", EWMA{}, []float64{100, 100, 100, 100, 100, 100, 0}, []int{6}},
		{"gaps are skipped", EWMA{}, []float64{100, nan, 100, 100, nan, 100, 100, nan, 400}, []int{8}},
		{"floor hides small wobble on a flat line", EWMA{MinRelative: 0.1}, []float64{100, 100, 100, 100, 100, 100, 125}, nil},
		{"lasting change becomes normal", EWMA{Alpha: 0.9}, []float64{1, 1, 1, 1, 1, 1, 50, 50, 50, 50}, []int{6}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.e.Detect(c.xs)
			if err != nil {
				t.Fatal(err)
			}
			var idx []int
			for _, a := range got {
				idx = append(idx, a.Index)
			}
			if len(idx) != len(c.want) {
				t.Fatalf("flagged %v, want %v (%+v)", idx, c.want, got)
			}
			for i := range idx {
				if idx[i] != c.want[i] {
					t.Fatalf("flagged %v, want %v", idx, c.want)
				}
			}
		})
	}
	if _, err := (EWMA{Alpha: 2}).Detect([]float64{1}); err == nil {
		t.Error("alpha 2 accepted")
	}
}
