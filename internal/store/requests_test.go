package store

import (
	"context"
	"testing"
)

// A request coalesced with another into one batched write is billed its
// weight's share of the batch (Stardust §3.2.1), in the request_demand and
// client_demand views.
func TestRequestViewsBillCoalescedWork(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	span := func(trace, id, parent, svc, name string, start, end int64, client string) Span {
		return Span{Host: "h", TraceID: trace, SpanID: id, ParentSpanID: parent, Service: svc, Name: name, Kind: "server",
			StartNs: start, EndNs: end, StatusCode: "unset", Client: client, Resource: "{}", Attributes: "{}", Scope: "t"}
	}
	b := &SpanBatch{
		Spans: []Span{
			span("a", "a1", "", "client", "put", 0, 100, "alice"),
			span("a", "a2", "a1", "front", "put", 10, 90, ""),
			span("b", "b1", "", "client", "put", 0, 100, "bob"),
			span("b", "b2", "b1", "front", "put", 10, 90, ""),
			span("x", "x1", "", "middle", "flush", 200, 300, ""),
			span("x", "x2", "x1", "storage", "write", 210, 290, ""),
		},
		Links: []SpanLink{
			{TraceID: "x", SpanID: "x1", LinkedTraceID: "a", LinkedSpanID: "a2", Weight: 1, Attributes: "{}"},
			{TraceID: "x", SpanID: "x1", LinkedTraceID: "b", LinkedSpanID: "b2", Weight: 3, Attributes: "{}"},
		},
	}
	if err := s.WriteSpans(ctx, b); err != nil {
		t.Fatal(err)
	}
	acct := []SpanAccounting{
		{TraceID: "a", SpanID: "a2", Accounted: true, CPUNs: 10, SelfCPUNs: 10, BlockedSites: "[]"},
		{TraceID: "b", SpanID: "b2", Accounted: true, CPUNs: 20, SelfCPUNs: 20, BlockedSites: "[]"},
		{TraceID: "x", SpanID: "x1", Accounted: true, CPUNs: 40, SelfCPUNs: 40, BlockedSites: "[]"},
		{TraceID: "x", SpanID: "x2", Accounted: true, CPUNs: 360, SelfCPUNs: 360, IOBytes: 4000, BlockedSites: "[]"},
	}
	if err := s.WriteSpanAccounting(ctx, acct); err != nil {
		t.Fatal(err)
	}
	res, err := s.Query(ctx, `SELECT trace_id, client, own_cpu_ns, billed_cpu_ns, cpu_ns, io_bytes FROM request_demand ORDER BY trace_id`)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]any{{"a", "alice", 10.0, 100.0, 110.0, 1000.0}, {"b", "bob", 20.0, 300.0, 320.0, 3000.0}}
	for i, w := range want {
		row := res.Rows[i]
		if row[0] != w[0] || row[1] != w[1] || toF(row[2]) != w[2] || toF(row[3]) != w[3] || toF(row[4]) != w[4] || toF(row[5]) != w[5] {
			t.Errorf("request %s: got %v, want %v", w[0], row, w)
		}
	}
	res, err = s.Query(ctx, `SELECT client, requests, cpu_ns FROM client_demand ORDER BY client`)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 || res.Rows[0][0] != "alice" || toF(res.Rows[0][2]) != 110 || toF(res.Rows[1][2]) != 320 {
		t.Errorf("client_demand: %v", res.Rows)
	}
	res, err = s.Query(ctx, `SELECT service, operation, requests, p50_ns FROM service_counters WHERE service = 'front'`)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 || toF(res.Rows[0][2]) != 2 || toF(res.Rows[0][3]) < 76 || toF(res.Rows[0][3]) > 84 {
		t.Errorf("service_counters: %v", res.Rows)
	}
}

func toF(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int64:
		return float64(x)
	case int32:
		return float64(x)
	case uint64:
		return float64(x)
	}
	return -1
}

// Span commits are numbered in order; SpanCommitSeq is the last one, and a
// number is not reused once pruning deleted the rows that had it, even in a
// store opened again.
func TestSpanCommitSeqOutlivesPruning(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	last := func(s *Store) int64 {
		t.Helper()
		res, err := s.Query(ctx, SpanCommitSeq)
		if err != nil {
			t.Fatal(err)
		}
		return res.Rows[0][0].(int64)
	}
	write := func(s *Store, trace string, end int64) {
		t.Helper()
		sp := Span{Host: "h", TraceID: trace, SpanID: trace + "1", Service: "s", Name: "n", Kind: "server", StartNs: end - 10,
			EndNs: end, StatusCode: "unset", Resource: "{}", Attributes: "{}", Scope: "t"}
		if err := s.WriteSpans(ctx, &SpanBatch{Spans: []Span{sp}}); err != nil {
			t.Fatal(err)
		}
	}
	write(s, "a", 100)
	write(s, "b", 200)
	if n := last(s); n != 2 {
		t.Fatalf("after two commits SpanCommitSeq is %d, want 2", n)
	}
	if _, err := s.ReplaceSpansWithRollups(ctx, &SpanRollups{CutoffNs: 1000}); err != nil {
		t.Fatal(err)
	}
	if n := last(s); n != 2 {
		t.Errorf("after pruning every span SpanCommitSeq is %d, want still 2", n)
	}
	s.Close()
	if s, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write(s, "c", 2000)
	res, err := s.Query(ctx, `SELECT commit_seq FROM spans`)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 || res.Rows[0][0].(int64) != 3 || last(s) != 3 {
		t.Errorf("the commit after pruning and reopening has %v, SpanCommitSeq %d; want 3 for both", res.Rows, last(s))
	}
}
