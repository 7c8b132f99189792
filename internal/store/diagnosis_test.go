package store

import (
	"context"
	"errors"
	"testing"
)

func TestFindingsMergeAcrossEpochs(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	f := Finding{Host: "h", Rule: "ewma", Timescale: "epoch", Subject: "blio", StartNs: 10, EndNs: 20, Score: 4,
		Summary: "blio up", Pids: []uint32{7, 8}, Comms: []string{"dd"}, Detail: `{"n":1}`}
	if err := s.AddFindings(ctx, []Finding{f}, 0); err != nil {
		t.Fatal(err)
	}
	next := f
	next.StartNs, next.EndNs, next.Score, next.Detail = 20, 30, 6, `{"n":2}`
	later := f
	later.StartNs, later.EndNs = 100, 110
	other := f
	other.Subject = "blck"
	if err := s.AddFindings(ctx, []Finding{next, later, other}, 0); err != nil {
		t.Fatal(err)
	}
	res, err := s.Query(ctx, `SELECT subject, start_ns, end_ns, score, detail, pids[2], comms[1] FROM findings ORDER BY subject, start_ns`)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]any{
		{"blck", int64(10), int64(20), 4.0, `{"n":1}`, uint32(8), "dd"},
		{"blio", int64(10), int64(30), 6.0, `{"n":2}`, uint32(8), "dd"},
		{"blio", int64(100), int64(110), 4.0, `{"n":1}`, uint32(8), "dd"},
	}
	if len(res.Rows) != len(want) {
		t.Fatalf("rows %v, want %v", res.Rows, want)
	}
	for i := range want {
		for j := range want[i] {
			if res.Rows[i][j] != want[i][j] {
				t.Errorf("row %d col %s = %#v, want %#v", i, res.Columns[j], res.Rows[i][j], want[i][j])
			}
		}
	}
}

// TestAddAnalysisNotesTheRange: the ranges an analysis judged are kept
// with its findings, a range that continues one extending it, and one
// that ends before it starts refused.
func TestAddAnalysisNotesTheRange(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	f := Finding{Host: "h", Rule: "busy-loop", Timescale: "epoch", Subject: "pid 1", StartNs: 10, EndNs: 20, Score: 0.5, Detail: `{}`}
	for _, a := range []struct {
		fs       []Finding
		from, to int64
	}{{[]Finding{f}, 0, 20}, {nil, 20, 30}, {nil, 31, 40}, {nil, 100, 110}} {
		if err := s.AddAnalysis(ctx, "h", a.fs, 5, a.from, a.to); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddAnalysis(ctx, "h", nil, 5, 50, 40); err == nil {
		t.Error("a range ending before it starts was stored")
	}
	res, err := s.Query(ctx, `SELECT start_ns, end_ns FROM analysed ORDER BY start_ns`)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]any{{int64(0), int64(40)}, {int64(100), int64(110)}}
	if len(res.Rows) != len(want) || res.Rows[0][0] != want[0][0] || res.Rows[0][1] != want[0][1] || res.Rows[1][0] != want[1][0] {
		t.Fatalf("analysed %v, want %v", res.Rows, want)
	}
	if res, err := s.Query(ctx, `SELECT count(*) FROM findings`); err != nil || res.Rows[0][0] != int64(1) {
		t.Fatalf("findings %v %v", res, err)
	}
}

func TestAddRun(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	perf := 12.5
	r := Run{ID: "r1", Host: "h", Params: map[string]string{"size": "4k"}, StartNs: 1, EndNs: 2, Perf: &perf, PerfSource: "regex", Command: "w 4k", Pids: []uint32{7, 4000000}}
	if err := s.AddRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := s.AddRun(ctx, r); !errors.Is(err, ErrRunExists) {
		t.Fatalf("second add: %v", err)
	}
	r.ID, r.Perf, r.Pids = "r2", nil, nil
	if err := s.AddRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	res, err := s.Query(ctx, `SELECT id, params->>'size', perf, CAST(pids AS VARCHAR) FROM runs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 || res.Rows[0][1] != "4k" || res.Rows[0][2] != 12.5 || res.Rows[1][2] != nil ||
		res.Rows[0][3] != "[7, 4000000]" || res.Rows[1][3] != "[]" {
		t.Fatalf("runs = %v", res.Rows)
	}
}
