package requests

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/holter-dev/holter/internal/store"
)

// Tracker says since when a process's threads are accounted (a process
// of another host is not), and up to when their intervals are in the
// store; *account.Accountant is one.
type Tracker interface {
	Since(host string, pid uint32) (int64, bool)
	Watermark() int64
}

// RecentActivity is a Tracker that also keeps the recent intervals of the
// threads it accounts in memory, exact where the store may keep only
// summaries; *account.Accountant is one. Activity returns the intervals
// of thread (pid, tid) of host that overlap lo..hi, and whether memory
// still holds all of them (false: the pass reads the store).
type RecentActivity interface {
	Activity(host string, pid, tid uint32, lo, hi int64) ([]store.ThreadActivity, bool)
}

// AccountGrace is how long after the accounting watermark a span must have
// ended before it is charged: a thread's interval is written when it ends,
// so a thread that keeps running right after its span has one still open.
const AccountGrace = 500_000_000

// accountLookback bounds how far back the pass looks for spans still to
// charge (spans received later than that are charged with nothing known).
const accountLookback = 10 * 60 * 1_000_000_000

// Account charges the spans that name a thread (thread.id) and have ended
// early enough with the kernel activity of that thread during the span:
// CPU it ran, time it was blocked (and where) or runnable, block I/O it
// submitted, page cache it dirtied. A span's own (self) share excludes its
// children that ran on the same thread. It writes span_accounting and
// returns how many spans it charged.
func Account(ctx context.Context, st *store.Store, tr Tracker, nowNs int64) (int, error) {
	return accountStored(ctx, st, tr, tr.Watermark()-AccountGrace, nowNs-accountLookback)
}

// RecentLookback is what a frequent accounting pass looks back over, and
// how long Held keeps a span: a span is received after it ended, and
// chargeable within a couple of seconds of that (the accountant commits
// every second, AccountGrace after) while the accountant keeps
// committing; a pass that looks back the whole accountLookback now and
// then catches the rest. A pass over the store costs with the spans it
// looks back over: at 60 s, on the demo system at 400 requests a second,
// 30 ms a pass, a pass a second.
const RecentLookback = 10 * 1_000_000_000

// pendingSpans selects the spans received after the given time that name a
// thread, ended before the given limit and are not charged yet (%[1]d the
// limit, %[2]d the time, %[3]s which charges to look at). Only the charges
// committed since the earliest of those spans are looked at: a span's
// charge is committed after the span (its commit_seq is greater), and the
// charges of all time would make every pass cost with the store's age.
// The bound is a constant (pendingSeq), so the scan skips older blocks.
const pendingSpans = `SELECT s.trace_id, s.span_id, s.host, s.pid, s.tid, s.start_ns, s.end_ns
	FROM (SELECT trace_id, span_id, host, pid, tid, start_ns, end_ns FROM spans WHERE ` + chargeable + `) s
	ANTI JOIN (SELECT trace_id, span_id FROM span_accounting WHERE %[3]s) a USING (trace_id, span_id)
	ORDER BY s.host, s.pid, s.tid, s.start_ns`

// chargeable is the filter on spans of pendingSpans and pendingSeq: they
// name a thread, ended before %[1]d and were received after %[2]d.
const chargeable = `tid IS NOT NULL AND pid IS NOT NULL AND end_ns < %[1]d AND received_ns > %[2]d`

// pendingSeq is the filter on charges for pendingSpans: those committed
// since the earliest span received after since that names a thread and
// ended before limit; "" when there is no such span. Spans stored before
// commit numbers existed (NULL) are looked up among all charges.
func pendingSeq(ctx context.Context, st *store.Store, limit, since int64) (string, error) {
	r, err := store.Internal(st).Query(ctx, fmt.Sprintf(`SELECT count(*), count(*) FILTER (WHERE commit_seq IS NULL), coalesce(min(commit_seq), 0)
		FROM spans WHERE `+chargeable, limit, since))
	if err != nil {
		return "", err
	}
	switch {
	case i64(r.Rows[0][0]) == 0:
		return "", nil
	case i64(r.Rows[0][1]) > 0:
		return "true", nil
	}
	return fmt.Sprintf("commit_seq >= %d OR commit_seq IS NULL", i64(r.Rows[0][2])), nil
}

// accountStored charges the spans in the store received after since that
// name a thread, ended before limit and are not charged yet: its queries
// cost with what they look back over.
func accountStored(ctx context.Context, st *store.Store, tr Tracker, limit, since int64) (int, error) {
	seq, err := pendingSeq(ctx, st, limit, since)
	if err != nil || seq == "" {
		return 0, err
	}
	pending, err := store.Internal(st).Query(ctx, fmt.Sprintf(pendingSpans, limit, since, seq))
	if err != nil {
		return 0, fmt.Errorf("account spans: %w", err)
	}
	spans := make([]pendingSpan, len(pending.Rows))
	for i, r := range pending.Rows {
		spans[i] = pendingSpan{trace: str(r[0]), span: str(r[1]), thread: threadAt(r, 2), start: i64(r[5]), end: i64(r[6])}
	}
	return chargePending(ctx, st, tr, spans, func(threads []thread, lo, hi int64) (map[parentKey][]interval, error) {
		// Spans of the pending threads over the pending spans' time: a
		// superset of their children, which are found by parent.
		tuples := make([]string, len(threads))
		for i, k := range threads {
			tuples[i] = k.sql()
		}
		kids, err := st.Query(ctx, fmt.Sprintf(`SELECT c.host, c.pid, c.tid, c.trace_id, c.parent_span_id, c.start_ns, c.end_ns
			FROM spans c
			WHERE c.parent_span_id IS NOT NULL AND c.end_ns > %d AND c.start_ns < %d AND (c.host, c.pid, c.tid) IN (%s)`,
			lo, hi, strings.Join(tuples, ", ")))
		if err != nil {
			return nil, fmt.Errorf("account spans: %w", err)
		}
		children := map[parentKey][]interval{}
		for _, r := range kids.Rows {
			p := parentKey{str(r[3]), str(r[4]), threadAt(r, 0)}
			children[p] = append(children[p], interval{i64(r[5]), i64(r[6])})
		}
		return children, nil
	})
}

// thread is a thread of a process of a host.
type thread struct {
	host     string
	pid, tid uint32
}

// threadAt is the thread in a result row's columns i (host), i+1 (pid)
// and i+2 (tid).
func threadAt(r []any, i int) thread {
	return thread{str(r[i]), uint32(i64(r[i+1])), uint32(i64(r[i+2]))}
}

// sql is k as an SQL tuple (host, pid, tid).
func (k thread) sql() string {
	return fmt.Sprintf("('%s', %d, %d)", strings.ReplaceAll(k.host, "'", "''"), k.pid, k.tid)
}

// pendingSpan is a span to charge.
type pendingSpan struct {
	trace, span string
	thread      thread
	start, end  int64
}

// parentKey is a span (trace, span id) as the parent of spans on thread.
type parentKey struct {
	trace, span string
	thread      thread
}

// chargePending charges spans, ordered by thread and start, with their
// threads' activity over their time, from memory where the tracker keeps
// it, else from the store; children gives the spans on the threads
// between lo and hi by parent, which a span's self share leaves out. It
// writes span_accounting.
func chargePending(ctx context.Context, st *store.Store, tr Tracker, spans []pendingSpan,
	children func(threads []thread, lo, hi int64) (map[parentKey][]interval, error)) (int, error) {
	if len(spans) == 0 {
		return 0, nil
	}
	groups := map[thread][]pendingSpan{}
	var order []thread
	lo, hi := spans[0].start, spans[0].end
	for _, s := range spans {
		if _, ok := groups[s.thread]; !ok {
			order = append(order, s.thread)
		}
		groups[s.thread] = append(groups[s.thread], s)
		lo, hi = min(lo, s.start), max(hi, s.end)
	}
	// The activity of every pending thread over its spans' time, from
	// memory where the tracker keeps it, else from the store; and the
	// children on the same thread. Each query is one for all threads.
	// Constant bounds too, so the scan skips the table's older blocks.
	activity := map[thread][]store.ThreadActivity{}
	var fromStore, windows []string
	recent, _ := tr.(RecentActivity)
	for _, k := range order {
		spans := groups[k]
		tlo, thi := spans[0].start, spans[0].end
		for _, s := range spans {
			tlo, thi = min(tlo, s.start), max(thi, s.end)
		}
		if recent != nil {
			if acts, ok := recent.Activity(k.host, k.pid, k.tid, tlo, thi); ok {
				activity[k] = acts
				continue
			}
		}
		fromStore = append(fromStore, k.sql())
		windows = append(windows, fmt.Sprintf("('%s', %d, %d, %d, %d)", strings.ReplaceAll(k.host, "'", "''"), k.pid, k.tid, tlo, thi))
	}
	if len(fromStore) > 0 {
		acts, err := st.Query(ctx, fmt.Sprintf(`WITH w AS (SELECT * FROM (VALUES %s) w(host, pid, tid, lo, hi))
			SELECT t.host, t.pid, t.tid, t.kind, t.start_ns, t.end_ns, coalesce(t.wake_ns, 0), t.kstack, coalesce(t.bytes, 0),
				coalesce(t.ns, 0)
			FROM thread_activity t JOIN w ON t.host = w.host AND t.pid = w.pid AND t.tid = w.tid
			WHERE t.end_ns >= w.lo AND t.start_ns < w.hi AND t.end_ns >= %d AND t.start_ns < %d
				AND (t.host, t.pid, t.tid) IN (%s)
			ORDER BY t.host, t.pid, t.tid, t.start_ns`, strings.Join(windows, ", "), lo, hi, strings.Join(fromStore, ", ")))
		if err != nil {
			return 0, fmt.Errorf("account spans: %w", err)
		}
		for _, r := range acts.Rows {
			k := threadAt(r, 0)
			activity[k] = append(activity[k], store.ThreadActivity{Kind: str(r[3]), StartNs: i64(r[4]), EndNs: i64(r[5]),
				WakeNs: i64(r[6]), KStack: frames(r[7]), Bytes: uint64(i64(r[8])), Ns: i64(r[9])})
		}
	}
	kids, err := children(order, lo, hi)
	if err != nil {
		return 0, err
	}
	var out []store.SpanAccounting
	for _, k := range order {
		since, tracked := tr.Since(k.host, k.pid)
		rows := activity[k]
		// Rows are ordered by start: a span's are those that start before
		// it ends, and not longer before it starts than the longest row.
		var longest int64
		for i := range rows {
			longest = max(longest, rows[i].EndNs-rows[i].StartNs)
		}
		for _, s := range groups[k] {
			a := store.SpanAccounting{TraceID: s.trace, SpanID: s.span, BlockedSites: "[]"}
			if tracked && since <= s.start {
				a.Accounted = true
				from := sort.Search(len(rows), func(i int) bool { return rows[i].StartNs >= s.start-longest })
				to := sort.Search(len(rows), func(i int) bool { return rows[i].StartNs >= s.end })
				charge(&a, interval{s.start, s.end}, kids[parentKey{s.trace, s.span, k}], rows[from:max(from, to)])
			}
			out = append(out, a)
		}
	}
	if err := st.WriteSpanAccounting(ctx, out); err != nil {
		return 0, err
	}
	return len(out), nil
}

type interval struct{ start, end int64 }

func overlap(a, b interval) int64 {
	return max(0, min(a.end, b.end)-max(a.start, b.start))
}

// selfOverlap is the part of x inside span but outside its children.
func selfOverlap(x, span interval, children []interval) int64 {
	n := overlap(x, span)
	if n == 0 {
		return 0
	}
	in := interval{max(x.start, span.start), min(x.end, span.end)}
	for _, c := range mergeIntervals(children) {
		n -= overlap(in, c)
	}
	return max(n, 0)
}

func mergeIntervals(xs []interval) []interval {
	if len(xs) < 2 {
		return xs
	}
	s := append([]interval(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i].start < s[j].start })
	out := []interval{s[0]}
	for _, x := range s[1:] {
		last := &out[len(out)-1]
		if x.start <= last.end {
			last.end = max(last.end, x.end)
		} else {
			out = append(out, x)
		}
	}
	return out
}

// BlockedSite is where a span's thread slept and for how long.
type BlockedSite struct {
	Site string `json:"site"`
	Ns   int64  `json:"ns"`
}

// charge fills a from the thread's activity during span. A row with Ns
// set — a summary, or an on-CPU interval the thread executed Ns of by its
// CPU clock — is charged in proportion to how much of it the span covers.
func charge(a *store.SpanAccounting, span interval, children []interval, rows []store.ThreadActivity) {
	sites := map[string]int64{}
	for i := range rows {
		r := &rows[i]
		x := interval{r.StartNs, r.EndNs}
		// I/O and dirtying are charged where they began, which may be
		// a point (a single page dirtied).
		if r.Kind != "io" && r.Kind != "dirty" && overlap(x, span) == 0 {
			continue
		}
		// share scales an overlap with the row to the time of its kind.
		share := func(n int64) int64 {
			if r.Ns == 0 || n == 0 {
				return n
			}
			return int64(float64(n) * float64(r.Ns) / float64(max(x.end-x.start, 1)))
		}
		switch r.Kind {
		case "cpu":
			a.CPUNs += share(overlap(x, span))
			a.SelfCPUNs += share(selfOverlap(x, span, children))
		case "runnable":
			a.RunnableNs += share(overlap(x, span))
			a.SelfRunnableNs += share(selfOverlap(x, span, children))
		case "blocked":
			// Asleep until woken, then waiting for a CPU.
			asleep, waiting := x, interval{x.end, x.end}
			if wake := r.WakeNs; wake > x.start && wake < x.end {
				asleep, waiting = interval{x.start, wake}, interval{wake, x.end}
			}
			a.BlockedNs += share(overlap(asleep, span))
			self := share(selfOverlap(asleep, span, children))
			a.SelfBlockedNs += self
			a.RunnableNs += overlap(waiting, span)
			a.SelfRunnableNs += selfOverlap(waiting, span, children)
			if self > 0 {
				sites[siteName(r.KStack)] += self
			}
		case "io":
			// A request belongs to the span it was submitted in, not to
			// that span's parents on the thread: I/O is a self cost, as
			// the self CPU and blocked time are, so that sums over spans
			// (the trace's, a service's, a client's) count it once.
			if at := (interval{x.start, x.start + 1}); selfOverlap(at, span, children) > 0 {
				a.IOBytes += int64(r.Bytes)
				a.IONs += x.end - x.start
				a.IOCount++
			}
		case "dirty":
			// Dirtied page cache belongs to the span (not a child of it
			// on the thread) it was dirtied in.
			if at := (interval{x.start, x.start + 1}); selfOverlap(at, span, children) > 0 {
				a.DirtiedBytes += int64(r.Bytes)
			}
		}
	}
	list := make([]BlockedSite, 0, len(sites))
	for s, ns := range sites {
		list = append(list, BlockedSite{s, ns})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Ns > list[j].Ns })
	if len(list) > 5 {
		list = list[:5]
	}
	b, _ := json.Marshal(list)
	a.BlockedSites = string(b)
}

// frames is a kernel stack as the store returns it.
func frames(v any) []string {
	fs, _ := v.([]any)
	var names []string
	for _, f := range fs {
		if s, ok := f.(string); ok {
			names = append(names, s)
		}
	}
	return names
}

// siteName is the top of a kernel stack, below the scheduler: what the
// thread was waiting for.
func siteName(frames []string) string {
	if len(frames) == 0 {
		return "unknown"
	}
	return strings.Join(frames[:min(len(frames), 3)], " < ")
}
