package findings

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// busyMinute is a synthetic one-minute epoch (the recorder's default) of a
// busy host "h": n samples over the vitals the metrics read, each with the
// fields its metrics use, labels drawn from a pool so that labels repeat
// within the epoch (and have inter-arrival gaps). slow scales the latencies
// of block I/O, so that two windows differ in a known metric.
func busyMinute(rng *rand.Rand, number int64, n int, slow float64) *store.Epoch {
	const width = int64(time.Minute)
	start := int64(1_790_000_000_000_000_000) + number*width
	e := &store.Epoch{Host: "h", Epoch: number, StartNs: start, EndNs: start + width}
	vitals := []string{"cpu", "sched", "blck", "syscall", "blio", "lock", "sock", "kmem"}
	for _, v := range vitals {
		e.Vitals = append(e.Vitals, store.Vital{Name: v, Events: uint64(n)*20 + uint64(rng.IntN(n)), WeightSum: uint64(n) * 200,
			Samples: uint64(n / len(vitals)), Threshold: 2})
	}
	ops := []string{"read", "write", "flush"}
	for i := 0; i < n; i++ {
		label := rng.IntN(4000)
		v := vitals[label%len(vitals)]
		s := store.Sample{TsNs: start + int64(i)*(width/int64(n)) + int64(rng.IntN(1000)), Vital: v,
			LabelHash: uint64(label) * 0x9e3779b97f4a7c15, Weight: uint64(1 + rng.IntN(1000)), EstCount: uint64(rng.IntN(5000)),
			Pid: uint32(label % 500), Tid: uint32(label % 700), Comm: fmt.Sprintf("proc-%d", label%500), Exe: fmt.Sprintf("/usr/bin/p%d", label%200)}
		switch v {
		case "sched", "blck", "lock":
			s.Fields = map[string]any{"delay_ns": int64(rng.ExpFloat64() * 2e5)}
		case "syscall":
			s.Fields = map[string]any{"syscall_nr": int32(label % 60), "latency_ns": int64(rng.ExpFloat64() * 5e4)}
		case "blio":
			s.Fields = map[string]any{"latency_ns": int64(rng.ExpFloat64() * 1e6 * slow), "queue_ns": int64(rng.ExpFloat64() * 1e5),
				"bytes_requested": uint64(4096 << rng.IntN(5)), "bytes_completed": uint64(4096), "sector": uint64(rng.IntN(1 << 30)),
				"dev": "8:0", "op": ops[label%len(ops)]}
		case "sock":
			s.Fields = map[string]any{"bytes": uint64(rng.IntN(65536))}
		case "kmem":
			s.Fields = map[string]any{"alloc_order": int32(rng.IntN(4))}
		}
		e.Samples = append(e.Samples, s)
	}
	return e
}

// busyStore writes two 5-minute windows of one-minute epochs, perEpoch
// samples each, block I/O 3× slower in the second, and returns the store
// with the two windows as START/END ranges (target second). The store is
// written in HOLTER_BENCH_STORE when that names a directory.
func busyStore(tb testing.TB, perEpoch int) (st *store.Store, target, reference string) {
	tb.Helper()
	dir := tb.TempDir()
	if d := os.Getenv("HOLTER_BENCH_STORE"); d != "" {
		dir = d // kept, for timing `holter diff --data` on it
	}
	st, err := store.Open(dir, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	rng := rand.New(rand.NewPCG(1, 2))
	for n := int64(0); n < 10; n++ {
		slow := 1.0
		if n >= 5 {
			slow = 3
		}
		if err := st.WriteEpoch(context.Background(), busyMinute(rng, n, perEpoch, slow)); err != nil {
			tb.Fatal(err)
		}
	}
	t0 := int64(1_790_000_000_000_000_000)
	mid, end := t0+5*int64(time.Minute), t0+10*int64(time.Minute)
	return st, fmt.Sprintf("%d/%d", mid, end), fmt.Sprintf("%d/%d", t0, mid)
}

// BenchmarkRankRanges5Min times `holter diff` over two 5-minute windows of
// one-minute epochs of a busy host (RankRanges, as the CLI and GET
// /api/diff call it), against the legacy derivation measured in the same
// run; it reports ms per diff of each and their ratio. Run with
//
//	go test -run XXX -bench RankRanges5Min -benchtime 5x ./internal/findings/
//
// HOLTER_BENCH_SAMPLES sets the samples per epoch (default 20000: 100 000
// per window).
func BenchmarkRankRanges5Min(b *testing.B) {
	per := 20000
	if s := os.Getenv("HOLTER_BENCH_SAMPLES"); s != "" {
		fmt.Sscan(s, &per)
	}
	st, target, reference := busyStore(b, per)
	ctx := context.Background()
	q := FromStore(st)
	now := time.Unix(0, 0)
	t, _ := ParseRange(ctx, q, target, now)
	r, _ := ParseRange(ctx, q, reference, now)
	var newNs, oldNs []float64
	for b.Loop() {
		began := time.Now()
		d, err := RankRanges(ctx, q, target, reference, DiffOptions{Host: "h", Now: now})
		if err != nil {
			b.Fatal(err)
		}
		newNs = append(newNs, float64(time.Since(began).Nanoseconds()))
		began = time.Now()
		tm, err := legacyMetrics(ctx, q, "h", t)
		if err != nil {
			b.Fatal(err)
		}
		rm, err := legacyMetrics(ctx, q, "h", r)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := Compare(tm, rm, nil); err != nil {
			b.Fatal(err)
		}
		oldNs = append(oldNs, float64(time.Since(began).Nanoseconds()))
		if len(d.Ranked) == 0 {
			b.Fatal("nothing ranked")
		}
	}
	med := func(xs []float64) (m, lo, hi float64) {
		s := append([]float64(nil), xs...)
		sort.Float64s(s)
		return s[len(s)/2] / 1e6, s[0] / 1e6, s[len(s)-1] / 1e6
	}
	nm, nlo, nhi := med(newNs)
	om, olo, ohi := med(oldNs)
	ratios := make([]float64, len(newNs))
	for i := range newNs {
		ratios[i] = newNs[i] / oldNs[i]
	}
	rm, rlo, rhi := med(ratios)
	b.Logf("%d samples per epoch, %d runs: RankRanges %.0f ms (min %.0f, max %.0f); legacy %.0f ms (min %.0f, max %.0f); new/old %.3f (%.3f–%.3f)",
		per, len(newNs), nm, nlo, nhi, om, olo, ohi, rm*1e6, rlo*1e6, rhi*1e6)
	b.ReportMetric(nm, "ms/diff")
	b.ReportMetric(om, "legacy-ms/diff")
	b.ReportMetric(rm*1e6, "new/old")
}
