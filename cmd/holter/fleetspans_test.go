package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/requests"
	"github.com/holter-dev/holter/internal/testutil"
)

// testSpan is one span sent to an agent as OTLP/JSON.
type testSpan struct {
	service, name, trace, id, parent string
	start, end                       int64
	link                             string // trace/span this span coalesces
	event                            string
	pid                              int // process.pid and thread.id: the kernel accounts the span
}

// otlpJSON is an ExportTraceServiceRequest in OTLP/JSON, one resource per
// service.
func otlpJSON(spans []testSpan) string {
	byService := map[string][]map[string]any{}
	var services []string
	for _, s := range spans {
		sp := map[string]any{"traceId": s.trace, "spanId": s.id, "name": s.name, "kind": 2,
			"startTimeUnixNano": fmt.Sprint(s.start), "endTimeUnixNano": fmt.Sprint(s.end)}
		if s.parent != "" {
			sp["parentSpanId"] = s.parent
		}
		if s.link != "" {
			t, id, _ := strings.Cut(s.link, "/")
			sp["links"] = []any{map[string]any{"traceId": t, "spanId": id}}
		}
		if s.pid != 0 {
			sp["attributes"] = []any{
				map[string]any{"key": "process.pid", "value": map[string]any{"intValue": fmt.Sprint(s.pid)}},
				map[string]any{"key": "thread.id", "value": map[string]any{"intValue": fmt.Sprint(s.pid)}}}
		}
		if s.event != "" {
			sp["events"] = []any{map[string]any{"timeUnixNano": fmt.Sprint(s.start + 1000), "name": s.event}}
		}
		if _, ok := byService[s.service]; !ok {
			services = append(services, s.service)
		}
		byService[s.service] = append(byService[s.service], sp)
	}
	var rs []any
	for _, svc := range services {
		rs = append(rs, map[string]any{
			"resource":   map[string]any{"attributes": []any{map[string]any{"key": "service.name", "value": map[string]any{"stringValue": svc}}}},
			"scopeSpans": []any{map[string]any{"spans": byService[svc]}}})
	}
	b, _ := json.Marshal(map[string]any{"resourceSpans": rs})
	return string(b)
}

// postSpans sends spans to the OTLP/HTTP receiver at addr, from inside ns
// when ns is not nil; the receiver answers once they are committed.
func postSpans(t *testing.T, ns *testutil.Netns, addr string, spans []testSpan) {
	t.Helper()
	args := []string{"-sS", "--fail-with-body", "-H", "Content-Type: application/json", "--data-binary", otlpJSON(spans),
		"http://" + addr + "/v1/traces"}
	cmd := exec.Command("curl", args...)
	if ns != nil {
		cmd = ns.Command("curl", args...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("OTLP post to %s: %v: %s", addr, err, out)
	}
}

// waitSpansShipped waits until the agent has shipped every span commit it
// spooled, and at least one.
func (a *fleetAgent) waitSpansShipped(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if st := a.status(t).Export; st != nil && st.LastSpooledSpanSeq > 0 && st.LastShippedSpanSeq == st.LastSpooledSpanSeq {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, _ := json.Marshal(a.status(t).Export)
	t.Fatalf("%s did not ship its spans within %v: %s\n%s", a.name, within, b, a.rec.log)
}

func tracePath(t *testing.T, bin string, args ...string) *requests.Path {
	t.Helper()
	out, err := exec.Command(bin, append(append([]string{"trace-path", "--json"}, args[:len(args)-1]...), args[len(args)-1])...).Output()
	if err != nil {
		t.Fatalf("holter trace-path %v: %v: %s", args, err, stderrOf(err))
	}
	var p requests.Path
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("trace-path %v: %v: %s", args, err, out)
	}
	return &p
}

// pathSpans lists a path's spans as "host service/operation parent>span
// start-end remote", by span id.
func pathSpans(p *requests.Path) []string {
	var out []string
	var walk func(n *requests.Node)
	walk = func(n *requests.Node) {
		out = append(out, fmt.Sprintf("%s %s/%s %s>%s %d-%d remote=%v", n.Host, n.Service, n.Operation, n.ParentID, n.SpanID,
			n.StartNs, n.EndNs, n.Remote))
		for _, c := range n.Children {
			walk(c)
		}
	}
	for _, r := range p.Roots {
		walk(r)
	}
	for _, c := range p.Coalesced {
		walk(c.Batch)
	}
	sort.Strings(out)
	return out
}

// TestFleetSpans sends the spans of one request to two agents (hosts in
// network namespaces) — the front and the storage on one, the middle and a
// batch that coalesces the request on the other — and reconstructs its
// causal path from ClickHouse: one tree across both hosts, whose spans are
// the union of what each agent's own store gives, with the hops between
// hosts marked remote and the batch billed through its link. holter ui
// --source lists the request with both hosts and serves the same path and
// latency graph, and headless Chromium (ui/test/fleetpaths.test.mjs) sees
// the Request traces tab draw the cross-host waterfall.
func TestFleetSpans(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	bin := testutil.BuildHolter(t)
	ch, a, b := startExportingPair(t, bin, "holter-s", 61, "span", 1)

	const trace, batchTrace = "5b8efff798038103d269b633813fc60c", "6c9f0000a8049214e37ac744924fd71d"
	t0 := time.Now().Add(-2 * time.Second).UnixNano()
	ms := int64(time.Millisecond)
	postSpans(t, a.ns, "127.0.0.1:4318", []testSpan{
		{service: "front", name: "GET /item", trace: trace, id: "a000000000000001", start: t0, end: t0 + 50*ms, event: "parsed"},
		{service: "storage", name: "read", trace: trace, id: "a000000000000003", parent: "b000000000000002", start: t0 + 20*ms, end: t0 + 30*ms,
			pid: a.workload.Process.Pid},
	})
	postSpans(t, b.ns, "127.0.0.1:4318", []testSpan{
		{service: "middle", name: "lookup", trace: trace, id: "b000000000000002", parent: "a000000000000001", start: t0 + 10*ms, end: t0 + 40*ms},
		{service: "middle", name: "flush", trace: batchTrace, id: "b000000000000009", start: t0 + 60*ms, end: t0 + 90*ms,
			link: trace + "/b000000000000002"},
	})
	a.waitSpansShipped(t, 60*time.Second)
	b.waitSpansShipped(t, 60*time.Second)
	// The storage span names its thread: the kernel's account of it (a
	// later commit) ships too.
	c, _ := clickhouse.New(ch.URL, &clickhouse.Options{Database: "fleet"})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		res, err := c.Query(context.Background(), "SELECT host, span_id FROM span_accounting")
		if err == nil && len(res.Rows) == 1 && fmt.Sprint(res.Rows[0]) == "[span-a a000000000000003]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the storage span's accounting did not arrive: %v %v\n%s", res, err, a.rec.log)
		}
	}
	a.stop()
	b.stop()

	fleet := tracePath(t, bin, "--source", ch.URL, "--source-db", "fleet", trace)
	onA := tracePath(t, bin, "--data", a.data, trace)
	onB := tracePath(t, bin, "--data", b.data, trace)
	if fleet.Spans != 3 || len(fleet.Roots) != 1 || fleet.Roots[0].Service != "front" {
		t.Fatalf("fleet path: want one tree of 3 spans rooted at front:\n%s", strings.Join(pathSpans(fleet), "\n"))
	}
	mid := fleet.Roots[0].Children
	if len(mid) != 1 || mid[0].Host != "span-b" || !mid[0].Remote || len(mid[0].Children) != 1 ||
		mid[0].Children[0].Host != "span-a" || !mid[0].Children[0].Remote {
		t.Errorf("fleet path: front (span-a) → middle (span-b) → storage (span-a), each hop remote:\n%s", strings.Join(pathSpans(fleet), "\n"))
	}
	if len(fleet.Coalesced) != 1 || fleet.Coalesced[0].Batch.Host != "span-b" || fleet.Coalesced[0].Share != 1 {
		t.Errorf("fleet path: the batch on span-b coalesces the request: %+v", fleet.Coalesced)
	}
	// Each agent's own view is partial: the spans it received, with the
	// spans whose parent is on the other host as roots.
	if onA.Spans != 2 || len(onA.Roots) != 2 || onB.Spans != 1 {
		t.Errorf("partial views: span-a %d spans in %d trees, span-b %d spans", onA.Spans, len(onA.Roots), onB.Spans)
	}
	// The fleet's spans are the union of the agents' (hosts, services,
	// parents and times alike; "remote" is a property of the tree).
	strip := func(ss []string) []string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = s[:strings.LastIndex(s, " remote=")]
		}
		sort.Strings(out)
		return out
	}
	union := strip(append(pathSpans(onA), pathSpans(onB)...))
	if got := strip(pathSpans(fleet)); strings.Join(got, "\n") != strings.Join(union, "\n") {
		t.Errorf("fleet spans are not the union of the agents':\nfleet:\n%s\nunion:\n%s", strings.Join(got, "\n"), strings.Join(union, "\n"))
	}
	// Rows of every span table arrived once, tagged with their host.
	for table, want := range map[string]string{
		"spans":           "span-a:2,span-b:2",
		"span_links":      "span-b:1",
		"span_events":     "span-a:1",
		"span_accounting": "span-a:1",
	} {
		res, err := c.Query(context.Background(), "SELECT host, count() FROM "+table+" GROUP BY host ORDER BY host")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range res.Rows {
			got = append(got, fmt.Sprintf("%v:%v", r[0], r[1]))
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%s in ClickHouse by host: %s, want %s", table, strings.Join(got, ","), want)
		}
	}
	// The latency graph reads the same spans.
	out, err := exec.Command(bin, "latency-graph", "--source", ch.URL, "--source-db", "fleet", "--json",
		"--service", "front", "--operation", "GET /item").Output()
	if err != nil {
		t.Fatalf("latency-graph --source: %v: %s", err, stderrOf(err))
	}
	var g requests.Graph
	if err := json.Unmarshal(out, &g); err != nil || g.Paths != 1 || len(g.Edges) < 4 {
		t.Errorf("fleet latency graph: %v, %d paths, %d edges: %s", err, g.Paths, len(g.Edges), out)
	}

	// holter ui --source gives the same through the API the Request traces
	// view draws from: the request listed with both hosts, its whole path
	// (what trace-path --source prints) and its latency graph.
	ui := serveUI(t, bin, "--source", ch.URL, "--source-db", "fleet")
	var list struct {
		Total  int64 `json:"total"`
		Traces []struct {
			TraceID   string   `json:"trace_id"`
			Service   string   `json:"service"`
			Operation string   `json:"operation"`
			Spans     int64    `json:"spans"`
			Hosts     []string `json:"hosts"`
			Accounted bool     `json:"accounted"`
		} `json:"traces"`
	}
	apiDecode(t, ui, "/api/traces", &list)
	listed := false
	for _, tr := range list.Traces {
		if tr.TraceID == trace {
			listed = tr.Service == "front" && tr.Operation == "GET /item" && tr.Spans == 3 &&
				strings.Join(tr.Hosts, ",") == "span-a,span-b" && tr.Accounted == fleet.Own.Accounted
		}
	}
	if list.Total != 2 || !listed {
		t.Errorf("fleet /api/traces: want the request (front GET /item, 3 spans on span-a and span-b, accounted as its path) and the batch: %+v", list)
	}
	var viaAPI requests.Path
	apiDecode(t, ui, "/api/traces/"+trace+"/path", &viaAPI)
	fleet.BuildNs, viaAPI.BuildNs = 0, 0
	if a, b := fmt.Sprintf("%+v", pathSpans(fleet)), fmt.Sprintf("%+v", pathSpans(&viaAPI)); a != b ||
		!reflect.DeepEqual(fleet.Own, viaAPI.Own) || !reflect.DeepEqual(fleet.Total, viaAPI.Total) || len(viaAPI.Coalesced) != 1 {
		t.Errorf("fleet /api/traces/{id}/path differs from trace-path --source:\n%s\n%s", a, b)
	}
	var viaAPIGraph requests.Graph
	apiDecode(t, ui, "/api/latency-graph?"+url.Values{"service": {"front"}, "operation": {"GET /item"}}.Encode(), &viaAPIGraph)
	if !reflect.DeepEqual(g, viaAPIGraph) {
		t.Errorf("fleet /api/latency-graph differs from latency-graph --source:\n%+v\n%+v", viaAPIGraph, g)
	}
	// The Request traces tab draws it (ui/test/fleetpaths.test.mjs).
	requireBrowser(t)
	runBrowserTests(t, "test/fleetpaths.test.mjs", "ui-fleet-paths", "HOLTER_URL="+ui.loginURL, "HOLTER_TRACE_ID="+trace,
		"HOLTER_HOSTS=span-a,span-b")
}

// apiDecode fetches an API answer of s into out, integers exact; it must
// succeed.
func apiDecode(t *testing.T, s uiSession, path string, out any) {
	t.Helper()
	code, b := s.get(t, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}
