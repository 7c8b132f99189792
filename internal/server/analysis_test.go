package server

import (
	"context"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/requests"
	"github.com/holter-dev/holter/internal/store"
)

// startAnalysis serves the synthetic recording of startSynth, analysed as
// the recorder's online analysis would have, with two findings, plus a few
// traces: reads (client → front → storage) and a batched write coalescing
// two of them.
func startAnalysis(t *testing.T) (string, *store.Store) {
	t.Helper()
	st := synthStore(t)
	ctx := context.Background()
	// Findings go in the way the recorder's online analysis stores them,
	// with the range it analysed: the report reads them instead of
	// evaluating the epochs again.
	fs := []findings.Finding{
		{Rule: "rule5-blocking", Timescale: "epoch", Subject: "pid 200 (blocker) disk", StartNs: minute(3), EndNs: minute(5), Severity: 0.9, Score: 0.9,
			Resource: findings.ResourceDisk, Summary: "blocker blocks", Vitals: []string{"blck"}, Processes: []findings.Process{{Pid: 200, Comm: "blocker"}},
			Culprit:  &findings.Culprit{Pid: 200, Comm: "blocker", Exe: "/bin/blocker", Function: "mid_1", User: []string{"leaf_1", "mid_1", "main"}},
			Evidence: []findings.Evidence{{Name: "blck µs/s", Value: 900, Against: 500, Relation: ">="}}},
		{Rule: "ewma:cpu", Timescale: "epoch", Subject: "cpu", StartNs: minute(20), EndNs: minute(21), Score: 5, Resource: findings.ResourceCPU,
			Summary: "cpu rose", Vitals: []string{"cpu"}, Processes: []findings.Process{{Pid: 100, Comm: "spinner"}}},
	}
	var rows []store.Finding
	for _, f := range fs {
		rows = append(rows, f.Row("h"))
	}
	if err := st.AddAnalysis(ctx, "h", rows, 0, minute(0), minute(30)); err != nil {
		t.Fatal(err)
	}
	b := &store.SpanBatch{}
	span := func(trace, id, parent, svc, name string, start, end int64) store.Span {
		return store.Span{Host: "h", TraceID: trace, SpanID: id, ParentSpanID: parent, Service: svc, Name: name, Kind: "server",
			StartNs: start, EndNs: end, StatusCode: "unset", Scope: "t", Resource: "{}", Attributes: "{}", Pid: 7, Tid: 8,
			Client: map[bool]string{true: "bob"}[parent == "" && svc == "client"]}
	}
	ms := int64(time.Millisecond)
	var acct []store.SpanAccounting
	for i := range 4 {
		tr := fmt.Sprintf("%032x", 0xa0+i)
		s0 := minute(10) + int64(i)*time.Second.Nanoseconds()
		b.Spans = append(b.Spans,
			span(tr, "0000000000000001", "", "client", "get", s0, s0+20*ms),
			span(tr, "0000000000000002", "0000000000000001", "front", "GET /item", s0+ms, s0+19*ms),
			span(tr, "0000000000000003", "0000000000000002", "storage", "read", s0+5*ms, s0+9*ms+int64(i)*ms))
		acct = append(acct, store.SpanAccounting{TraceID: tr, SpanID: "0000000000000003", Accounted: true,
			CPUNs: 3 * ms, SelfCPUNs: 3 * ms, BlockedNs: ms, SelfBlockedNs: ms, IOBytes: 512, IOCount: 1, BlockedSites: "[]"})
	}
	// A batch write linking to the storage spans of the first two reads.
	batch := fmt.Sprintf("%032x", 0xbb)
	b.Spans = append(b.Spans, span(batch, "00000000000000b1", "", "storage", "flush", minute(11), minute(11)+8*ms))
	for i := range 2 {
		b.Links = append(b.Links, store.SpanLink{TraceID: batch, SpanID: "00000000000000b1",
			LinkedTraceID: fmt.Sprintf("%032x", 0xa0+i), LinkedSpanID: "0000000000000003", Weight: 1, Attributes: "{}"})
	}
	acct = append(acct, store.SpanAccounting{TraceID: batch, SpanID: "00000000000000b1", Accounted: true,
		CPUNs: 4 * ms, SelfCPUNs: 4 * ms, BlockedSites: "[]"})
	if err := st.WriteSpans(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteSpanAccounting(ctx, acct); err != nil {
		t.Fatal(err)
	}
	return startServer(t, Options{Store: st}), st
}

func TestFindingsEndpoint(t *testing.T) {
	base, _ := startAnalysis(t)
	var all FindingsAnswer
	if code := fetch(t, base+"/api/findings?"+rangeQ(0, 30), &all); code != 200 {
		t.Fatalf("status %d", code)
	}
	if all.Host != "" || len(all.Incidents) != 2 || !reflect.DeepEqual(all.Rules, []string{"ewma:cpu", "rule5-blocking"}) {
		t.Fatalf("findings %+v", all)
	}
	// Ranked: the blocking costs 90% of its thread's time, the rise of
	// the cpu vital nothing measured.
	in := all.Incidents[0]
	if in.Rank != 1 || in.Severity != 0.9 || in.Resource != findings.ResourceDisk || in.StartNs != minute(3) || in.EndNs != minute(5) ||
		in.Culprit == nil || in.Culprit.Function != "mid_1" || in.Findings[0].Evidence[0].Value != 900 || len(in.Drill) == 0 {
		t.Errorf("first incident %+v", in)
	}
	if in := all.Incidents[1]; in.Rank != 2 || in.Severity != 0 || in.Rules[0] != "ewma:cpu" {
		t.Errorf("second incident %+v", in)
	}
	// The rule filter takes a rule or a family of detectors; the range
	// keeps findings that overlap it.
	for _, c := range []struct {
		q    string
		want []string
	}{
		{rangeQ(0, 30) + "&rule=ewma", []string{"ewma:cpu"}},
		{rangeQ(0, 30) + "&rule=rule5-blocking", []string{"rule5-blocking"}},
		{rangeQ(0, 30) + "&rule=rule5", nil},
		{rangeQ(4, 6), []string{"rule5-blocking"}},
		{rangeQ(5, 20), nil},
	} {
		var a FindingsAnswer
		if code := fetch(t, base+"/api/findings?"+c.q, &a); code != 200 {
			t.Fatalf("%s: status %d", c.q, code)
		}
		var got []string
		for _, in := range a.Incidents {
			got = append(got, in.Rules...)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.q, got, c.want)
		}
	}
}

func TestDiffEndpoint(t *testing.T) {
	base, st := startAnalysis(t)
	target, reference := fmt.Sprintf("%d/%d", minute(15), minute(30)), fmt.Sprintf("%d/%d", minute(0), minute(15))
	var d findings.Diff
	q := "/api/diff?target=" + url.QueryEscape(target) + "&reference=" + url.QueryEscape(reference)
	if code := fetch(t, base+q, &d); code != 200 {
		t.Fatalf("status %d %+v", code, d)
	}
	// The API answers what holter diff computes: the same function.
	want, err := findings.RankRanges(context.Background(), store.Plain(st), target, reference, findings.DiffOptions{MinSamples: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Ranked) == 0 || len(d.Ranked) != len(want.Ranked) || d.Host != "h" ||
		d.Target != (findings.Range{StartNs: minute(15), EndNs: minute(30)}) {
		t.Fatalf("diff %d ranked (want %d), host %q, target %+v", len(d.Ranked), len(want.Ranked), d.Host, d.Target)
	}
	for i, m := range d.Ranked {
		w := want.Ranked[i]
		if m.Name != w.Name || m.EMD != w.EMD || !reflect.DeepEqual(m.Histogram, w.Histogram) {
			t.Errorf("rank %d: %s %.4f, want %s %.4f", i, m.Name, m.EMD, w.Name, w.EMD)
		}
		h := m.Histogram
		if len(h.Edges) != len(h.Target)+1 || len(h.Target) != len(h.Reference) {
			t.Errorf("%s: histogram of %d edges, %d and %d bins", m.Name, len(h.Edges), len(h.Target), len(h.Reference))
		}
		if i > 0 && m.EMD > d.Ranked[i-1].EMD {
			t.Errorf("rank %d (%s, %.4f) above rank %d (%.4f)", i, m.Name, m.EMD, i-1, d.Ranked[i-1].EMD)
		}
	}
	// Fewer samples needed: more metrics ranked.
	var loose findings.Diff
	fetch(t, base+q+"&min_samples=1", &loose)
	if len(loose.Ranked) < len(d.Ranked) {
		t.Errorf("min_samples=1 ranks %d metrics, fewer than the default's %d", len(loose.Ranked), len(d.Ranked))
	}
}

func TestTracesEndpoint(t *testing.T) {
	base, _ := startAnalysis(t)
	var all TracesAnswer
	if code := fetch(t, base+"/api/traces", &all); code != 200 {
		t.Fatalf("status %d", code)
	}
	if all.Total != 5 || len(all.Traces) != 5 {
		t.Fatalf("traces %+v", all)
	}
	// Newest first: the batch, then the reads from the last.
	first, last := all.Traces[0], all.Traces[4]
	if first.TraceID != fmt.Sprintf("%032x", 0xbb) || first.Service != "storage" || first.Operation != "flush" {
		t.Errorf("newest %+v", first)
	}
	ms := float64(time.Millisecond)
	// The first read: its own 3 ms of CPU plus half the 4-ms batch.
	if last.TraceID != fmt.Sprintf("%032x", 0xa0) || last.Service != "client" || last.Client != "bob" || last.Spans != 3 ||
		!last.Accounted || last.CPUNs != 5*ms || last.BilledCPU != 2*ms || last.IOBytes != 512 || last.DurationNs != int64(20*ms) {
		t.Errorf("oldest %+v", last)
	}
	if !reflect.DeepEqual(all.Workloads, []TraceWorkload{{"client", "get", 4}, {"storage", "flush", 1}}) {
		t.Errorf("workloads %+v", all.Workloads)
	}
	for _, c := range []struct {
		q    string
		want int
	}{
		{"service=storage", 5},
		{"service=storage&operation=read", 4},
		{"service=front&operation=flush", 0},
		{"client=bob", 4},
		{"limit=2", 2},
		{fmt.Sprintf("from=%d&to=%d", minute(10), minute(10)+int64(2*time.Second)), 2},
	} {
		var a TracesAnswer
		if code := fetch(t, base+"/api/traces?"+c.q, &a); code != 200 || len(a.Traces) != c.want {
			t.Errorf("%s: status %d, %d traces, want %d", c.q, code, len(a.Traces), c.want)
		}
	}
	// A listed trace has a causal path with the batch billed to it, and
	// its workload a latency graph: what the UI draws next.
	var p requests.Path
	if code := fetch(t, base+"/api/traces/"+last.TraceID+"/path", &p); code != 200 || p.Spans != 3 ||
		len(p.Coalesced) != 1 || p.Coalesced[0].Share != 0.5 || p.Total.CPUNs != 5*ms {
		t.Errorf("path: %d %+v", code, p)
	}
	var g requests.Graph
	if code := fetch(t, base+"/api/latency-graph?service=client&operation=get", &g); code != 200 || g.Paths != 4 || len(g.Edges) == 0 {
		t.Errorf("latency graph: %d %+v", code, g)
	}
}

// TestAnalysisDocumented: the endpoints of the Findings, Diff and Request
// traces views are in openapi.yaml.
func TestAnalysisDocumented(t *testing.T) {
	for _, path := range []string{"findings", "diff", "traces", "traces/{id}/path", "latency-graph"} {
		if !strings.Contains(string(openAPI), "\n  /api/"+path+":\n") {
			t.Errorf("openapi.yaml does not describe /api/%s", path)
		}
	}
}

func TestAnalysisBadParameters(t *testing.T) {
	base, _ := startAnalysis(t)
	r := rangeQ(0, 30)
	tgt := fmt.Sprintf("target=%d/%d", minute(15), minute(30))
	checkAnswers(t, base, []badCase{
		{"/api/findings", 400, "from and to are required"},
		{"/api/findings?" + r + "&rules=x", 400, `unknown parameter "rules"`},
		{"/api/findings?from=9&to=5", 400, "must be before to"},
		{"/api/findings?" + r + "&host=nowhere", 404, `nothing recorded for host "nowhere"`},
		{"/api/findings?" + r + "&rule=" + strings.Repeat("r", 300), 400, "rule: longer than"},
		{"/api/diff", 400, "target and reference are required"},
		{"/api/diff?" + tgt, 400, "target and reference are required"},
		{"/api/diff?" + tgt + "&reference=nosuchrun", 400, `reference: unknown range "nosuchrun"`},
		{"/api/diff?" + tgt + "&reference=yesterday/now", 400, "reference: range \"yesterday/now\": start:"},
		{"/api/diff?" + tgt + "&reference=" + fmt.Sprint(minute(9)) + "/" + fmt.Sprint(minute(2)), 400, "is empty"},
		{"/api/diff?" + tgt + "&reference=99999999999999999999/now", 400, "too large for nanoseconds"},
		{"/api/diff?" + tgt + fmt.Sprintf("&reference=%d/%d", minute(100), minute(110)), 404, "reference range 2024-03-01T01:40:00 to 2024-03-01T01:50:00: no epochs recorded on host h"},
		{"/api/diff?" + tgt + "&reference=" + tgt[7:] + "&min_samples=0", 400, "min_samples:"},
		{"/api/diff?" + tgt + "&reference=" + tgt[7:] + "&host=nowhere", 404, `nothing recorded for host "nowhere"`},
		{"/api/diff?" + tgt + "&referense=x", 400, `unknown parameter "referense"`},
		{"/api/traces?limit=0", 400, "limit:"},
		{"/api/traces?limit=5000", 400, "limit:"},
		{"/api/traces?from=5", 400, "from and to are required"},
		{"/api/traces?operation=get", 400, "operation: give service="},
		{"/api/traces?service=a&service=b", 400, "given 2 times"},
		{"/api/traces?svc=a", 400, `unknown parameter "svc"`},
		{"/api/traces?service=%27%3B%20DROP%20TABLE%20spans", 200, ""},
		{"/api/traces/nothex/path", 400, "32 hex digits"},
	})
}
