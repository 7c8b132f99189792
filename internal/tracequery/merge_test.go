package tracequery

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

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
					row[j] = time.Unix(1000, int64(i)*1e6).UTC()
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
