// Package requests answers Stardust's questions (§3.2–§3.3, §5.4) over the
// spans the OTLP receivers store and the thread activity internal/account
// records:
//
//   - Account charges each span that names its thread (thread.id, with
//     process.pid) the CPU its thread ran, the time it was blocked (and on
//     which kernel path) or runnable, and the block I/O it submitted during
//     the span, and the page cache it dirtied, into span_accounting;
//     "self" costs leave out children that ran on the same thread. It
//     reads the thread's intervals from the accountant's memory when it
//     keeps them (RecentActivity; the recorder does, for 30 s), else from
//     thread_activity, whose rows with ns set (the recorder's summaries;
//     on-CPU intervals, the time the thread executed in them by its CPU
//     clock) are charged in proportion to the part of them a span covers. The
//     block writes kernel flushers make later of files a span dirtied
//     (write-back) are charged to it by the span_writeback view: a flush
//     of a file is split among the spans whose threads dirtied it since
//     the previous flush, in proportion to the bytes each dirtied (each
//     dirtying goes to the innermost span of its thread at the time), or
//     goes whole to the thread that last dirtied the file when no
//     dirtying of it is stored.
//   - BuildPath reconstructs a request's causal path: the tree of its spans
//     across services and hosts, the time in each component and between
//     them, work that outlives its parent (async write-back), and the
//     batches it was coalesced into through links, whose cost is billed to
//     each linked request in proportion to the link weights (§3.2.1;
//     weight from the link attribute holter.weight, default 1).
//   - Both read spans the same way from the host's store or, wrapped in
//     Fleet, from the fleet's ClickHouse, where the spans of one request
//     may have been shipped by several hosts (internal/export): plain row
//     queries both backends answer, joined in Go (loadSpans).
//   - BuildGraph aggregates a workload's latency graph (Figure 9): nodes
//     are the start and end of each service's operations, edges the
//     latency between them as a distribution; WriteDOT draws it.
//   - Prune reduces spans older than the retention to per-workload demand
//     and latency-graph rollups per period T; the views and BuildGraph read
//     the rollups beside raw spans.
//   - WriteMetrics exposes the virtual performance counters in Prometheus
//     text.
//
// The counters are SQL views in the store, queryable with holter query:
//
//	span_costs        one row per span: service, operation, client, duration,
//	                  error, and the kernel's account (cpu_ns, self_cpu_ns,
//	                  blocked_ns, runnable_ns, io_bytes, io_ns, blocked_sites,
//	                  dirtied_bytes: page cache its thread dirtied,
//	                  writeback_bytes/_ns/_count: block writes flushers
//	                  made of it later; io_bytes is the I/O the thread
//	                  submitted itself, so the two do not overlap).
//	                  cpu_ns, blocked_ns and runnable_ns include the
//	                  span's children on its thread, the self_ columns
//	                  do not; io_*, dirtied_* and writeback_* are self
//	                  costs only (a child's I/O is not its parent's), so
//	                  sums over spans count each once)
//	span_writeback    per span: the write-back charged to it
//	request_demand    one row per request (trace): its own kernel demand,
//	                  the billed share of coalesced work, and the total
//	                  (cpu, blocked, io, dirtied and written-back bytes)
//	service_counters  per service and operation: requests, errors, mean and
//	                  p50/p90/p99 latency, cpu, blocked time, block I/O,
//	                  dirtied and written-back bytes
//	client_demand     per client: requests, errors, cpu, blocked, I/O bytes
//	                  and time, dirtied and written-back bytes, coalesced
//	                  work billed in shares
//
// The client of a request is the enduser.id (or client.id) attribute some
// span of its trace carries, else the service of its root span.
package requests
