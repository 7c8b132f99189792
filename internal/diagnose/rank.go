package diagnose

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// ErrTooFewSamples: a metric has fewer values than RankOptions.MinSamples on
// one side, too few to say how it is distributed.
var ErrTooFewSamples = errors.New("too few samples")

// Metric is one low-level metric measured in a target and in a reference
// execution (§4.3: inter-arrival delay of an event type, delay between two
// causally related events, an event parameter, a concurrency level).
type Metric struct {
	Name              string
	Target, Reference Sample
	// MinSamples, when positive, replaces RankOptions.MinSamples for this
	// metric: one whose values each summarise many events (a rate per
	// epoch) is judged on fewer values than one of single measurements.
	MinSamples int
}

// RankOptions tunes Rank. Nil means the defaults.
type RankOptions struct {
	// MinSamples is the fewest values a metric needs on each side to be
	// ranked (the paper leaves out "metrics with too few samples", Fig. 11).
	// Default 10.
	MinSamples int
	// Bins is the number of histogram bins returned per metric. Default 20.
	Bins int
	// Denoise ranks by the EMD beyond the reference's own variation
	// (Ranked.Score) rather than by the EMD, as the paper does. On a busy
	// shared machine whose background comes in bursts the variation
	// measured between the reference's halves is itself noisy and can
	// bury the metric that changed, so it is off by default.
	Denoise bool
}

func (o *RankOptions) withDefaults() (RankOptions, error) {
	r := RankOptions{MinSamples: 10, Bins: 20}
	if o == nil {
		return r, nil
	}
	r.Denoise = o.Denoise
	if o.MinSamples < 0 || o.Bins < 0 {
		return r, fmt.Errorf("rank options: negative MinSamples %d or Bins %d", o.MinSamples, o.Bins)
	}
	if o.MinSamples > 0 {
		r.MinSamples = o.MinSamples
	}
	if o.Bins > 0 {
		r.Bins = o.Bins
	}
	return r, nil
}

// Histogram shows a metric's two distributions over shared bins, for display
// next to its distance (as in the paper's Fig. 6).
type Histogram struct {
	// Edges are the bin boundaries in the metric's own units, len(bins)+1,
	// from the smallest to the largest value of either side. When all values
	// are equal there is one bin and both edges are that value.
	Edges []float64
	// Log says the edges grow by a constant ratio rather than a constant
	// width: the values are positive and span LogSpan or more (latencies,
	// sizes), where equal widths would put nearly all of them in the first
	// bin.
	Log bool
	// Target and Reference hold each bin's share of the side's total weight;
	// each sums to 1. A bin holds the values v with Edges[k] <= v <
	// Edges[k+1]; the last bin also holds its upper edge.
	Target, Reference []float64
}

// Ranked is one metric's place in the ranking.
type Ranked struct {
	Name string
	// EMD is the earth mover's distance after scaling (see EMD).
	EMD float64
	// Noise is the earth mover's distance between the first and the
	// second half of the reference's values (in the order given: time
	// order for recorded metrics), divided by the same Scale as EMD: how
	// much the metric moves with nothing changed, in the units its
	// difference is measured in. Shen et al. §3.1 note that a large
	// difference "may also be due to the natural variation between
	// reference and target executions"; Noise measures that variation.
	//
	// Dividing by the halves' own means instead would make a metric that
	// is near zero in the reference and comes in bursts (a rate of block
	// requests on an idle machine, 0 in most epochs and 20 in one) vary
	// by 1 within the reference however far the target rose above it.
	Noise float64
	// Score is what the ranking orders by: the EMD, or with
	// RankOptions.Denoise EMD - Noise, at least 0 (a metric that differs
	// as much within the reference as between the two sides scores 0).
	Score float64
	// Scale is the divisor that made the larger mean 1; 0 when both means
	// are 0 and the distributions are identical.
	Scale                     float64
	TargetMean, ReferenceMean float64
	TargetN, ReferenceN       int
	Histogram                 Histogram
}

// Skipped is a metric left out of the ranking, with the reason.
type Skipped struct {
	Name string
	Err  error
}

// Rank implements the reference-driven metric filtering of §3.1: every
// metric's target and reference distributions are compared by EMD (scaled so
// the larger mean is 1) and the metrics are returned from the most to the
// least different, ties in name order. The top of the list is where to look
// for the anomaly's cause.
//
// Each metric's natural variation (Ranked.Noise) is reported with it: a
// heavy-tailed metric — the latency of wait4, say, which is a child's
// lifetime — shows a large EMD between any two stretches of a busy
// machine. RankOptions.Denoise ranks by the EMD beyond it.
//
// A metric that cannot be compared (too few values, malformed values, means
// of zero) is returned in skipped with its error rather than failing the
// ranking. The error is for malformed options and duplicate names.
func Rank(metrics []Metric, opts *RankOptions) (ranked []Ranked, skipped []Skipped, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, nil, err
	}
	seen := make(map[string]bool, len(metrics))
	for _, m := range metrics {
		if seen[m.Name] {
			return nil, nil, fmt.Errorf("rank: metric %q given twice", m.Name)
		}
		seen[m.Name] = true
		r, err := rankOne(m, o)
		if err != nil {
			skipped = append(skipped, Skipped{Name: m.Name, Err: err})
			continue
		}
		ranked = append(ranked, r)
	}
	sort.Slice(ranked, func(i, j int) bool {
		if ranked[i].Score != ranked[j].Score {
			return ranked[i].Score > ranked[j].Score
		}
		if ranked[i].EMD != ranked[j].EMD {
			return ranked[i].EMD > ranked[j].EMD
		}
		return ranked[i].Name < ranked[j].Name
	})
	return ranked, skipped, nil
}

func rankOne(m Metric, o RankOptions) (Ranked, error) {
	need := o.MinSamples
	if m.MinSamples > 0 {
		need = m.MinSamples
	}
	if m.Target.Len() < need || m.Reference.Len() < need {
		return Ranked{}, fmt.Errorf("%w: %d target and %d reference values, need %d",
			ErrTooFewSamples, m.Target.Len(), m.Reference.Len(), need)
	}
	dist, scale, err := EMD(m.Target, m.Reference)
	if err != nil {
		return Ranked{}, err
	}
	score, noise := dist, 0.0
	// A reference of one value has no halves, and both means of zero no
	// scale: its variation is taken as none.
	if a, b := m.Reference.halves(); scale > 0 {
		if w, err := Wasserstein(a, b); err == nil {
			noise = w / scale
		}
	}
	if o.Denoise {
		score = math.Max(dist-noise, 0)
	}
	// EMD has validated both samples, so neither mean fails.
	mt, _ := m.Target.Mean()
	mr, _ := m.Reference.Mean()
	return Ranked{
		Name: m.Name, EMD: dist, Noise: noise, Score: score, Scale: scale,
		TargetMean: mt, ReferenceMean: mr,
		TargetN: m.Target.Len(), ReferenceN: m.Reference.Len(),
		Histogram: histogram(m.Target, m.Reference, o.Bins),
	}, nil
}

// LogSpan is the ratio of the largest value to the smallest from which a
// histogram's bins are spaced logarithmically: two decades.
const LogSpan = 100

// histogram bins two valid samples over their common range.
func histogram(t, r Sample, bins int) Histogram {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range []Sample{t, r} {
		for _, v := range s.Values {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if lo == hi {
		bins = 1
	}
	h := Histogram{Edges: make([]float64, bins+1), Log: lo > 0 && hi/lo >= LogSpan}
	// bin is the bin of a value, by its distance from lo or by its ratio
	// to lo. Divided before subtracting so that a range wider than
	// MaxFloat64 does not overflow.
	width := hi/float64(bins) - lo/float64(bins)
	bin := func(v float64) float64 { return (v - lo) / width }
	for k := range h.Edges {
		h.Edges[k] = lo + float64(k)*width
	}
	if h.Log {
		step := math.Log(hi/lo) / float64(bins)
		bin = func(v float64) float64 { return math.Log(v/lo) / step }
		for k := range h.Edges {
			h.Edges[k] = lo * math.Exp(step*float64(k))
		}
	}
	h.Edges[0], h.Edges[bins] = lo, hi
	fill := func(s Sample) []float64 {
		total, _ := s.check()
		mass := make([]float64, bins)
		for i, v := range s.Values {
			k := 0
			if width > 0 {
				k = max(0, min(int(bin(v)), bins-1))
			}
			mass[k] += s.weight(i) / total
		}
		return mass
	}
	h.Target, h.Reference = fill(t), fill(r)
	return h
}

// halves splits a valid sample into its first and second half by count,
// keeping the order of the values. With Counts the first half ends after
// the first value that brings its measurements to half of Len, rounded
// down.
func (s Sample) halves() (Sample, Sample) {
	h := len(s.Values) / 2
	if s.Counts != nil {
		half, n := s.Len()/2, 0
		for h = 0; h < len(s.Counts) && n < half; h++ {
			n += s.Counts[h]
		}
	}
	a, b := Sample{Values: s.Values[:h]}, Sample{Values: s.Values[h:]}
	if s.Weights != nil {
		a.Weights, b.Weights = s.Weights[:h], s.Weights[h:]
	}
	if s.Counts != nil {
		a.Counts, b.Counts = s.Counts[:h], s.Counts[h:]
	}
	return a, b
}
