package findings

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/diagnose"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/storetest"
)

// TestJoin: joined metric sets keep their values in the order given and do
// not change the sets joined, and Compare holds per-epoch metrics to
// MinEpochs values.
func TestJoin(t *testing.T) {
	a := &MetricSet{Samples: map[string]diagnose.Sample{"x": {Values: []float64{1, 2}, Weights: []float64{1, 1}}},
		PerEpoch: map[string]bool{}}
	b := &MetricSet{Samples: map[string]diagnose.Sample{
		"x":           {Values: []float64{3}, Weights: []float64{2}},
		"e per epoch": {Values: []float64{5, 5}, Weights: []float64{1, 1}}},
		PerEpoch: map[string]bool{"e per epoch": true}, Truncated: true}
	j := Join(a, b)
	if got := j.Samples["x"]; !reflect.DeepEqual(got.Values, []float64{1, 2, 3}) || !reflect.DeepEqual(got.Weights, []float64{1, 1, 2}) {
		t.Errorf("joined x %+v", got)
	}
	if !j.PerEpoch["e per epoch"] || !j.Truncated {
		t.Errorf("joined %+v", j)
	}
	j2 := Join(a, a)
	if len(a.Samples["x"].Values) != 2 || len(j2.Samples["x"].Values) != 4 || len(j.Samples["x"].Values) != 3 {
		t.Errorf("join changed its inputs: a %v, j %v, j2 %v", a.Samples["x"], j.Samples["x"], j2.Samples["x"])
	}

	// Binned values keep their counts; values without count one each.
	c := &MetricSet{Samples: map[string]diagnose.Sample{"x": {Values: []float64{7}, Weights: []float64{3}, Counts: []int{5}}}}
	if got := Join(a, c).Samples["x"]; !reflect.DeepEqual(got.Counts, []int{1, 1, 5}) || got.Len() != 7 {
		t.Errorf("joined counts %+v", got)
	}

	target := &MetricSet{Samples: map[string]diagnose.Sample{
		"e per epoch": {Values: []float64{9, 9, 9, 9}}, "x": {Values: []float64{1, 2, 3, 4}}}, PerEpoch: map[string]bool{"e per epoch": true}}
	ref := &MetricSet{Samples: map[string]diagnose.Sample{
		"e per epoch": {Values: []float64{1, 1, 1, 1}}, "x": {Values: []float64{1, 2, 3, 4}}}, PerEpoch: map[string]bool{"e per epoch": true}}
	ranked, skipped, err := Compare(target, ref, &diagnose.RankOptions{MinSamples: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(ranked) != 1 || ranked[0].Name != "e per epoch" || len(skipped) != 1 || skipped[0].Name != "x" {
		t.Errorf("ranked %+v skipped %+v", ranked, skipped)
	}
}

// TestCompareTooFewEvents: a per-epoch rate of a rare event — two in the
// reference, none in the target — is not ranked (scaled, it would be as far
// apart as any two distributions); with MinEvents events it is, and Join
// adds the events of the sets it joins.
func TestCompareTooFewEvents(t *testing.T) {
	rates := func(events float64, vals ...float64) *MetricSet {
		return &MetricSet{Samples: map[string]diagnose.Sample{"signal events/s per epoch": {Values: vals}},
			PerEpoch: map[string]bool{"signal events/s per epoch": true},
			Events:   map[string]float64{"signal events/s per epoch": events}}
	}
	ranked, skipped, err := Compare(rates(0, 0, 0, 0, 0), rates(2, 0.2, 0, 0, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ranked) != 0 || len(skipped) != 1 || !errors.Is(skipped[0].Err, ErrTooFewEvents) {
		t.Fatalf("two events: ranked %+v skipped %+v", ranked, skipped)
	}
	ref := Join(rates(MinEvents/2, 3, 3, 0, 0), rates(MinEvents/2, 3, 3, 0, 0))
	if got := ref.Events["signal events/s per epoch"]; got != MinEvents {
		t.Fatalf("joined events %v, want %d", got, MinEvents)
	}
	ranked, skipped, err = Compare(rates(0, 0, 0, 0, 0), ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ranked) != 1 || len(skipped) != 0 || ranked[0].EMD != 1 {
		t.Fatalf("%d events: ranked %+v skipped %+v", MinEvents, ranked, skipped)
	}
}

// TestMetricsOfRun: the metrics of a run's range are those of its
// processes' samples and of the block requests on the devices they used,
// whoever issued them — as if the store held nothing else — and leave out
// the host's per-epoch rates. The run is pids 3 (system calls) and 4
// (block I/O); pid 4 sends its block requests to 8:1, as does pid 12 (a
// kernel worker issuing for it, say); everyone else uses 8:2.
func TestMetricsOfRun(t *testing.T) {
	ctx := context.Background()
	full := storetest.Open(t)
	own := storetest.Open(t)
	rng := rand.New(rand.NewPCG(3, 4))
	var r Range
	for n := int64(0); n < 3; n++ {
		e := busyMinute(rng, n, 4000, 1)
		kept := *e
		kept.Samples = nil
		for i, s := range e.Samples {
			if s.Vital == "blio" {
				dev := "8:2"
				if s.Pid == 4 || s.Pid == 12 {
					dev = "8:1"
				}
				e.Samples[i].Fields["dev"] = dev
			}
			if s.Pid == 3 || s.Pid == 4 || s.Pid == 12 && s.Vital == "blio" {
				kept.Samples = append(kept.Samples, e.Samples[i])
			}
		}
		if err := full.WriteEpoch(ctx, e); err != nil {
			t.Fatal(err)
		}
		if err := own.WriteEpoch(ctx, &kept); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			r.StartNs = e.StartNs
		}
		r.EndNs = e.EndNs
	}
	want, err := Metrics(ctx, FromStore(own), "h", Range{StartNs: r.StartNs, EndNs: r.EndNs})
	if err != nil {
		t.Fatal(err)
	}
	if err := full.AddRun(ctx, store.Run{ID: "w", Host: "h", StartNs: r.StartNs, EndNs: r.EndNs, Pids: []uint32{3, 4}}); err != nil {
		t.Fatal(err)
	}
	r.Run = "w"
	got, err := Metrics(ctx, FromStore(full), "h", r)
	if err != nil {
		t.Fatal(err)
	}
	for n := range want.Samples {
		if want.PerEpoch[n] {
			delete(want.Samples, n)
		}
	}
	for _, n := range []string{"blio request size (bytes)", "syscall latency (ns)", "inter-arrival blio (ns)"} {
		if want.Samples[n].Len() == 0 {
			t.Fatalf("the run's own store has no %q: the test shows nothing", n)
		}
	}
	if len(got.PerEpoch) != 0 {
		t.Errorf("a run's metrics have per-epoch metrics %v", got.PerEpoch)
	}
	if !reflect.DeepEqual(got.Samples, want.Samples) {
		for n, s := range want.Samples {
			if !reflect.DeepEqual(got.Samples[n], s) {
				t.Errorf("%s: %d values, want %d (%v, want %v)", n, got.Samples[n].Len(), s.Len(), got.Samples[n].Values, s.Values)
			}
		}
		for n := range got.Samples {
			if _, ok := want.Samples[n]; !ok {
				t.Errorf("%s: not the run's metric", n)
			}
		}
	}
}

// TestCompareLeavesOutSameMetrics: a breakdown with every value of its total
// on both sides (the latency of reads when all requests were reads) is left
// out of the ranking, naming the total; one with other values, or the same
// values on one side only, is ranked.
func TestCompareLeavesOutSameMetrics(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sample := func(mean float64) diagnose.Sample {
		var s diagnose.Sample
		for range 40 {
			s.Values = append(s.Values, mean*(0.5+rng.Float64()))
			s.Weights = append(s.Weights, 1+rng.Float64())
		}
		return s
	}
	total, other := sample(100), sample(300)
	tset, rset := newMetricSet(), newMetricSet()
	tset.Samples["blio latency (ns)"], rset.Samples["blio latency (ns)"] = total, other
	tset.Samples["blio read latency (ns)"], rset.Samples["blio read latency (ns)"] = total, other
	tset.Samples["blio write latency (ns)"], rset.Samples["blio write latency (ns)"] = total, sample(300)
	tset.Samples["blio queue time (ns)"], rset.Samples["blio queue time (ns)"] = sample(10), sample(10)
	ranked, skipped, err := Compare(tset, rset, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ranked {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	if want := []string{"blio latency (ns)", "blio queue time (ns)", "blio write latency (ns)"}; !slices.Equal(names, want) {
		t.Errorf("ranked %v, want %v", names, want)
	}
	if len(skipped) != 1 || skipped[0].Name != "blio read latency (ns)" || !errors.Is(skipped[0].Err, ErrSameMetric) ||
		!strings.Contains(skipped[0].Err.Error(), `"blio latency (ns)"`) {
		t.Errorf("skipped %v, want blio read latency (ns) as the same as blio latency (ns)", skipped)
	}
}

// TestSyscallMetricsNamed checks that holter diff names a system call's
// latency metric by the call, not its number.
func TestSyscallMetricsNamed(t *testing.T) {
	for in, want := range map[string]string{
		"syscall 318 latency (ns)":   "syscall getrandom latency (ns)",
		"syscall 0 latency (ns)":     "syscall read latency (ns)",
		"syscall latency (ns)":       "syscall latency (ns)",
		"inter-arrival syscall (ns)": "inter-arrival syscall (ns)",
	} {
		if got := syscallNamed(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
