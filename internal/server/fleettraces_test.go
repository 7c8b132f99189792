package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/requests"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestFleetTraces ships the spans of two hosts, each from its own store, to
// a real ClickHouse server: one request whose spans are split across them
// (front on fa, middle and storage on fb), one that stays on fa, and a
// batch on fb coalescing both. The fleet API lists the requests, draws the
// split one's whole causal path and its workload's latency graph — the
// same answers, to the byte, as a store holding every host's spans, and
// the same path holter trace-path --source builds from ClickHouse — while
// either host's own store knows only its part.
func TestFleetTraces(t *testing.T) {
	chServer := testutil.StartClickHouse(t, "127.0.0.1")
	ctx := context.Background()
	open := func() *store.Store {
		st, err := store.Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	stA, stB, all := open(), open(), open()
	ms := int64(time.Millisecond)
	t0 := minute(10)
	tr := func(n int) string { return fmt.Sprintf("%032x", 0xc0+n) }
	span := func(host, trace, id, parent, svc, name string, start, end int64, status string) store.Span {
		return store.Span{Host: host, TraceID: trace, SpanID: id, ParentSpanID: parent, Service: svc, Name: name, Kind: "server",
			StartNs: start, EndNs: end, StatusCode: status, Scope: "t", Resource: "{}", Attributes: "{}", Pid: 7, Tid: 8,
			Client: map[bool]string{true: "alice"}[trace == tr(1) && parent == ""]}
	}
	acct := func(trace, id string, cpu, blocked, io int64) store.SpanAccounting {
		return store.SpanAccounting{TraceID: trace, SpanID: id, Accounted: true, CPUNs: cpu * ms, SelfCPUNs: cpu * ms,
			BlockedNs: blocked * ms, SelfBlockedNs: blocked * ms, IOBytes: io, IONs: io * 1000, IOCount: io / 512, BlockedSites: "[]"}
	}
	a := &store.SpanBatch{Spans: []store.Span{
		span("fa", tr(1), "00000000000000a1", "", "front", "GET /checkout", t0, t0+40*ms, "unset"),
		span("fa", tr(2), "00000000000000a2", "", "front", "GET /home", t0+2*time.Second.Nanoseconds(), t0+2*time.Second.Nanoseconds()+9*ms, "unset"),
		span("fa", tr(2), "00000000000000a3", "00000000000000a2", "storage", "read", t0+2*time.Second.Nanoseconds()+ms, t0+2*time.Second.Nanoseconds()+5*ms, "error"),
	}}
	b := &store.SpanBatch{Spans: []store.Span{
		span("fb", tr(1), "00000000000000b1", "00000000000000a1", "middle", "reserve", t0+3*ms, t0+31*ms, "unset"),
		span("fb", tr(1), "00000000000000b2", "00000000000000b1", "storage", "write", t0+6*ms, t0+20*ms, "unset"),
		span("fb", tr(3), "00000000000000b3", "", "storage", "flush", t0+3*time.Second.Nanoseconds(), t0+3*time.Second.Nanoseconds()+8*ms, "unset"),
	}, Links: []store.SpanLink{
		{TraceID: tr(3), SpanID: "00000000000000b3", LinkedTraceID: tr(1), LinkedSpanID: "00000000000000b2", Weight: 1, Attributes: "{}"},
		{TraceID: tr(3), SpanID: "00000000000000b3", LinkedTraceID: tr(2), LinkedSpanID: "00000000000000a3", Weight: 3, Attributes: "{}"},
	}}
	acctA := []store.SpanAccounting{acct(tr(1), "00000000000000a1", 2, 1, 0), acct(tr(2), "00000000000000a2", 1, 0, 0),
		acct(tr(2), "00000000000000a3", 3, 2, 1024)}
	acctB := []store.SpanAccounting{acct(tr(1), "00000000000000b1", 4, 0, 0), acct(tr(1), "00000000000000b2", 5, 6, 2048),
		acct(tr(3), "00000000000000b3", 8, 4, 4096)}
	for _, w := range []struct {
		st    *store.Store
		spans []*store.SpanBatch
		acct  [][]store.SpanAccounting
	}{{stA, []*store.SpanBatch{a}, [][]store.SpanAccounting{acctA}}, {stB, []*store.SpanBatch{b}, [][]store.SpanAccounting{acctB}},
		{all, []*store.SpanBatch{a, b}, [][]store.SpanAccounting{acctA, acctB}}} {
		for _, sb := range w.spans {
			if err := w.st.WriteSpans(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		for _, ac := range w.acct {
			if err := w.st.WriteSpanAccounting(ctx, ac); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each agent ships its own store as it commits an epoch.
	synthetic{host: "fa", startNs: synthStart, epoch: time.Minute, epochs: 1, samplesPerEpoc: 3}.write(t, stA)
	synthetic{host: "fb", startNs: synthStart, epoch: time.Minute, epochs: 1, samplesPerEpoc: 3}.write(t, stB)
	ch, err := clickhouse.New(chServer.URL, &clickhouse.Options{Database: "fleettraces"})
	if err != nil {
		t.Fatal(err)
	}
	shipAll(t, stA, ch, 1, "fa")
	shipAll(t, stB, ch, 1, "fb")
	local := startServer(t, Options{Store: all})
	fleet := startServer(t, Options{Store: Fleet{Client: ch}})

	// The fleet answers as a store with every host's spans does.
	in := func(from, to int64) string { return fmt.Sprintf("from=%d&to=%d", from, to) }
	var paths []string
	for _, q := range []string{"", "service=middle", "service=front&operation=" + url.QueryEscape("GET /checkout"),
		"service=storage&operation=read", "client=alice", "client=front", "client=storage", "limit=1", "limit=2",
		in(t0, t0+time.Second.Nanoseconds()), in(t0+time.Second.Nanoseconds(), minute(20)), in(minute(20), minute(30))} {
		paths = append(paths, "/api/traces?"+q)
	}
	for i := 1; i <= 3; i++ {
		paths = append(paths, "/api/traces/"+tr(i)+"/path")
	}
	paths = append(paths, "/api/traces/"+tr(9)+"/path", "/api/traces/xyz/path", "/api/traces?operation=read", "/api/traces?limit=0",
		"/api/latency-graph?service=front&operation="+url.QueryEscape("GET /checkout"),
		"/api/latency-graph?service=middle&operation=reserve", "/api/latency-graph?service=storage&operation=flush",
		"/api/latency-graph?service=front&operation="+url.QueryEscape("GET /checkout")+"&client=alice",
		"/api/latency-graph?service=front")
	var tookL, tookF time.Duration
	for _, p := range paths {
		t0 := time.Now()
		codeL, ansL := getJSON(t, local+p)
		t1 := time.Now()
		codeF, ansF := getJSON(t, fleet+p)
		tookL, tookF = tookL+t1.Sub(t0), tookF+time.Since(t1)
		for _, ans := range []any{ansL, ansF} {
			if m, ok := ans.(map[string]any); ok {
				delete(m, "build_ns") // how long it took
			}
		}
		if codeL != codeF || !reflect.DeepEqual(ansL, ansF) {
			l, _ := json.Marshal(ansL)
			f, _ := json.Marshal(ansF)
			t.Errorf("GET %s\nstore of all hosts %d: %.3000s\nClickHouse         %d: %.3000s", p, codeL, l, codeF, f)
		}
	}

	t.Logf("%d requests answered alike; the store of all hosts in %v, ClickHouse in %v (%.1fx)", len(paths), tookL, tookF,
		tookF.Seconds()/tookL.Seconds())

	// The split request is listed with both hosts and the whole demand
	// charged to it: its spans' own plus a quarter of the batch.
	var list TracesAnswer
	if code := fetch(t, fleet+"/api/traces", &list); code != 200 || list.Total != 3 || len(list.Traces) != 3 {
		t.Fatalf("fleet traces: %d %+v", code, list)
	}
	var split TraceSummary
	for _, s := range list.Traces {
		if s.TraceID == tr(1) {
			split = s
		}
	}
	msf := float64(ms)
	if split.Service != "front" || split.Operation != "GET /checkout" || split.Client != "alice" || split.Spans != 3 ||
		!slices.Equal(split.Hosts, []string{"fa", "fb"}) || split.DurationNs != 40*ms || !split.Accounted ||
		split.CPUNs != 11*msf+2*msf || split.BilledCPU != 2*msf || split.BlockedNs != 7*msf+msf || split.IOBytes != 2048+1024 {
		t.Errorf("the split request in the fleet's list: %+v", split)
	}
	if !reflect.DeepEqual(list.Workloads, []TraceWorkload{{"front", "GET /checkout", 1}, {"front", "GET /home", 1}, {"storage", "flush", 1}}) {
		t.Errorf("fleet workloads %+v", list.Workloads)
	}

	// Its path is the whole tree, front → middle → storage, each span with
	// its host and the hops marked remote: what trace-path --source builds.
	var p requests.Path
	if code := fetch(t, fleet+"/api/traces/"+tr(1)+"/path", &p); code != 200 {
		t.Fatalf("fleet path: %d", code)
	}
	var shape []string
	var walk func(n *requests.Node, depth int)
	walk = func(n *requests.Node, depth int) {
		shape = append(shape, fmt.Sprintf("%s%s %s@%s remote=%v", strings.Repeat("  ", depth), n.Service, n.Operation, n.Host, n.Remote))
		for _, c := range n.Children {
			walk(c, depth+1)
		}
	}
	for _, r := range p.Roots {
		walk(r, 0)
	}
	want := []string{"front GET /checkout@fa remote=false", "  middle reserve@fb remote=true", "    storage write@fb remote=true"}
	if !slices.Equal(shape, want) || p.Spans != 3 || len(p.Coalesced) != 1 || p.Coalesced[0].Share != 0.25 ||
		p.Coalesced[0].Batch.Host != "fb" {
		t.Errorf("fleet path of the split request:\n%s\nwant\n%s\n%+v", strings.Join(shape, "\n"), strings.Join(want, "\n"), p)
	}
	cli, err := requests.BuildPath(ctx, requests.Fleet(ch), tr(1))
	if err != nil {
		t.Fatal(err)
	}
	cli.BuildNs, p.BuildNs = 0, 0
	if !reflect.DeepEqual(cli, &p) {
		c, _ := json.Marshal(cli)
		f, _ := json.Marshal(p)
		t.Errorf("trace-path --source and the fleet API disagree:\n%s\n%s", c, f)
	}
	// Each host's own store has only its part.
	for _, own := range []struct {
		st    *store.Store
		spans int
	}{{stA, 1}, {stB, 2}} {
		if op, err := requests.BuildPath(ctx, store.Plain(own.st), tr(1)); err != nil || op.Spans != own.spans {
			t.Errorf("a host's own path of the split request: %v %+v, want %d spans", err, op, own.spans)
		}
	}

	// Its workload's latency graph crosses the hosts: one path with the
	// remote hops in it.
	var g requests.Graph
	if code := fetch(t, fleet+"/api/latency-graph?service=front&operation="+url.QueryEscape("GET /checkout"), &g); code != 200 || g.Paths != 1 {
		t.Fatalf("fleet latency graph: %d %+v", code, g)
	}
	remote := 0
	for _, e := range g.Edges {
		if e.Remote {
			remote++
		}
	}
	if remote < 2 {
		t.Errorf("fleet latency graph: want the front→middle and middle→storage hops remote: %+v", g.Edges)
	}
}
