package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
)

// Request tracing (Stardust, MISSION §3). OpenTelemetry spans are the
// activity records: a span is a record pair (start, end) whose trace and
// span ids are the breadcrumbs, a link is a stitch record, a span event an
// intermediate record. thread_activity is the kernel's side: exact
// per-thread on-CPU, off-CPU and block I/O intervals of accounted processes
// (internal/account), joined with spans into span_accounting. Spans older
// than the span retention are pruned into the *_rollups tables (§5.4).
//
// Ids are lowercase hex (32 and 16 digits), as in W3C trace context, so
// they read and join the same in SQL, JSON and ClickHouse.
var requestsDDL = []string{
	`CREATE TABLE IF NOT EXISTS spans (
		host VARCHAR NOT NULL,
		trace_id VARCHAR NOT NULL,
		span_id VARCHAR NOT NULL,
		parent_span_id VARCHAR,
		service VARCHAR NOT NULL,
		name VARCHAR NOT NULL,
		kind VARCHAR NOT NULL,
		start_ns BIGINT NOT NULL,
		end_ns BIGINT NOT NULL,
		status_code VARCHAR NOT NULL,
		status_message VARCHAR NOT NULL,
		pid UINTEGER,
		tid UINTEGER,
		client VARCHAR,
		scope VARCHAR NOT NULL,
		resource VARCHAR NOT NULL,
		attributes VARCHAR NOT NULL,
		received_ns BIGINT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS span_links (
		trace_id VARCHAR NOT NULL,
		span_id VARCHAR NOT NULL,
		linked_trace_id VARCHAR NOT NULL,
		linked_span_id VARCHAR NOT NULL,
		weight DOUBLE NOT NULL,
		attributes VARCHAR NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS span_events (
		trace_id VARCHAR NOT NULL,
		span_id VARCHAR NOT NULL,
		ts_ns BIGINT NOT NULL,
		name VARCHAR NOT NULL,
		attributes VARCHAR NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS thread_activity (
		host VARCHAR NOT NULL,
		pid UINTEGER NOT NULL,
		tid UINTEGER NOT NULL,
		kind VARCHAR NOT NULL,
		start_ns BIGINT NOT NULL,
		end_ns BIGINT NOT NULL,
		wake_ns BIGINT,
		sleep_state UINTEGER,
		site UBIGINT,
		kstack VARCHAR[],
		bytes UBIGINT,
		op VARCHAR,
		dev VARCHAR)`,
	`CREATE TABLE IF NOT EXISTS span_accounting (
		trace_id VARCHAR NOT NULL,
		span_id VARCHAR NOT NULL,
		accounted BOOLEAN NOT NULL,
		cpu_ns BIGINT NOT NULL,
		self_cpu_ns BIGINT NOT NULL,
		blocked_ns BIGINT NOT NULL,
		self_blocked_ns BIGINT NOT NULL,
		runnable_ns BIGINT NOT NULL,
		self_runnable_ns BIGINT NOT NULL,
		io_bytes BIGINT NOT NULL,
		io_ns BIGINT NOT NULL,
		io_count BIGINT NOT NULL,
		blocked_sites VARCHAR NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS span_rollups (
		bucket_ns BIGINT NOT NULL,
		period_ns BIGINT NOT NULL,
		service VARCHAR NOT NULL,
		operation VARCHAR NOT NULL,
		client VARCHAR NOT NULL,
		spans BIGINT NOT NULL,
		errors BIGINT NOT NULL,
		duration_sum_ns BIGINT NOT NULL,
		hist_bucket INTEGER[] NOT NULL,
		hist_count BIGINT[] NOT NULL,
		cpu_ns BIGINT NOT NULL,
		blocked_ns BIGINT NOT NULL,
		runnable_ns BIGINT NOT NULL,
		io_bytes BIGINT NOT NULL,
		io_ns BIGINT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS client_rollups (
		bucket_ns BIGINT NOT NULL,
		period_ns BIGINT NOT NULL,
		client VARCHAR NOT NULL,
		requests BIGINT NOT NULL,
		errors BIGINT NOT NULL,
		cpu_ns DOUBLE NOT NULL,
		blocked_ns DOUBLE NOT NULL,
		io_bytes DOUBLE NOT NULL,
		io_ns DOUBLE NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS latency_edge_rollups (
		bucket_ns BIGINT NOT NULL,
		period_ns BIGINT NOT NULL,
		service VARCHAR NOT NULL,
		operation VARCHAR NOT NULL,
		client VARCHAR NOT NULL,
		paths BIGINT NOT NULL,
		from_node VARCHAR NOT NULL,
		to_node VARCHAR NOT NULL,
		remote BOOLEAN NOT NULL,
		async BOOLEAN NOT NULL,
		n BIGINT NOT NULL,
		sum_ns BIGINT NOT NULL,
		min_ns BIGINT NOT NULL,
		max_ns BIGINT NOT NULL,
		hist_bucket INTEGER[] NOT NULL,
		hist_count BIGINT[] NOT NULL)`,
	// Commit sequence: every commit of spans or span accounting takes the
	// next number (under the writer's lock, so what is committed is always
	// a prefix of the sequence); the exporter ships by it.
	`ALTER TABLE spans ADD COLUMN IF NOT EXISTS commit_seq BIGINT`,
	`ALTER TABLE span_links ADD COLUMN IF NOT EXISTS commit_seq BIGINT`,
	`ALTER TABLE span_events ADD COLUMN IF NOT EXISTS commit_seq BIGINT`,
	`ALTER TABLE span_accounting ADD COLUMN IF NOT EXISTS commit_seq BIGINT`,
	// Page cache dirtied by a span's thread, and the block writes kernel
	// flushers made of it later (write-back), charged by file.
	`ALTER TABLE thread_activity ADD COLUMN IF NOT EXISTS ino UBIGINT`,
	`ALTER TABLE thread_activity ADD COLUMN IF NOT EXISTS dirtied_ns BIGINT`,
	`ALTER TABLE span_accounting ADD COLUMN IF NOT EXISTS dirtied_bytes BIGINT DEFAULT 0`,
	// A summary row (the recorder's): ns of its kind within start..end,
	// the sum of the thread's intervals of that kind there; NULL for an
	// exact interval, all of which is of its kind.
	`ALTER TABLE thread_activity ADD COLUMN IF NOT EXISTS ns BIGINT`,
	`ALTER TABLE span_rollups ADD COLUMN IF NOT EXISTS dirtied_bytes BIGINT DEFAULT 0`,
	`ALTER TABLE span_rollups ADD COLUMN IF NOT EXISTS writeback_bytes BIGINT DEFAULT 0`,
	`ALTER TABLE client_rollups ADD COLUMN IF NOT EXISTS dirtied_bytes DOUBLE DEFAULT 0`,
	`ALTER TABLE client_rollups ADD COLUMN IF NOT EXISTS writeback_bytes DOUBLE DEFAULT 0`,
}

// HistPerOctave is the resolution of the latency histograms that rollups
// keep: bucket b holds values in [2^(b/16), 2^((b+1)/16)) ns, so a
// percentile read from it is within 4.4% of the exact one.
const HistPerOctave = 16

// requestViews are the virtual performance counters (Stardust §3.1: any
// counter is a query over the activity records). They read raw spans and
// the rollups that pruning left of older ones, so they answer over the
// whole retained history; see internal/requests' doc for each column.
var requestViews = []string{
	// The client of a request: the client.id (or enduser.id) some span of
	// its trace carries, else the service of its root span.
	`CREATE OR REPLACE VIEW trace_clients AS
	SELECT trace_id, coalesce(max(client), arg_min(service, start_ns) FILTER (WHERE parent_span_id IS NULL),
		arg_min(service, start_ns)) AS client
	FROM spans GROUP BY trace_id`,
	// Write-back: a block write of a file that a kernel flusher (not a
	// tracked thread) submitted is charged to the spans whose threads
	// dirtied what it flushed, in proportion to the bytes each dirtied
	// (Stardust §3.2.1: asynchronous work billed to the requests it did
	// work for). The write-backs of one flush of a file carry the time
	// the file was last dirtied before it (dirtied_ns); the dirtying they
	// flush is the file's "dirty" rows since the previous flush (at most
	// a minute back for the first one seen). With no dirty row stored the
	// write-back goes to the thread that last dirtied the file. A dirty
	// row or write-back is charged to the innermost span of its thread
	// around when it was dirtied. It comes seconds after the span was
	// charged, so it is joined here, not stored in span_accounting.
	`CREATE OR REPLACE VIEW span_writeback AS
	WITH wb AS (
		SELECT rowid AS wid, host, ino, coalesce(dev, '') AS dev, dirtied_ns, pid, tid, bytes, end_ns - start_ns AS ns
		FROM thread_activity WHERE kind = 'writeback'),
	flushes AS (
		SELECT host, ino, dev, dirtied_ns, lag(dirtied_ns) OVER (PARTITION BY host, ino, dev ORDER BY dirtied_ns) AS prev_ns
		FROM (SELECT DISTINCT host, ino, dev, dirtied_ns FROM wb)),
	dirtied AS (
		SELECT f.host, f.ino, f.dev, f.dirtied_ns, d.pid, d.tid, d.end_ns AS at_ns,
			d.bytes / sum(d.bytes) OVER (PARTITION BY f.host, f.ino, f.dev, f.dirtied_ns) AS share
		FROM flushes f JOIN thread_activity d ON d.kind = 'dirty' AND d.host = f.host AND d.ino = f.ino
			AND coalesce(d.dev, '') = f.dev AND d.end_ns <= f.dirtied_ns
			AND d.end_ns > coalesce(f.prev_ns, f.dirtied_ns - 60000000000)),
	shares AS (
		SELECT row_number() OVER () AS part, w.wid, w.host, coalesce(d.pid, w.pid) AS pid, coalesce(d.tid, w.tid) AS tid,
			coalesce(d.at_ns, w.dirtied_ns) AS at_ns, w.bytes * coalesce(d.share, 1) AS bytes, w.ns * coalesce(d.share, 1) AS ns
		FROM wb w LEFT JOIN dirtied d USING (host, ino, dev, dirtied_ns)),
	charged AS (
		SELECT any_value(c.wid) AS wid, any_value(c.bytes) AS bytes, any_value(c.ns) AS ns,
			arg_max(s.trace_id, s.start_ns) AS trace_id, arg_max(s.span_id, s.start_ns) AS span_id
		FROM shares c JOIN spans s ON s.host = c.host AND s.pid = c.pid AND s.tid = c.tid
			AND c.at_ns >= s.start_ns AND c.at_ns <= s.end_ns
		GROUP BY c.part)
	SELECT trace_id, span_id, round(sum(bytes))::BIGINT AS writeback_bytes, round(sum(ns))::BIGINT AS writeback_ns,
		count(DISTINCT wid) AS writeback_count
	FROM charged GROUP BY trace_id, span_id`,
	`CREATE OR REPLACE VIEW span_costs AS
	SELECT s.host, s.trace_id, s.span_id, s.parent_span_id, s.service, s.name AS operation, s.kind,
		s.start_ns, s.end_ns, s.end_ns - s.start_ns AS duration_ns, s.status_code = 'error' AS error,
		s.pid, s.tid, c.client, a.accounted, a.cpu_ns, a.self_cpu_ns, a.blocked_ns, a.self_blocked_ns,
		a.runnable_ns, a.self_runnable_ns, a.io_bytes, a.io_ns, a.io_count, a.blocked_sites,
		a.dirtied_bytes,
		CASE WHEN a.accounted IS NOT NULL THEN coalesce(w.writeback_bytes, 0) END AS writeback_bytes,
		CASE WHEN a.accounted IS NOT NULL THEN coalesce(w.writeback_ns, 0) END AS writeback_ns,
		CASE WHEN a.accounted IS NOT NULL THEN coalesce(w.writeback_count, 0) END AS writeback_count
	FROM spans s JOIN trace_clients c USING (trace_id)
	LEFT JOIN span_accounting a USING (trace_id, span_id)
	LEFT JOIN span_writeback w USING (trace_id, span_id)`,
	// Per request (trace): its own kernel demand, plus the shares billed to
	// it of the work it was coalesced into (links, §3.2.1): a span with
	// links to n original spans passes weight/Σweight of its subtree's
	// demand to each original span's trace.
	`CREATE OR REPLACE VIEW request_demand AS
	WITH RECURSIVE sub(src_trace, src_span, trace_id, span_id) AS (
		SELECT DISTINCT trace_id, span_id, trace_id, span_id FROM span_links
		UNION ALL
		SELECT sub.src_trace, sub.src_span, s.trace_id, s.span_id
		FROM spans s JOIN sub ON s.trace_id = sub.trace_id AND s.parent_span_id = sub.span_id),
	subtree AS (
		SELECT sub.src_trace, sub.src_span, sum(a.self_cpu_ns)::DOUBLE AS cpu_ns, sum(a.self_blocked_ns)::DOUBLE AS blocked_ns,
			sum(a.io_bytes)::DOUBLE AS io_bytes, sum(a.io_ns)::DOUBLE AS io_ns,
			sum(a.dirtied_bytes)::DOUBLE AS dirtied_bytes, coalesce(sum(w.writeback_bytes), 0)::DOUBLE AS writeback_bytes
		FROM sub JOIN span_accounting a USING (trace_id, span_id)
		LEFT JOIN span_writeback w USING (trace_id, span_id) GROUP BY ALL),
	shares AS (
		SELECT l.linked_trace_id AS trace_id, l.weight / sum(l.weight) OVER (PARTITION BY l.trace_id, l.span_id) AS share,
			st.cpu_ns, st.blocked_ns, st.io_bytes, st.io_ns, st.dirtied_bytes, st.writeback_bytes
		FROM span_links l JOIN subtree st ON st.src_trace = l.trace_id AND st.src_span = l.span_id),
	billed AS (
		SELECT trace_id, sum(share * cpu_ns) AS cpu_ns, sum(share * blocked_ns) AS blocked_ns,
			sum(share * io_bytes) AS io_bytes, sum(share * io_ns) AS io_ns,
			sum(share * dirtied_bytes) AS dirtied_bytes, sum(share * writeback_bytes) AS writeback_bytes
		FROM shares GROUP BY trace_id),
	own AS (
		SELECT trace_id, any_value(client) AS client, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
			arg_min(service, start_ns) FILTER (WHERE parent_span_id IS NULL) AS service,
			arg_min(operation, start_ns) FILTER (WHERE parent_span_id IS NULL) AS operation,
			bool_or(error) AS error, count(*) AS spans,
			coalesce(sum(self_cpu_ns), 0)::DOUBLE AS cpu_ns, coalesce(sum(self_blocked_ns), 0)::DOUBLE AS blocked_ns,
			coalesce(sum(io_bytes), 0)::DOUBLE AS io_bytes, coalesce(sum(io_ns), 0)::DOUBLE AS io_ns,
			coalesce(sum(dirtied_bytes), 0)::DOUBLE AS dirtied_bytes, coalesce(sum(writeback_bytes), 0)::DOUBLE AS writeback_bytes
		FROM span_costs GROUP BY trace_id)
	SELECT own.trace_id, own.client, own.service, own.operation, own.start_ns, own.end_ns,
		own.end_ns - own.start_ns AS duration_ns, own.error, own.spans,
		own.cpu_ns AS own_cpu_ns, coalesce(b.cpu_ns, 0) AS billed_cpu_ns, own.cpu_ns + coalesce(b.cpu_ns, 0) AS cpu_ns,
		own.blocked_ns + coalesce(b.blocked_ns, 0) AS blocked_ns,
		own.io_bytes + coalesce(b.io_bytes, 0) AS io_bytes, own.io_ns + coalesce(b.io_ns, 0) AS io_ns,
		own.dirtied_bytes + coalesce(b.dirtied_bytes, 0) AS dirtied_bytes,
		own.writeback_bytes + coalesce(b.writeback_bytes, 0) AS writeback_bytes
	FROM own LEFT JOIN billed b USING (trace_id)`,
	// Requests, errors and latency percentiles per service and operation.
	// Percentiles come from log histograms (HistPerOctave buckets per
	// doubling) so raw spans and rollups merge: within 4.4%.
	`CREATE OR REPLACE VIEW service_counters AS
	WITH raw AS (
		SELECT service, operation, count(*) AS spans, count(*) FILTER (WHERE error) AS errors,
			sum(duration_ns) AS duration_sum_ns, sum(coalesce(self_cpu_ns, 0)) AS cpu_ns,
			sum(coalesce(self_blocked_ns, 0)) AS blocked_ns, sum(coalesce(io_bytes, 0)) AS io_bytes,
			sum(coalesce(dirtied_bytes, 0)) AS dirtied_bytes, sum(coalesce(writeback_bytes, 0)) AS writeback_bytes
		FROM span_costs GROUP BY ALL),
	rolled AS (
		SELECT service, operation, sum(spans) AS spans, sum(errors) AS errors, sum(duration_sum_ns) AS duration_sum_ns,
			sum(cpu_ns) AS cpu_ns, sum(blocked_ns) AS blocked_ns, sum(io_bytes) AS io_bytes,
			sum(dirtied_bytes) AS dirtied_bytes, sum(writeback_bytes) AS writeback_bytes
		FROM span_rollups GROUP BY ALL),
	hist AS (
		SELECT service, operation, b, sum(n) AS n FROM (
			SELECT service, operation, floor(log2(greatest(duration_ns, 1)) * 16)::INTEGER AS b, 1 AS n FROM span_costs
			UNION ALL
			SELECT service, operation, unnest(hist_bucket) AS b, unnest(hist_count) AS n FROM span_rollups)
		GROUP BY ALL),
	cum AS (
		SELECT *, sum(n) OVER (PARTITION BY service, operation ORDER BY b) AS below,
			sum(n) OVER (PARTITION BY service, operation) AS total FROM hist),
	pct AS (
		SELECT service, operation,
			pow(2, (min(b) FILTER (WHERE below >= 0.50 * total) + 0.5) / 16) AS p50_ns,
			pow(2, (min(b) FILTER (WHERE below >= 0.90 * total) + 0.5) / 16) AS p90_ns,
			pow(2, (min(b) FILTER (WHERE below >= 0.99 * total) + 0.5) / 16) AS p99_ns
		FROM cum GROUP BY ALL)
	SELECT service, operation, sum(spans)::BIGINT AS requests, sum(errors)::BIGINT AS errors,
		(sum(duration_sum_ns) / sum(spans))::DOUBLE AS mean_ns, any_value(pct.p50_ns) AS p50_ns,
		any_value(pct.p90_ns) AS p90_ns, any_value(pct.p99_ns) AS p99_ns,
		sum(cpu_ns)::BIGINT AS cpu_ns, sum(blocked_ns)::BIGINT AS blocked_ns, sum(io_bytes)::BIGINT AS io_bytes,
		sum(dirtied_bytes)::BIGINT AS dirtied_bytes, sum(writeback_bytes)::BIGINT AS writeback_bytes
	FROM (SELECT * FROM raw UNION ALL SELECT * FROM rolled) JOIN pct USING (service, operation)
	GROUP BY service, operation`,
	// Per-client resource demand (§3.2), coalesced work billed in shares.
	`CREATE OR REPLACE VIEW client_demand AS
	SELECT client, sum(requests)::BIGINT AS requests, sum(errors)::BIGINT AS errors, sum(cpu_ns) AS cpu_ns,
		sum(blocked_ns) AS blocked_ns, sum(io_bytes) AS io_bytes, sum(io_ns) AS io_ns,
		sum(dirtied_bytes) AS dirtied_bytes, sum(writeback_bytes) AS writeback_bytes
	FROM (
		SELECT client, count(*) AS requests, count(*) FILTER (WHERE error) AS errors, sum(cpu_ns) AS cpu_ns,
			sum(blocked_ns) AS blocked_ns, sum(io_bytes) AS io_bytes, sum(io_ns) AS io_ns,
			sum(dirtied_bytes) AS dirtied_bytes, sum(writeback_bytes) AS writeback_bytes
		FROM request_demand WHERE trace_id NOT IN (SELECT trace_id FROM span_links) GROUP BY client
		UNION ALL
		SELECT client, requests, errors, cpu_ns, blocked_ns, io_bytes, io_ns, dirtied_bytes, writeback_bytes FROM client_rollups)
	GROUP BY client`,
}

// Span is one row of the spans table. Pid and Tid 0 and empty
// ParentSpanID and Client are stored as NULL.
type Span struct {
	Host          string
	TraceID       string
	SpanID        string
	ParentSpanID  string
	Service       string
	Name          string
	Kind          string
	StartNs       int64
	EndNs         int64
	StatusCode    string
	StatusMessage string
	Pid           uint32
	Tid           uint32
	Client        string
	Scope         string
	Resource      string // JSON object
	Attributes    string // JSON object
	ReceivedNs    int64
}

// SpanLink is one row of span_links: span (TraceID, SpanID) was caused by,
// or coalesces, the linked span. Weight is its share in billing (§3.2.1).
type SpanLink struct {
	TraceID, SpanID             string
	LinkedTraceID, LinkedSpanID string
	Weight                      float64
	Attributes                  string
}

// SpanEvent is one row of span_events.
type SpanEvent struct {
	TraceID, SpanID string
	TsNs            int64
	Name            string
	Attributes      string
}

// SpanBatch is what one commit of received spans adds.
type SpanBatch struct {
	Spans  []Span
	Links  []SpanLink
	Events []SpanEvent
}

// ThreadActivity is one interval of one thread: kind "cpu" (it ran),
// "blocked" (asleep until woken, then waiting for a CPU), "runnable"
// (preempted, waiting for a CPU) or "io" (a block request it submitted).
type ThreadActivity struct {
	Host       string
	Pid, Tid   uint32
	Kind       string
	StartNs    int64
	EndNs      int64
	WakeNs     int64 // blocked: woken at (0 unknown)
	SleepState uint32
	Site       uint64
	KStack     []string
	Bytes      uint64
	Op, Dev    string
	// Ino is the file of "dirty" (page cache the thread dirtied: Bytes,
	// from StartNs to EndNs) and "writeback" (a block write of that file
	// a kernel flusher submitted, charged to the thread that last dirtied
	// it, at DirtiedNs) intervals.
	Ino       uint64
	DirtiedNs int64
	// Ns, when not 0, is the time of Kind between StartNs and EndNs, and
	// 0 all of it. A row of several intervals of Kind ("cpu", "runnable"
	// or "blocked", the last of one kernel stack) is a summary holding
	// their total; WakeNs is then 0 and the time blocked ones waited for
	// a CPU once woken is in a "runnable" summary. One "cpu" interval
	// holds the time the thread executed in it by the scheduler's clock
	// (its CPU clock), which leaves out what a hypervisor stole.
	Ns int64
}

// SpanAccounting is the kernel's account of one span (span_accounting).
type SpanAccounting struct {
	TraceID, SpanID string
	// Accounted is false when the span's process was not yet accounted
	// when the span ran: its costs are unknown, not zero.
	Accounted                  bool
	CPUNs, SelfCPUNs           int64
	BlockedNs, SelfBlockedNs   int64
	RunnableNs, SelfRunnableNs int64
	IOBytes, IONs, IOCount     int64
	BlockedSites               string // JSON: [{"site": frames, "ns": …}]
	// DirtiedBytes is the page cache the span's thread (itself, not its
	// children on the thread) made dirty: writes the kernel flushes later.
	DirtiedBytes int64
}

// SpanRollup is one row of span_rollups.
type SpanRollup struct {
	BucketNs, PeriodNs           int64
	Service, Operation, Client   string
	Spans, Errors, DurationSumNs int64
	HistBucket                   []int32
	HistCount                    []int64
	CPUNs, BlockedNs, RunnableNs int64
	IOBytes, IONs                int64
	DirtiedBytes, WritebackBytes int64
}

// ClientRollup is one row of client_rollups.
type ClientRollup struct {
	BucketNs, PeriodNs int64
	Client             string
	Requests, Errors   int64
	CPUNs, BlockedNs   float64
	IOBytes, IONs      float64
	DirtiedBytes       float64
	WritebackBytes     float64
}

// EdgeRollup is one row of latency_edge_rollups: one edge of the latency
// graph of a workload (service, operation, client) over one period.
type EdgeRollup struct {
	BucketNs, PeriodNs         int64
	Service, Operation, Client string
	Paths                      int64
	From, To                   string
	Remote, Async              bool
	N, SumNs, MinNs, MaxNs     int64
	HistBucket                 []int32
	HistCount                  []int64
}

// PrunableTraces selects the traces pruning removes at cutoff $1: those
// wholly ended before it, except requests a newer batch still links to
// (their billed share is read from the batch while it is raw).
const PrunableTraces = `WITH t AS (SELECT trace_id, max(end_ns) AS last FROM spans GROUP BY trace_id)
	SELECT trace_id FROM t WHERE last < $1 AND trace_id NOT IN (
		SELECT l.linked_trace_id FROM span_links l JOIN t ON t.trace_id = l.trace_id WHERE t.last >= $1)`

// SpanRollups is what pruning replaces spans before CutoffNs with.
type SpanRollups struct {
	CutoffNs int64
	Spans    []SpanRollup
	Clients  []ClientRollup
	Edges    []EdgeRollup
}

// withAppender gives fn the driver connection for DuckDB's appender; no
// statement may run on conn while fn does.
func withAppender(conn *sql.Conn, fn func(dconn driver.Conn) error) error {
	return conn.Raw(func(dc any) error {
		dconn, ok := dc.(driver.Conn)
		if !ok {
			return errors.New("unexpected driver connection")
		}
		return fn(dconn)
	})
}

func nullString(s string) driver.Value {
	if s == "" {
		return nil
	}
	return s
}

func nullU32(v uint32) driver.Value {
	if v == 0 {
		return nil
	}
	return v
}

func nullI64(v int64) driver.Value {
	if v == 0 {
		return nil
	}
	return v
}

// writing runs commit under the writer's lock once the store is
// writable, taking note of how it went (fault.go), so span commits and
// epoch commits do not interleave.
func (s *Store) writing(what string, commit func() error) (err error) {
	if s.readOnly {
		return fmt.Errorf("%s: store is open read-only", what)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer func() { err = s.wrote(err) }()
	return commit()
}

// inTx runs fn in one transaction on one connection, under the writer's
// lock.
func (s *Store) inTx(ctx context.Context, what string, fn func(conn *sql.Conn) error) error {
	return s.writing(what, func() error { return s.commitTx(ctx, what, fn) })
}

// commitTx is inTx's transaction; s.mu is held.
func (s *Store) commitTx(ctx context.Context, what string, fn func(conn *sql.Conn) error) (err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err = fn(conn); err != nil {
		if _, rbErr := conn.ExecContext(context.Background(), "ROLLBACK"); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("%s: commit: %w", what, err)
	}
	return nil
}

// numberedTx is inTx for rows that record their commit's number
// (nextSpanSeq): the commit is kept (fault.go), and the number tells
// whether it is in the store.
func (s *Store) numberedTx(ctx context.Context, what string, write func(conn *sql.Conn, seq int64) error) error {
	var commit func(ctx context.Context) error
	commit = func(ctx context.Context) error {
		var seq int64
		err := s.commitTx(ctx, what, func(conn *sql.Conn) (err error) {
			if seq, err = s.nextSpanSeq(ctx, conn); err != nil {
				return err
			}
			return write(conn, seq)
		})
		if err == nil {
			s.keep(what, &lastCommit{
				what:   fmt.Sprintf("%s (commit %d)", what, seq),
				stored: func(ctx context.Context) (bool, error) { return s.seqStored(ctx, seq) },
				again:  commit,
			})
		}
		return err
	}
	return s.writing(what, func() error { return commit(ctx) })
}

// seqStored says whether rows of commit seq are in the store.
func (s *Store) seqStored(ctx context.Context, seq int64) (bool, error) {
	var in bool
	err := s.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM spans WHERE commit_seq = $1) OR EXISTS (SELECT 1 FROM span_links WHERE commit_seq = $1)
		OR EXISTS (SELECT 1 FROM span_events WHERE commit_seq = $1) OR EXISTS (SELECT 1 FROM span_accounting WHERE commit_seq = $1)`, seq).Scan(&in)
	return in, err
}

// nextSpanSeq takes the next commit sequence number, in the transaction
// on conn (the writer's lock is held). The rows committed with it record
// it; meta records the last one only before pruning deletes rows (a write
// a commit cost 1.6 ms of the recorder's CPU), so a number is never reused.
func (s *Store) nextSpanSeq(ctx context.Context, conn *sql.Conn) (int64, error) {
	if s.spanSeq == 0 {
		var v sql.NullInt64
		if err := conn.QueryRowContext(ctx, SpanCommitSeq).Scan(&v); err != nil {
			return 0, fmt.Errorf("commit sequence: %w", err)
		}
		s.spanSeq = v.Int64
	}
	s.spanSeq++
	return s.spanSeq, nil
}

// SpanCommitSeq is the last span commit sequence number committed: every
// row of SpanTables with commit_seq up to it is in the store (unless
// pruned since). Commits are numbered under the writer's lock, so the
// greatest number in the tables is the last commit that stored rows.
const SpanCommitSeq = `SELECT greatest(
	coalesce((SELECT max(TRY_CAST(value AS BIGINT)) FROM meta WHERE key = 'span_commit_seq'), 0),
	coalesce((SELECT max(commit_seq) FROM spans), 0), coalesce((SELECT max(commit_seq) FROM span_accounting), 0))`

// WriteSpans commits a batch of received spans in one transaction: when it
// returns nil they are durable, and only then may the sender be told so.
func (s *Store) WriteSpans(ctx context.Context, b *SpanBatch) error {
	if len(b.Spans)+len(b.Links)+len(b.Events) == 0 {
		return nil
	}
	return s.numberedTx(ctx, "write spans", func(conn *sql.Conn, seq int64) error {
		return withAppender(conn, func(dconn driver.Conn) error {
			err := appendRows(dconn, "spans", len(b.Spans), func(i int) []driver.Value {
				sp := &b.Spans[i]
				return []driver.Value{sp.Host, sp.TraceID, sp.SpanID, nullString(sp.ParentSpanID), sp.Service, sp.Name,
					sp.Kind, sp.StartNs, sp.EndNs, sp.StatusCode, sp.StatusMessage, nullU32(sp.Pid), nullU32(sp.Tid),
					nullString(sp.Client), sp.Scope, sp.Resource, sp.Attributes, sp.ReceivedNs, seq}
			})
			if err != nil {
				return err
			}
			err = appendRows(dconn, "span_links", len(b.Links), func(i int) []driver.Value {
				l := &b.Links[i]
				return []driver.Value{l.TraceID, l.SpanID, l.LinkedTraceID, l.LinkedSpanID, l.Weight, l.Attributes, seq}
			})
			if err != nil {
				return err
			}
			return appendRows(dconn, "span_events", len(b.Events), func(i int) []driver.Value {
				e := &b.Events[i]
				return []driver.Value{e.TraceID, e.SpanID, e.TsNs, e.Name, e.Attributes, seq}
			})
		})
	})
}

// WriteThreadActivity commits kernel intervals of accounted threads.
func (s *Store) WriteThreadActivity(ctx context.Context, as []ThreadActivity) error {
	if len(as) == 0 {
		return nil
	}
	return s.inTx(ctx, "write thread activity", func(conn *sql.Conn) error {
		return withAppender(conn, func(dconn driver.Conn) error {
			return appendRows(dconn, "thread_activity", len(as), func(i int) []driver.Value {
				a := &as[i]
				var kstack driver.Value
				if len(a.KStack) > 0 {
					kstack = a.KStack
				}
				var ino driver.Value
				if a.Ino != 0 {
					ino = a.Ino
				}
				return []driver.Value{a.Host, a.Pid, a.Tid, a.Kind, a.StartNs, a.EndNs, nullI64(a.WakeNs),
					a.SleepState, a.Site, kstack, a.Bytes, nullString(a.Op), nullString(a.Dev), ino, nullI64(a.DirtiedNs),
					nullI64(a.Ns)}
			})
		})
	})
}

// WriteSpanAccounting commits the kernel's account of spans.
func (s *Store) WriteSpanAccounting(ctx context.Context, as []SpanAccounting) error {
	if len(as) == 0 {
		return nil
	}
	return s.numberedTx(ctx, "write span accounting", func(conn *sql.Conn, seq int64) error {
		return withAppender(conn, func(dconn driver.Conn) error {
			return appendRows(dconn, "span_accounting", len(as), func(i int) []driver.Value {
				a := &as[i]
				return []driver.Value{a.TraceID, a.SpanID, a.Accounted, a.CPUNs, a.SelfCPUNs, a.BlockedNs, a.SelfBlockedNs,
					a.RunnableNs, a.SelfRunnableNs, a.IOBytes, a.IONs, a.IOCount, a.BlockedSites, seq, a.DirtiedBytes}
			})
		})
	})
}

// ReplaceSpansWithRollups stores r's rollups and deletes, in the same
// transaction, the raw spans (and their links, events and accounting) that
// ended before r.CutoffNs, and the thread activity before it.
func (s *Store) ReplaceSpansWithRollups(ctx context.Context, r *SpanRollups) (deleted int64, err error) {
	prune := func(conn *sql.Conn) error {
		err := withAppender(conn, func(dconn driver.Conn) error {
			err := appendRows(dconn, "span_rollups", len(r.Spans), func(i int) []driver.Value {
				x := &r.Spans[i]
				return []driver.Value{x.BucketNs, x.PeriodNs, x.Service, x.Operation, x.Client, x.Spans, x.Errors,
					x.DurationSumNs, x.HistBucket, x.HistCount, x.CPUNs, x.BlockedNs, x.RunnableNs, x.IOBytes, x.IONs,
					x.DirtiedBytes, x.WritebackBytes}
			})
			if err != nil {
				return err
			}
			err = appendRows(dconn, "client_rollups", len(r.Clients), func(i int) []driver.Value {
				x := &r.Clients[i]
				return []driver.Value{x.BucketNs, x.PeriodNs, x.Client, x.Requests, x.Errors, x.CPUNs, x.BlockedNs, x.IOBytes, x.IONs,
					x.DirtiedBytes, x.WritebackBytes}
			})
			if err != nil {
				return err
			}
			return appendRows(dconn, "latency_edge_rollups", len(r.Edges), func(i int) []driver.Value {
				x := &r.Edges[i]
				return []driver.Value{x.BucketNs, x.PeriodNs, x.Service, x.Operation, x.Client, x.Paths, x.From, x.To,
					x.Remote, x.Async, x.N, x.SumNs, x.MinNs, x.MaxNs, x.HistBucket, x.HistCount}
			})
		})
		if err != nil {
			return err
		}
		// The last commit number outlives the rows that had it.
		if _, err := conn.ExecContext(ctx, `INSERT OR REPLACE INTO meta SELECT 'span_commit_seq', (`+SpanCommitSeq+`)::VARCHAR`); err != nil {
			return fmt.Errorf("commit sequence: %w", err)
		}
		// A trace is pruned whole, once all of it is older than the cutoff.
		old := PrunableTraces
		for _, table := range []string{"span_links", "span_events", "span_accounting"} {
			if _, err := conn.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE trace_id IN (%s)`, table, old), r.CutoffNs); err != nil {
				return fmt.Errorf("delete %s: %w", table, err)
			}
		}
		res, err := conn.ExecContext(ctx, fmt.Sprintf(`DELETE FROM spans WHERE trace_id IN (%s)`, old), r.CutoffNs)
		if err != nil {
			return fmt.Errorf("delete spans: %w", err)
		}
		deleted, _ = res.RowsAffected()
		if _, err := conn.ExecContext(ctx, `DELETE FROM thread_activity WHERE end_ns < $1`, r.CutoffNs); err != nil {
			return fmt.Errorf("delete thread activity: %w", err)
		}
		return nil
	}
	err = s.writing("prune spans", func() error {
		if err := s.commitTx(ctx, "prune spans", prune); err != nil {
			return err
		}
		// The span commits kept (fault.go) may be pruned now: a fault is
		// not to bring them back.
		delete(s.kept, "write spans")
		delete(s.kept, "write span accounting")
		return nil
	})
	return deleted, err
}
