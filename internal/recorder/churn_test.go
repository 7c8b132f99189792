package recorder

import (
	"fmt"
	"github.com/holter-dev/holter/internal/symbol"
	"math"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestChurnKeepsLabels: labels survive process churn. One run of a short
// program, then 200 runs of it in one epoch: the 200 make at most five
// times the labels of the one (labels are the code's place in the
// program, not the process or its randomised addresses; a few sites fault
// in some runs and not others, as the stack's offset in its page varies),
// and at most 2 + log2(200) times its samples: a label is sampled once per
// doubling of its count, so one seen once a run has one sample in one run
// and 1 + ⌊log2 200⌋ in 200, one more for the sites a single run does not
// show. (Labelled by the process, as they were, 200 runs made about 200
// times the labels and samples.) And their samples are symbolized, though
// most processes are gone by the time their samples are read: by the
// layout of a process of the program that was not (ResolveImage).
func TestChurnKeepsLabels(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildWorkload(t, "short_lived")
	type sample struct {
		store.Sample
		epoch      int64
		symbolized bool
	}
	var mu sync.Mutex
	var samples []sample
	bounds := map[int64][2]int64{}
	// The cap on samples per epoch (off here) would drop the first events of
	// the new labels this test counts. Epochs of 5 s: each phase must fall
	// in one (the one run lingers 1 s, the 200 took 0.2-1.3 s on a loaded
	// machine), and the test waits out two of them.
	rec, stop := startRecorder(t, Config{Epoch: 5 * time.Second, Budget: -1, Vitals: []Vital{Syscall, Umem, Kmem}},
		func(e *store.Epoch) error {
			stacks := map[uint64]store.Stack{}
			for _, st := range e.Stacks {
				stacks[st.ID] = st
			}
			mu.Lock()
			defer mu.Unlock()
			bounds[e.Epoch] = [2]int64{e.StartNs, e.EndNs}
			for _, s := range e.Samples {
				if s.Comm == "short_lived" {
					st, stacked := stacks[s.UStackID]
					samples = append(samples, sample{s, e.Epoch, stacked && symbol.Named(st.Frames[0])})
				}
			}
			return nil
		})
	run := func(args ...string) {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", bin, err, out)
		}
	}
	phase := func(runs int, args ...string) [2]int64 {
		began := time.Now()
		for range runs {
			run(args...)
		}
		return [2]int64{began.UnixNano(), time.Now().UnixNano()}
	}
	// Each phase starts as an epoch does, so that it falls in one.
	newEpoch := func() {
		n := rec.Status().CurrentEpoch
		for deadline := time.Now().Add(30 * time.Second); rec.Status().CurrentEpoch == n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no new epoch in 30 s")
			}
		}
	}
	newEpoch()
	one := phase(1, "1000")
	newEpoch()
	many := phase(200)
	time.Sleep(500 * time.Millisecond)
	stop()

	mu.Lock()
	defer mu.Unlock()
	epochOf := func(w [2]int64) int64 {
		for n, b := range bounds {
			if b[0] <= w[0] && w[1] <= b[1] {
				return n
			}
		}
		t.Fatalf("a phase (%v) straddled an epoch boundary", time.Duration(w[1]-w[0]))
		return 0
	}
	type tally struct {
		samples, stacked, symbolized int
		labels                       map[string]bool
		pids                         map[uint32]bool
	}
	count := func(w [2]int64) tally {
		n := epochOf(w)
		ta := tally{labels: map[string]bool{}, pids: map[uint32]bool{}}
		for _, s := range samples {
			if s.epoch != n || s.TsNs < w[0] || s.TsNs > w[1] {
				continue
			}
			ta.samples++
			ta.labels[fmt.Sprint(s.Vital, s.LabelHash)] = true
			ta.pids[s.Pid] = true
			if s.UStackID != 0 {
				ta.stacked++
				if s.symbolized {
					ta.symbolized++
				}
			}
		}
		return ta
	}
	a, b := count(one), count(many)
	t.Logf("one run: %d samples, %d labels; 200 runs (%d pids sampled, in %v): %d samples, %d labels, %d of %d user stacks symbolized",
		a.samples, len(a.labels), len(b.pids), time.Duration(many[1]-many[0]).Round(time.Millisecond),
		b.samples, len(b.labels), b.symbolized, b.stacked)
	if a.samples == 0 || len(b.pids) < 100 {
		t.Fatalf("the recording missed the workload: %d samples of the one run, %d of the 200 processes sampled", a.samples, len(b.pids))
	}
	if len(b.labels) > 5*len(a.labels) {
		t.Errorf("200 runs made %d labels, one run %d: over five times", len(b.labels), len(a.labels))
	}
	if bound := 2 + math.Log2(200); float64(b.samples) > bound*float64(a.samples) {
		t.Errorf("200 runs made %d samples, one run %d: over %.1f times", b.samples, a.samples, bound)
	}
	if b.stacked == 0 || float64(b.symbolized) < 0.8*float64(b.stacked) {
		t.Errorf("%d of the 200 runs' %d user stacks symbolized, want 80%% or more", b.symbolized, b.stacked)
	}
}
