package requests

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// PruneReport says what Prune did.
type PruneReport struct {
	Spans       int64 `json:"spans_deleted"`
	SpanRollups int   `json:"span_rollups"`
	EdgeRollups int   `json:"edge_rollups"`
}

// Prune reduces the raw spans of requests that ended before cutoff to
// per-workload rollups over periods of length period (Stardust §5.4): per
// service and operation the demand and latency histogram (span_rollups),
// per client the demand with coalesced work billed (client_rollups), and
// per workload the latency graph's edges (latency_edge_rollups). The
// counters views and BuildGraph read rollups beside raw spans, so they keep
// answering, at the period's grain. Rollups and deletion are one
// transaction.
func Prune(ctx context.Context, st *store.Store, cutoff time.Time, period time.Duration) (PruneReport, error) {
	var rep PruneReport
	if period <= 0 {
		return rep, fmt.Errorf("prune spans: period %v must be positive", period)
	}
	cut := cutoff.UnixNano()
	per := period.Nanoseconds()
	old := strings.ReplaceAll(store.PrunableTraces, "$1", fmt.Sprint(cut))
	spans, err := loadSpans(ctx, store.Plain(st), "trace_id IN ("+old+")")
	if err != nil {
		return rep, fmt.Errorf("prune spans: %w", err)
	}
	if len(spans) == 0 {
		return rep, nil
	}
	bucket := func(ns int64) int64 { return ns - ((ns%per)+per)%per }
	r := &store.SpanRollups{CutoffNs: cut}

	// Demand and latency per service and operation.
	type opKey struct {
		bucket                     int64
		service, operation, client string
	}
	ops := map[opKey]*store.SpanRollup{}
	hists := map[opKey]*dist{}
	for _, s := range spans {
		k := opKey{bucket(s.StartNs), s.Service, s.Operation, s.Client}
		x, ok := ops[k]
		if !ok {
			x = &store.SpanRollup{BucketNs: k.bucket, PeriodNs: per, Service: k.service, Operation: k.operation, Client: k.client}
			ops[k] = x
			hists[k] = &dist{}
		}
		x.Spans++
		if s.Error {
			x.Errors++
		}
		x.DurationSumNs += s.EndNs - s.StartNs
		hists[k].add(s.EndNs - s.StartNs)
		if s.Kernel != nil {
			x.CPUNs += int64(s.Kernel.SelfCPUNs)
			x.BlockedNs += int64(s.Kernel.SelfBlockedNs)
			x.RunnableNs += int64(s.Kernel.RunnableNs)
			x.IOBytes += int64(s.Kernel.IOBytes)
			x.IONs += int64(s.Kernel.IONs)
			x.DirtiedBytes += int64(s.Kernel.DirtiedBytes)
			x.WritebackBytes += int64(s.Kernel.WritebackBytes)
		}
	}
	for k, x := range ops {
		x.HistBucket, x.HistCount = hists[k].histogram()
		r.Spans = append(r.Spans, *x)
	}

	// Demand per client, coalesced work billed in shares.
	res, err := st.Query(ctx, `SELECT client, start_ns, error, cpu_ns, blocked_ns, io_bytes, io_ns, dirtied_bytes, writeback_bytes FROM request_demand
		WHERE trace_id IN (`+old+`) AND trace_id NOT IN (SELECT trace_id FROM span_links)`)
	if err != nil {
		return rep, fmt.Errorf("prune spans: %w", err)
	}
	type clientKey struct {
		bucket int64
		client string
	}
	clients := map[clientKey]*store.ClientRollup{}
	for _, row := range res.Rows {
		k := clientKey{bucket(i64(row[1])), str(row[0])}
		x, ok := clients[k]
		if !ok {
			x = &store.ClientRollup{BucketNs: k.bucket, PeriodNs: per, Client: k.client}
			clients[k] = x
		}
		x.Requests++
		if row[2] == true {
			x.Errors++
		}
		x.CPUNs += f64(row[3])
		x.BlockedNs += f64(row[4])
		x.IOBytes += f64(row[5])
		x.IONs += f64(row[6])
		x.DirtiedBytes += f64(row[7])
		x.WritebackBytes += f64(row[8])
	}
	for _, x := range clients {
		r.Clients = append(r.Clients, *x)
	}

	// Latency graphs of every workload: each span where a request enters
	// a service (a root, or a remote child).
	byTrace := map[string][]Span{}
	for _, s := range spans {
		byTrace[s.TraceID] = append(byTrace[s.TraceID], s)
	}
	graphs := map[opKey]*graphBuilder{}
	for _, ss := range byTrace {
		for _, n := range entrySpans(ss) {
			k := opKey{bucket(n.StartNs), n.Service, n.Operation, n.Client}
			g, ok := graphs[k]
			if !ok {
				g = newGraphBuilder()
				graphs[k] = g
			}
			g.addPath(n)
		}
	}
	for k, g := range graphs {
		for e, d := range g.edges {
			hb, hc := d.histogram()
			r.Edges = append(r.Edges, store.EdgeRollup{BucketNs: k.bucket, PeriodNs: per, Service: k.service,
				Operation: k.operation, Client: k.client, Paths: g.paths, From: e[0], To: e[1], Remote: d.remote,
				Async: d.async, N: d.n, SumNs: d.sum, MinNs: d.min, MaxNs: d.max, HistBucket: hb, HistCount: hc})
		}
	}
	n, err := st.ReplaceSpansWithRollups(ctx, r)
	if err != nil {
		return rep, err
	}
	return PruneReport{Spans: n, SpanRollups: len(r.Spans), EdgeRollups: len(r.Edges)}, nil
}
