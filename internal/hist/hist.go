// Package hist is the bucketing of holter's histograms: the log2 and
// linear histograms of hist() and lhist(), and the log-linear one
// quantiles are read from. The live-query probes bucket values in the
// kernel by the same rule (tracequery's code generator), and the
// user-space engine's functions by these, so an answer does not change
// with where it was computed.
package hist

import (
	"math"
	"math/bits"
	"sort"
)

// Kind is a histogram's bucketing.
type Kind int

const (
	// Log2 buckets: 0 for v ≤ 0, then b for 2^(b-1) ≤ v < 2^b.
	Log2 Kind = iota + 1
	// Linear buckets of Step from Min: 0 below Min, 1…Buckets, and
	// Buckets+1 at or past the last.
	Linear
	// LogLinear buckets: 0…3 for the values themselves (0 also for
	// those below), then four buckets a power of two.
	LogLinear
)

// Spec is a histogram's bucketing; Min, Step and Buckets are Linear's.
type Spec struct {
	Kind               Kind
	Min, Step, Buckets int64
}

// Bucket is the bucket of v.
func (s Spec) Bucket(v int64) int64 {
	switch s.Kind {
	case Log2:
		if v <= 0 {
			return 0
		}
		return int64(bits.Len64(uint64(v)))
	case Linear:
		if v < s.Min {
			return 0
		}
		b := int64(uint64(v-s.Min)/uint64(s.Step)) + 1
		if b > s.Buckets {
			return s.Buckets + 1
		}
		return b
	}
	switch {
	case v < 0:
		return 0
	case v < 4:
		return v
	}
	m := int64(bits.Len64(uint64(v))) - 1
	return 4*(m-1) + (v>>(m-2))&3
}

// Bounds is the value range [lo, hi) of bucket b.
func (s Spec) Bounds(b int64) (lo, hi int64) {
	switch s.Kind {
	case Log2:
		if b == 0 {
			return math.MinInt64, 1
		}
		lo = int64(1) << (b - 1)
		if b >= 63 {
			return lo, math.MaxInt64
		}
		return lo, int64(1) << b
	case Linear:
		if b == 0 {
			return math.MinInt64, s.Min
		}
		if b > s.Buckets {
			return s.Min + s.Buckets*s.Step, math.MaxInt64
		}
		lo = s.Min + (b-1)*s.Step
		return lo, lo + s.Step
	}
	if b == 0 {
		return math.MinInt64, 1
	}
	if b < 4 {
		return b, b + 1
	}
	p, m := b/4+1, b%4
	lo = (4 + m) << (p - 2)
	return lo, (5 + m) << (p - 2)
}

// Quantile is the q-quantile of the log-linear histogram h (bucket →
// count), interpolated linearly inside the bucket holding it; nil for an
// empty one.
func Quantile(h map[int64]uint64, q float64) any {
	var total uint64
	var bs []int64
	for b, c := range h {
		total += c
		bs = append(bs, b)
	}
	if total == 0 {
		return nil
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i] < bs[j] })
	rank := q * float64(total)
	var cum float64
	ll := Spec{Kind: LogLinear}
	for _, b := range bs {
		c := float64(h[b])
		if cum+c >= rank {
			if b < 4 {
				return float64(b) // the value itself (0: none above it)
			}
			lo, hi := ll.Bounds(b)
			return float64(lo) + (rank-cum)/c*float64(hi-lo)
		}
		cum += c
	}
	if last := bs[len(bs)-1]; last >= 4 {
		lo, _ := ll.Bounds(last)
		return float64(lo)
	}
	return float64(bs[len(bs)-1])
}

// Rows is the histogram of values bucketed by s, as hist() and lhist()
// answer: a {lo, hi, count} struct per bucket that holds any, in order.
func (s Spec) Rows(h map[int64]uint64) []any {
	bs := make([]int64, 0, len(h))
	for b := range h {
		bs = append(bs, b)
	}
	sort.Slice(bs, func(x, y int) bool { return bs[x] < bs[y] })
	out := []any{}
	for _, b := range bs {
		lo, hi := s.Bounds(b)
		out = append(out, map[string]any{"lo": lo, "hi": hi, "count": int64(h[b])})
	}
	return out
}
