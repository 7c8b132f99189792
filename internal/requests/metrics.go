package requests

import (
	"context"
	"fmt"
	"io"

	"github.com/holter-dev/holter/internal/metrics"
)

// WriteMetrics writes the virtual performance counters in the Prometheus
// text exposition format (version 0.0.4): per service and operation the
// requests, errors, latency quantiles and kernel demand (service_counters),
// per client the demand with coalesced work billed (client_demand). They
// are totals over what the store retains, raw and rolled up.
func WriteMetrics(ctx context.Context, q Querier, w io.Writer) error {
	svc, err := q.Query(ctx, `SELECT service, operation, requests, errors, p50_ns, p90_ns, p99_ns, cpu_ns, blocked_ns, io_bytes, mean_ns
		FROM service_counters ORDER BY service, operation`)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	cl, err := q.Query(ctx, `SELECT client, requests, errors, cpu_ns, blocked_ns, io_bytes, io_ns FROM client_demand ORDER BY client`)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	mw := metrics.Writer{W: w}
	family := mw.Family
	type column struct {
		name, typ, help string
		idx             int
		scale           float64
	}
	svcCols := []column{
		{"holter_spans_total", "counter", "Spans received, per service and operation.", 2, 1},
		{"holter_span_errors_total", "counter", "Spans with an error status.", 3, 1},
		{"holter_span_cpu_seconds_total", "counter", "CPU time the spans' threads ran, from kernel scheduling events (own time of each span).", 7, 1e-9},
		{"holter_span_blocked_seconds_total", "counter", "Time the spans' threads were blocked, from kernel scheduling events.", 8, 1e-9},
		{"holter_span_io_bytes_total", "counter", "Block I/O bytes the spans' threads submitted.", 9, 1},
	}
	for _, c := range svcCols {
		family(c.name, c.typ, c.help)
		for _, r := range svc.Rows {
			mw.Sample(c.name, f64(r[c.idx])*c.scale, "service", str(r[0]), "operation", str(r[1]))
		}
	}
	family("holter_span_duration_seconds", "summary", "Span latency quantiles (from log histograms, within 4.4%).")
	for _, r := range svc.Rows {
		for i, q := range []string{"0.5", "0.9", "0.99"} {
			mw.Sample("holter_span_duration_seconds", f64(r[4+i])*1e-9, "service", str(r[0]), "operation", str(r[1]), "quantile", q)
		}
		mw.Sample("holter_span_duration_seconds_sum", f64(r[10])*f64(r[2])*1e-9, "service", str(r[0]), "operation", str(r[1]))
		mw.Sample("holter_span_duration_seconds_count", f64(r[2]), "service", str(r[0]), "operation", str(r[1]))
	}
	clCols := []column{
		{"holter_client_requests_total", "counter", "Requests per client.", 1, 1},
		{"holter_client_errors_total", "counter", "Requests per client with an error in any span.", 2, 1},
		{"holter_client_cpu_seconds_total", "counter", "CPU charged to a client's requests, coalesced work billed in shares.", 3, 1e-9},
		{"holter_client_blocked_seconds_total", "counter", "Blocked time charged to a client's requests.", 4, 1e-9},
		{"holter_client_io_bytes_total", "counter", "Block I/O bytes charged to a client's requests.", 5, 1},
		{"holter_client_io_seconds_total", "counter", "Block I/O service time charged to a client's requests.", 6, 1e-9},
	}
	for _, c := range clCols {
		family(c.name, c.typ, c.help)
		for _, r := range cl.Rows {
			mw.Sample(c.name, f64(r[c.idx])*c.scale, "client", str(r[0]))
		}
	}
	return nil
}
