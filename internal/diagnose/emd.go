package diagnose

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Errors of malformed metric samples. They are returned wrapped, with the
// metric or side they concern; test them with errors.Is.
var (
	// ErrEmpty: a sample without values, or whose weights sum to zero.
	ErrEmpty = errors.New("empty sample")
	// ErrNotFinite: a value or weight that is NaN or infinite.
	ErrNotFinite = errors.New("value is not finite")
	// ErrBadWeights: weights of the wrong length, or negative.
	ErrBadWeights = errors.New("bad weights")
	// ErrZeroScale: both means are zero while the distributions differ, so
	// there is no scale that makes the larger mean 1 (§3.1).
	ErrZeroScale = errors.New("both means are zero, the distributions cannot be scaled")
)

// Sample is the manifestation of one low-level metric in one execution: the
// measured values (a delay, a request size, a concurrency level ...), each
// with an optional weight. It stands for the empirical distribution that puts
// mass weight/sum(weights) on each value (Shen et al. §3.1).
type Sample struct {
	Values []float64
	// Weights, if not nil, has one non-negative weight per value (for example
	// the count a sketch sample stands for). Nil weighs every value 1.
	Weights []float64
	// Counts, if not nil, has for each value the number of measurements it
	// stands for: measurements of nearly equal values merged into one
	// value with their total weight, as findings.Metrics does to bound
	// what it reads. Nil is one measurement per value.
	Counts []int
}

// Len is the number of measurements: the values, or with Counts their sum.
func (s Sample) Len() int {
	if s.Counts == nil {
		return len(s.Values)
	}
	n := 0
	for _, c := range s.Counts {
		n += c
	}
	return n
}

// check validates the sample and returns its total weight.
func (s Sample) check() (float64, error) {
	if len(s.Values) == 0 {
		return 0, ErrEmpty
	}
	if s.Weights != nil && len(s.Weights) != len(s.Values) {
		return 0, fmt.Errorf("%w: %d weights for %d values", ErrBadWeights, len(s.Weights), len(s.Values))
	}
	if s.Counts != nil && len(s.Counts) != len(s.Values) {
		return 0, fmt.Errorf("%w: %d counts for %d values", ErrBadWeights, len(s.Counts), len(s.Values))
	}
	total := 0.0
	for i, v := range s.Values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("value %d: %w", i, ErrNotFinite)
		}
		w := s.weight(i)
		if math.IsNaN(w) || math.IsInf(w, 0) {
			return 0, fmt.Errorf("weight %d: %w", i, ErrNotFinite)
		}
		if w < 0 {
			return 0, fmt.Errorf("%w: weight %d is negative", ErrBadWeights, i)
		}
		total += w
	}
	if total == 0 {
		return 0, fmt.Errorf("%w: all weights are zero", ErrEmpty)
	}
	if math.IsInf(total, 0) {
		return 0, fmt.Errorf("total weight: %w", ErrNotFinite)
	}
	return total, nil
}

func (s Sample) weight(i int) float64 {
	if s.Weights == nil {
		return 1
	}
	return s.Weights[i]
}

// Mean is the weighted mean of the sample.
func (s Sample) Mean() (float64, error) {
	total, err := s.check()
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for i, v := range s.Values {
		sum += s.weight(i) * v
	}
	return sum / total, nil
}

// sorted returns the values in increasing order with their weights
// normalised to sum to 1.
func (s Sample) sorted(total float64) (vals, probs []float64) {
	idx := make([]int, len(s.Values))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return s.Values[idx[a]] < s.Values[idx[b]] })
	vals = make([]float64, len(idx))
	probs = make([]float64, len(idx))
	for k, i := range idx {
		vals[k] = s.Values[i]
		probs[k] = s.weight(i) / total
	}
	return vals, probs
}

// Wasserstein is the earth mover's distance between the empirical
// distributions of u and v on the real line, without scaling: the integral
// of |F_u(x) - F_v(x)| dx, where F is the cumulative distribution. It is the
// minimum work (mass times distance moved) to turn one distribution into the
// other (Rubner et al., the distance Shen et al. §3.1 use), and equals
// scipy.stats.wasserstein_distance.
func Wasserstein(u, v Sample) (float64, error) {
	tu, err := u.check()
	if err != nil {
		return 0, fmt.Errorf("first sample: %w", err)
	}
	tv, err := v.check()
	if err != nil {
		return 0, fmt.Errorf("second sample: %w", err)
	}
	uv, up := u.sorted(tu)
	vv, vp := v.sorted(tv)
	// Sweep the merged support left to right; between two consecutive points
	// both cumulative distributions are constant.
	var (
		i, j   int
		fu, fv float64
		dist   float64
		x      = math.Min(uv[0], vv[0])
	)
	for i < len(uv) || j < len(vv) {
		next := math.Inf(1)
		if i < len(uv) {
			next = uv[i]
		}
		if j < len(vv) && vv[j] < next {
			next = vv[j]
		}
		dist += math.Abs(fu-fv) * (next - x)
		x = next
		for i < len(uv) && uv[i] == x {
			fu += up[i]
			i++
		}
		for j < len(vv) && vv[j] == x {
			fv += vp[j]
			j++
		}
	}
	return dist, nil
}

// EMD is the metric difference of Shen et al. §3.1: the earth mover's
// distance between the target's and the reference's distributions of one
// metric after all values are divided by the larger of the two means, so that
// the larger mean is 1 and metrics of different units and scales compare.
// It returns the distance and the divisor.
//
// The paper's metrics are non-negative (delays, sizes, offsets, counts); for
// a metric that can be negative the divisor is the larger absolute mean.
// When both means are zero the distance is 0 if the distributions are
// identical, and ErrZeroScale otherwise.
func EMD(target, reference Sample) (dist, scale float64, err error) {
	mt, err := target.Mean()
	if err != nil {
		return 0, 0, fmt.Errorf("target: %w", err)
	}
	mr, err := reference.Mean()
	if err != nil {
		return 0, 0, fmt.Errorf("reference: %w", err)
	}
	w, err := Wasserstein(target, reference)
	if err != nil {
		return 0, 0, err
	}
	// Wasserstein distance is homogeneous: W(u/s, v/s) = W(u, v)/s.
	scale = math.Max(math.Abs(mt), math.Abs(mr))
	if scale == 0 {
		if w == 0 {
			return 0, 0, nil
		}
		return 0, 0, ErrZeroScale
	}
	dist = w / scale
	if math.IsInf(dist, 0) {
		// Means that cancel to almost zero: no meaningful scale either.
		return 0, 0, ErrZeroScale
	}
	return dist, scale, nil
}
