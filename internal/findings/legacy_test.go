package findings

// The metric derivation as it was before it was restructured for speed
// (commit 9716b90), one row per sample converted in Go: the reference that
// TestMetricsMatchLegacy holds the new derivation to, and the baseline of
// BenchmarkRankRanges5Min.

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/diagnose"
)

func legacyMetrics(ctx context.Context, q Querier, host string, r Range) (*MetricSet, error) {
	if r.EndNs <= r.StartNs {
		return nil, fmt.Errorf("metrics: empty range")
	}
	m := &MetricSet{Samples: map[string]diagnose.Sample{}, PerEpoch: map[string]bool{}}
	add := func(name string, v, w float64) {
		if math.IsNaN(v) || math.IsNaN(w) || w <= 0 {
			return
		}
		s := m.Samples[name]
		s.Values = append(s.Values, v)
		s.Weights = append(s.Weights, w)
		m.Samples[name] = s
	}
	// Samples count by their own time, so that a range boundary inside an
	// epoch (a workload started mid-epoch) splits the epoch's samples; the
	// epoch holding the start is read whole, for the weights its samples
	// stand for.
	first, err := firstEpoch(ctx, q, host, r)
	if err != nil {
		return nil, err
	}
	cte := representedCTE(host, 0, first, r.EndNs, "")
	res, err := q.Query(ctx, cte+fmt.Sprintf(`, g AS (SELECT *, CASE WHEN lag(ts_ns) OVER o IS NOT NULL THEN greatest(ts_ns - lag(ts_ns) OVER o, 0) END AS gap FROM r
		WINDOW o AS (PARTITION BY epoch, vital, label_hash, pid ORDER BY est_count, ts_ns))
		SELECT vital, epoch, ts_ns, de, gap,
		CAST(delay_ns AS DOUBLE), CAST(latency_ns AS DOUBLE), CAST(queue_ns AS DOUBLE), CAST(bytes_requested AS DOUBLE),
		CAST(sector AS DOUBLE), CAST(bytes AS DOUBLE), CAST(alloc_order AS DOUBLE), syscall_nr, op
		FROM g WHERE ts_ns >= %d AND ts_ns < %d ORDER BY ts_ns`, r.StartNs, r.EndNs))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m.Truncated = res.Truncated
	type lat struct{ sum, n float64 }
	latency := map[[2]any]*lat{} // (vital, epoch) -> weighted latency
	for _, row := range res.Rows {
		vital, epoch, de := fmt.Sprint(row[0]), toInt(row[1]), toFloat(row[3])
		if gap := toFloat(row[4]); !math.IsNaN(gap) && de > 0 {
			add("inter-arrival "+vital+" (ns)", gap/de, de)
		}
		delay, latNs, queue := toFloat(row[5]), toFloat(row[6]), toFloat(row[7])
		switch vital {
		case "sched":
			add("sched wake-up to run delay (ns)", delay, de)
		case "blck":
			add("blck blocked time (ns)", delay, de)
		case "lock":
			add("lock wait (ns)", delay, de)
		case "syscall":
			add("syscall latency (ns)", latNs, de)
			if nr := toFloat(row[12]); !math.IsNaN(nr) {
				add(syscallNamed(fmt.Sprintf("syscall %d latency (ns)", int64(nr))), latNs, de)
			}
		case "blio":
			add("blio latency (ns)", latNs, de)
			add("blio queue time (ns)", queue, de)
			add("blio request size (bytes)", toFloat(row[8]), de)
			add("blio sector", toFloat(row[9]), de)
			if op, ok := row[13].(string); ok && op != "" {
				add("blio "+op+" latency (ns)", latNs, de)
			}
		case "sock":
			add("sock bytes", toFloat(row[10]), de)
		case "kmem":
			add("kmem allocation order", toFloat(row[11]), de)
		}
		if (vital == "blio" || vital == "syscall") && !math.IsNaN(latNs) && de > 0 {
			k := [2]any{vital, epoch}
			if latency[k] == nil {
				latency[k] = &lat{}
			}
			latency[k].sum += latNs * de
			latency[k].n += de
		}
	}
	res, err = q.Query(ctx, fmt.Sprintf(`SELECT v.vital, e.epoch, CAST(v.events AS DOUBLE) / ((e.end_ns - e.start_ns) / 1e9)
		FROM vitals v JOIN epochs e ON e.host = v.host AND e.epoch = v.epoch
		WHERE e.host = %s AND e.start_ns + (e.end_ns - e.start_ns) / 2 >= %d AND e.start_ns + (e.end_ns - e.start_ns) / 2 < %d
		ORDER BY e.start_ns`, sqlString(host), r.StartNs, r.EndNs))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	for _, row := range res.Rows {
		vital, epoch, rate := fmt.Sprint(row[0]), toInt(row[1]), toFloat(row[2])
		add(vital+" events/s per epoch", rate, 1)
		m.PerEpoch[vital+" events/s per epoch"] = true
		if l := latency[[2]any{vital, epoch}]; l != nil && l.n > 0 {
			name := map[string]string{"blio": "outstanding block requests (Little)", "syscall": "system calls in flight (Little)"}[vital]
			add(name, rate*l.sum/l.n/1e9, 1)
			m.PerEpoch[name] = true
		}
	}
	return m, nil
}

// TestMetricsMatchLegacy: on a busy store (two 5-minute windows, block I/O
// slower in the second) the binned derivation finds the same metrics with
// the same counts and means as the unbinned one, EMDs and noise within
// EMDTolerance, and the same ranking but for metrics whose legacy EMDs are
// within twice the tolerance of each other.
func TestMetricsMatchLegacy(t *testing.T) {
	st, target, reference := busyStore(t, 4000)
	ctx := context.Background()
	q := FromStore(st)
	tr, _ := ParseRange(ctx, q, target, time.Unix(0, 0))
	rr, _ := ParseRange(ctx, q, reference, time.Unix(0, 0))
	// A range that starts and ends inside epochs, too.
	inner := Range{StartNs: rr.StartNs + int64(90*time.Second), EndNs: rr.EndNs + int64(30*time.Second)}
	for _, c := range []struct {
		name   string
		t, ref Range
	}{{"windows", tr, rr}, {"mid-epoch", tr, inner}} {
		t.Run(c.name, func(t *testing.T) {
			var sets [2][2]*MetricSet
			for i, r := range []Range{c.t, c.ref} {
				var err error
				if sets[0][i], err = Metrics(ctx, q, "h", r); err != nil {
					t.Fatal(err)
				}
				if sets[1][i], err = legacyMetrics(ctx, q, "h", r); err != nil {
					t.Fatal(err)
				}
				if sets[1][i].Truncated {
					t.Fatal("legacy derivation truncated: make the store smaller")
				}
			}
			ranked, skipped, err := Compare(sets[0][0], sets[0][1], nil)
			if err != nil {
				t.Fatal(err)
			}
			want, wantSkipped, err := Compare(sets[1][0], sets[1][1], nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(ranked) != len(want) || len(skipped) != len(wantSkipped) || len(want) < 20 {
				t.Fatalf("%d ranked and %d skipped, legacy %d and %d", len(ranked), len(skipped), len(want), len(wantSkipped))
			}
			legacy := map[string]diagnose.Ranked{}
			for _, w := range want {
				legacy[w.Name] = w
			}
			rel := func(a, b float64) float64 {
				return math.Abs(a-b) / math.Max(math.Max(math.Abs(a), math.Abs(b)), 1e-300)
			}
			var rows int
			for i, g := range ranked {
				w, ok := legacy[g.Name]
				if !ok {
					t.Fatalf("metric %q not derived by the legacy code", g.Name)
				}
				rows += len(sets[0][0].Samples[g.Name].Values) + len(sets[0][1].Samples[g.Name].Values)
				if g.TargetN != w.TargetN || g.ReferenceN != w.ReferenceN || rel(g.TargetMean, w.TargetMean) > 1e-9 ||
					rel(g.ReferenceMean, w.ReferenceMean) > 1e-9 {
					t.Errorf("%s: n %d/%d means %v/%v, legacy n %d/%d means %v/%v", g.Name, g.TargetN, g.ReferenceN,
						g.TargetMean, g.ReferenceMean, w.TargetN, w.ReferenceN, w.TargetMean, w.ReferenceMean)
				}
				if math.Abs(g.EMD-w.EMD) > EMDTolerance || math.Abs(g.Noise-w.Noise) > EMDTolerance {
					t.Errorf("%s: EMD %.5f noise %.5f, legacy %.5f and %.5f", g.Name, g.EMD, g.Noise, w.EMD, w.Noise)
				}
				if w2 := want[i]; w2.Name != g.Name && math.Abs(w2.EMD-w.EMD) > 2*EMDTolerance {
					t.Errorf("rank %d: %s (legacy EMD %.5f), legacy ranks %s (EMD %.5f) there", i+1, g.Name, w.EMD, w2.Name, w2.EMD)
				}
			}
			var n int
			for _, s := range sets[1] {
				for _, x := range s.Samples {
					n += len(x.Values)
				}
			}
			t.Logf("top %s (EMD %.4f, legacy %.4f); %d binned values for %d measurements", ranked[0].Name, ranked[0].EMD,
				legacy[ranked[0].Name].EMD, rows, n)
			// Block I/O was made slower: it ranks first either way.
			for _, top := range []string{ranked[0].Name, want[0].Name} {
				if !strings.HasPrefix(top, "blio") && !strings.Contains(top, "block requests") {
					t.Errorf("top %s, legacy top %s: not block I/O", ranked[0].Name, want[0].Name)
				}
			}
		})
	}
}
