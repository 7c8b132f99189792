package findings

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/diagnose"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/storetest"
)

// writeEpochs writes n one-second epochs: a steady background of block I/O
// by pid 5, and from epoch spikeFrom on pid 70 ("writer") doing 40 MB/s of
// writes and blocking 0.9 s/s, sampled at est counts 1, 4, 16 … as the
// recorder would.
func writeEpochs(t *testing.T, st *store.Store, n, spikeFrom int) {
	t.Helper()
	ctx := context.Background()
	for e := 0; e < n; e++ {
		start := int64(e) * 1e9
		ep := &store.Epoch{Host: "h", Epoch: int64(e), StartNs: start, EndNs: start + 1e9,
			Stacks: []store.Stack{{ID: userStack, Kind: "user", Frames: []string{"holter_write_once", "main"}, Modules: []string{"/writer", "/writer"}},
				{ID: kernelStack, Kind: "kernel", Frames: []string{"io_schedule", "submit_bio_wait", "blkdev_issue_flush"}, Modules: []string{"", "", ""}}}}
		blio := store.Vital{Name: "blio", Events: 10, WeightSum: 10 * 4096}
		blck := store.Vital{Name: "blck", Events: 5, WeightSum: 5000}
		ep.Samples = append(ep.Samples, store.Sample{TsNs: start + 1, Vital: "blio", LabelHash: 1, Weight: 4096, EstCount: 4096 * 10,
			Pid: 5, Comm: "bg", Exe: "/bg", Fields: map[string]any{"bytes_requested": uint64(4096), "bytes_completed": uint64(4096), "latency_ns": int64(1e5)}})
		// A system call whose return value is no errno (a result past
		// MAX_ERRNO, here the least int64): not a failed call, and
		// nothing to negate.
		ep.Samples = append(ep.Samples, store.Sample{TsNs: start + 2, Vital: "syscall", LabelHash: 4, Weight: 1, EstCount: 1,
			Pid: 5, Comm: "bg", Exe: "/bg", Fields: map[string]any{"syscall_nr": int32(8), "ret": int64(math.MinInt64)}})
		if e >= spikeFrom {
			blio.Events += 640
			blio.WeightSum += 640 * 65536
			blck.Events += 640
			blck.WeightSum += 900_000
			for k, est := range []uint64{1, 4, 16, 64, 256, 640} {
				ts := start + int64(k+2)*1e8
				ep.Samples = append(ep.Samples,
					store.Sample{TsNs: ts, Vital: "blio", LabelHash: 2, Weight: 65536, EstCount: est * 65536, Pid: 70, Tid: 70,
						Comm: "writer", Exe: "/writer", UStackID: userStack,
						Fields: map[string]any{"bytes_requested": uint64(65536), "bytes_completed": uint64(65536), "latency_ns": int64(5e6)}},
					store.Sample{TsNs: ts + 1, Vital: "blck", LabelHash: 3, Weight: 1400, EstCount: est * 1400, Pid: 70, Tid: 70,
						Comm: "writer", Exe: "/writer", UStackID: userStack, KStackID: kernelStack, Fields: map[string]any{"delay_ns": int64(1.4e6)}})
			}
			if e == spikeFrom+1 {
				ep.Samples = append(ep.Samples, store.Sample{TsNs: start + 9e8, Vital: "blio", LabelHash: 2, Weight: 65536, EstCount: 700 * 65536,
					Pid: 70, Comm: "writer", Exe: "/writer", Fields: map[string]any{"bytes_requested": uint64(65536), "bytes_completed": uint64(512),
						"dev": "8:0", "op": "write", "sector": uint64(2048), "error": int32(10)}})
			}
		}
		ep.Vitals = []store.Vital{blio, blck, {Name: "cpu", Events: 100, WeightSum: 100000}}
		if err := st.WriteEpoch(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
}

// The stacks' ids are hashes, many past int64.
const userStack, kernelStack = 1<<63 | 77, 1<<63 | 78<<20 | 1

// jsonQuerier answers as a recorder's API does, in JSON read back with
// json.Number (cmd/holter's apiQuerier).
type jsonQuerier struct{ q Querier }

func (j jsonQuerier) Query(ctx context.Context, sql string) (*store.Result, error) {
	res, err := j.q.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out store.Result
	return &out, dec.Decode(&out)
}

func TestFindingsOnARealStore(t *testing.T) {
	st := storetest.Open(t)
	writeEpochs(t, st, 12, 8)
	t.Run("store", func(t *testing.T) { findingsOnARealStore(t, FromStore(st)) })
	t.Run("api", func(t *testing.T) { findingsOnARealStore(t, jsonQuerier{FromStore(st)}) })
}

func findingsOnARealStore(t *testing.T, q Querier) {
	ctx := context.Background()
	w, err := Load(ctx, q, LoadOptions{From: time.Unix(0, 0), To: time.Unix(100, 0), CPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Intervals) != 12 || w.Host != "h" {
		t.Fatalf("window of %d intervals, host %q", len(w.Intervals), w.Host)
	}
	// Pid 70's share of blio in epoch 8: represented weight 640*65536 of
	// 640*65536 + 10*4096, times the exact total.
	p := w.Proc(8, "blio", 70)
	total := float64(10*4096 + 640*65536)
	if want := total * 640 * 65536 / total; p.Weight < want*0.999 || p.Weight > want*1.001 || p.Comm != "writer" {
		t.Fatalf("pid 70 blio %+v, want weight %v", p, want)
	}
	if w.Unavailable["l2"] == "" || w.Unavailable["blio"] != "" {
		t.Fatalf("unavailable %v", w.Unavailable)
	}
	found, skipped := Evaluate(w, DefaultFilters(nil))
	rules := map[string]Finding{}
	for _, f := range found {
		rules[f.Rule+" "+f.Subject] = f
	}
	ew, ok := rules["ewma:blio weight/s blio"]
	if !ok || ew.StartNs != 8e9 || len(ew.Processes) == 0 || ew.Processes[0].Comm != "writer" {
		t.Fatalf("no EWMA blio finding at epoch 8 naming writer: %+v", found)
	}
	// Blocked 0.9 s/s flushing to the disk, from its own function.
	b, ok := rules["rule5-blocking pid 70 (writer) disk"]
	if !ok || b.StartNs != 8e9 || b.EndNs != 12e9 || !strings.Contains(b.Summary, "mirrored by blio") ||
		b.Culprit == nil || b.Culprit.Function != "holter_write_once" || b.Severity < 0.85 || b.Severity > 0.95 {
		t.Errorf("rule 5: %+v", b)
	}
	u, ok := rules["rule3-unsatisfied-io dev 8:0"]
	if !ok || u.StartNs != 9e9 || u.Processes[0].Pid != 70 {
		t.Errorf("rule 3: %+v", u)
	}
	var rule1 bool
	for _, s := range skipped {
		rule1 = rule1 || s.Rule == "rule1-busy-loop" && strings.Contains(s.Reason, "l2 not recorded")
	}
	if !rule1 {
		t.Errorf("rule 1 not reported unevaluable: %+v", skipped)
	}
	// The rollup timescale sees the same store.
	w5, err := Load(ctx, q, LoadOptions{Timescale: "5m", From: time.Unix(0, 0), To: time.Unix(100, 0)})
	if err != nil || len(w5.Intervals) != 1 || w5.Vitals["blio"].Events[0] != 120+4*640 {
		t.Fatalf("5m window %+v, %v", w5, err)
	}
	if _, err := Load(ctx, q, LoadOptions{From: time.Unix(1000, 0), To: time.Unix(2000, 0)}); err == nil {
		t.Fatal("empty range loaded")
	}
}

func TestCompareRangesRanksTheChangedMetricFirst(t *testing.T) {
	st := storetest.Open(t)
	writeEpochs(t, st, 16, 8)
	ranked, skipped, err := CompareRanges(context.Background(), FromStore(st), "h", Range{StartNs: 8e9, EndNs: 16e9}, Range{StartNs: 0, EndNs: 8e9}, &diagnose.RankOptions{MinSamples: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(ranked) == 0 {
		t.Fatalf("nothing ranked; skipped %+v", skipped)
	}
	for _, r := range ranked {
		t.Logf("%-40s EMD %.3f  target mean %.4g (n %d)  reference mean %.4g (n %d)", r.Name, r.EMD, r.TargetMean, r.TargetN, r.ReferenceMean, r.ReferenceN)
	}
	// The writer's I/O changed everything about blio: outstanding requests,
	// rate, latency and size rank above the unchanged cpu rate.
	if n := ranked[0].Name; !strings.Contains(n, "block requests") && !strings.HasPrefix(n, "blio") {
		t.Errorf("top metric %q is not about block I/O", n)
	}
	if last := ranked[len(ranked)-1]; last.Name != "cpu events/s per epoch" || last.EMD > 1e-9 {
		t.Errorf("unchanged cpu rate ranked %+v last", last)
	}
	// blck exists only in the target: too few reference values, skipped.
	var blck bool
	for _, s := range skipped {
		blck = blck || s.Name == "blck blocked time (ns)"
	}
	if !blck {
		t.Errorf("blck delay not skipped: %+v", skipped)
	}
}

// TestMedianEpochLength: a recording of 5 s epochs whose last one the
// recorder cut short when it stopped has epochs of 5 s, as its latest
// says otherwise; through the API as from the store; none in a range
// without epochs.
func TestMedianEpochLength(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	for e := range int64(7) {
		ep := &store.Epoch{Host: "h", Epoch: e, StartNs: e * 5e9, EndNs: (e + 1) * 5e9}
		if e == 6 {
			ep.EndNs = ep.StartNs + 1.2e9
		}
		if err := st.WriteEpoch(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []Querier{FromStore(st), jsonQuerier{FromStore(st)}} {
		if d, err := EpochLength(ctx, q, "h"); err != nil || d != 1200*time.Millisecond {
			t.Fatalf("latest epoch %v, %v", d, err)
		}
		if d, err := MedianEpochLength(ctx, q, "h", Range{StartNs: 0, EndNs: 40e9}); err != nil || d != 5*time.Second {
			t.Errorf("median epoch %v, %v", d, err)
		}
		if d, err := MedianEpochLength(ctx, q, "h", Range{StartNs: 100e9, EndNs: 200e9}); err != nil || d != 0 {
			t.Errorf("median epoch of a range without any %v, %v", d, err)
		}
	}
}

// TestLoadScalesUpOnlyTheTails writes 5-s epochs as a recorder under a
// tight storage budget stores them: of the blck vital's 300 s of blocking
// (60 threads), the samples kept are those of one thread blocked on a peer
// all epoch long, taken at each power of two (t = 2) its estimate crossed,
// up to 2^22 µs of its 5 s. Loaded, that thread blocks at most t times
// what its samples represent — their tail made good, not the 295 s of the
// labels the budget kept nothing of — and Rule #5 names it; with every
// label kept (the represented weight a little under the total), the
// process gets the whole exact total, as before.
func TestLoadScalesUpOnlyTheTails(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	const epochNs, top = 5e9, 1 << 22
	for e, total := range []uint64{300e6, 4.9e6} {
		start := int64(e) * epochNs
		ep := &store.Epoch{Host: "h", Epoch: int64(e), StartNs: start, EndNs: start + epochNs,
			Stacks: []store.Stack{{ID: userStack, Kind: "user", Frames: []string{"recv", "holter_ask_peer", "main"}, Modules: []string{"/libc", "/asker", "/asker"}},
				{ID: kernelStack, Kind: "kernel", Frames: []string{"wait_woken", "sk_wait_data", "tcp_recvmsg_locked", "tcp_recvmsg"}, Modules: []string{"", "", "", ""}}},
			Vitals: []store.Vital{{Name: "blck", Events: 100, WeightSum: total, Threshold: 2}, {Name: "cpu", Events: 10, WeightSum: 10000, Threshold: 2}}}
		for k, est := 0, uint64(1<<18); est <= top; k, est = k+1, est*2 {
			ep.Samples = append(ep.Samples, store.Sample{TsNs: start + int64(k+1)*1e8, Vital: "blck", LabelHash: 9, Weight: 300_000, EstCount: est,
				Pid: 80, Tid: 80, Comm: "asker", Exe: "/asker", UStackID: userStack, KStackID: kernelStack, Fields: map[string]any{"delay_ns": int64(3e8)}})
		}
		if err := st.WriteEpoch(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	w, err := Load(ctx, FromStore(st), LoadOptions{From: time.Unix(0, 0), To: time.Unix(100, 0), CPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	starved, full := w.Proc(0, "blck", 80).Weight, w.Proc(1, "blck", 80).Weight
	t.Logf("blocked %.2f s in the starved epoch, %.2f s in the full one", starved/1e6, full/1e6)
	if starved < top || starved > 2*top {
		t.Errorf("a thread blocked all epoch long, its samples representing %.2f s, counted %.2f s: the budget's dropped labels were spread over it",
			float64(top)/1e6, starved/1e6)
	}
	if math.Abs(full-4.9e6) > 1 {
		t.Errorf("with every label kept the process weighs %.0f µs, want the exact total 4.9e6", full)
	}
	var blocking []Finding
	found, _ := Evaluate(w, Rules(DefaultLevels))
	for _, f := range found {
		if f.Rule == "rule5-blocking" {
			blocking = append(blocking, f)
		}
	}
	if len(blocking) != 1 || blocking[0].Culprit == nil || blocking[0].Culprit.Function != "holter_ask_peer" {
		t.Fatalf("rule 5: %+v, want one finding on holter_ask_peer", blocking)
	}
}

// TestLoadReadsTheMemoryInUse: from a real store, read as the recorder's
// API answers too, each interval's least free memory and its first and
// last kernel memory in use, from the kmem samples that carry it (an
// interval without one has none); the leak detector's growth runs from the
// interval before a run's last reading to the run's last.
func TestLoadReadsTheMemoryInUse(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	for e := range 4 {
		start := int64(e) * 1e9
		ep := &store.Epoch{Host: "h", Epoch: int64(e), StartNs: start, EndNs: start + 1e9,
			Vitals: []store.Vital{{Name: "kmem", Events: 30, WeightSum: 30}, {Name: "umem", Events: 1, WeightSum: 1}}}
		// In the opposite order of time, and a umem sample with less free
		// memory and no kernel memory in use.
		for k := 2; k >= 0; k-- {
			fields := map[string]any{"free_kb": uint64(9000 - 100*k)}
			if e != 2 {
				fields["kernel_kb"] = uint64(1000*(e+1) + 10*k)
			}
			ep.Samples = append(ep.Samples, store.Sample{TsNs: start + int64(k+1)*1e8, Vital: "kmem", LabelHash: 1, Weight: 10, EstCount: 10,
				Pid: 5, Comm: "leaker", Exe: "/leaker", Fields: fields})
		}
		ep.Samples = append(ep.Samples, store.Sample{TsNs: start + 5e8, Vital: "umem", LabelHash: 2, Weight: 1, EstCount: 1,
			Pid: 6, Comm: "toucher", Exe: "/toucher", Fields: map[string]any{"free_kb": uint64(8000)}})
		if err := st.WriteEpoch(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	for name, q := range map[string]Querier{"store": FromStore(st), "api": jsonQuerier{FromStore(st)}} {
		w, err := Load(ctx, q, LoadOptions{From: time.Unix(0, 0), To: time.Unix(100, 0), CPUs: 2})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			first, last := float64(1000*(i+1)), float64(1000*(i+1)+20)
			if i == 2 {
				first, last = math.NaN(), math.NaN()
			}
			if w.FreeKB[i] != 8000 || !same(w.KernelFirstKB[i], first) || !same(w.KernelLastKB[i], last) {
				t.Errorf("%s: interval %d: free %v, kernel memory in use %v to %v KiB; want 8000, %v to %v",
					name, i, w.FreeKB[i], w.KernelFirstKB[i], w.KernelLastKB[i], first, last)
			}
		}
		for _, c := range []struct {
			first, last int
			growth      float64
			ok          bool
		}{{0, 0, 20, true}, {1, 3, 4020 - 1020, true}, {1, 2, 2020 - 1020, true}, {2, 2, 0, false}, {2, 3, 4020 - 2020, true}} {
			if g, ok := w.kernelGrowth(c.first, c.last); g != c.growth || ok != c.ok {
				t.Errorf("%s: growth over %d-%d: %v, %v; want %v, %v", name, c.first, c.last, g, ok, c.growth, c.ok)
			}
		}
	}
	if !hasSampleColumn(ctx, FromStore(st), "kernel_kb") || hasSampleColumn(ctx, FromStore(st), "no_such_field") {
		t.Error("hasSampleColumn does not tell the samples' columns")
	}
}

func same(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
