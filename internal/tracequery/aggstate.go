package tracequery

import (
	"fmt"
	"math"
	"math/bits"
	"strings"

	"github.com/holter-dev/holter/internal/hist"
)

// group is one group's aggregate state, whoever fills it: the probe's
// per-CPU values read at a flush, the evaluator's aggregation of events,
// or partials merged across hosts or a sliding window.
type group struct {
	keys  []any // decoded key values
	pid   uint32
	count uint64
	sums  []int64
	fsums []float64
	ext   []any // min and max so far; nil: none
	hist  []map[int64]uint64
	bits  [][]uint64
	samp  [][]any
	top   []*topSummary
	// avgN is the count behind a merged average (its partial's own).
	avgN []uint64
	// result holds what is finished across groups (kmeans).
	result []any
}

func newGroup(naggs int) *group {
	return &group{sums: make([]int64, naggs), fsums: make([]float64, naggs), ext: make([]any, naggs),
		hist: make([]map[int64]uint64, naggs), bits: make([][]uint64, naggs), samp: make([][]any, naggs),
		top: make([]*topSummary, naggs), avgN: make([]uint64, naggs), result: make([]any, naggs)}
}

// groups are the groups of an interval, in the order they appeared.
type groups struct {
	byKey map[string]*group
	order []*group
	naggs int
	limit int // at most this many; 0: no limit
	full  uint64
}

func newGroups(naggs, limit int) *groups {
	return &groups{byKey: map[string]*group{}, naggs: naggs, limit: limit}
}

// get finds or makes the group of decoded keys; nil when the limit is
// reached (counted in full).
func (gs *groups) get(keys []any) *group {
	id := keyID(keys)
	g := gs.byKey[id]
	if g == nil {
		if gs.limit > 0 && len(gs.order) >= gs.limit {
			gs.full++
			return nil
		}
		g = newGroup(gs.naggs)
		g.keys = keys
		gs.byKey[id] = g
		gs.order = append(gs.order, g)
	}
	return g
}

// keyID identifies decoded key values: stacks that symbolize alike are
// one group, whatever their ids.
func keyID(keys []any) string {
	var b strings.Builder
	for _, k := range keys {
		switch v := k.(type) {
		case string:
			fmt.Fprintf(&b, "s%d:%s", len(v), v)
		case []byte:
			fmt.Fprintf(&b, "b%d:%x", len(v), v)
		case nil:
			b.WriteString("n")
		default:
			fmt.Fprintf(&b, "%T:%v|", v, v)
		}
	}
	return b.String()
}

// add adds one event (v its argument, w topk's weight) to aggregate i.
func (g *group) add(a *Agg, i int, v any, w int64) {
	switch a.Kind {
	case AggSum, AggAvg:
		switch x := v.(type) {
		case int64:
			g.sums[i] += x
		case float64:
			g.fsums[i] += x
		}
	case AggMin, AggMax:
		g.extreme(a, i, v)
	case AggHist, AggLHist, AggQuantile, AggKMeans:
		x, ok := v.(int64)
		if !ok {
			if f, isF := v.(float64); isF {
				x, ok = int64(math.Round(f)), true
			}
		}
		if ok {
			if g.hist[i] == nil {
				g.hist[i] = map[int64]uint64{}
			}
			b := x
			if a.Kind != AggKMeans {
				b = a.bucketOf(x)
			}
			g.hist[i][b]++
		}
	case AggDistinct:
		if g.bits[i] == nil {
			g.bits[i] = make([]uint64, distinctBits/64)
		}
		h := distinctHash(v)
		g.bits[i][h>>6] |= 1 << (h & 63)
	case AggSample:
		// The values at counts 1, 2, 4, … (g.count is this event's).
		if c := g.count; c&(c-1) == 0 && len(g.samp[i]) < sampleSlots {
			g.samp[i] = append(g.samp[i], v)
		}
	case AggTopK:
		if g.top[i] == nil {
			g.top[i] = newTopSummary(a.K)
		}
		g.top[i].add(v, uint64(max(w, 0)))
	}
}

func (g *group) extreme(a *Agg, i int, v any) {
	if v == nil {
		return
	}
	if g.ext[i] == nil {
		g.ext[i] = v
		return
	}
	c, ok := compareValues(v, g.ext[i])
	if ok && (a.Kind == AggMin && c < 0 || a.Kind == AggMax && c > 0) {
		g.ext[i] = v
	}
}

// distinctHash is the bit the probe's count_distinct sets for v: a
// Fibonacci hash of the integer (strings are hashed to one first).
func distinctHash(v any) uint64 {
	var x uint64
	switch y := v.(type) {
	case int64:
		x = uint64(y)
	case string:
		x = 14695981039346656037 // FNV-1a
		for i := 0; i < len(y); i++ {
			x ^= uint64(y[i])
			x *= 1099511628211
		}
	case float64:
		x = math.Float64bits(y)
	case bool:
		if y {
			x = 1
		}
	}
	return (x * 0x9E3779B97F4A7C15) >> (64 - 12)
}

// finish is aggregate i's value; decodeStack turns a sampled stack id
// into frames.
func (g *group) finish(a *Agg, i int, decodeStack func(id int64, user bool, pid uint32) string) any {
	switch a.Kind {
	case AggCount:
		return int64(g.count)
	case AggSum:
		if a.ArgType == TFloat {
			return g.fsums[i]
		}
		return g.sums[i]
	case AggMin, AggMax:
		return g.ext[i]
	case AggAvg:
		n := g.count
		if g.avgN[i] > 0 {
			n = g.avgN[i]
		}
		if n == 0 {
			return nil
		}
		return (float64(g.sums[i]) + g.fsums[i]) / float64(n)
	case AggHist, AggLHist:
		return a.histSpec().Rows(g.hist[i])
	case AggQuantile:
		return hist.Quantile(g.hist[i], a.Q)
	case AggDistinct:
		if g.bits[i] == nil {
			return int64(0)
		}
		zeros := 0
		for _, w := range g.bits[i] {
			zeros += 64 - bits.OnesCount64(w)
		}
		if zeros == 0 {
			zeros = 1 // saturated: the estimate is a lower bound
		}
		return int64(math.Round(-distinctBits * math.Log(float64(zeros)/distinctBits)))
	case AggSample:
		out := []any{}
		for _, v := range g.samp[i] {
			if id, ok := v.(int64); ok && a.ArgType == TStack && decodeStack != nil {
				out = append(out, decodeStack(id, isUserStack(a.Arg), g.pid))
				continue
			}
			out = append(out, v)
		}
		return out
	case AggTopK:
		return g.top[i].result()
	case AggKMeans:
		return g.result[i]
	}
	return nil
}

// isUserStack says whether a stack expression is a user stack.
func isUserStack(n Node) bool {
	switch x := n.(type) {
	case *Ident:
		return strings.HasSuffix(x.Name, "ustack")
	case *Call:
		return x.Name == "ustack"
	}
	return false
}

// finishAll finishes the aggregates that depend on every group (kmeans:
// the clusters of all groups' histograms), then gives each group's row:
// its keys, then its aggregates' values.
func finishAll(aggs []*Agg, gs []*group, value func(a *Agg, g *group, i int) any) [][]any {
	for i, a := range aggs {
		if a.Kind == AggKMeans {
			clusterGroups(a, i, gs)
		}
	}
	rows := make([][]any, 0, len(gs))
	for _, g := range gs {
		row := append([]any(nil), g.keys...)
		for i, a := range aggs {
			row = append(row, value(a, g, i))
		}
		rows = append(rows, row)
	}
	return rows
}

// histSpec is the bucketing of a histogram aggregate: hist's, lhist's,
// or the log-linear one of quantiles.
func (a *Agg) histSpec() hist.Spec {
	switch a.Kind {
	case AggHist:
		return hist.Spec{Kind: hist.Log2}
	case AggLHist:
		return hist.Spec{Kind: hist.Linear, Min: a.Min, Step: a.Step, Buckets: a.Buckets}
	}
	return hist.Spec{Kind: hist.LogLinear}
}

// bucketOf is the bucket the probe's code (gen.bucket) gives v.
func (a *Agg) bucketOf(v int64) int64 { return a.histSpec().Bucket(v) }
