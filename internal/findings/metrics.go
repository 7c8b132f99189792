package findings

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/holter-dev/holter/internal/diagnose"
	"github.com/holter-dev/holter/internal/sysname"
)

// Range is a time range [StartNs, EndNs), of the whole host or, with Run,
// of one run's processes.
type Range struct {
	StartNs, EndNs int64
	// Run is the id of the run in the catalog whose processes (its pids)
	// the metrics are derived from; "" for the whole host (see Metrics).
	Run string `json:",omitempty"`
}

// MetricSet is every low-level metric derived from one range's samples.
type MetricSet struct {
	Samples map[string]diagnose.Sample
	// PerEpoch names the metrics with one value per epoch.
	PerEpoch map[string]bool
	// Events is, for each per-epoch metric, the number of events its
	// values summarise (the vital's events in the range's epochs).
	Events map[string]float64
	// Truncated: the range had more samples than one query returns, and
	// the metrics use the first ones.
	Truncated bool
}

// syscallNamed names the system call of a metric metricsSQL names by its
// number ("syscall 318 latency (ns)" is "syscall getrandom latency (ns)").
func syscallNamed(metric string) string {
	rest, ok := strings.CutPrefix(metric, "syscall ")
	nr, tail, _ := strings.Cut(rest, " ")
	if n, err := strconv.ParseInt(nr, 10, 64); ok && err == nil {
		return "syscall " + sysname.Syscall(n) + " " + tail
	}
	return metric
}

// newMetricSet is an empty MetricSet.
func newMetricSet() *MetricSet {
	return &MetricSet{Samples: map[string]diagnose.Sample{}, PerEpoch: map[string]bool{}, Events: map[string]float64{}}
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
// A range with a Run is that run's, and its metrics are the run's own:
// they come from the samples of the run's processes (store.Run.Pids), and
// of the block requests on the devices those processes sent requests to in
// the range, whoever issued them (the block layer may issue a process's
// request from a kernel worker). The per-epoch metrics are left out, as
// they count the whole host's events: a run's own rate is its
// inter-arrival delays.
//
// Each sample counts with the number of events it stands for (its label's
// weight since its previous sample over its own weight, see Load), so a
// frequent label weighs as much as it happened rather than as often as it
// was sampled.
//
// The store does the derivation in one query over the range's samples and
// returns each metric binned (see Resolution): the values of one bin merged
// into their weighted mean with their total weight and count
// (diagnose.Sample.Counts), separately for the first and the second half
// of the metric's measurements in time order, so that a busy range costs
// a few thousand rows rather than one per sample.
func Metrics(ctx context.Context, q Querier, host string, r Range) (*MetricSet, error) {
	if r.EndNs <= r.StartNs {
		return nil, fmt.Errorf("metrics: empty range")
	}
	m := newMetricSet()
	add := func(name string, v, w float64, n int) {
		if math.IsNaN(v) || math.IsNaN(w) || w <= 0 {
			return
		}
		s := m.Samples[name]
		s.Values = append(s.Values, v)
		s.Weights = append(s.Weights, w)
		s.Counts = append(s.Counts, n)
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
	samples, scope := "", ""
	if r.Run != "" {
		in := "pid IN (SELECT unnest(pids) FROM runs WHERE id = " + sqlString(r.Run) + ")"
		// Whole processes are kept before the window functions, so the
		// run's samples stand for the events they did over the whole
		// range; block requests are all kept there and chosen after them,
		// as a label's requests may go to several devices.
		samples = "(s." + in + " OR s.vital = 'blio')"
		scope = fmt.Sprintf(` AND (%[1]s OR dev IN (SELECT dev FROM g WHERE vital = 'blio' AND %[1]s AND ts_ns >= %[2]d AND ts_ns < %[3]d))`,
			in, r.StartNs, r.EndNs)
	}
	res, err := q.Query(ctx, represented(host, 0, first, r.EndNs, samples, metricsColumns)+fmt.Sprintf(metricsSQL, r.StartNs, r.EndNs, Resolution, scope))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m.Truncated = res.Truncated
	// Rows named "(latency) VITAL" are the mean latency of a vital's
	// samples in one epoch (its number in the second column), for
	// Little's law.
	latency := map[[2]any]float64{} // (vital, epoch) -> weighted mean latency
	for _, row := range res.Rows {
		name := fmt.Sprint(row[0])
		if vital, ok := strings.CutPrefix(name, "(latency) "); ok {
			latency[[2]any{vital, toInt(row[1])}] = toFloat(row[2])
			continue
		}
		add(syscallNamed(name), toFloat(row[1]), toFloat(row[2]), int(toInt(row[3])))
	}
	if r.Run != "" {
		return m, nil
	}
	res, err = q.Query(ctx, fmt.Sprintf(`SELECT v.vital, e.epoch, CAST(v.events AS DOUBLE) / ((e.end_ns - e.start_ns) / 1e9), v.events
		FROM vitals v JOIN epochs e ON e.host = v.host AND e.epoch = v.epoch
		WHERE e.host = %s AND e.start_ns + (e.end_ns - e.start_ns) / 2 >= %d AND e.start_ns + (e.end_ns - e.start_ns) / 2 < %d
		ORDER BY e.start_ns`, sqlString(host), r.StartNs, r.EndNs))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	for _, row := range res.Rows {
		vital, epoch, rate := fmt.Sprint(row[0]), toInt(row[1]), toFloat(row[2])
		events := toFloat(row[3])
		add(vital+" events/s per epoch", rate, 1, 1)
		m.PerEpoch[vital+" events/s per epoch"] = true
		m.Events[vital+" events/s per epoch"] += events
		if l, ok := latency[[2]any{vital, epoch}]; ok {
			name := map[string]string{"blio": "outstanding block requests (Little)", "syscall": "system calls in flight (Little)"}[vital]
			add(name, rate*l/1e9, 1, 1)
			m.PerEpoch[name] = true
			m.Events[name] += events
		}
	}
	return m, nil
}

// firstEpoch is the start of the epoch holding r's start, or r's start when
// none does.
func firstEpoch(ctx context.Context, q Querier, host string, r Range) (int64, error) {
	res, err := q.Query(ctx, fmt.Sprintf(`SELECT coalesce(max(start_ns), %d) FROM epochs WHERE host = %s AND start_ns <= %d`,
		r.StartNs, sqlString(host), r.StartNs))
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	if len(res.Rows) > 0 {
		return toInt(res.Rows[0][0]), nil
	}
	return r.StartNs, nil
}

// Resolution is the number of bins per doubling that Metrics bins each
// metric's values in: a bin's values lie within a factor 2^(1/Resolution)
// (0.54%) of each other, and are merged into their weighted mean. The
// means are then exact, and every value moves by less than 0.54% of
// itself, so the scaled EMD of a metric (diagnose.EMD: in units of the
// larger mean) moves by less than 2 × 0.54% = 1.1% (EMDTolerance) —
// TestMetricsMatchLegacy checks that against the unbinned derivation.
const Resolution = 128

// EMDTolerance bounds how far binning (Resolution) moves a metric's EMD
// and noise: 2 (2^(1/Resolution) - 1).
var EMDTolerance = 2 * (math.Exp2(1.0/Resolution) - 1)

// metricsColumns are the columns of the samples metricsSQL reads, and each
// sample's inter-arrival gap, taken in the window that weighs it: the
// window keeps the whole rows it is given, so a narrow one is the cheaper.
// The window orders a label's samples as the sketch counted them, which
// for block requests (sent at completion) is not always the order of their
// times: a request that completed before an earlier one of its label has a
// gap of 0.
const metricsColumns = `s.ts_ns, s.epoch, s.vital, s.pid, s.weight, s.delay_ns, s.latency_ns, s.queue_ns,
			s.bytes_requested, s.sector, s.bytes, s.alloc_order, s.syscall_nr, s.op, s.dev,
			CASE WHEN lag(s.ts_ns) OVER w IS NOT NULL THEN greatest(s.ts_ns - lag(s.ts_ns) OVER w, 0) END AS gap`

// metricsSQL follows represented with metricsColumns: it names the metrics
// each sample is a measurement of (with its value), numbers each metric's
// measurements in time order to split them into halves, and bins them; and
// it adds the mean latency per epoch of blio and syscall. Placeholders:
// range start and end, Resolution, and a condition on the range's samples
// (AND ...) or "".
const metricsSQL = `, g AS (
		SELECT ts_ns, epoch, de, vital, gap,
			CAST(delay_ns AS DOUBLE) AS delay, CAST(latency_ns AS DOUBLE) AS lat, CAST(queue_ns AS DOUBLE) AS queue,
			CAST(bytes_requested AS DOUBLE) AS size, CAST(sector AS DOUBLE) AS sector, CAST(bytes AS DOUBLE) AS sbytes,
			CAST(alloc_order AS DOUBLE) AS aorder, syscall_nr, nullif(op, '') AS op, pid, dev
		FROM r),
	in_range AS (SELECT * FROM g WHERE ts_ns >= %[1]d AND ts_ns < %[2]d AND de > 0%[4]s),
	m AS (
		SELECT ts_ns, de AS w, unnest(CASE vital
			WHEN 'sched' THEN [{'n': 'sched wake-up to run delay (ns)', 'v': delay}]
			WHEN 'blck' THEN [{'n': 'blck blocked time (ns)', 'v': delay}]
			WHEN 'lock' THEN [{'n': 'lock wait (ns)', 'v': delay}]
			WHEN 'syscall' THEN [{'n': 'syscall latency (ns)', 'v': lat},
				{'n': 'syscall ' || CAST(syscall_nr AS VARCHAR) || ' latency (ns)', 'v': lat}]
			WHEN 'blio' THEN [{'n': 'blio latency (ns)', 'v': lat}, {'n': 'blio queue time (ns)', 'v': queue},
				{'n': 'blio request size (bytes)', 'v': size}, {'n': 'blio sector', 'v': sector},
				{'n': 'blio ' || op || ' latency (ns)', 'v': lat}]
			WHEN 'sock' THEN [{'n': 'sock bytes', 'v': sbytes}]
			WHEN 'kmem' THEN [{'n': 'kmem allocation order', 'v': aorder}]
			ELSE [] END || [{'n': 'inter-arrival ' || vital || ' (ns)', 'v': CAST(gap AS DOUBLE) / de}]) AS x
		FROM in_range),
	h AS (
		SELECT x.n AS n, x.v AS v, w,
			row_number() OVER (PARTITION BY x.n ORDER BY ts_ns) > count(*) OVER (PARTITION BY x.n) // 2 AS second
		FROM m WHERE x.n IS NOT NULL AND x.v IS NOT NULL AND NOT isnan(x.v))
	SELECT n, sum(v * w) / sum(w) AS mean, sum(w) AS wsum, count(*) AS cnt, second FROM h
	GROUP BY n, second, sign(v), CASE WHEN v <> 0 THEN floor(log2(abs(v)) * %[3]d) END
	UNION ALL
	SELECT '(latency) ' || vital, CAST(epoch AS DOUBLE), sum(lat * de) / sum(de), 0, NULL FROM in_range
	WHERE vital IN ('blio', 'syscall') AND lat IS NOT NULL GROUP BY vital, epoch
	ORDER BY n, second, mean`

// MinEpochs is the fewest epochs a metric with one value per epoch needs on
// each side to be ranked: each of its values summarises an epoch's events,
// so it is not held to RankOptions.MinSamples, which counts single
// measurements.
const MinEpochs = 4

// MinEvents is the fewest events a metric with one value per epoch needs in
// the target and the reference together to be ranked. Scaled so the larger
// mean is 1, a rate of a rare event — two signals in the reference, none in
// the target — is as far apart as a distribution can be (EMD 1), though two
// events say nothing about a change in rate: a Poisson count of 2 is 0 one
// time in seven. With 30 events the two sides' counts differ by their own
// noise by about a third of their mean at most, and an EMD near 1 needs one
// side near silent against a steady stream.
const MinEvents = 30

// ErrTooFewEvents: a per-epoch metric summarises fewer than MinEvents events
// over both ranges.
var ErrTooFewEvents = errors.New("too few events")

// CompareRanges derives the metrics of a target and a reference range and
// ranks them by earth mover's distance (diagnose.Rank): the metrics most
// differently distributed first. The two ranges are derived at once, each
// on a connection of its own.
func CompareRanges(ctx context.Context, q Querier, host string, target, reference Range, opts *diagnose.RankOptions) ([]diagnose.Ranked, []diagnose.Skipped, error) {
	var r *MetricSet
	var rErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		r, rErr = Metrics(ctx, q, host, reference)
	}()
	t, err := Metrics(ctx, q, host, target)
	<-done
	if err != nil {
		return nil, nil, fmt.Errorf("target: %w", err)
	}
	if rErr != nil {
		return nil, nil, fmt.Errorf("reference: %w", rErr)
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
	var few []diagnose.Skipped
	same := sameMetrics(t, r, names)
	for _, n := range names {
		if total, ok := same[n]; ok {
			few = append(few, diagnose.Skipped{Name: n, Err: fmt.Errorf("%w: its values are those of %q on both sides", ErrSameMetric, total)})
			continue
		}
		m := diagnose.Metric{Name: n, Target: t.Samples[n], Reference: r.Samples[n]}
		if t.PerEpoch[n] || r.PerEpoch[n] {
			m.MinSamples = MinEpochs
			_, tk := t.Events[n]
			_, rk := r.Events[n]
			if e := t.Events[n] + r.Events[n]; (tk || rk) && e < MinEvents {
				few = append(few, diagnose.Skipped{Name: n, Err: fmt.Errorf("%w: %.0f in both ranges, need %d", ErrTooFewEvents, e, MinEvents)})
				continue
			}
		}
		ms = append(ms, m)
	}
	ranked, skipped, err := diagnose.Rank(ms, opts)
	return ranked, append(skipped, few...), err
}

// ErrSameMetric: a metric has the same values as another in both ranges.
var ErrSameMetric = errors.New("same values as another metric")

// sameMetrics maps each of names whose values in t and in r are those of
// another metric with a shorter name to that metric. A breakdown that holds
// all of its total's values — the latency of reads when every request was
// a read, of the one system call a process made — says nothing its total
// does not, and ranked beside it would take a second place.
func sameMetrics(t, r *MetricSet, names []string) map[string]string {
	type shape struct{ nt, nr int }
	byShape := map[shape][]string{}
	for _, n := range names {
		k := shape{len(t.Samples[n].Values), len(r.Samples[n].Values)}
		byShape[k] = append(byShape[k], n)
	}
	same := map[string]string{}
	for k, group := range byShape {
		if len(group) < 2 || k.nt+k.nr == 0 {
			continue
		}
		sort.Slice(group, func(i, j int) bool {
			if len(group[i]) != len(group[j]) {
				return len(group[i]) < len(group[j])
			}
			return group[i] < group[j]
		})
		for i, n := range group {
			if _, ok := same[n]; ok {
				continue
			}
			for _, o := range group[i+1:] {
				if _, ok := same[o]; !ok && sameSample(t.Samples[n], t.Samples[o]) && sameSample(r.Samples[n], r.Samples[o]) {
					same[o] = n
				}
			}
		}
	}
	return same
}

func sameSample(a, b diagnose.Sample) bool {
	return slices.Equal(a.Values, b.Values) && slices.Equal(a.Weights, b.Weights) && slices.Equal(a.Counts, b.Counts)
}

// ones is counts, or n counts of one when it is nil.
func ones(counts []int, n int) []int {
	if counts != nil {
		return counts[:len(counts):len(counts)]
	}
	c := make([]int, n)
	for i := range c {
		c[i] = 1
	}
	return c
}

// Join is the metrics of consecutive ranges, given oldest first, as if
// derived from their union: values stay in time order. The sets are not
// changed.
func Join(sets ...*MetricSet) *MetricSet {
	out := newMetricSet()
	for _, m := range sets {
		for n, e := range m.Events {
			out.Events[n] += e
		}
		for n, s := range m.Samples {
			j := out.Samples[n]
			j.Values = append(j.Values[:len(j.Values):len(j.Values)], s.Values...)
			j.Weights = append(j.Weights[:len(j.Weights):len(j.Weights)], s.Weights...)
			if s.Counts != nil || j.Counts != nil {
				j.Counts = append(ones(j.Counts, len(j.Values)-len(s.Values)), ones(s.Counts, len(s.Values))...)
			}
			out.Samples[n] = j
		}
		for n := range m.PerEpoch {
			out.PerEpoch[n] = true
		}
		out.Truncated = out.Truncated || m.Truncated
	}
	return out
}
