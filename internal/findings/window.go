package findings

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// Querier answers read-only SQL: the store itself, or a running recorder's
// API when the recorder holds the store.
type Querier = store.Querier

// FromStore answers from an open store.
func FromStore(st *store.Store) Querier { return store.Plain(st) }

// Epoch is the timescale of raw epochs; the others are the store's rollups
// (store.Timescales: 5m, 1h, 1d).
const Epoch = "epoch"

// Interval is one point of a window: an epoch or a rollup bucket.
type Interval struct {
	StartNs, EndNs int64
}

// Seconds is the interval's length.
func (iv Interval) Seconds() float64 { return float64(iv.EndNs-iv.StartNs) / 1e9 }

// VitalSeries is one vital's summary per interval of a window, from the
// vitals table (or rollups): exact totals, not estimates. An interval in
// which the vital was not recorded holds NaN.
type VitalSeries struct {
	Events, Weight, Secondary []float64
}

// ProcStat is one process's share of one vital in one interval, estimated
// from samples (see Load).
type ProcStat struct {
	Interval int
	Vital    string
	Pid      uint32
	Comm     string
	Exe      string
	// Weight and Events are the process's estimated part of the vital's
	// exact totals in the interval.
	Weight, Events float64
	Samples        int
}

// Window is what filters read: each vital's series over a run of
// intervals of one timescale, and per-process estimates from samples.
type Window struct {
	Host      string
	Timescale string
	Intervals []Interval
	Vitals    map[string]*VitalSeries
	Procs     []ProcStat
	// Unavailable says, per vital, why it cannot be read here: never
	// recorded in the window, or (filled in by the caller from the
	// recorder's status) unsupported on the host.
	Unavailable map[string]string
	// CPUs is the number of CPUs, to express cpu time as a share of the
	// machine.
	CPUs int
	// KernelCPU is the share of cpu time spent in the kernel per interval
	// (NaN without cpu samples).
	KernelCPU []float64
	// FreeKB is the least free memory seen by kmem and umem samples per
	// interval (NaN without them).
	FreeKB []float64
	// KernelFirstKB and KernelLastKB are the machine's kernel memory in
	// use that is neither page cache, user memory nor reclaimable (kmem
	// samples' kernel_kb) as first and last read in each interval (NaN
	// without a reading: no kmem sample, or a store older than the field).
	KernelFirstKB, KernelLastKB []float64
	// Unsatisfied are sampled block requests that completed fewer bytes
	// than they asked for, or failed (Rule #3).
	Unsatisfied []IORequest
	// Signals are sampled fatal signals (Rule #10); Exits the first
	// sampled exit or exit_group of each process in each interval.
	Signals []SignalEvent
	Exits   []SampleRef
	// Groups are the samples of each process, vital and pair of stacks
	// per interval, from interval SampledFrom on (see Load); Procs sums
	// them per process and vital.
	Groups      []Group
	SampledFrom int
	// Stacks holds the frames of the groups' stacks.
	Stacks *Stacks
	// ReportFrom is the first interval findings are reported for; earlier
	// ones are history (a detector's warm-up, a rule's baseline).
	ReportFrom int
	// IncludeSelf makes the monitor's own processes (IsMonitor) subjects
	// of findings too.
	IncludeSelf bool

	profiles map[int][]*Profile
	// groupsAt and procsAt index Groups and Procs by interval (see
	// byInterval).
	groupsAt, procsAt intervalIndex
}

// intervalIndex lists the positions of a window's groups or process stats
// in each interval, in their order. Rules ask for one interval's at a
// time, interval after interval: a scan of the whole window for each
// would make a report's cost grow with the square of its length.
type intervalIndex struct {
	of [][]int
	// n is the length of the slice indexed: one that grew since is
	// indexed again.
	n int
}

// byInterval is the index of n items of a window of intervals, item k
// being in interval interval(k).
func (x *intervalIndex) byInterval(n, intervals int, interval func(int) int) *intervalIndex {
	if x.of != nil && x.n == n && len(x.of) == intervals {
		return x
	}
	x.of, x.n = make([][]int, intervals), n
	for k := range n {
		if i := interval(k); i >= 0 && i < intervals {
			x.of[i] = append(x.of[i], k)
		}
	}
	return x
}

// in is the positions of interval i's items.
func (x *intervalIndex) in(i int) []int {
	if i < 0 || i >= len(x.of) {
		return nil
	}
	return x.of[i]
}

// groupsIn is the positions in w.Groups of interval i's groups.
func (w *Window) groupsIn(i int) []int {
	return w.groupsAt.byInterval(len(w.Groups), len(w.Intervals), func(k int) int { return w.Groups[k].Interval }).in(i)
}

// procsIn is the positions in w.Procs of interval i's process stats.
func (w *Window) procsIn(i int) []int {
	return w.procsAt.byInterval(len(w.Procs), len(w.Intervals), func(k int) int { return w.Procs[k].Interval }).in(i)
}

// IORequest is a sampled block request.
type IORequest struct {
	SampleRef
	Comm                 string
	Dev, Op              string
	Sector               uint64
	Requested, Completed uint64
	Error                int64
}

// SignalEvent is a sampled signal.
type SignalEvent struct {
	SampleRef
	Comm      string
	Signal    int64
	TargetPid uint32
}

// SampleRef points at one row of the samples table.
type SampleRef struct {
	Interval int    `json:"-"`
	Epoch    int64  `json:"epoch"`
	TsNs     int64  `json:"ts_ns"`
	Vital    string `json:"vital"`
	Pid      uint32 `json:"pid"`
}

// LoadOptions says which window to load.
type LoadOptions struct {
	// Host defaults to the host of the latest epoch in the store.
	Host string
	// Timescale is Epoch (the default) or a rollup timescale name.
	Timescale string
	// From and To bound the intervals by their start; zero To means now.
	From, To time.Time
	// ReportFrom: intervals ending before it (or at it) are loaded as
	// history only.
	ReportFrom time.Time
	// CPUs defaults to 1.
	CPUs int
	// SamplesFrom: the samples of intervals starting before it are not
	// read, only the vitals' exact totals; zero reads every interval's.
	SamplesFrom time.Time
	// Stacks caches stacks' frames across loads; nil makes a new cache.
	Stacks *Stacks
}

// Vitals are the vital sign names the store may hold, in the recorder's
// order.
var Vitals = []string{"cpu", "l2", "sched", "blck", "blio", "kmem", "umem", "syscall", "signal", "sock", "lock"}

// ErrNoData is returned by Load for a range without recorded intervals.
var ErrNoData = fmt.Errorf("nothing recorded")

// Load reads a window from the store.
//
// Per-process figures are estimates. The recorder samples an event when
// its label's estimated weight crosses the next power of the threshold, so
// a sample stands for the weight its label gathered since the label's
// previous sample in the epoch (the difference of their est_count) and for
// about that weight divided by its own weight in events. A process's
// Weight and Events are its represented weight and events scaled up
// towards the vital's exact totals, by at most the vital's threshold t (a
// label's samples represent more than 1/t of what it counted; the rest of
// a total is labels no sample was kept of: scaleUp). At rollup timescales
// they come from the raw samples still retained.
func Load(ctx context.Context, q Querier, o LoadOptions) (*Window, error) {
	if o.Timescale == "" {
		o.Timescale = Epoch
	}
	width, ok := timescaleWidth(o.Timescale)
	if !ok {
		return nil, fmt.Errorf("unknown timescale %q (epoch, 5m, 1h or 1d)", o.Timescale)
	}
	if o.To.IsZero() {
		o.To = time.Now()
	}
	if o.CPUs <= 0 {
		o.CPUs = 1
	}
	if o.Host == "" {
		res, err := q.Query(ctx, `SELECT host FROM epochs ORDER BY end_ns DESC LIMIT 1`)
		if err != nil {
			return nil, fmt.Errorf("load window: %w", err)
		}
		if len(res.Rows) == 0 {
			return nil, fmt.Errorf("load window: %w: the store has no epochs", ErrNoData)
		}
		o.Host = fmt.Sprint(res.Rows[0][0])
	}
	if o.Stacks == nil {
		o.Stacks = NewStacks()
	}
	w := &Window{Host: o.Host, Timescale: o.Timescale, Vitals: map[string]*VitalSeries{},
		Unavailable: map[string]string{}, CPUs: o.CPUs, Stacks: o.Stacks}
	from, to := o.From.UnixNano(), o.To.UnixNano()
	host := sqlString(o.Host)
	var series string
	if o.Timescale == Epoch {
		series = fmt.Sprintf(`SELECT e.start_ns, e.end_ns, v.vital, CAST(v.events AS DOUBLE), CAST(v.weight_sum AS DOUBLE),
			CAST(v.secondary AS DOUBLE) FROM epochs e JOIN vitals v ON v.host = e.host AND v.epoch = e.epoch
			WHERE e.host = %s AND e.start_ns >= %d AND e.start_ns < %d ORDER BY e.start_ns`, host, from, to)
	} else {
		series = fmt.Sprintf(`SELECT bucket_ns, bucket_ns + %d, vital, CAST(events AS DOUBLE), CAST(weight_sum AS DOUBLE),
			CAST(secondary AS DOUBLE) FROM rollups WHERE timescale = %s AND host = %s AND bucket_ns >= %d AND bucket_ns < %d
			ORDER BY bucket_ns`, width, sqlString(o.Timescale), host, from-from%width, to)
	}
	res, err := q.Query(ctx, series)
	if err != nil {
		return nil, fmt.Errorf("load window: %w", err)
	}
	index := map[int64]int{}
	type row struct {
		i                   int
		vital               string
		events, weight, sec float64
	}
	var rows []row
	for _, r := range res.Rows {
		start, end := toInt(r[0]), toInt(r[1])
		i, ok := index[start]
		if !ok {
			i = len(w.Intervals)
			index[start] = i
			w.Intervals = append(w.Intervals, Interval{start, end})
		}
		rows = append(rows, row{i, fmt.Sprint(r[2]), toFloat(r[3]), toFloat(r[4]), toFloat(r[5])})
	}
	if len(w.Intervals) == 0 {
		return nil, fmt.Errorf("%w on host %s between %s and %s at timescale %s", ErrNoData, o.Host,
			o.From.UTC().Format(time.RFC3339), o.To.UTC().Format(time.RFC3339), o.Timescale)
	}
	n := len(w.Intervals)
	for _, r := range rows {
		s := w.Vitals[r.vital]
		if s == nil {
			s = &VitalSeries{Events: nans(n), Weight: nans(n), Secondary: nans(n)}
			w.Vitals[r.vital] = s
		}
		s.Events[r.i], s.Weight[r.i], s.Secondary[r.i] = r.events, r.weight, r.sec
	}
	for _, v := range Vitals {
		if w.Vitals[v] == nil {
			w.Unavailable[v] = "not recorded in this range"
		}
	}
	// The first interval reported is the first that ends after ReportFrom:
	// one that a range starts inside of is part of the range. A workload
	// started mid-epoch shows first in that epoch, and a detector judges
	// a change at its onset.
	w.ReportFrom = sort.Search(n, func(i int) bool { return w.Intervals[i].EndNs > o.ReportFrom.UnixNano() })
	w.SampledFrom = sort.Search(n, func(i int) bool { return w.Intervals[i].StartNs >= o.SamplesFrom.UnixNano() })
	w.KernelCPU, w.FreeKB, w.KernelFirstKB, w.KernelLastKB = nans(n), nans(n), nans(n), nans(n)
	// A window of history alone (a report's stretch after the last
	// committed epoch) has no finding to report: its samples are not read.
	if w.SampledFrom < n && w.ReportFrom < n {
		if err := w.loadSamples(ctx, q, index, width, max(from, w.Intervals[w.SampledFrom].StartNs), to); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// bucketExpr maps an epoch's start to its interval's start.
func bucketExpr(width int64) string {
	if width == 0 {
		return "e.start_ns"
	}
	return fmt.Sprintf("(e.start_ns - e.start_ns %% %d)", width)
}

// representedCTE gives each sample in range the weight (dw) and events (de)
// it stands for — its label's estimated count since the label's previous
// sample in the epoch — and its interval (b). A label's samples are taken
// in the order of their estimates, which is the order the sketch counted
// them in: a block request's sample is sent when it completes, and a
// request that overtakes an earlier one of its label would otherwise find
// its estimate above the next sample's, leaving that one none.
func representedCTE(host string, width, from, to int64, where string) string {
	return represented(host, width, from, to, where, "s.*")
}

// byProcessLabel and byLabel are how represented partitions samples: by
// label and process, or by label alone. A sample stands for its label's
// weight since the label's previous sample, whichever process that was
// in: when labels carry no pid (one label for every process running the
// same code) the label alone is right, and when they carry one, the two
// are the same.
const (
	byProcessLabel = "s.epoch, s.vital, s.label_hash, s.pid"
	byLabel        = "s.epoch, s.vital, s.label_hash"
)

// represented is representedCTE with the samples' columns it keeps (cols,
// of samples s; other expressions may use the window w, a label's samples
// in the order the sketch counted them).
func represented(host string, width, from, to int64, where, cols string) string {
	return representedBy(host, width, from, to, where, cols, byProcessLabel)
}

// representedBy is represented with the window's partition.
func representedBy(host string, width, from, to int64, where, cols, partition string) string {
	if where != "" {
		where = " AND " + where
	}
	return fmt.Sprintf(`WITH s AS (
		SELECT %s AS b, %s,
			greatest(CAST(s.est_count AS DOUBLE) - coalesce(lag(CAST(s.est_count AS DOUBLE)) OVER w, 0), 0) AS dw
		FROM samples s JOIN epochs e ON e.host = s.host AND e.epoch = s.epoch
		WHERE s.host = %s AND e.start_ns >= %d AND e.start_ns < %d%s
		WINDOW w AS (PARTITION BY %s ORDER BY s.est_count, s.ts_ns)),
	r AS (SELECT *, dw / greatest(CAST(weight AS DOUBLE), 1) AS de FROM s)`,
		bucketExpr(width), cols, sqlString(host), from-from%max(width, 1), to, where, partition)
}

func timescaleWidth(name string) (int64, bool) {
	if name == Epoch {
		return 0, true
	}
	for _, ts := range store.Timescales {
		if ts.Name == name {
			return ts.Width.Nanoseconds(), true
		}
	}
	return 0, false
}

// Value reads one vital's series at an interval: NaN when absent.
func (w *Window) series(vital string) *VitalSeries {
	if s := w.Vitals[vital]; s != nil {
		return s
	}
	n := len(w.Intervals)
	return &VitalSeries{Events: nans(n), Weight: nans(n), Secondary: nans(n)}
}

// WeightRate is a vital's weight per second in interval i: for the
// time-weighted vitals (cpu, sched, blck, syscall, lock, in microseconds)
// it is microseconds per second.
func (w *Window) WeightRate(vital string, i int) float64 {
	return w.series(vital).Weight[i] / w.Intervals[i].Seconds()
}

// EventRate is a vital's events per second in interval i.
func (w *Window) EventRate(vital string, i int) float64 {
	return w.series(vital).Events[i] / w.Intervals[i].Seconds()
}

// CPUUtil is the machine's CPU utilisation in interval i, 0..1.
func (w *Window) CPUUtil(i int) float64 {
	return w.WeightRate("cpu", i) / 1e6 / float64(max(w.CPUs, 1))
}

// Proc returns a process's stat for a vital in interval i (zero if none).
func (w *Window) Proc(i int, vital string, pid uint32) ProcStat {
	for _, k := range w.procsIn(i) {
		if p := w.Procs[k]; p.Vital == vital && p.Pid == pid {
			return p
		}
	}
	return ProcStat{Interval: i, Vital: vital, Pid: pid}
}

// ProcsOf lists the process stats of a vital in interval i, largest first,
// without the monitor's own (unless w.IncludeSelf).
func (w *Window) ProcsOf(i int, vital string) []ProcStat {
	var out []ProcStat
	for _, k := range w.procsIn(i) {
		if p := w.Procs[k]; p.Vital == vital && (w.IncludeSelf || !IsMonitor(p.Comm, p.Exe)) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Weight > out[b].Weight })
	return out
}

// kernelGrowth is how far the kernel memory in use rose over intervals
// first to last, in KiB: its highest reading in them less the last reading
// before (the interval before's, else first's own first); false without a
// reading in them. The highest, not the last: a leaking process's buffers
// are freed when it exits, in the last interval of its run.
func (w *Window) kernelGrowth(first, last int) (float64, bool) {
	if first < 0 || last >= len(w.KernelLastKB) || last >= len(w.KernelFirstKB) {
		return 0, false
	}
	from, peak := math.NaN(), math.Inf(-1)
	if first > 0 {
		from = w.KernelLastKB[first-1]
	}
	for k := first; k <= last; k++ {
		for _, v := range []float64{w.KernelFirstKB[k], w.KernelLastKB[k]} {
			if math.IsNaN(v) {
				continue
			}
			if math.IsNaN(from) {
				from = v
			}
			peak = math.Max(peak, v)
		}
	}
	if math.IsInf(peak, -1) {
		return 0, false
	}
	return peak - from, true
}

func nans(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

func nanZero(x float64) float64 {
	if math.IsNaN(x) {
		return 0
	}
	return x
}

func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// toFloat reads a number as the store or the API returns it (NULL: NaN).
func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case float32:
		return float64(x)
	case int64:
		return float64(x)
	case int32:
		return float64(x)
	case int:
		return float64(x)
	case uint64:
		return float64(x)
	case uint32:
		return float64(x)
	case int16:
		return float64(x)
	case int8:
		return float64(x)
	case uint16:
		return float64(x)
	case uint8:
		return float64(x)
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return math.NaN()
		}
		return f
	case bool:
		if x {
			return 1
		}
		return 0
	}
	return math.NaN()
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case uint64:
		return int64(x)
	case *big.Int:
		return x.Int64()
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		// A UBIGINT past int64 (a stack id is a 64-bit hash) keeps its
		// bits: a double would lose the low ones, and the id its stack.
		if n, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return int64(n)
		}
	}
	f := toFloat(v)
	if math.IsNaN(f) {
		return 0
	}
	return int64(f)
}

// Concat joins windows of consecutive intervals of one host and timescale,
// oldest first, into one, as if loaded at once: the recorder's online
// analysis loads each epoch once and judges it with the ones before it.
// A vital missing from some windows is NaN in their intervals, and
// unavailable only if missing from all. ReportFrom is the last window's
// first interval; the windows are not changed.
func Concat(ws ...*Window) *Window {
	if len(ws) == 0 {
		return nil
	}
	last := ws[len(ws)-1]
	out := &Window{Host: last.Host, Timescale: last.Timescale, Vitals: map[string]*VitalSeries{}, Unavailable: map[string]string{},
		CPUs: last.CPUs, Stacks: last.Stacks, IncludeSelf: last.IncludeSelf}
	n := 0
	for _, w := range ws {
		n += len(w.Intervals)
	}
	for _, w := range ws {
		for v := range w.Vitals {
			if out.Vitals[v] == nil {
				out.Vitals[v] = &VitalSeries{Events: nans(n), Weight: nans(n), Secondary: nans(n)}
			}
		}
	}
	for _, v := range Vitals {
		if out.Vitals[v] == nil {
			out.Unavailable[v] = last.Unavailable[v]
			if out.Unavailable[v] == "" {
				out.Unavailable[v] = "not recorded in this range"
			}
		}
	}
	off := 0
	for k, w := range ws {
		if k == len(ws)-1 {
			out.ReportFrom = off
		}
		if k == 0 {
			out.SampledFrom = w.SampledFrom
		}
		out.Intervals = append(out.Intervals, w.Intervals...)
		for v, s := range w.Vitals {
			o := out.Vitals[v]
			copy(o.Events[off:], s.Events)
			copy(o.Weight[off:], s.Weight)
			copy(o.Secondary[off:], s.Secondary)
		}
		out.KernelCPU = append(out.KernelCPU, w.KernelCPU...)
		out.FreeKB = append(out.FreeKB, w.FreeKB...)
		out.KernelFirstKB = append(out.KernelFirstKB, w.KernelFirstKB...)
		out.KernelLastKB = append(out.KernelLastKB, w.KernelLastKB...)
		out.Groups = appendShifted(out.Groups, w.Groups, func(g *Group) { g.Interval += off })
		out.Procs = appendShifted(out.Procs, w.Procs, func(p *ProcStat) { p.Interval += off })
		out.Unsatisfied = appendShifted(out.Unsatisfied, w.Unsatisfied, func(r *IORequest) { r.Interval += off })
		out.Signals = appendShifted(out.Signals, w.Signals, func(s *SignalEvent) { s.Interval += off })
		out.Exits = appendShifted(out.Exits, w.Exits, func(e *SampleRef) { e.Interval += off })
		off += len(w.Intervals)
	}
	return out
}

// appendShifted appends src's elements to dst, each moved to its interval
// in the joined window by shift.
func appendShifted[T any](dst, src []T, shift func(*T)) []T {
	for _, x := range src {
		shift(&x)
		dst = append(dst, x)
	}
	return dst
}

// AsInt and AsFloat read a number as the store or a recorder's API returns
// it (a JSON number from the API); AsFloat reads NULL as NaN, AsInt as 0.
func AsInt(v any) int64     { return toInt(v) }
func AsFloat(v any) float64 { return toFloat(v) }
