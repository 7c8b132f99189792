package sketch

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Test 5, the acceptance bar (Chopstix §5.3): an event type that is 0.1% of
// all events in an epoch is sampled at least once with probability >= 0.999
// at the default sizes. 20 000 epochs of 100 000 events: 200 Zipf(1.1)
// background labels and one label with 100 events at random positions.
//
// Then, as a report rather than an assertion, the same for other thresholds,
// numbers of background labels and the paper's single row of the same memory
// (skipped with -short; HOLTER_SKETCH_TABLE_EPOCHS sets the epochs per row,
// 2000 by default).
func TestCoverage(t *testing.T) {
	start := time.Now()
	res, err := Simulate(SimConfig{Epochs: 20000, Seed: 20080101})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d epochs in %v", res.Epochs, time.Since(start).Round(time.Millisecond))
	t.Logf("%s", res)
	c := res.Config
	if c.Events != 100000 || c.Labels != 200 || c.RareEvents != 100 || c.ZipfS != 1.1 ||
		c.Shift != DefaultShift || c.Rows != Rows || c.Width != Width || res.Epochs != 20000 {
		t.Fatalf("defaults changed: %+v", c)
	}
	if res.MissUpper99 > 1e-3 {
		t.Errorf("rare label missed in %d of %d epochs: miss probability up to %.2e at 99%% confidence, want <= 1e-3",
			res.Misses, res.Epochs, res.MissUpper99)
	}
	// Alone, 100 events get floor(log2 100)+1 = 7 samples; collisions cost few.
	if res.MeanRareSamples < 6.5 || res.MeanRareSamples > 7.5 {
		t.Errorf("rare label: %.3f samples per epoch, want about 7", res.MeanRareSamples)
	}

	if testing.Short() {
		return
	}
	epochs := 2000
	if v := os.Getenv("HOLTER_SKETCH_TABLE_EPOCHS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("HOLTER_SKETCH_TABLE_EPOCHS=%q", v)
		}
		epochs = n
	}
	results := []SimResult{res}
	for i, c := range []SimConfig{
		{Shift: 2}, {Shift: 3},
		{Labels: 50}, {Labels: 1000},
		{Rows: 1, Width: Rows * Width}, // the paper's single row, same memory
	} {
		c.Epochs, c.Seed = epochs, uint64(1000+i)
		r, err := Simulate(c)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "coverage of a label with 0.1%% of the events (M=100000, Zipf s=1.1):\n%-5s %-5s %-4s %-5s %7s %6s %9s %9s %13s %12s\n",
		"shift", "D", "rows", "width", "epochs", "misses", "miss rate", "upper99", "samples/epoch", "rare samples")
	for _, r := range results {
		c := r.Config
		fmt.Fprintf(&b, "%-5d %-5d %-4d %-5d %7d %6d %9.2e %9.2e %13.1f %12.3f\n",
			c.Shift, c.Labels, c.Rows, c.Width, r.Epochs, r.Misses, r.MissRate, r.MissUpper99, r.MeanSamples, r.MeanRareSamples)
	}
	t.Log(b.String())
}

func TestSimulateDeterministic(t *testing.T) {
	cfg := SimConfig{Epochs: 60, Events: 20000, Labels: 100, Seed: 5}
	var results []SimResult
	for _, workers := range []int{1, 2, 7} {
		cfg.Workers = workers
		r, err := Simulate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r.Config.Workers = 0
		results = append(results, r)
	}
	if results[0] != results[1] || results[0] != results[2] {
		t.Fatalf("results depend on the number of workers: %+v", results)
	}
	cfg.Seed++
	if r, _ := Simulate(cfg); r.MeanSamples == results[0].MeanSamples {
		t.Error("a different seed gave the same simulation")
	}
}

// One epoch has exactly the configured events: the rare label at distinct
// positions, every event of weight 1 in the counters.
func TestSimEpochShape(t *testing.T) {
	for _, geom := range [][2]int{{Rows, Width}, {1, 2048}, {2, 64}} {
		cfg, err := SimConfig{Events: 30000, RareEvents: 300, Rows: geom[0], Width: geom[1], Seed: 3}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		s := &simulator{cfg: cfg, labels: make([]Label, cfg.Labels), bg: newAliasTable(zipfWeights(cfg.Labels, cfg.ZipfS))}
		for k := range s.labels {
			s.labels[k] = simLabel(k)
		}
		w := s.newWorker()
		for e := range 5 {
			res := w.epoch(e)
			pos := w.pos[:len(w.pos)-1]
			if len(pos) != cfg.RareEvents || w.pos[len(w.pos)-1] != cfg.Events {
				t.Fatalf("%d rare positions, want %d", len(pos), cfg.RareEvents)
			}
			if !slices.IsSorted(pos) || len(slices.Compact(slices.Clone(pos))) != len(pos) || pos[0] < 0 || pos[len(pos)-1] >= cfg.Events {
				t.Fatalf("rare positions not distinct, sorted and in range: %v", pos)
			}
			var row0 uint64
			var rareEst uint32
			switch a := w.a.(type) {
			case *HCA:
				for _, c := range a.Counters[0] {
					row0 += uint64(c)
				}
				rareEst = a.Estimate(simRareLabel)
			case *flatHCA:
				for _, c := range a.c[:a.width] {
					row0 += uint64(c)
				}
				rareEst = math.MaxUint32
				h := Hash(a.seed, simRareLabel)
				for r := range a.rows {
					rareEst = min(rareEst, a.c[r*a.width+int((h>>(16*r))&a.mask)])
				}
			}
			if row0 != uint64(cfg.Events) {
				t.Fatalf("row 0 holds %d events, want %d", row0, cfg.Events)
			}
			if rareEst < uint32(cfg.RareEvents) {
				t.Fatalf("rare label estimate %d < %d", rareEst, cfg.RareEvents)
			}
			if res.rareSamples < 1 && rareEst == uint32(cfg.RareEvents) {
				t.Fatal("rare label alone in its counters but never sampled")
			}
		}
	}
}

// flatHCA, used to simulate other geometries, behaves exactly like HCA at
// the kernel's geometry.
func TestFlatMatchesHCA(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	var h HCA
	f := newFlatHCA(Rows, Width)
	seed := rng.Uint64()
	h.Reset(seed)
	f.Reset(seed)
	for i := range 200000 {
		hsh := Hash(seed, Label{rng.Uint64N(5000)})
		w := uint32(1)
		if rng.IntN(50) == 0 {
			w = rng.Uint32()
		}
		shift := rng.UintN(5)
		s1, e1 := h.addHash(hsh, w, shift)
		s2, e2 := f.addHash(hsh, w, shift)
		if s1 != s2 || e1 != e2 {
			t.Fatalf("event %d: HCA (%v, %d), flat (%v, %d)", i, s1, e1, s2, e2)
		}
	}
	for r := range Rows {
		if !slices.Equal(h.Counters[r][:], f.c[r*Width:(r+1)*Width]) {
			t.Fatalf("row %d differs", r)
		}
	}
}

func TestAliasTable(t *testing.T) {
	for _, n := range []int{1, 2, 50, 200, 1000} {
		w := zipfWeights(n, 1.1)
		tab := newAliasTable(w)
		// The probability the table gives each index, exactly.
		p := make([]float64, n)
		for i := range n {
			keep := float64(tab.prob[i]) / (1 << 32)
			if tab.prob[i] == math.MaxUint32 {
				keep = 1
			}
			p[i] += keep / float64(n)
			p[tab.alias[i]] += (1 - keep) / float64(n)
		}
		var sum float64
		for _, x := range w {
			sum += x
		}
		for i := range n {
			if want := w[i] / sum; math.Abs(p[i]-want) > 1e-8*want+1e-12 {
				t.Fatalf("n=%d: P(%d) = %v, want %v", n, i, p[i], want)
			}
		}
	}
	// The draw itself, empirically.
	n := 200
	w := zipfWeights(n, 1.1)
	tab := newAliasTable(w)
	v := make([]uint64, n)
	for i := range v {
		v[i] = uint64(i)
	}
	cols := tab.columns(nil, v)
	rng := rand.NewPCG(14, 15)
	counts := make([]int, n)
	const draws = 2000000
	for range draws {
		counts[drawValue(cols, rng.Uint64())]++
	}
	var sum float64
	for _, x := range w {
		sum += x
	}
	for i, c := range counts {
		exp := draws * w[i] / sum
		if math.Abs(float64(c)-exp) > 5*math.Sqrt(exp)+1 {
			t.Errorf("label %d drawn %d times, expected %.0f", i, c, exp)
		}
	}
}

func TestBinomialUpper(t *testing.T) {
	for _, n := range []int{10, 1000, 20000} {
		if got, want := BinomialUpper(0, n, 0.01), 1-math.Pow(0.01, 1/float64(n)); math.Abs(got-want) > 1e-9*want {
			t.Errorf("k=0, n=%d: %v, want %v", n, got, want)
		}
	}
	// For large n the bound approaches the Poisson one: 99% upper limits of
	// the mean for k = 1..5 observed.
	poisson := []float64{6.638, 8.406, 10.045, 11.605, 13.108}
	for k, want := range poisson {
		if got := BinomialUpper(k+1, 1e7, 0.01) * 1e7; math.Abs(got-want) > 2e-3 {
			t.Errorf("k=%d: %v, want %v", k+1, got, want)
		}
	}
	if BinomialUpper(5, 5, 0.01) != 1 || BinomialUpper(0, 0, 0.01) != 1 {
		t.Error("degenerate cases")
	}
	if a, b := BinomialUpper(3, 100, 0.01), BinomialUpper(3, 100, 0.05); !(a > b && b > 0.03) {
		t.Errorf("bounds %v (99%%) and %v (95%%)", a, b)
	}
}

func TestSimulateErrors(t *testing.T) {
	for _, c := range []SimConfig{
		{Rows: 5}, {Width: 100}, {Width: 1 << 17}, {Events: 10, RareEvents: 11}, {Epochs: -1}, {ZipfS: -1}, {ZipfS: math.NaN()},
	} {
		if _, err := Simulate(c); err == nil {
			t.Errorf("Simulate(%+v) accepted", c)
		}
	}
}
