package hist

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBucketsHoldTheirValues checks that every value falls in the bounds
// of its bucket, and that buckets are ordered as their values, for each
// kind of histogram.
func TestBucketsHoldTheirValues(t *testing.T) {
	specs := []Spec{{Kind: Log2}, {Kind: LogLinear}, {Kind: Linear, Min: -50, Step: 7, Buckets: 30}}
	vals := []int64{math.MinInt64, -1, 0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 1000, 1 << 40, math.MaxInt64 >> 2}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		vals = append(vals, r.Int64N(1<<uint(r.IntN(60)+1))-r.Int64N(100))
	}
	for _, s := range specs {
		for _, v := range vals {
			b := s.Bucket(v)
			lo, hi := s.Bounds(b)
			if v < lo || v >= hi {
				t.Errorf("kind %d: %d in bucket %d, whose bounds are [%d, %d)", s.Kind, v, b, lo, hi)
			}
			if b2 := s.Bucket(v + 1); v < math.MaxInt64 && b2 < b {
				t.Errorf("kind %d: %d in bucket %d, %d in bucket %d", s.Kind, v, b, v+1, b2)
			}
		}
	}
}

// TestQuantileReadsTheBuckets checks the quantiles of a known histogram:
// exact for the small values, interpolated inside a bucket.
func TestQuantileReadsTheBuckets(t *testing.T) {
	s := Spec{Kind: LogLinear}
	h := map[int64]uint64{}
	for v := int64(0); v < 4; v++ {
		h[s.Bucket(v)] += 25
	}
	if q := Quantile(h, 0.5); q != 1.0 {
		t.Errorf("median of 0..3: %v, want 1", q)
	}
	h = map[int64]uint64{s.Bucket(64): 10}
	lo, hi := s.Bounds(s.Bucket(64))
	if q := Quantile(h, 0.5).(float64); q < float64(lo) || q > float64(hi) {
		t.Errorf("median of a bucket [%d, %d): %v", lo, hi, q)
	}
	if Quantile(map[int64]uint64{}, 0.5) != nil {
		t.Error("the quantile of nothing is not nil")
	}
}
