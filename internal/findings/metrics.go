package findings

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/holter-dev/holter/internal/diagnose"
)

// Range is a time range [StartNs, EndNs).
type Range struct{ StartNs, EndNs int64 }

// MetricSet is every low-level metric derived from one range's samples.
type MetricSet struct {
	Samples map[string]diagnose.Sample
	// PerEpoch names the metrics with one value per epoch.
	PerEpoch map[string]bool
	// Truncated: the range had more samples than one query returns, and
	// the metrics use the first ones.
	Truncated bool
}

// Metrics derives from the samples of a range the low-level metrics of
// Shen et al. §3.1/§4.3, as distributions for diagnose.Rank:
//
//   - delays between causally paired events: syscall entry→exit and block
//     issue→completion latency (overall and per syscall number and per
//     block op), block queueing, runnable→running (sched), sleep→wake-up
//     (blck) and lock wait;
//   - event parameters: block request size and sector, socket bytes,
//     kernel allocation order;
//   - inter-arrival delay per vital: between two samples of one label, the
//     elapsed time over the events the later one stands for — the label's
//     mean inter-arrival over that stretch, since samples are not events;
//   - per epoch: each vital's event rate, and the mean number of block
//     requests and system calls in flight by Little's law (rate × mean
//     latency), which needs no per-request bookkeeping. An epoch belongs
//     to the range its middle falls in.
//
// Each sample counts with the number of events it stands for (its label's
// weight since its previous sample over its own weight, see Load), so a
// frequent label weighs as much as it happened rather than as often as it
// was sampled.
func Metrics(ctx context.Context, q Querier, host string, r Range) (*MetricSet, error) {
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
	res, err := q.Query(ctx, fmt.Sprintf(`SELECT coalesce(max(start_ns), %d) FROM epochs WHERE host = %s AND start_ns <= %d`,
		r.StartNs, sqlString(host), r.StartNs))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	first := r.StartNs
	if len(res.Rows) > 0 {
		first = toInt(res.Rows[0][0])
	}
	cte := representedCTE(host, 0, first, r.EndNs, "")
	res, err = q.Query(ctx, cte+fmt.Sprintf(`, g AS (SELECT *, ts_ns - lag(ts_ns) OVER (PARTITION BY epoch, vital, label_hash, pid ORDER BY ts_ns) AS gap FROM r)
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
				add(fmt.Sprintf("syscall %d latency (ns)", int64(nr)), latNs, de)
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

// MinEpochs is the fewest epochs a metric with one value per epoch needs on
// each side to be ranked: each of its values summarises an epoch's events,
// so it is not held to RankOptions.MinSamples, which counts single
// measurements.
const MinEpochs = 4

// CompareRanges derives the metrics of a target and a reference range and
// ranks them by earth mover's distance (diagnose.Rank): the metrics most
// differently distributed first.
func CompareRanges(ctx context.Context, q Querier, host string, target, reference Range, opts *diagnose.RankOptions) ([]diagnose.Ranked, []diagnose.Skipped, error) {
	t, err := Metrics(ctx, q, host, target)
	if err != nil {
		return nil, nil, fmt.Errorf("target: %w", err)
	}
	r, err := Metrics(ctx, q, host, reference)
	if err != nil {
		return nil, nil, fmt.Errorf("reference: %w", err)
	}
	return Compare(t, r, opts)
}

// Compare ranks the metrics of a target against a reference (see
// CompareRanges).
func Compare(t, r *MetricSet, opts *diagnose.RankOptions) ([]diagnose.Ranked, []diagnose.Skipped, error) {
	var names []string
	for n := range t.Samples {
		names = append(names, n)
	}
	for n := range r.Samples {
		if _, ok := t.Samples[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var ms []diagnose.Metric
	for _, n := range names {
		m := diagnose.Metric{Name: n, Target: t.Samples[n], Reference: r.Samples[n]}
		if t.PerEpoch[n] || r.PerEpoch[n] {
			m.MinSamples = MinEpochs
		}
		ms = append(ms, m)
	}
	return diagnose.Rank(ms, opts)
}

// Join is the metrics of consecutive ranges, given oldest first, as if
// derived from their union: values stay in time order. The sets are not
// changed.
func Join(sets ...*MetricSet) *MetricSet {
	out := &MetricSet{Samples: map[string]diagnose.Sample{}, PerEpoch: map[string]bool{}}
	for _, m := range sets {
		for n, s := range m.Samples {
			j := out.Samples[n]
			j.Values = append(j.Values[:len(j.Values):len(j.Values)], s.Values...)
			j.Weights = append(j.Weights[:len(j.Weights):len(j.Weights)], s.Weights...)
			out.Samples[n] = j
		}
		for n := range m.PerEpoch {
			out.PerEpoch[n] = true
		}
		out.Truncated = out.Truncated || m.Truncated
	}
	return out
}
