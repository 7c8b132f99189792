package server

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/holter-dev/holter/internal/requests"
	"github.com/holter-dev/holter/internal/store"
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
	// Hosts are the hosts its spans came from, in order.
	Hosts []string `json:"hosts"`
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
	ctx := r.Context()
	if isFleet(a.store) {
		cond, args := traceConds("trace_id", "t_start", "t_client", from, to, service, operation, client)
		return a.fleetTraces(ctx, cond, args, from, to, limit)
	}
	cond, args := traceConds("d.trace_id", "d.start_ns", "d.client", from, to, service, operation, client)
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
	if err := a.traceHosts(ctx, out.Traces); err != nil {
		return nil, err
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

// traceConds selects the traces of GET /api/traces, given the columns of
// a trace's id, start and client: starting in [from, to) ($1, $2), with a
// span of the service (and operation), of the client.
func traceConds(id, start, clientCol string, from, to int64, service, operation, client string) (string, []any) {
	where := []string{start + " >= $1", start + " < $2"}
	args := []any{from, to}
	if service != "" {
		args = append(args, service)
		cond := fmt.Sprintf("s.service = $%d", len(args))
		if operation != "" {
			args = append(args, operation)
			cond += fmt.Sprintf(" AND s.name = $%d", len(args))
		}
		where = append(where, id+" IN (SELECT s.trace_id FROM spans s WHERE "+cond+")")
	}
	if client != "" {
		args = append(args, client)
		where = append(where, fmt.Sprintf("%s = $%d", clientCol, len(args)))
	}
	return strings.Join(where, " AND "), args
}

// traceIDs is an SQL IN list of the traces' ids, as placeholders $1… and
// their arguments.
func traceIDs(ts []TraceSummary) (string, []any) {
	marks := make([]string, len(ts))
	args := make([]any, len(ts))
	for i, t := range ts {
		marks[i], args[i] = fmt.Sprintf("$%d", i+1), t.TraceID
	}
	return "(" + strings.Join(marks, ", ") + ")", args
}

// traceHosts fills in the hosts of each trace's spans.
func (a *api) traceHosts(ctx context.Context, ts []TraceSummary) error {
	if len(ts) == 0 {
		return nil
	}
	ids, args := traceIDs(ts)
	res, err := a.query(ctx, `SELECT DISTINCT trace_id, host FROM spans WHERE trace_id IN `+ids+` ORDER BY trace_id, host`, args...)
	if err != nil {
		return err
	}
	hosts := map[string][]string{}
	for _, row := range res.Rows {
		id := asString(row[0])
		hosts[id] = append(hosts[id], asString(row[1]))
	}
	for i := range ts {
		ts[i].Hosts = append([]string{}, hosts[ts[i].TraceID]...)
	}
	return nil
}

// fleetTrace is one trace as the fleet's spans table gives it, whatever
// hosts its spans came from: its start, duration, root span's service and
// operation, and its client (the tagged client of some span, else the root
// span's service, else the first span's), as the store's request_demand
// and trace_clients views have them.
const fleetTrace = `SELECT trace_id, min(start_ns) AS t_start, max(end_ns) - min(start_ns) AS t_duration,
	count() AS t_spans, max(status_code = 'error') AS t_error,
	argMinIf(service, start_ns, isNull(parent_span_id)) AS t_service,
	argMinIf(name, start_ns, isNull(parent_span_id)) AS t_operation,
	ifNull(max(client), if(countIf(isNull(parent_span_id)) > 0, argMinIf(service, start_ns, isNull(parent_span_id)),
		argMin(service, start_ns))) AS t_client
	FROM spans `

// fleetTraces is GET /api/traces over the fleet's ClickHouse, which has the
// raw spans, links and accounting every host shipped but not the store's
// request_demand view: traces are grouped from the spans table, their own
// demand summed from span_accounting, and the billed shares of coalesced
// work taken from their causal paths (requests.BuildPath, the code the
// view's numbers are checked against), for the few traces a batch links to.
func (a *api) fleetTraces(ctx context.Context, cond string, args []any, from, to, limit int64) (any, error) {
	traces := "(" + fleetTrace + " GROUP BY trace_id)"
	out := TracesAnswer{Traces: []TraceSummary{}, Workloads: []TraceWorkload{}}
	res, err := a.query(ctx, `SELECT count() FROM `+traces+` WHERE `+cond, args...)
	if err != nil {
		return nil, err
	}
	out.Total = asInt(res.Rows[0][0])
	res, err = a.query(ctx, `SELECT trace_id, t_client, t_service, t_operation, t_start, t_duration, t_error, t_spans
		FROM `+traces+` WHERE `+cond+fmt.Sprintf(` ORDER BY t_start DESC, trace_id LIMIT %d`, limit), args...)
	if err != nil {
		return nil, err
	}
	for _, row := range res.Rows {
		out.Traces = append(out.Traces, TraceSummary{TraceID: asString(row[0]), Client: asString(row[1]), Service: asString(row[2]),
			Operation: asString(row[3]), StartNs: asInt(row[4]), DurationNs: asInt(row[5]), Error: asInt(row[6]) != 0,
			Spans: asInt(row[7])})
	}
	if len(out.Traces) > 0 {
		if err := a.fleetDemand(ctx, out.Traces); err != nil {
			return nil, err
		}
		if err := a.traceHosts(ctx, out.Traces); err != nil {
			return nil, err
		}
	}
	res, err = a.query(ctx, fmt.Sprintf(`SELECT t_service, t_operation, count() AS n FROM (`+fleetTrace+` GROUP BY trace_id)
		WHERE t_start >= $1 AND t_start < $2 AND t_service != '' GROUP BY t_service, t_operation
		ORDER BY n DESC, t_service, t_operation LIMIT %d`, maxWorkloads), from, to)
	if err != nil {
		return nil, err
	}
	for _, row := range res.Rows {
		out.Workloads = append(out.Workloads, TraceWorkload{Service: asString(row[0]), Operation: asString(row[1]), Traces: asInt(row[2])})
	}
	return out, nil
}

// fleetDemand fills in the kernel demand charged to each trace: its own
// spans' self costs, plus the billed shares of the batches that link to it.
func (a *api) fleetDemand(ctx context.Context, ts []TraceSummary) error {
	ids, args := traceIDs(ts)
	res, err := a.query(ctx, `SELECT trace_id, max(accounted), sum(self_cpu_ns), sum(self_blocked_ns), sum(io_bytes), sum(io_ns)
		FROM span_accounting WHERE trace_id IN `+ids+` AND (trace_id, span_id) IN (SELECT trace_id, span_id FROM spans WHERE trace_id IN `+ids+`)
		GROUP BY trace_id`, args...)
	if err != nil {
		return err
	}
	byID := make(map[string]*TraceSummary, len(ts))
	for i := range ts {
		byID[ts[i].TraceID] = &ts[i]
	}
	for _, row := range res.Rows {
		if t := byID[asString(row[0])]; t != nil {
			t.Accounted, t.CPUNs, t.BlockedNs, t.IOBytes, t.IONs = asInt(row[1]) != 0, asFloat(row[2]), asFloat(row[3]), asFloat(row[4]), asFloat(row[5])
		}
	}
	res, err = a.query(ctx, `SELECT DISTINCT linked_trace_id FROM span_links WHERE linked_trace_id IN `+ids+` ORDER BY linked_trace_id`, args...)
	if err != nil {
		return err
	}
	for _, row := range res.Rows {
		t := byID[asString(row[0])]
		if t == nil {
			continue
		}
		p, err := requests.BuildPath(ctx, requests.Fleet(store.Plain(a.store)), t.TraceID)
		if err != nil {
			return err
		}
		billed := p.Total
		billed.CPUNs -= p.Own.CPUNs
		billed.BlockedNs -= p.Own.BlockedNs
		billed.IOBytes -= p.Own.IOBytes
		billed.IONs -= p.Own.IONs
		t.BilledCPU = billed.CPUNs
		t.CPUNs += billed.CPUNs
		t.BlockedNs += billed.BlockedNs
		t.IOBytes += billed.IOBytes
		t.IONs += billed.IONs
	}
	return nil
}
