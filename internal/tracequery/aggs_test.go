package tracequery

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestKMeansMatchesExhaustiveSearch compares k-means with the best
// clustering found by trying every assignment of small point sets: on
// separated clusters (what finding the odd process needs) the
// within-cluster sum of squares must be the optimum's; on random points,
// where Lloyd's iterations may stop at a local optimum, within 10 % of it.
func TestKMeansMatchesExhaustiveSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := 0; trial < 60; trial++ {
		n, k := 4+rng.IntN(5), 2+rng.IntN(2)
		points := make([][]float64, n)
		for i := range points {
			points[i] = []float64{rng.Float64(), rng.Float64(), rng.Float64()}
			if trial%2 == 0 {
				// Separated clusters around k centres.
				c := float64(i % k)
				points[i] = []float64{c*10 + rng.Float64(), -c*10 + rng.Float64(), rng.Float64()}
			}
		}
		assign, _ := kmeans(points, k)
		got := sse(points, assign, k)
		best := math.Inf(1)
		a := make([]int, n)
		var try func(i int)
		try = func(i int) {
			if i == n {
				best = min(best, sse(points, a, k))
				return
			}
			for c := 0; c < k; c++ {
				a[i] = c
				try(i + 1)
			}
		}
		try(0)
		if trial%2 == 0 && got > best+1e-9 || got > best*1.1+1e-9 {
			t.Errorf("trial %d (n=%d k=%d): k-means SSE %.6f, best %.6f", trial, n, k, got, best)
		}
	}
}

func sse(points [][]float64, assign []int, k int) float64 {
	var total float64
	for c := 0; c < k; c++ {
		var members [][]float64
		for i, p := range points {
			if assign[i] == c {
				members = append(members, p)
			}
		}
		if len(members) == 0 {
			continue
		}
		centre := make([]float64, len(points[0]))
		for _, p := range members {
			for d, v := range p {
				centre[d] += v / float64(len(members))
			}
		}
		for _, p := range members {
			total += sqDist(p, centre)
		}
	}
	return total
}

// TestTopSummaryBound feeds Space-Saving summaries (as CPUs would, then
// merged as across CPUs, intervals or hosts) streams of skewed keys, and
// checks every reported count against the exact one: never below it, at
// most its error above, errors within N/k, every key over N/k reported.
func TestTopSummaryBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for trial := 0; trial < 40; trial++ {
		k := 4 + rng.IntN(8)
		parts := 1 + rng.IntN(4)
		exact := map[int64]uint64{}
		var n uint64
		merged := newTopSummary(k)
		for p := 0; p < parts; p++ {
			s := newTopSummary(k)
			for i := 0; i < 500+rng.IntN(2000); i++ {
				var v int64
				if rng.IntN(3) > 0 {
					v = int64(rng.IntN(5)) // heavy
				} else {
					v = 100 + int64(rng.IntN(300))
				}
				w := uint64(1 + rng.IntN(3))
				s.add(v, w)
				exact[v] += w
				n += w
			}
			merged.merge(s)
		}
		if merged.n != n {
			t.Fatalf("trial %d: summary of weight %d, want %d", trial, merged.n, n)
		}
		seen := map[int64]bool{}
		for _, e := range merged.entries {
			v := e.val.(int64)
			seen[v] = true
			if tr := exact[v]; tr > e.count || tr+e.err < e.count || e.err > n/uint64(k) {
				t.Errorf("trial %d: key %d: %d ±%d, true %d, N/k %d", trial, v, e.count, e.err, tr, n/uint64(k))
			}
		}
		for v, tr := range exact {
			if tr > n/uint64(k) && !seen[v] {
				t.Errorf("trial %d: key %d of %d > N/k = %d missing", trial, v, tr, n/uint64(k))
			}
		}
	}
}

// TestFormatKeepsNeededParentheses: EXPLAIN prints a filter with the
// parentheses its meaning needs, and no others.
func TestFormatKeepsNeededParentheses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"(a = 1 OR b = 2) AND c = 3", "(a = 1 OR b = 2) AND c = 3"},
		{"a = 1 OR b = 2 AND c = 3", "a = 1 OR b = 2 AND c = 3"},
		{"(a - b) - c", "a - b - c"},
		{"a - (b - c)", "a - (b - c)"},
		{"(a + b) * c", "(a + b) * c"},
		{"NOT (a = 1 AND b = 2)", "NOT (a = 1 AND b = 2)"},
		{"x NOT IN (1, 2) AND (y BETWEEN 1 AND 2 OR z IS NULL)", "x NOT IN (1, 2) AND (y BETWEEN 1 AND 2 OR z IS NULL)"},
		{"CASE WHEN a > 1 THEN 'x' ELSE 'y' END = 'x'", "CASE WHEN a > 1 THEN 'x' ELSE 'y' END = 'x'"},
	} {
		q, err := Parse("SELECT 1 FROM syscall.read WHERE " + c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if got := Format(q.Where); got != c.want {
			t.Errorf("%s: %s, want %s", c.in, got, c.want)
		}
	}
	p, err := Compile("SELECT count() FROM syscall.read WHERE (comm = 'a' OR comm = 'b') AND fd > 2", fixture, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ex, _ := p.Explain(false); !strings.Contains(ex, "filter: (comm = 'a' OR comm = 'b') AND fd > 2\n") {
		t.Errorf("EXPLAIN:\n%s", ex)
	}
}
