package server

import (
	"fmt"
	"math"
	"net/http"
	"strings"
)

// Bounds of GET /api/traces.
const (
	defaultTraceLimit = 100
	maxTraceLimit     = 1000
	maxWorkloads      = 100
)

// TraceSummary is one request in the list of recent traces: its root span's
// service and operation, and the kernel demand charged to it (its own
// spans' plus the billed shares of work it was coalesced into, as the
// request_demand view counts it).
type TraceSummary struct {
	TraceID    string  `json:"trace_id"`
	Client     string  `json:"client"`
	Service    string  `json:"service"`
	Operation  string  `json:"operation"`
	StartNs    int64   `json:"start_ns"`
	DurationNs int64   `json:"duration_ns"`
	Error      bool    `json:"error"`
	Spans      int64   `json:"spans"`
	Accounted  bool    `json:"accounted"`
	CPUNs      float64 `json:"cpu_ns"`
	BilledCPU  float64 `json:"billed_cpu_ns"`
	BlockedNs  float64 `json:"blocked_ns"`
	IOBytes    float64 `json:"io_bytes"`
	IONs       float64 `json:"io_ns"`
}

// TraceWorkload is a service and operation requests entered through (a
// workload of the latency graph), with how many traces did in the range.
type TraceWorkload struct {
	Service   string `json:"service"`
	Operation string `json:"operation"`
	Traces    int64  `json:"traces"`
}

// TracesAnswer lists recent traces, newest first.
type TracesAnswer struct {
	Total     int64           `json:"total"`
	Traces    []TraceSummary  `json:"traces"`
	Workloads []TraceWorkload `json:"workloads"`
}

// traces lists stored traces. service and operation select traces with a
// span of that service (and operation); client the requests of one client;
// from and to (both or neither) traces starting in the range.
func (a *api) traces(r *http.Request) (any, error) {
	p := newParams(r.URL.Query(), "from", "to", "service", "operation", "client", "limit")
	q := r.URL.Query()
	var from, to int64 = 0, math.MaxInt64
	if q.Has("from") || q.Has("to") {
		from, to = p.timeRange("from", "to")
	}
	service, operation, client := p.str("service"), p.str("operation"), p.str("client")
	limit, ok := p.int("limit", 1, maxTraceLimit)
	if !ok {
		limit = defaultTraceLimit
	}
	if p.err == nil && operation != "" && service == "" {
		p.fail("operation: give service= with it (an operation is named within a service)")
	}
	if p.err != nil {
		return nil, p.err
	}
	where := []string{"d.start_ns >= $1", "d.start_ns < $2"}
	args := []any{from, to}
	if service != "" {
		args = append(args, service)
		cond := fmt.Sprintf("s.service = $%d", len(args))
		if operation != "" {
			args = append(args, operation)
			cond += fmt.Sprintf(" AND s.name = $%d", len(args))
		}
		where = append(where, "d.trace_id IN (SELECT s.trace_id FROM spans s WHERE "+cond+")")
	}
	if client != "" {
		args = append(args, client)
		where = append(where, fmt.Sprintf("d.client = $%d", len(args)))
	}
	cond := strings.Join(where, " AND ")
	ctx := r.Context()
	out := TracesAnswer{Traces: []TraceSummary{}, Workloads: []TraceWorkload{}}
	res, err := a.query(ctx, `SELECT count(*) FROM request_demand d WHERE `+cond, args...)
	if err != nil {
		return nil, err
	}
	out.Total = asInt(res.Rows[0][0])
	res, err = a.query(ctx, `SELECT d.trace_id, d.client, coalesce(d.service, ''), coalesce(d.operation, ''), d.start_ns,
		d.duration_ns, d.error, d.spans, coalesce((SELECT bool_or(x.accounted) FROM span_accounting x WHERE x.trace_id = d.trace_id), false),
		d.cpu_ns, d.billed_cpu_ns, d.blocked_ns, d.io_bytes, d.io_ns
		FROM request_demand d WHERE `+cond+fmt.Sprintf(` ORDER BY d.start_ns DESC, d.trace_id LIMIT %d`, limit), args...)
	if err != nil {
		return nil, err
	}
	for _, row := range res.Rows {
		out.Traces = append(out.Traces, TraceSummary{TraceID: asString(row[0]), Client: asString(row[1]), Service: asString(row[2]),
			Operation: asString(row[3]), StartNs: asInt(row[4]), DurationNs: asInt(row[5]), Error: row[6] == true,
			Spans: asInt(row[7]), Accounted: row[8] == true, CPUNs: asFloat(row[9]), BilledCPU: asFloat(row[10]),
			BlockedNs: asFloat(row[11]), IOBytes: asFloat(row[12]), IONs: asFloat(row[13])})
	}
	// The workloads of the range, whatever the other filters: what the
	// latency graph can be drawn for.
	res, err = a.query(ctx, fmt.Sprintf(`SELECT d.service, d.operation, count(*) FROM request_demand d
		WHERE d.start_ns >= $1 AND d.start_ns < $2 AND d.service IS NOT NULL
		GROUP BY ALL ORDER BY 3 DESC, 1, 2 LIMIT %d`, maxWorkloads), from, to)
	if err != nil {
		return nil, err
	}
	for _, row := range res.Rows {
		out.Workloads = append(out.Workloads, TraceWorkload{Service: asString(row[0]), Operation: asString(row[1]), Traces: asInt(row[2])})
	}
	return out, nil
}
