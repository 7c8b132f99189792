package findings

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// Filter is an operator over a window of vital series (Chopstix §2.2, the
// aggregator's "multi-set aggregation operators"): a detector, a threshold
// or a diagnostic rule. Filters are pure functions of the window, so they
// are tested on constructed series; Evaluate runs them and Attribute adds
// what the samples say about the findings.
type Filter interface {
	// Name identifies the filter in findings ("ewma:blio", "rule5-blocking").
	Name() string
	// Needs are the vitals the filter reads. A filter is not run when one
	// of them is unavailable; Evaluate reports it as unevaluated instead.
	Needs() []string
	// Evaluate returns the filter's findings, one per interval (index in
	// Finding.First/Last) and subject; Evaluate merges runs of them.
	Evaluate(w *Window) []Finding
}

// Finding is what a filter concluded about a time range.
type Finding struct {
	Rule      string `json:"rule"`
	Timescale string `json:"timescale"`
	// Subject is what the finding is about: a vital, or a process.
	Subject string `json:"subject"`
	StartNs int64  `json:"start_ns"`
	EndNs   int64  `json:"end_ns"`
	// Severity is what the problem costs, from 0 to 1, on one scale for
	// every filter (see doc.go); 0 when the filter cannot put a cost on
	// what it found. Score is the filter's own measure, in its units.
	Severity float64 `json:"severity"`
	Score    float64 `json:"score"`
	// Resource is what the problem is about (Resource* constants).
	Resource string `json:"resource,omitempty"`
	// Culprit is the process and code the problem is in, when the filter
	// can name them.
	Culprit   *Culprit    `json:"culprit,omitempty"`
	Summary   string      `json:"summary"`
	Vitals    []string    `json:"vitals"`
	Processes []Process   `json:"processes,omitempty"`
	Sites     []Site      `json:"sites,omitempty"`
	Evidence  []Evidence  `json:"evidence,omitempty"`
	Samples   []SampleRef `json:"samples,omitempty"`
	// First and Last are the window intervals the finding covers.
	First, Last int `json:"-"`
}

// Culprit is what a finding blames: a process and where in its code.
type Culprit struct {
	Pid  uint32 `json:"pid"`
	Comm string `json:"comm"`
	Exe  string `json:"exe,omitempty"`
	// Function is the function of the process's own code the problem is
	// in (see OwnFunction); User and Kernel the top frames, innermost
	// first, of its heaviest stacks in the finding.
	Function string   `json:"function,omitempty"`
	User     []string `json:"user_frames,omitempty"`
	Kernel   []string `json:"kernel_frames,omitempty"`
}

// The resources findings are about.
const (
	ResourceCPU      = "cpu"
	ResourceRunQueue = "run queue"
	ResourceLock     = "lock"
	ResourceDisk     = "disk"
	ResourcePeer     = "network peer"
	ResourceMemory   = "memory"
	ResourceSyscall  = "system call"
	ResourceSignal   = "signals"
	ResourceProcess  = "process"
)

// Process is a process a finding involves.
type Process struct {
	Pid    uint32  `json:"pid"`
	Comm   string  `json:"comm"`
	Exe    string  `json:"exe,omitempty"`
	Vital  string  `json:"vital,omitempty"`
	Weight float64 `json:"weight,omitempty"`
}

// Site is a code site a finding involves: a stack with its top frames.
type Site struct {
	Vital   string   `json:"vital"`
	StackID uint64   `json:"stack_id"`
	Kind    string   `json:"kind"`
	Frames  []string `json:"frames"`
	Weight  float64  `json:"weight"`
}

// Evidence is one measured value behind a finding, with the level it was
// compared against.
type Evidence struct {
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Against  float64 `json:"against"`
	Relation string  `json:"relation"` // ">=", "<=", "vs mean", ...
	Unit     string  `json:"unit,omitempty"`
	Interval int     `json:"-"`
}

// Unevaluated is a filter that could not run on the window, and why.
type Unevaluated struct {
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

// Evaluate runs the filters over the window and returns the findings of
// intervals from w.ReportFrom on, a run of consecutive intervals with the
// same rule and subject merged into one finding, strongest first; and the
// filters whose vitals are unavailable, with the reason.
func Evaluate(w *Window, filters []Filter) ([]Finding, []Unevaluated) {
	var found []Finding
	var skipped []Unevaluated
	for _, f := range filters {
		if u, ok := unevaluable(f, w.Unavailable); ok {
			skipped = append(skipped, u)
			continue
		}
		var mine []Finding
		for _, x := range f.Evaluate(w) {
			if x.Last < w.ReportFrom {
				continue
			}
			if x.Rule == "" {
				x.Rule = f.Name()
			}
			x.Timescale = w.Timescale
			mine = append(mine, x)
		}
		found = append(found, merge(w, mine)...)
	}
	sort.SliceStable(found, func(i, j int) bool {
		if found[i].StartNs != found[j].StartNs {
			return found[i].StartNs < found[j].StartNs
		}
		return stronger(found[i], found[j])
	})
	return found, skipped
}

// Unevaluable lists the filters that cannot run for want of a vital
// that is unavailable (vital → why), as Evaluate reports them.
func Unevaluable(filters []Filter, unavailable map[string]string) []Unevaluated {
	var out []Unevaluated
	for _, f := range filters {
		if u, ok := unevaluable(f, unavailable); ok {
			out = append(out, u)
		}
	}
	return out
}

func unevaluable(f Filter, unavailable map[string]string) (Unevaluated, bool) {
	var missing []string
	for _, v := range f.Needs() {
		if reason, ok := unavailable[v]; ok {
			missing = append(missing, fmt.Sprintf("%s %s", v, reason))
		}
	}
	if len(missing) == 0 {
		return Unevaluated{}, false
	}
	return Unevaluated{Rule: f.Name(), Reason: strings.Join(missing, "; ")}, true
}

// Unrecorded says which vitals no epoch of the host recorded in the
// range (vital → why), as Load's Window.Unavailable does for the
// intervals it loads.
func Unrecorded(ctx context.Context, q Querier, host string, r Range) (map[string]string, error) {
	res, err := q.Query(ctx, fmt.Sprintf(`SELECT DISTINCT v.vital FROM epochs e JOIN vitals v ON v.host = e.host AND v.epoch = e.epoch
		WHERE e.host = %s AND e.end_ns > %d AND e.start_ns < %d`, sqlString(host), r.StartNs, r.EndNs))
	if err != nil {
		return nil, fmt.Errorf("vitals recorded: %w", err)
	}
	seen := map[string]bool{}
	for _, row := range res.Rows {
		seen[fmt.Sprint(row[0])] = true
	}
	out := map[string]string{}
	for _, v := range Vitals {
		if !seen[v] {
			out[v] = "not recorded in this range"
		}
	}
	return out, nil
}

// stronger orders findings by severity, then by their filter's own score.
func stronger(a, b Finding) bool {
	if a.Severity != b.Severity {
		return a.Severity > b.Severity
	}
	return a.Score > b.Score
}

// merge joins findings of one filter with the same subject over adjacent
// intervals, keeping the strongest one's summary and evidence.
func merge(w *Window, fs []Finding) []Finding {
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].Subject != fs[j].Subject {
			return fs[i].Subject < fs[j].Subject
		}
		return fs[i].First < fs[j].First
	})
	var out []Finding
	for _, f := range fs {
		if n := len(out); n > 0 && out[n-1].Subject == f.Subject && f.First <= out[n-1].Last+1 {
			last := &out[n-1]
			last.Last = max(last.Last, f.Last)
			if stronger(f, *last) {
				f.First, f.Last = last.First, last.Last
				f.Evidence = append(last.Evidence, f.Evidence...)
				f.Samples = append(last.Samples, f.Samples...)
				*last = f
			} else {
				last.Evidence = append(last.Evidence, f.Evidence...)
				last.Samples = append(last.Samples, f.Samples...)
			}
			continue
		}
		out = append(out, f)
	}
	for i := range out {
		out[i].StartNs = w.Intervals[out[i].First].StartNs
		out[i].EndNs = w.Intervals[out[i].Last].EndNs
		if len(out[i].Evidence) > 12 {
			out[i].Evidence = out[i].Evidence[len(out[i].Evidence)-12:]
		}
		if len(out[i].Samples) > 10 {
			out[i].Samples = out[i].Samples[:10]
		}
	}
	return out
}

// finite is x, with NaN as 0 and infinities as the largest finite values
// (JSON has neither).
func finite(x float64) float64 {
	switch {
	case math.IsNaN(x):
		return 0
	case math.IsInf(x, 1):
		return math.MaxFloat64
	case math.IsInf(x, -1):
		return -math.MaxFloat64
	}
	return x
}

// at makes a finding for interval i.
func at(i int, subject string, score float64, summary string, vitals ...string) Finding {
	return Finding{Subject: subject, Score: score, Summary: summary, Vitals: vitals, First: i, Last: i}
}

func procSubject(p ProcStat) string { return fmt.Sprintf("pid %d (%s)", p.Pid, p.Comm) }

func procOf(p ProcStat) Process {
	return Process{Pid: p.Pid, Comm: p.Comm, Exe: p.Exe, Vital: p.Vital, Weight: p.Weight}
}

// Measure is a number read from a window at an interval.
type Measure struct {
	Name, Unit string
	Vitals     []string
	At         func(w *Window, i int) float64
	// Floor is the least standard deviation a detector assumes of the
	// measure, in its units: changes smaller than a few of it are noise.
	Floor float64
}

// WeightRate measures a vital's weight per second.
func WeightRate(vital string) Measure {
	return Measure{Name: vital + " weight/s", Unit: unitOf(vital) + "/s", Vitals: []string{vital},
		At: func(w *Window, i int) float64 { return w.WeightRate(vital, i) }, Floor: weightFloor(vital)}
}

// EventRate measures a vital's events per second.
func EventRate(vital string) Measure {
	return Measure{Name: vital + " events/s", Unit: "events/s", Vitals: []string{vital},
		At: func(w *Window, i int) float64 { return w.EventRate(vital, i) }, Floor: 10}
}

// weightFloor is the least standard deviation of a vital's weight per
// second: 1% of a CPU for the time-weighted vitals, 64 KiB/s of I/O,
// 1 MiB/s of memory, 10 events/s.
func weightFloor(vital string) float64 {
	switch unitOf(vital) {
	case "bytes":
		return 64 << 10
	case "pages":
		return 256
	case "events":
		return 10
	}
	return 1e4
}

// VitalResource is the resource a vital measures.
func VitalResource(vital string) string {
	switch vital {
	case "cpu", "l2":
		return ResourceCPU
	case "sched":
		return ResourceRunQueue
	case "blio":
		return ResourceDisk
	case "kmem", "umem":
		return ResourceMemory
	case "syscall":
		return ResourceSyscall
	case "signal":
		return ResourceSignal
	case "sock":
		return ResourcePeer
	case "lock":
		return ResourceLock
	}
	return "blocking"
}

func unitOf(vital string) string {
	switch vital {
	case "blio", "sock":
		return "bytes"
	case "kmem", "umem":
		return "pages"
	case "l2", "signal":
		return "events"
	}
	return "µs"
}

// Threshold flags intervals where a measure is at or above Above (if set)
// or at or below Below (if set).
type Threshold struct {
	Label   string
	Measure Measure
	Above   *float64
	Below   *float64
}

func (t Threshold) Name() string    { return t.Label }
func (t Threshold) Needs() []string { return t.Measure.Vitals }

func (t Threshold) Evaluate(w *Window) []Finding {
	var out []Finding
	for i := range w.Intervals {
		x := t.Measure.At(w, i)
		if math.IsNaN(x) {
			continue
		}
		for _, lim := range []struct {
			level *float64
			rel   string
			hit   bool
		}{{t.Above, ">=", t.Above != nil && x >= *t.Above}, {t.Below, "<=", t.Below != nil && x <= *t.Below}} {
			if !lim.hit {
				continue
			}
			f := at(i, t.Measure.Vitals[0], x, fmt.Sprintf("%s %.4g %s, threshold %s %.4g", t.Measure.Name, x, t.Measure.Unit, lim.rel, *lim.level), t.Measure.Vitals...)
			f.Evidence = []Evidence{{Name: t.Measure.Name, Value: x, Against: *lim.level, Relation: lim.rel, Unit: t.Measure.Unit, Interval: i}}
			out = append(out, f)
		}
	}
	return out
}

// EWMAFilter runs an EWMA detector over a measure.
type EWMAFilter struct {
	Measure  Measure
	Detector EWMA
	// MinEvents is the fewest events of the measure's first vital an
	// interval needs for a rise to count, so that a stray event over an
	// idle baseline is not an anomaly. Default 10.
	MinEvents float64
}

func (e EWMAFilter) Name() string    { return "ewma:" + e.Measure.Name }
func (e EWMAFilter) Needs() []string { return e.Measure.Vitals }

func (e EWMAFilter) Evaluate(w *Window) []Finding {
	xs := make([]float64, len(w.Intervals))
	for i := range xs {
		xs[i] = e.Measure.At(w, i)
	}
	d := e.Detector
	if d.MinSigma == 0 {
		d.MinSigma = e.Measure.Floor
	}
	anomalies, err := d.Detect(xs)
	if err != nil {
		return nil
	}
	minEvents := e.MinEvents
	if minEvents == 0 {
		minEvents = 10
	}
	vital := e.Measure.Vitals[0]
	var out []Finding
	for _, a := range anomalies {
		if a.Z > 0 && w.series(vital).Events[a.Index] < minEvents {
			continue
		}
		dir := "rose"
		if a.Z < 0 {
			dir = "fell"
		}
		f := at(a.Index, vital, math.Abs(a.Z), fmt.Sprintf("%s %s to %.4g %s from a moving mean of %.4g (%.1fσ)",
			e.Measure.Name, dir, a.Value, e.Measure.Unit, a.Mean, a.Z), e.Measure.Vitals...)
		f.Resource = VitalResource(vital)
		f.Evidence = []Evidence{{Name: e.Measure.Name, Value: a.Value, Against: a.Mean, Relation: "vs moving mean", Unit: e.Measure.Unit, Interval: a.Index}}
		if a.Z > 0 {
			for k, p := range w.ProcsOf(a.Index, vital) {
				if k == 3 {
					break
				}
				f.Processes = append(f.Processes, procOf(p))
			}
		}
		out = append(out, f)
	}
	return out
}

// Row is the finding as a row of the store's findings table; its score
// column holds the severity, so that a finding extended over more epochs
// keeps its worst.
func (f Finding) Row(host string) store.Finding {
	f.Severity, f.Score = finite(f.Severity), finite(f.Score)
	for i := range f.Evidence {
		f.Evidence[i].Value, f.Evidence[i].Against = finite(f.Evidence[i].Value), finite(f.Evidence[i].Against)
	}
	for i := range f.Processes {
		f.Processes[i].Weight = finite(f.Processes[i].Weight)
	}
	for i := range f.Sites {
		f.Sites[i].Weight = finite(f.Sites[i].Weight)
	}
	detail, _ := json.Marshal(f)
	row := store.Finding{Host: host, Rule: f.Rule, Timescale: f.Timescale, Subject: f.Subject, StartNs: f.StartNs,
		EndNs: f.EndNs, Score: f.Severity, Summary: f.Summary, Detail: string(detail)}
	for _, p := range f.Processes {
		row.Pids = append(row.Pids, p.Pid)
		row.Comms = append(row.Comms, p.Comm)
	}
	return row
}

// The rules of findings about how the metrics of holter diff moved: the
// online analysis's check of each stretch against the ones before it, and
// a report's of its range against the stretch before it.
const (
	DriftRule = "reference-drift"
	DiffRule  = "diff"
)

// Stored reads the findings the store holds that overlap a range.
func Stored(ctx context.Context, q Querier, host string, r Range) ([]Finding, error) {
	res, err := q.Query(ctx, fmt.Sprintf(`SELECT detail, start_ns, end_ns, score FROM findings
		WHERE host = %s AND end_ns > %d AND start_ns < %d ORDER BY start_ns, rule, subject`, sqlString(host), r.StartNs, r.EndNs))
	if err != nil {
		return nil, fmt.Errorf("stored findings: %w", err)
	}
	var out []Finding
	for _, row := range res.Rows {
		var f Finding
		// Rows an older holter stored are left out: they have no
		// resource or severity to rank them by (and some no detail, which
		// it could not encode when a score was infinite).
		if err := json.Unmarshal([]byte(fmt.Sprint(row[0])), &f); err != nil || f.Resource == "" {
			continue
		}
		// The row's range and severity may have grown past the detail's.
		f.StartNs, f.EndNs, f.Severity = toInt(row[1]), toInt(row[2]), toFloat(row[3])
		out = append(out, f)
	}
	return out, nil
}

// Analysed reads the ranges of a host's recording overlapping r that the
// recorder's online analysis has judged, by start; their findings are
// among Stored's. A store from before the analysed table has none.
func Analysed(ctx context.Context, q Querier, host string, r Range) ([]Range, error) {
	res, err := q.Query(ctx, fmt.Sprintf(`SELECT start_ns, end_ns FROM analysed WHERE host = %s AND end_ns > %d AND start_ns < %d ORDER BY start_ns`,
		sqlString(host), r.StartNs, r.EndNs))
	if err != nil {
		if noAnalysedTable(ctx, q) {
			return nil, nil
		}
		return nil, fmt.Errorf("analysed ranges: %w", err)
	}
	var out []Range
	for _, row := range res.Rows {
		out = append(out, Range{StartNs: toInt(row[0]), EndNs: toInt(row[1])})
	}
	return out, nil
}

// noAnalysedTable says whether the store lacks the analysed table (a store
// an older holter wrote, opened read-only).
func noAnalysedTable(ctx context.Context, q Querier) bool {
	res, err := q.Query(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_name = 'analysed'`)
	return err == nil && len(res.Rows) == 1 && toInt(res.Rows[0][0]) == 0
}

// LatestHost is the host of the latest epoch in the store.
func LatestHost(ctx context.Context, q Querier) (string, error) {
	res, err := q.Query(ctx, `SELECT host FROM epochs ORDER BY end_ns DESC LIMIT 1`)
	if err != nil {
		return "", fmt.Errorf("latest host: %w", err)
	}
	if len(res.Rows) == 0 {
		return "", fmt.Errorf("%w: the store has no epochs", ErrNoData)
	}
	return fmt.Sprint(res.Rows[0][0]), nil
}

// EpochLength is the length of a host's latest epoch (1 s when it has
// none).
func EpochLength(ctx context.Context, q Querier, host string) (time.Duration, error) {
	res, err := q.Query(ctx, `SELECT end_ns - start_ns FROM epochs WHERE host = `+sqlString(host)+` ORDER BY end_ns DESC LIMIT 1`)
	if err != nil {
		return 0, fmt.Errorf("epoch length: %w", err)
	}
	if len(res.Rows) == 0 || toInt(res.Rows[0][0]) <= 0 {
		return time.Second, nil
	}
	return time.Duration(toInt(res.Rows[0][0])), nil
}

// MedianEpochLength is the median length of a host's epochs within r (0
// when it has none there): unlike the latest epoch, it is not the one the
// recorder cut short when it stopped.
func MedianEpochLength(ctx context.Context, q Querier, host string, r Range) (time.Duration, error) {
	res, err := q.Query(ctx, fmt.Sprintf(`SELECT quantile_disc(end_ns - start_ns, 0.5) FROM epochs WHERE host = %s AND start_ns >= %d AND end_ns <= %d`,
		sqlString(host), r.StartNs, r.EndNs))
	if err != nil {
		return 0, fmt.Errorf("epoch length: %w", err)
	}
	if len(res.Rows) == 0 {
		return 0, nil
	}
	return time.Duration(max(0, toInt(res.Rows[0][0]))), nil
}

// TimescaleWidth is a rollup timescale's bucket length.
func TimescaleWidth(name string) (time.Duration, bool) {
	if name == Epoch {
		return 0, false
	}
	w, ok := timescaleWidth(name)
	return time.Duration(w), ok
}
