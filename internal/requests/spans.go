package requests

import (
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
	IOBytes       float64 `json:"io_bytes"`
	IONs          float64 `json:"io_ns"`
	IOCount       float64 `json:"io_count"`
	// DirtiedBytes is the page cache the span's thread made dirty (its
	// buffered writes); WritebackBytes the block writes of those files
	// that kernel flushers made later on its behalf (write-back), which
	// IOBytes, the I/O the thread submitted itself, does not include.
	DirtiedBytes   float64 `json:"dirtied_bytes"`
	WritebackBytes float64 `json:"writeback_bytes"`
	// BlockedSites is JSON: where the thread slept, longest first.
	BlockedSites string `json:"blocked_sites,omitempty"`
}

const spanColumns = `host, trace_id, span_id, parent_span_id, service, operation, kind, start_ns, end_ns, error,
	pid, tid, client, accounted, cpu_ns, self_cpu_ns, blocked_ns, self_blocked_ns, runnable_ns, io_bytes, io_ns,
	io_count, blocked_sites, dirtied_bytes, writeback_bytes`

// loadSpans reads spans (with their accounting) from span_costs.
func loadSpans(ctx context.Context, q Querier, where string) ([]Span, error) {
	res, err := q.Query(ctx, `SELECT `+spanColumns+` FROM span_costs WHERE `+where+` ORDER BY start_ns, span_id`)
	if err != nil {
		return nil, err
	}
	out := make([]Span, 0, len(res.Rows))
	for _, r := range res.Rows {
		s := Span{Host: str(r[0]), TraceID: str(r[1]), SpanID: str(r[2]), ParentID: str(r[3]), Service: str(r[4]),
			Operation: str(r[5]), Kind: str(r[6]), StartNs: i64(r[7]), EndNs: i64(r[8]), Error: r[9] == true,
			Pid: uint32(i64(r[10])), Tid: uint32(i64(r[11])), Client: str(r[12])}
		if r[13] != nil {
			s.Kernel = &Cost{Accounted: r[13] == true, CPUNs: f64(r[14]), SelfCPUNs: f64(r[15]), BlockedNs: f64(r[16]),
				SelfBlockedNs: f64(r[17]), RunnableNs: f64(r[18]), IOBytes: f64(r[19]), IONs: f64(r[20]),
				IOCount: f64(r[21]), BlockedSites: str(r[22]), DirtiedBytes: f64(r[23]), WritebackBytes: f64(r[24])}
		}
		out = append(out, s)
	}
	return out, nil
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
