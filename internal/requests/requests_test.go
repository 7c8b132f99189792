package requests

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

const ms = int64(time.Millisecond)

// seed stores n read requests (client → front → storage, front taking
// 10+i ms before calling storage for 5 ms) starting at base, each with a
// charged storage span.
func seed(t *testing.T, st *store.Store, base int64, n int) []string {
	t.Helper()
	b := &store.SpanBatch{}
	var acct []store.SpanAccounting
	var ids []string
	for i := 0; i < n; i++ {
		tr := fmt.Sprintf("%032x", base+int64(i))
		ids = append(ids, tr)
		s0 := base + int64(i)*100*ms
		sp := func(id, parent, svc, name string, start, end int64) store.Span {
			return store.Span{Host: "h", TraceID: tr, SpanID: id, ParentSpanID: parent, Service: svc, Name: name, Kind: "server",
				StartNs: start, EndNs: end, StatusCode: "unset", Client: map[bool]string{true: "alice"}[parent == ""],
				Resource: "{}", Attributes: "{}", Scope: "t", Pid: 1, Tid: 2}
		}
		d := int64(i) * ms
		b.Spans = append(b.Spans,
			sp("0000000000000001", "", "client", "get", s0, s0+30*ms+d),
			sp("0000000000000002", "0000000000000001", "front", "GET /item", s0+1*ms, s0+29*ms+d),
			sp("0000000000000003", "0000000000000002", "storage", "read", s0+11*ms+d, s0+16*ms+d),
			sp("0000000000000004", "0000000000000002", "front", "write-back", s0+20*ms+d, s0+40*ms+d))
		acct = append(acct, store.SpanAccounting{TraceID: tr, SpanID: "0000000000000003", Accounted: true,
			CPUNs: 2 * ms, SelfCPUNs: 2 * ms, BlockedNs: 3 * ms, SelfBlockedNs: 3 * ms, IOBytes: 4096, IOCount: 1, BlockedSites: "[]"})
	}
	if err := st.WriteSpans(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteSpanAccounting(context.Background(), acct); err != nil {
		t.Fatal(err)
	}
	return ids
}

// openStore opens an empty store; base is the time test data starts at.
func openStore(t *testing.T) (st *store.Store, ctx context.Context, base int64) {
	t.Helper()
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, context.Background(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
}

func TestPathGraphAndPruning(t *testing.T) {
	st, ctx, base := openStore(t)
	ids := seed(t, st, base, 10)

	p, err := BuildPath(ctx, store.Plain(st), ids[3])
	if err != nil {
		t.Fatal(err)
	}
	front := p.Roots[0].Children[0]
	if front.Service != "front" || !front.Remote || len(front.Children) != 2 {
		t.Fatalf("path: %+v", front)
	}
	read, wb := front.Children[0], front.Children[1]
	if read.BeforeNs != 13*ms || !read.Remote || read.Async || !wb.Async || wb.AfterNs != -11*ms {
		t.Errorf("read before %d remote %v async %v; write-back async %v after %d", read.BeforeNs, read.Remote, read.Async, wb.Async, wb.AfterNs)
	}
	if p.Own.CPUNs != float64(2*ms) || p.Own.IOBytes != 4096 || p.Client != "alice" {
		t.Errorf("own cost %+v client %q", p.Own, p.Client)
	}
	if _, err := BuildPath(ctx, store.Plain(st), "nothex"); err == nil {
		t.Error("a bad trace id is accepted")
	}
	if _, err := BuildPath(ctx, store.Plain(st), strings.Repeat("ab", 16)); err == nil {
		t.Error("an unknown trace has a path")
	}

	w := Workload{Service: "front", Operation: "GET /item", Client: "alice"}
	raw, err := BuildGraph(ctx, store.Plain(st), w)
	if err != nil {
		t.Fatal(err)
	}
	edge := func(g *Graph, from, to string) GraphEdge {
		for _, e := range g.Edges {
			if e.From == from && e.To == to {
				return e
			}
		}
		t.Fatalf("no edge %s -> %s in %+v", from, to, g.Edges)
		return GraphEdge{}
	}
	// front waits 10+i ms before calling storage: p50 of 10..19 ms.
	e := edge(raw, "front:GET /item:start", "storage:read:start")
	if raw.Paths != 10 || e.N != 10 || e.MinNs != 10*ms || e.MaxNs != 19*ms || e.P50Ns != 14.5*float64(ms) || !e.Remote {
		t.Errorf("raw edge %+v over %d paths", e, raw.Paths)
	}
	if e := edge(raw, "storage:read:end", "front:GET /item:end"); e.MinNs != 13*ms {
		t.Errorf("return edge %+v", e)
	}
	var dot bytes.Buffer
	raw.WriteDOT(&dot)
	if !strings.Contains(dot.String(), `"front:GET /item:start" -> "storage:read:start" [label="p50 14.5ms`) {
		t.Errorf("DOT:\n%s", dot.String())
	}
	before, err := st.Query(ctx, `SELECT requests, errors, cpu_ns, io_bytes FROM service_counters WHERE service = 'storage'`)
	if err != nil {
		t.Fatal(err)
	}

	// Prune everything into 1 s rollups: the same questions, coarser.
	rep, err := Prune(ctx, st, time.Unix(0, base).Add(time.Hour), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Spans != 40 || rep.EdgeRollups == 0 {
		t.Fatalf("prune: %+v", rep)
	}
	if res, _ := st.Query(ctx, `SELECT count(*) FROM spans`); i64(res.Rows[0][0]) != 0 {
		t.Fatalf("%v raw spans left", res.Rows[0][0])
	}
	rolled, err := BuildGraph(ctx, store.Plain(st), w)
	if err != nil {
		t.Fatal(err)
	}
	re := edge(rolled, "front:GET /item:start", "storage:read:start")
	if rolled.Paths != 10 || rolled.RolledUp != 10 || re.N != 10 || re.MinNs != 10*ms || re.MaxNs != 19*ms ||
		math.Abs(re.P50Ns/e.P50Ns-1) > 0.1 || !re.Remote {
		t.Errorf("rolled-up edge %+v (raw p50 %v) over %d paths", re, e.P50Ns, rolled.Paths)
	}
	after, err := st.Query(ctx, `SELECT requests, errors, cpu_ns, io_bytes FROM service_counters WHERE service = 'storage'`)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(before.Rows) != fmt.Sprint(after.Rows) {
		t.Errorf("service counters before pruning %v, after %v", before.Rows, after.Rows)
	}
	res, err := st.Query(ctx, `SELECT requests, cpu_ns, io_bytes FROM client_demand WHERE client = 'alice'`)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 || i64(res.Rows[0][0]) != 10 || f64(res.Rows[0][1]) != float64(20*ms) || f64(res.Rows[0][2]) != 40960 {
		t.Errorf("client demand from rollups: %v", res.Rows)
	}
	var metrics bytes.Buffer
	if err := WriteMetrics(ctx, store.Plain(st), &metrics); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(metrics.String(), `holter_client_requests_total{client="alice"} 10`) {
		t.Errorf("metrics:\n%s", metrics.String())
	}
}

func TestSelfOverlapLeavesOutChildren(t *testing.T) {
	span := interval{0, 100}
	kids := []interval{{10, 30}, {20, 40}, {90, 120}}
	if got := selfOverlap(interval{0, 100}, span, kids); got != 100-30-10 {
		t.Errorf("self overlap %d, want 60", got)
	}
	if got := selfOverlap(interval{35, 95}, span, kids); got != 60-5-5 {
		t.Errorf("self overlap %d, want 50", got)
	}
}

// fixedTracker says every process of host "h" was accounted from the
// start and every interval up to watermark is stored.
type fixedTracker struct{ watermark int64 }

func (f fixedTracker) Since(host string, _ uint32) (int64, bool) { return 0, host == "h" }
func (f fixedTracker) Watermark() int64                          { return f.watermark }

// Page cache a span's thread dirtied is charged to it (not to its parent
// on the same thread), and so is the write-back a flusher made of it
// later; both reach the path, the counter views, and survive pruning.
func TestWritebackChargedToDirtyingSpan(t *testing.T) {
	st, ctx, base := openStore(t)
	tr := fmt.Sprintf("%032x", 42)
	sp := func(id, parent, name string, start, end int64) store.Span {
		return store.Span{Host: "h", TraceID: tr, SpanID: id, ParentSpanID: parent, Service: "db", Name: name, Kind: "server",
			StartNs: base + start, EndNs: base + end, StatusCode: "unset", Client: map[bool]string{true: "bob"}[parent == ""],
			Resource: "{}", Attributes: "{}", Scope: "t", Pid: 1, Tid: 2, ReceivedNs: time.Now().UnixNano()}
	}
	b := &store.SpanBatch{Spans: []store.Span{sp("0000000000000001", "", "put", 0, 100*ms), sp("0000000000000002", "0000000000000001", "append", 40*ms, 60*ms)}}
	if err := st.WriteSpans(ctx, b); err != nil {
		t.Fatal(err)
	}
	act := func(kind string, start, end, bytes int64, ino uint64, dirtied int64) store.ThreadActivity {
		a := store.ThreadActivity{Host: "h", Pid: 1, Tid: 2, Kind: kind, StartNs: base + start, EndNs: base + end, Bytes: uint64(bytes), Ino: ino}
		if dirtied != 0 {
			a.DirtiedNs = base + dirtied
		}
		return a
	}
	err := st.WriteThreadActivity(ctx, []store.ThreadActivity{
		act("cpu", 0, 100*ms, 0, 0, 0),
		act("dirty", 10*ms, 11*ms, 8192, 7, 0),
		act("dirty", 50*ms, 50*ms, 4096, 8, 0),
		// Flushed by a kernel worker seconds later.
		act("writeback", 5000*ms, 5001*ms, 8192, 7, 11*ms),
		act("writeback", 5000*ms, 5002*ms, 4096, 8, 50*ms),
		act("writeback", 5000*ms, 5002*ms, 4096, 9, 200*ms), // dirtied after both spans
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Account(ctx, st, fixedTracker{base + 10_000*ms}, time.Now().UnixNano()); err != nil || n != 2 {
		t.Fatalf("accounted %d spans: %v", n, err)
	}
	res, err := st.Query(ctx, `SELECT span_id, dirtied_bytes, writeback_bytes, writeback_count, io_bytes FROM span_costs ORDER BY span_id`)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int64{{8192, 8192, 1, 0}, {4096, 4096, 1, 0}}
	for i, r := range res.Rows {
		if got := []int64{i64(r[1]), i64(r[2]), i64(r[3]), i64(r[4])}; fmt.Sprint(got) != fmt.Sprint(want[i]) {
			t.Errorf("span %v: dirtied, written back, write-backs, own I/O = %v, want %v", r[0], got, want[i])
		}
	}
	p, err := BuildPath(ctx, store.Plain(st), tr)
	if err != nil {
		t.Fatal(err)
	}
	if p.Own.DirtiedBytes != 12288 || p.Own.WritebackBytes != 12288 {
		t.Errorf("path own cost %+v, want 12288 bytes dirtied and written back", p.Own)
	}
	var text bytes.Buffer
	p.WriteText(&text)
	if !strings.Contains(text.String(), "dirtied 8192 bytes of page cache, 8192 bytes written back for it") {
		t.Errorf("path text lacks the write-back:\n%s", text.String())
	}
	views := func(queries ...string) string {
		var out []string
		for _, q := range queries {
			res, err := st.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Rows) != 1 {
				t.Fatalf("%s: %v", q, res.Rows)
			}
			out = append(out, fmt.Sprint(f64(res.Rows[0][0]), f64(res.Rows[0][1])))
		}
		return strings.Join(out, "; ")
	}
	perService := `SELECT sum(dirtied_bytes), sum(writeback_bytes) FROM service_counters`
	perClient := `SELECT dirtied_bytes, writeback_bytes FROM client_demand WHERE client = 'bob'`
	if got := views(`SELECT dirtied_bytes, writeback_bytes FROM request_demand`, perService, perClient); got != "12288 12288; 12288 12288; 12288 12288" {
		t.Errorf("request_demand; service_counters; client_demand dirtied and written back: %s", got)
	}
	if _, err := Prune(ctx, st, time.Unix(0, base+time.Hour.Nanoseconds()), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := views(perService, perClient); got != "12288 12288; 12288 12288" {
		t.Errorf("after pruning, service_counters; client_demand: %s", got)
	}
}

// A file several requests dirtied before one flush has its write-back
// split among them by the bytes each dirtied; the next flush of the file
// is charged only for what was dirtied since the first.
func TestWritebackSplitAmongDirtiers(t *testing.T) {
	st, ctx, base := openStore(t)
	var spans []store.Span
	var acts []store.ThreadActivity
	// Three requests on three threads append to one log file: 8, 4 and
	// 4 KiB, the third after the first flush.
	for i, r := range []struct {
		start, dirtyBytes int64
	}{{0, 8192}, {100 * ms, 4096}, {6000 * ms, 4096}} {
		tid := uint32(10 + i)
		spans = append(spans, store.Span{Host: "h", TraceID: fmt.Sprintf("%032x", i+1), SpanID: fmt.Sprintf("%016x", i+1),
			Service: "log", Name: "append", Kind: "server", StartNs: base + r.start, EndNs: base + r.start + 50*ms,
			StatusCode: "unset", Resource: "{}", Attributes: "{}", Scope: "t", Pid: 1, Tid: tid, ReceivedNs: time.Now().UnixNano()})
		acts = append(acts, store.ThreadActivity{Host: "h", Pid: 1, Tid: tid, Kind: "cpu", StartNs: base + r.start, EndNs: base + r.start + 50*ms},
			store.ThreadActivity{Host: "h", Pid: 1, Tid: tid, Kind: "dirty", StartNs: base + r.start + 10*ms, EndNs: base + r.start + 20*ms,
				Bytes: uint64(r.dirtyBytes), Ino: 7, Dev: "8:1"})
	}
	wb := func(at, dirtied int64, bytes uint64, tid uint32) store.ThreadActivity {
		return store.ThreadActivity{Host: "h", Pid: 1, Tid: tid, Kind: "writeback", StartNs: base + at, EndNs: base + at + 4*ms,
			Bytes: bytes, Ino: 7, Dev: "8:1", DirtiedNs: base + dirtied}
	}
	// The first flush writes the 12 KiB in two requests, both naming the
	// last dirtier (thread 11); the second flushes the third request's.
	acts = append(acts, wb(5000*ms, 120*ms, 8192, 11), wb(5004*ms, 120*ms, 4096, 11), wb(9000*ms, 6020*ms, 4096, 12))
	if err := st.WriteSpans(ctx, &store.SpanBatch{Spans: spans}); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteThreadActivity(ctx, acts); err != nil {
		t.Fatal(err)
	}
	if n, err := Account(ctx, st, fixedTracker{base + 20_000*ms}, time.Now().UnixNano()); err != nil || n != 3 {
		t.Fatalf("accounted %d spans: %v", n, err)
	}
	res, err := st.Query(ctx, `SELECT span_id, dirtied_bytes, writeback_bytes, writeback_count, writeback_ns FROM span_costs ORDER BY span_id`)
	if err != nil {
		t.Fatal(err)
	}
	// 12 KiB flushed for 8 KiB and 4 KiB dirtied: two thirds and one third
	// of each of the two write-backs (and of their 8 ms).
	want := []string{"[8192 8192 2 5333333]", "[4096 4096 2 2666667]", "[4096 4096 1 4000000]"}
	for i, r := range res.Rows {
		if got := fmt.Sprint([]int64{i64(r[1]), i64(r[2]), i64(r[3]), i64(r[4])}); i >= len(want) || got != want[i] {
			t.Errorf("span %v: dirtied, written back, write-backs, write-back ns = %v, want %v", r[0], got, want[min(i, len(want)-1)])
		}
	}
}

// A summary row (the recorder stores them) is charged in proportion to
// the part of it a span covers; an exact interval by its overlap.
func TestChargesSummariesInProportion(t *testing.T) {
	const ms = 1_000_000
	rows := []store.ThreadActivity{
		{Kind: "cpu", StartNs: 0, EndNs: 100 * ms, Ns: 40 * ms},
		{Kind: "blocked", StartNs: 0, EndNs: 100 * ms, Ns: 20 * ms, KStack: []string{"io_schedule", "folio_wait_bit"}},
		{Kind: "runnable", StartNs: 60 * ms, EndNs: 70 * ms},
	}
	var a store.SpanAccounting
	charge(&a, interval{50 * ms, 100 * ms}, []interval{{90 * ms, 100 * ms}}, rows)
	if a.CPUNs != 20*ms || a.SelfCPUNs != 16*ms || a.BlockedNs != 10*ms || a.SelfBlockedNs != 8*ms ||
		a.RunnableNs != 10*ms || a.SelfRunnableNs != 10*ms {
		t.Errorf("charged %+v, want cpu 20 ms (self 16), blocked 10 ms (self 8), runnable 10 ms", a)
	}
	if a.BlockedSites != `[{"site":"io_schedule \u003c folio_wait_bit","ns":8000000}]` {
		t.Errorf("blocked sites %s", a.BlockedSites)
	}
}

// Spans held in memory (requests.Held, fed by the receiver's commits) are
// charged by Pass as the store's pass charges them — self shares leaving
// out children on the same thread, blocked time, I/O — once each, and a
// span that started before memory held every span is charged from the
// store in the same pass. A span of another host that names the same
// process and thread ids is not accounted.
func TestHeldSpansChargedAsFromTheStore(t *testing.T) {
	now := time.Now().UnixNano()
	var spans []store.Span
	var acts []store.ThreadActivity
	for i := range 3 {
		tid, trace := uint32(20+i), fmt.Sprintf("%032x", 100+i)
		at := int64(i) * 500 * ms
		sp := func(id, parent string, start, end int64) store.Span {
			return store.Span{Host: "h", TraceID: trace, SpanID: id, ParentSpanID: parent, Service: "svc", Name: "op", Kind: "server",
				StartNs: start, EndNs: end, StatusCode: "unset", Resource: "{}", Attributes: "{}", Scope: "t", Pid: 7, Tid: tid, ReceivedNs: now}
		}
		spans = append(spans, sp(fmt.Sprintf("%016x", 10*i+1), "", at, at+100*ms), sp(fmt.Sprintf("%016x", 10*i+2), fmt.Sprintf("%016x", 10*i+1), at+20*ms, at+60*ms))
		acts = append(acts,
			store.ThreadActivity{Host: "h", Pid: 7, Tid: tid, Kind: "cpu", StartNs: at, EndNs: at + 30*ms},
			store.ThreadActivity{Host: "h", Pid: 7, Tid: tid, Kind: "blocked", StartNs: at + 30*ms, EndNs: at + 50*ms, WakeNs: at + 45*ms,
				KStack: []string{"schedule", "io_schedule"}, SleepState: 2},
			store.ThreadActivity{Host: "h", Pid: 7, Tid: tid, Kind: "io", StartNs: at + 31*ms, EndNs: at + 44*ms, Bytes: 4096, Op: "R", Dev: "8:0"},
			store.ThreadActivity{Host: "h", Pid: 7, Tid: tid, Kind: "cpu", StartNs: at + 50*ms, EndNs: at + 100*ms})
	}
	// The same process and thread ids on another host: not accounted here.
	other := spans[2]
	other.Host, other.SpanID = "other", fmt.Sprintf("%016x", 99)
	spans = append(spans, other)
	charges := func(held bool) []string {
		st, ctx, base := openStore(t)
		batch := &store.SpanBatch{Spans: slices.Clone(spans)}
		for i := range batch.Spans {
			batch.Spans[i].StartNs += base
			batch.Spans[i].EndNs += base
		}
		as := slices.Clone(acts)
		for i := range as {
			as[i].StartNs += base
			as[i].EndNs += base
			if as[i].WakeNs != 0 {
				as[i].WakeNs += base
			}
		}
		if err := st.WriteSpans(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if err := st.WriteThreadActivity(ctx, as); err != nil {
			t.Fatal(err)
		}
		tr := fixedTracker{base + 10_000*ms}
		if held {
			// Memory holds every span that started from the second
			// request on: the first is left to the store.
			h := NewHeld(base+500*ms, time.Hour.Nanoseconds())
			h.Add(batch)
			for pass := 1; pass <= 2; pass++ {
				n, err := Pass(ctx, st, tr, h, now, pass)
				if err != nil {
					t.Fatal(err)
				}
				if want := map[int]int{1: 7, 2: 0}[pass]; n != want {
					t.Errorf("pass %d charged %d spans, want %d", pass, n, want)
				}
			}
		} else if _, err := Account(ctx, st, tr, now); err != nil {
			t.Fatal(err)
		}
		res, err := st.Query(ctx, `SELECT span_id, accounted, cpu_ns, self_cpu_ns, blocked_ns, self_blocked_ns, runnable_ns,
			self_runnable_ns, io_bytes, io_count, blocked_sites FROM span_accounting ORDER BY span_id`)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range res.Rows {
			out = append(out, fmt.Sprint(r...))
		}
		return out
	}
	fromStore, fromMemory := charges(false), charges(true)
	t.Logf("charged from the store:\n%s", strings.Join(fromStore, "\n"))
	if len(fromStore) != 7 || !slices.Equal(fromStore, fromMemory) {
		t.Errorf("charged from memory:\n%s\nwant the store's", strings.Join(fromMemory, "\n"))
	}
	if len(fromStore) == 7 && !strings.HasPrefix(fromStore[6], "0000000000000063false 0 0 ") {
		t.Errorf("the other host's span was charged: %s", fromStore[6])
	}
}

// The block I/O a child span submitted on its parent's thread is the
// child's alone: a trace whose only I/O span wrote 528 KiB totals 528 KiB
// in its path, request_demand, service_counters, client_demand and
// holter_client_io_bytes_total, not twice that.
func TestIOChargedOnce(t *testing.T) {
	st, ctx, base := openStore(t)
	tr := fmt.Sprintf("%032x", 528)
	sp := func(id, parent, name string, start, end int64) store.Span {
		return store.Span{Host: "h", TraceID: tr, SpanID: id, ParentSpanID: parent, Service: "api", Name: name, Kind: "server",
			StartNs: base + start, EndNs: base + end, StatusCode: "unset", Client: map[bool]string{true: "carol"}[parent == ""],
			Resource: "{}", Attributes: "{}", Scope: "t", Pid: 1, Tid: 2, ReceivedNs: time.Now().UnixNano()}
	}
	b := &store.SpanBatch{Spans: []store.Span{sp("0000000000000001", "", "upload", 0, 100*ms), sp("0000000000000002", "0000000000000001", "write", 20*ms, 60*ms)}}
	if err := st.WriteSpans(ctx, b); err != nil {
		t.Fatal(err)
	}
	const written = 528 << 10
	err := st.WriteThreadActivity(ctx, []store.ThreadActivity{
		{Host: "h", Pid: 1, Tid: 2, Kind: "cpu", StartNs: base, EndNs: base + 100*ms},
		{Host: "h", Pid: 1, Tid: 2, Kind: "io", StartNs: base + 30*ms, EndNs: base + 40*ms, Bytes: written, Op: "W", Dev: "8:0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Account(ctx, st, fixedTracker{base + 10_000*ms}, time.Now().UnixNano()); err != nil || n != 2 {
		t.Fatalf("accounted %d spans: %v", n, err)
	}
	res, err := st.Query(ctx, `SELECT span_id, io_bytes, io_count FROM span_accounting ORDER BY span_id`)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(res.Rows); got != fmt.Sprint([][]any{{"0000000000000001", int64(0), int64(0)}, {"0000000000000002", int64(written), int64(1)}}) {
		t.Errorf("span_accounting io_bytes, io_count: %v, want the write span's alone", got)
	}
	p, err := BuildPath(ctx, store.Plain(st), tr)
	if err != nil {
		t.Fatal(err)
	}
	if p.Own.IOBytes != written || p.Total.IOBytes != written {
		t.Errorf("path own %v, total %v bytes of I/O, want %d", p.Own.IOBytes, p.Total.IOBytes, written)
	}
	for _, q := range []string{`SELECT io_bytes FROM request_demand`, `SELECT io_bytes FROM client_demand WHERE client = 'carol'`,
		`SELECT sum(io_bytes) FROM service_counters`} {
		res, err := st.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Rows) != 1 || f64(res.Rows[0][0]) != written {
			t.Errorf("%s: %v, want %d", q, res.Rows, written)
		}
	}
	var m bytes.Buffer
	if err := WriteMetrics(ctx, store.Plain(st), &m); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("holter_client_io_bytes_total{client=\"carol\"} %d\n", written); !strings.Contains(m.String(), want) {
		t.Errorf("/metrics lacks %q:\n%s", want, m.String())
	}
}
