package tracequery

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// kernelGroup fills a group as the kernel part does for the events
// values: the count, sums, log-linear buckets and the distinct bitmap
// (the same hash as codegen's).
func kernelGroup(p *Plan, values []int64) *group {
	g := newGroup(len(p.Aggs))
	for _, v := range values {
		g.count++
		for i, a := range p.Aggs {
			switch a.Kind {
			case AggSum, AggAvg:
				g.sums[i] += v
			case AggQuantile:
				if g.hist[i] == nil {
					g.hist[i] = map[int64]uint64{}
				}
				g.hist[i][logLinearBucket(v)]++
			case AggDistinct:
				if g.bits[i] == nil {
					g.bits[i] = make([]uint64, distinctBits/64)
				}
				h := uint64(v) * 0x9E3779B97F4A7C15 >> (64 - 12)
				g.bits[i][h>>6] |= 1 << (h & 63)
			}
		}
	}
	return g
}

// logLinearBucket is the bucket bucketBounds gives [lo, hi) of for v.
func logLinearBucket(v int64) int64 {
	if v < 4 {
		return v
	}
	e := int64(63 - bits.LeadingZeros64(uint64(v)))
	return (e-1)*4 + (v >> (e - 2)) - 4
}

// TestMergeIsExact merges the partials of two hosts, each with its own
// events, and compares every aggregate with what one host gives over the
// union of the events: count, sum, avg (not an average of averages),
// quantiles (from the merged buckets, not an average of quantiles) and
// count_distinct (the merged bitmap: a value on both hosts counts once).
func TestMergeIsExact(t *testing.T) {
	p, err := Compile(`SELECT fd, count() AS n, sum(count) AS s, avg(count) AS a, p99(count) AS q, median(count) AS m,
		count_distinct(count) AS d FROM syscall.read GROUP BY fd ORDER BY fd`, fixture, nil)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []map[int64][]int64{
		{3: {1, 100, 1000, 5000, 5000, 7}, 5: {42}},
		{3: {1, 1, 9000, 12, 100, 100, 100, 64000, 3}, 4: {8, 16}},
	}
	union := map[int64][]int64{}
	var parts []*store.Result
	for _, h := range hosts {
		cols, types := partialColumns(p)
		res := &store.Result{Columns: cols, Types: types}
		for fd, vs := range h {
			union[fd] = append(union[fd], vs...)
			g := kernelGroup(p, vs)
			row := []any{fd}
			for i, a := range p.Aggs {
				if hasState(a) {
					row = append(row, stateOf(a, g, i))
				} else {
					row = append(row, g.finish(a, i, nil))
				}
			}
			res.Rows = append(res.Rows, row)
		}
		// As the coordinator receives it: through JSON.
		b, _ := json.Marshal(res)
		var back store.Result
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, &back)
	}
	m := NewMerger(p)
	defer m.Close()
	got, err := m.Merge(context.Background(), parts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Rows) != 3 {
		t.Fatalf("merged %d groups, want 3: %v", len(got.Rows), got.Rows)
	}
	for _, r := range got.Rows {
		fd := r[0].(int64)
		g := kernelGroup(p, union[fd])
		for i, a := range p.Aggs {
			want := g.finish(a, i, nil)
			if fmt.Sprint(r[1+i]) != fmt.Sprint(want) {
				t.Errorf("fd %d: %s = %v merged, %v over the union", fd, a.Col, r[1+i], want)
			}
		}
	}
	// A value on both hosts counts once: fd 3 has 1 and 100 on both, 9
	// distinct values in all.
	if d := got.Rows[0][6]; fmt.Sprint(d) != "9" {
		t.Errorf("fd 3: count_distinct = %v, want 9", d)
	}
}

// viaJSON is a result as a coordinator gets it from an agent.
func viaJSON(t *testing.T, r *store.Result) *store.Result {
	t.Helper()
	r.Sanitize()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var out store.Result
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestMergeStreamPartials merges two hosts' events of a query whose
// aggregation runs in user space: hist and p99 are computed over both
// hosts' events, as over one host's.
func TestMergeStreamPartials(t *testing.T) {
	p, err := Compile("SELECT lower(comm) AS c, count() AS n, hist(ret) AS h, p99(ret) AS p, max(time) > min(time) AS spread FROM syscall.read GROUP BY c ORDER BY c", fixture, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != ModeStream {
		t.Fatalf("mode %v, want stream", p.Mode)
	}
	cols, types := partialColumns(p)
	host := func(comm string, rets ...int64) *store.Result {
		r := &store.Result{Columns: cols, Types: types}
		for i, v := range rets {
			row := make([]any, len(cols))
			for j, c := range cols {
				switch c {
				case "comm":
					row[j] = comm
				case "ret":
					row[j] = v
				case "time":
					row[j] = time.Unix(1000, int64(i)*1e6).UnixNano()
				}
			}
			r.Rows = append(r.Rows, row)
		}
		return viaJSON(t, r)
	}
	m := NewMerger(p)
	defer m.Close()
	res, err := m.Merge(context.Background(), []*store.Result{host("A", 1, 100, 5000), host("a", 1000, 3), host("B", 7)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 || res.Rows[0][0] != "a" || res.Rows[0][1] != int64(5) || res.Rows[1][1] != int64(1) || res.Rows[0][4] != true {
		t.Fatalf("merged rows %v", res.Rows)
	}
	checkBuckets(t, "hist over both hosts", res.Rows[0][2], map[int64]int64{1: 1, 2: 1, 64: 1, 512: 1, 4096: 1})
	if p99 := res.Rows[0][3].(float64); p99 < 4096 || p99 >= 5120 {
		t.Errorf("p99 = %v, want in 5000's bucket [4096, 5120)", p99)
	}
	if fmt.Sprint(res.Columns) != "[c n h p spread]" {
		t.Errorf("columns %v", res.Columns)
	}
}

// TestMergeTopKAndKMeans merges two hosts' topk summaries and kmeans
// histograms through JSON: the topk of the merge is the merge of the
// summaries, and kmeans clusters the groups of both hosts together, as
// over one host's groups with the same histograms.
func TestMergeTopKAndKMeans(t *testing.T) {
	p, err := Compile("SELECT fd, topk(count, 3) AS top, kmeans(count, 2) AS c FROM syscall.read GROUP BY fd ORDER BY fd", fixture, nil)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []map[int64][]int64{
		{3: {1, 1, 1, 2, 2, 7, 9, 9, 9, 9}, 4: {1, 1, 1, 1, 2}},
		{3: {9, 9, 5, 5, 5, 1}, 5: {100, 100, 100, 101}, 6: {1, 1, 2, 1}},
	}
	fill := func(vs []int64) *group {
		g := newGroup(len(p.Aggs))
		for _, v := range vs {
			g.count++
			for i, a := range p.Aggs {
				g.add(a, i, v, 1)
			}
		}
		return g
	}
	var parts []*store.Result
	union := map[int64]*group{}
	for _, h := range hosts {
		cols, types := partialColumns(p)
		res := &store.Result{Columns: cols, Types: types}
		for fd, vs := range h {
			g := fill(vs)
			res.Rows = append(res.Rows, []any{fd, stateOf(p.Aggs[0], g, 0), stateOf(p.Aggs[1], g, 1)})
			if u, ok := union[fd]; ok {
				u.top[0].merge(g.top[0])
				for v, c := range g.hist[1] {
					u.hist[1][v] += c
				}
			} else {
				union[fd] = g
			}
		}
		parts = append(parts, viaJSON(t, res))
	}
	m := NewMerger(p)
	defer m.Close()
	got, err := m.Merge(context.Background(), parts)
	if err != nil {
		t.Fatal(err)
	}
	var gs []*group
	for _, fd := range []int64{3, 4, 5, 6} {
		gs = append(gs, union[fd])
	}
	clusterGroups(p.Aggs[1], 1, gs)
	for i, r := range got.Rows {
		g := gs[i]
		if fmt.Sprint(r[1]) != fmt.Sprint(g.top[0].result()) || fmt.Sprint(r[2]) != fmt.Sprint(g.result[1]) {
			t.Errorf("fd %v: merged %v %v, over the union %v %v", r[0], r[1], r[2], g.top[0].result(), g.result[1])
		}
	}
	// fd 5 (values near 100) is the odd group.
	if c := got.Rows[2][2].(map[string]any); c["members"] != int64(1) || c["cluster"] != int64(1) {
		t.Errorf("fd 5: %v, want alone in cluster 1", c)
	}
}
