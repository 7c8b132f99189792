package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holter-dev/holter/internal/account"
	"github.com/holter-dev/holter/internal/otlp"
	"github.com/holter-dev/holter/internal/requests"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/symbol"
)

// tracingFlags configure request tracing in `holter record`.
type tracingFlags struct {
	grpcAddr, httpAddr *string
	maxMessage         *int64
	account            *bool
	accountComm        *[]string
	accountExe         *[]string
	accountFollow      *bool
	retainSpans        *time.Duration
	spanPeriod         *time.Duration
}

func addTracingFlags(fs *flag.FlagSet) tracingFlags {
	return tracingFlags{
		grpcAddr:      valueFlag(fs, "otlp-grpc", otlp.DefaultGRPCAddr, `OTLP/gRPC trace receiver address ("off" to disable)`, addressOr("off")),
		httpAddr:      valueFlag(fs, "otlp-http", otlp.DefaultHTTPAddr, `OTLP/HTTP trace receiver address, /v1/traces ("off" to disable)`, addressOr("off")),
		maxMessage:    valueFlag(fs, "otlp-max-bytes", formatSize(otlp.DefaultMaxMessageBytes), "largest OTLP export request accepted", sizeIn(1<<10, 1<<30, "")),
		account:       fs.Bool("account", true, "charge spans that carry thread.id with their thread's kernel activity (CPU, blocking, block I/O, write-back)"),
		accountComm:   valueFlag(fs, "account-comm", "", "account processes of these program names (COMM[,COMM…], as in /proc/PID/comm) from their exec, so their first requests are charged too; and their children", commList),
		accountExe:    valueFlag(fs, "account-exe", "", "account processes running these executables (PATH[,PATH…]) from their exec, and their children", pathList),
		accountFollow: fs.Bool("account-follow", false, "also account, from their exec, new processes of each executable whose spans were received"),
		retainSpans:   valueFlag(fs, "retain-spans", "1d", "keep raw spans this long, then reduce them to per-workload rollups; 0 keeps them all", ageIn(maxAge)),
		spanPeriod:    valueFlag(fs, "span-period", "1m", "period T of the rollups raw spans are reduced to, and how often, at most, pruning runs (after an epoch's commit)", durationIn(time.Second, 24*time.Hour, "")),
	}
}

// tracing is request tracing inside a recorder: the OTLP receivers, the
// kernel accounting of the processes spans come from, and the periodic
// charging and pruning of spans.
type tracing struct {
	receiver *otlp.Receiver
	acct     *account.Accountant
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	prune    spanPruning
}

// spanPruning reduces raw spans older than retain to rollups of period,
// at most once a period, after an epoch's commit (pruneSpans).
type spanPruning struct {
	st             *store.Store
	retain, period time.Duration
	logf           func(string, ...any)
	last           time.Time
}

// startTracing starts receiving spans, tagged with host (the recorder's
// --host), and accounting them.
func startTracing(st *store.Store, f tracingFlags, host string, kernel *symbol.Kernel, logf func(string, ...any)) (*tracing, error) {
	prune := spanPruning{st: st, retain: *f.retainSpans, period: *f.spanPeriod, logf: logf}
	var err error
	opts := otlp.Options{GRPCAddr: *f.grpcAddr, HTTPAddr: *f.httpAddr, DisableGRPC: *f.grpcAddr == "off",
		DisableHTTP: *f.httpAddr == "off", MaxMessageBytes: int(*f.maxMessage), Host: host, Write: st.WriteSpans, Logf: logf,
		CommitDelay: spanCommitDelay}
	if opts.DisableGRPC && opts.DisableHTTP {
		return &tracing{cancel: func() {}, prune: prune}, nil
	}
	for _, a := range []string{opts.GRPCAddr, opts.HTTPAddr} {
		if a == "off" {
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return nil, usagef("OTLP address %q: %v", a, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, usagef("OTLP address %q is not loopback: the receivers take no token yet, so they listen on loopback only", a)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &tracing{cancel: cancel, prune: prune}
	rules := len(*f.accountComm) > 0 || len(*f.accountExe) > 0
	if rules && !*f.account {
		cancel()
		return nil, usagef("--account-comm and --account-exe need --account")
	}
	if *f.account {
		t.acct, err = account.New(account.Options{Host: host, Write: st.WriteThreadActivity, Logf: logf,
			Comms: *f.accountComm, Exes: *f.accountExe, FollowExes: *f.accountFollow,
			HoldUnnamed: holdUnnamed, Recent: recentActivity, Summarize: true, Kernel: kernel})
		if err != nil {
			if rules {
				cancel()
				return nil, fmt.Errorf("--account-comm/--account-exe: %w", err)
			}
			logf("request accounting unavailable, spans get no kernel costs: %v", err)
		}
		if t.acct != nil && rules {
			logf("accounting processes of %s from their exec", strings.Join(append(slices.Clone(*f.accountComm), *f.accountExe...), ","))
		}
	}
	var held *requests.Held
	if t.acct != nil {
		held = requests.NewHeld(time.Now().UnixNano(), requests.RecentLookback)
		opts.OnCommitted = held.Add
		self := uint32(os.Getpid())
		opts.OnThreads = t.acct.SpanThreads
		opts.OnProcesses = func(pids []uint32) {
			var others []uint32
			for _, p := range pids {
				if p != self {
					others = append(others, p)
				}
			}
			if err := t.acct.Track(others...); err != nil {
				logf("accounting: %v", err)
			}
		}
	}
	if t.receiver, err = otlp.Listen(opts); err != nil {
		// The default ports may belong to another collector on this host:
		// then the recorder records without receiving spans. Addresses the
		// user chose must work.
		if *f.grpcAddr == otlp.DefaultGRPCAddr && *f.httpAddr == otlp.DefaultHTTPAddr {
			logf("OTLP receivers not started, spans are not received: %v (choose addresses with --otlp-grpc and --otlp-http)", err)
			cancel()
			if t.acct != nil {
				t.acct.Close()
			}
			return &tracing{cancel: func() {}, prune: prune}, nil
		}
		cancel()
		if t.acct != nil {
			t.acct.Close()
		}
		return nil, err
	}
	t.receiver.Serve()
	logf("OTLP receivers: gRPC %s, HTTP %s", orOff(t.receiver.GRPCAddr()), orOff(t.receiver.HTTPAddr()))
	if t.acct != nil {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.acct.Run(ctx)
		}()
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		charge := time.NewTicker(time.Second)
		passes := 0
		defer charge.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-charge.C:
				// Before the accountant tracks a process, no span has
				// anything to be charged.
				if t.acct != nil && t.acct.Loaded() {
					passes++
					// A storage fault is the store's to report, once.
					if _, err := requests.Pass(ctx, st, t.acct, held, time.Now().UnixNano(), passes); err != nil && ctx.Err() == nil && !errors.Is(err, store.ErrUnavailable) {
						logf("accounting: %v", err)
					}
				}
			}
		}
	}()
	return t, nil
}

// spanCommitDelay is the least time between two commits of received
// spans. It bounds what committing costs the recorder (some 2 ms of CPU a
// commit besides its rows) while exporters wait little: at the SDKs'
// default pace (an export a process every 5 s or 512 spans) most exports
// are committed at once. Acknowledging 100 ms late left the demo system's
// services idle some 1.5 % of the time more, 25 ms late some 0.5 %
// (bench/tracing-overhead.sh, its idle figures).
const spanCommitDelay = 25 * time.Millisecond

// holdUnnamed is how long the recorder keeps the kernel intervals of a
// thread no span has named: longer than an OpenTelemetry SDK's batch delay
// (5 s by default), so a thread's first request, whose spans come after
// it, is charged; threads that never carry a span are not stored.
const holdUnnamed = 15 * time.Second

// recentActivity is how long the recorder keeps the exact kernel intervals
// of accounted threads in memory, charging spans from them: twice
// holdUnnamed, so a span received as late as a held interval is, and
// lasting as long, is charged exactly. The store keeps per-second
// summaries of them (account.Options.Summarize), from which spans received
// later are charged in proportion.
const recentActivity = 2 * holdUnnamed

func orOff(addr string) string {
	if addr == "" {
		return "off"
	}
	return addr
}

// requestsStatus is request tracing's part of a recorder's status.
type requestsStatus struct {
	// OTLP is what the receivers took; nil when both are off.
	OTLP *otlp.Stats `json:"otlp,omitempty"`
	// Accounting is the kernel accounting's; nil when it is off.
	Accounting *account.Stats `json:"accounting,omitempty"`
}

// pruneSpans reduces the raw spans older than --retain-spans to rollups,
// at most once a --span-period (0 keeps them all). The recorder calls it
// after an epoch's commit, while the store's engine process is up for
// that: on a ticker of its own, pruning started an engine process of its
// own every minute, even in a recorder that had received no span.
func (t *tracing) pruneSpans(ctx context.Context, now time.Time) {
	p := &t.prune
	if p.st == nil || p.retain == 0 || now.Sub(p.last) < p.period {
		return
	}
	p.last = now
	rep, err := requests.Prune(ctx, p.st, now.Add(-p.retain), p.period)
	if err != nil {
		p.logf("span retention: %v", err)
	} else if rep.Spans > 0 {
		p.logf("span retention: %d spans reduced to %d span and %d latency-edge rollups", rep.Spans, rep.SpanRollups, rep.EdgeRollups)
	}
}

func (t *tracing) status() *requestsStatus {
	var s requestsStatus
	if t.receiver != nil {
		o := t.receiver.Stats()
		s.OTLP = &o
	}
	if t.acct != nil {
		a := t.acct.Stats()
		s.Accounting = &a
	}
	if s.OTLP == nil && s.Accounting == nil {
		return nil
	}
	return &s
}

// writeMetrics writes s's counters in Prometheus text: what a scraper of
// /metrics watches to see spans refused or kernel records lost.
func (s *requestsStatus) writeMetrics(w io.Writer) {
	metric := func(name, typ, help string, v uint64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", name, help, name, typ, name, v)
	}
	if o := s.OTLP; o != nil {
		metric("holter_otlp_exports_total", "counter", "OTLP export requests received.", o.Requests)
		metric("holter_otlp_spans_stored_total", "counter", "Spans committed to the store, then acknowledged.", o.SpansAccepted)
		metric("holter_otlp_spans_rejected_total", "counter", "Malformed spans rejected (OTLP partial success).", o.SpansRejected)
		metric("holter_otlp_exports_refused_total", "counter", "Export requests refused while overloaded (the exporters retry them).", o.Refused)
		metric("holter_otlp_commits_total", "counter", "Commits of received spans.", o.Commits)
		metric("holter_otlp_commit_errors_total", "counter", "Commits of received spans that failed (the exporters retry them).", o.CommitErrors)
		metric("holter_otlp_spans_unattributed_total", "counter", "Spans stored without thread.id or process.pid: the kernel accounting cannot charge them (holter status says how to add them).", o.SpansUnattributed)
		metric("holter_otlp_spans_queued", "gauge", "Spans received and waiting for their commit.", uint64(o.QueuedSpans))
		metric("holter_otlp_connections_refused_total", "counter", "Connections over the receivers' limit, answered 503 (HTTP) or closed (gRPC).", o.ConnectionsRefused)
	}
	if a := s.Accounting; a != nil {
		metric("holter_accounting_processes", "gauge", "Processes whose threads the kernel accounting follows.", uint64(a.Tracked))
		metric("holter_accounting_records_total", "counter", "Records of the kernel accounting's BPF programs.", a.Records)
		metric("holter_accounting_records_lost_total", "counter", "Records lost to a full ring buffer: their threads' spans are charged less than they used.", a.Lost)
		metric("holter_accounting_io_lost_total", "counter", "Block requests not followed (in-flight map full): their I/O is not charged.", a.IOLost)
		metric("holter_accounting_processes_refused_total", "counter", "Processes not tracked (tracked map full).", a.Refused)
		metric("holter_accounting_intervals_committed_total", "counter", "Thread intervals committed to the store.", a.Committed)
		metric("holter_accounting_intervals_dropped_total", "counter", "Intervals of threads no span named, dropped.", a.Dropped)
		metric("holter_accounting_intervals_unstored_total", "counter", "Thread intervals the store could not take (a storage fault), dropped.", a.Unstored)
		metric("holter_accounting_switches_unseen_total", "counter", "Context switches of followed threads the sched_switch tracepoint did not report, their runs recorded from the threads' CPU clocks.", a.Unseen)
	}
}

// stop answers the exports in flight, then stops accounting.
func (t *tracing) stop() {
	if t.receiver != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t.receiver.Shutdown(ctx)
		cancel()
	}
	t.cancel()
	t.wg.Wait()
	if t.acct != nil {
		t.acct.Close()
	}
}
