package requests

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"

	"github.com/holter-dev/holter/internal/store"
)

// Querier answers read-only SQL; *store.Store is one.
type Querier = store.Querier

// Fleet marks q as the fleet's ClickHouse (a *clickhouse.Client), whose
// span tables hold the raw spans every host shipped, tagged with the host
// (internal/export), but not the rollups of pruned spans.
func Fleet(q Querier) Querier { return fleet{q} }

type fleet struct{ Querier }

// Span is a span with the kernel's account of it.
type Span struct {
	Host      string `json:"host"`
	TraceID   string `json:"trace_id"`
	SpanID    string `json:"span_id"`
	ParentID  string `json:"parent_span_id,omitempty"`
	Service   string `json:"service"`
	Operation string `json:"operation"`
	Kind      string `json:"kind"`
	StartNs   int64  `json:"start_ns"`
	EndNs     int64  `json:"end_ns"`
	Error     bool   `json:"error,omitempty"`
	Pid       uint32 `json:"pid,omitempty"`
	Tid       uint32 `json:"tid,omitempty"`
	Client    string `json:"client"`
	Kernel    *Cost  `json:"kernel,omitempty"`
}

// Cost is what the kernel recorded for a span's thread while it ran (or,
// for a request, the sum over its spans' own time).
type Cost struct {
	// Accounted is false when the span's process was not yet followed by
	// the kernel accounting when it ran: nothing is known then.
	Accounted     bool    `json:"accounted"`
	CPUNs         float64 `json:"cpu_ns"`
	SelfCPUNs     float64 `json:"self_cpu_ns"`
	BlockedNs     float64 `json:"blocked_ns"`
	SelfBlockedNs float64 `json:"self_blocked_ns"`
	RunnableNs    float64 `json:"runnable_ns"`
	// IOBytes, IONs and IOCount are the block I/O submitted in the span's
	// own time, not in its children's on its thread (a self cost).
	IOBytes float64 `json:"io_bytes"`
	IONs    float64 `json:"io_ns"`
	IOCount float64 `json:"io_count"`
	// DirtiedBytes is the page cache the span's thread made dirty (its
	// buffered writes); WritebackBytes the block writes of those files
	// that kernel flushers made later on its behalf (write-back), which
	// IOBytes, the I/O the thread submitted itself, does not include.
	DirtiedBytes   float64 `json:"dirtied_bytes"`
	WritebackBytes float64 `json:"writeback_bytes"`
	// BlockedSites is JSON: where the thread slept, longest first.
	BlockedSites string `json:"blocked_sites,omitempty"`
}

// loadSpans reads the spans of the traces cond selects (a condition on
// trace_id), with their accounting and their request's client. The SQL is
// plain enough for both backends — the host's store (DuckDB) and the
// fleet's ClickHouse, where a trace's spans may come from several hosts —
// and the rows are joined here, so paths and graphs are built by the same
// code from either: the client is the enduser.id (or client.id) some span
// of the trace carries, else the service of its root span (as the store's
// trace_clients view).
func loadSpans(ctx context.Context, q Querier, cond string) ([]Span, error) {
	res, err := q.Query(ctx, `SELECT host, trace_id, span_id, parent_span_id, service, name, kind, start_ns, end_ns,
		status_code, pid, tid, client FROM spans WHERE `+cond+` ORDER BY start_ns, span_id`)
	if err != nil {
		return nil, err
	}
	if len(res.Rows) == 0 {
		return nil, nil
	}
	acc, err := q.Query(ctx, `SELECT trace_id, span_id, accounted, cpu_ns, self_cpu_ns, blocked_ns, self_blocked_ns,
		runnable_ns, io_bytes, io_ns, io_count, blocked_sites, dirtied_bytes FROM span_accounting WHERE `+cond)
	if err != nil {
		return nil, err
	}
	costs := make(map[[2]string]*Cost, len(acc.Rows))
	for _, r := range acc.Rows {
		costs[[2]string{str(r[0]), str(r[1])}] = &Cost{Accounted: truth(r[2]), CPUNs: f64(r[3]), SelfCPUNs: f64(r[4]),
			BlockedNs: f64(r[5]), SelfBlockedNs: f64(r[6]), RunnableNs: f64(r[7]), IOBytes: f64(r[8]), IONs: f64(r[9]),
			IOCount: f64(r[10]), BlockedSites: str(r[11]), DirtiedBytes: f64(r[12])}
	}
	// Write-back is matched to spans from the host's thread activity, which
	// stays on the host: the fleet's spans carry what they dirtied only.
	if _, isFleet := q.(fleet); !isFleet && len(costs) > 0 {
		wb, err := q.Query(ctx, `SELECT trace_id, span_id, writeback_bytes FROM span_writeback WHERE `+cond)
		if err != nil {
			return nil, err
		}
		for _, r := range wb.Rows {
			if c := costs[[2]string{str(r[0]), str(r[1])}]; c != nil {
				c.WritebackBytes = f64(r[2])
			}
		}
	}
	type client struct{ tagged, root, first string }
	clients := map[string]*client{}
	out := make([]Span, 0, len(res.Rows))
	for _, r := range res.Rows {
		s := Span{Host: str(r[0]), TraceID: str(r[1]), SpanID: str(r[2]), ParentID: str(r[3]), Service: str(r[4]),
			Operation: str(r[5]), Kind: str(r[6]), StartNs: i64(r[7]), EndNs: i64(r[8]), Error: str(r[9]) == "error",
			Pid: uint32(i64(r[10])), Tid: uint32(i64(r[11])), Kernel: costs[[2]string{str(r[1]), str(r[2])}]}
		c := clients[s.TraceID]
		if c == nil {
			// Rows come by start time: the first is the earliest.
			c = &client{first: s.Service}
			clients[s.TraceID] = c
		}
		if tag := str(r[12]); tag > c.tagged {
			c.tagged = tag
		}
		if s.ParentID == "" && c.root == "" {
			c.root = s.Service
		}
		out = append(out, s)
	}
	for i := range out {
		c := clients[out[i].TraceID]
		out[i].Client = cmp.Or(c.tagged, c.root, c.first)
	}
	return out, nil
}

// truth reads a boolean as DuckDB (bool) or ClickHouse (UInt8) gives it.
func truth(v any) bool {
	if b, ok := v.(bool); ok {
		return b
	}
	return i64(v) != 0
}

// ErrBadTraceID is returned for a trace id that is not 32 hex digits.
var ErrBadTraceID = fmt.Errorf("a trace id is 32 hex digits")

func checkTraceID(id string) error {
	if b, err := hex.DecodeString(id); err != nil || len(b) != 16 {
		return fmt.Errorf("trace id %q: %w", id, ErrBadTraceID)
	}
	return nil
}

// sqlString quotes s as an SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

func i64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int32:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		return int64(x)
	case float64:
		return int64(x)
	case *big.Int:
		return x.Int64()
	case json.Number: // through the API, numbers stay exact
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return int64(f)
	}
	return 0
}

func f64(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return float64(i64(v))
}
