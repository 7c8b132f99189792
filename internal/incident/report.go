package incident

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/holter-dev/holter/internal/diagnose"
	"github.com/holter-dev/holter/internal/findings"
)

// Report is the ranked answer to "what is wrong with this host?" for a
// time range.
type Report struct {
	Host      string `json:"host"`
	StartNs   int64  `json:"start_ns"`
	EndNs     int64  `json:"end_ns"`
	Timescale string `json:"timescale"`
	// Incidents are ranked, the worst first.
	Incidents []Incident `json:"incidents"`
	// Unevaluated are the filters that could not run on the part of the
	// range evaluated now, and why.
	Unevaluated []findings.Unevaluated `json:"unevaluated"`
	// Analysed is how much of the range the recorder's online analysis had
	// judged (its findings were read); Evaluated how much was judged now.
	AnalysedNs  int64 `json:"analysed_ns"`
	EvaluatedNs int64 `json:"evaluated_ns"`
}

// Options say what to report on.
type Options struct {
	// Host is the host whose recording is judged; "" is the one that
	// recorded last.
	Host string
	// Range is the time range; its findings are those that overlap it.
	Range findings.Range
	// Timescale is findings.Epoch (the default) or a rollup's name; only
	// epochs have the online analysis's findings.
	Timescale string
	// History is how many intervals before the part of the range
	// evaluated now the detectors read as their baseline.
	History int
	// CPUs is the host's number of CPUs (default 1).
	CPUs int
	// Unavailable adds reasons for vitals the recorder cannot record.
	Unavailable map[string]string
	// IncludeSelf makes holter's own processes subjects of findings.
	IncludeSelf bool
	// Diff ranks the holter diff metrics of the range against the stretch
	// before it (three times as long) as evidence, when the range is at
	// most DiffMax long.
	Diff bool
	// Stacks caches stacks across reports; nil for a new cache.
	Stacks *findings.Stacks
}

// DiffMax is the longest range Options.Diff derives the diff metrics of:
// the derivation reads every sample of both ranges.
const DiffMax = 3 * time.Minute

// Build reports on a range: the findings the recorder's online analysis
// stored for the epochs it analysed, the filters evaluated now over the
// rest (and over the whole range at a rollup timescale), merged into
// ranked incidents.
func Build(ctx context.Context, q findings.Querier, o Options) (*Report, error) {
	if o.Timescale == "" {
		o.Timescale = findings.Epoch
	}
	if o.Range.EndNs <= o.Range.StartNs {
		return nil, fmt.Errorf("report: %w: the range is empty", findings.ErrBadRange)
	}
	if o.Stacks == nil {
		o.Stacks = findings.NewStacks()
	}
	host := o.Host
	if host == "" {
		h, err := findings.LatestHost(ctx, q)
		if err != nil {
			return nil, err
		}
		host = h
	}
	r := &Report{Host: host, StartNs: o.Range.StartNs, EndNs: o.Range.EndNs, Timescale: o.Timescale,
		Unevaluated: []findings.Unevaluated{}}
	var all []findings.Finding
	todo := []findings.Range{o.Range}
	if o.Timescale == findings.Epoch {
		stored, err := findings.Stored(ctx, q, host, o.Range)
		if err != nil {
			return nil, err
		}
		analysed, err := findings.Analysed(ctx, q, host, o.Range)
		if err != nil {
			return nil, err
		}
		all = append(all, stored...)
		todo = subtract(o.Range, analysed)
		for _, a := range analysed {
			r.AnalysedNs += min(a.EndNs, o.Range.EndNs) - max(a.StartNs, o.Range.StartNs)
		}
	}
	width, err := intervalWidth(ctx, q, host, o.Timescale)
	if err != nil {
		return nil, err
	}
	skipped := map[string]findings.Unevaluated{}
	for _, t := range todo {
		found, unevaluated, err := evaluate(ctx, q, host, t, width, o)
		if errors.Is(err, findings.ErrNoData) {
			continue // nothing recorded in this stretch
		}
		if err != nil {
			return nil, err
		}
		r.EvaluatedNs += t.EndNs - t.StartNs
		all = append(all, found...)
		for _, u := range unevaluated {
			skipped[u.Rule] = u
		}
	}
	if r.AnalysedNs == 0 && r.EvaluatedNs == 0 {
		return nil, fmt.Errorf("%w on host %s between %s and %s", findings.ErrNoData, host, fmtNs(o.Range.StartNs), fmtNs(o.Range.EndNs))
	}
	if r.AnalysedNs > 0 {
		// The online analysis stored what it found, not what it could
		// not judge: the filters short of a vital in the range are named
		// here, as an evaluation now would.
		missing, err := findings.Unrecorded(ctx, q, host, o.Range)
		if err != nil {
			return nil, err
		}
		o.explain(missing)
		for _, u := range findings.Unevaluable(findings.DefaultFilters(nil), missing) {
			if _, ok := skipped[u.Rule]; !ok {
				skipped[u.Rule] = u
			}
		}
	}
	for _, u := range skipped {
		r.Unevaluated = append(r.Unevaluated, u)
	}
	sort.Slice(r.Unevaluated, func(a, b int) bool { return r.Unevaluated[a].Rule < r.Unevaluated[b].Rule })
	if o.Diff && o.Range.EndNs-o.Range.StartNs <= int64(DiffMax) {
		span := o.Range.EndNs - o.Range.StartNs
		ref := findings.Range{StartNs: o.Range.StartNs - 3*span, EndNs: o.Range.StartNs}
		ranked, _, err := findings.CompareRanges(ctx, q, host, o.Range, ref, &diagnose.RankOptions{Denoise: true})
		if err == nil && len(ranked) > 0 && ranked[0].Score >= DriftScore {
			all = append(all, *Drift(findings.DiffRule, o.Range, ref, ranked))
		}
	}
	var h *History
	if o.Timescale == findings.Epoch {
		if h, err = history(ctx, q, host, o.Range); err != nil {
			return nil, err
		}
	}
	r.Incidents = Ranked(all, host, h)
	return r, nil
}

// Ranked merges one host's findings into ranked incidents (Merge), weighed
// against its history h (nil: none), each with the commands that look
// closer at it.
func Ranked(fs []findings.Finding, host string, h *History) []Incident {
	ins := Merge(fs, h)
	drill(ins, host)
	if ins == nil {
		ins = []Incident{}
	}
	return ins
}

// evaluate runs the default filters over one stretch of the range, with
// history before it.
func evaluate(ctx context.Context, q findings.Querier, host string, t findings.Range, width time.Duration, o Options) ([]findings.Finding, []findings.Unevaluated, error) {
	from := time.Unix(0, t.StartNs)
	w, err := findings.Load(ctx, q, findings.LoadOptions{Host: host, Timescale: o.Timescale, CPUs: o.CPUs,
		From: from.Add(-time.Duration(o.History) * width), To: time.Unix(0, t.EndNs), ReportFrom: from,
		// A leak is judged over a run of intervals: the samples of the
		// few before the stretch are read for it.
		SamplesFrom: from.Add(-time.Duration(findings.DefaultLevels.LeakIntervals) * width), Stacks: o.Stacks})
	if err != nil {
		return nil, nil, err
	}
	o.explain(w.Unavailable)
	w.IncludeSelf = o.IncludeSelf
	found, skipped := findings.Evaluate(w, findings.DefaultFilters(nil))
	return found, skipped, nil
}

// explain gives the vitals missing from a range (vital → why) the
// caller's reasons where it has one (no hardware PMU for l2).
func (o Options) explain(missing map[string]string) {
	for v, reason := range o.Unavailable {
		if _, ok := missing[v]; ok {
			missing[v] = reason
		}
	}
}

// intervalWidth is the length of an interval at a timescale: a rollup's
// bucket, or the host's latest epoch.
func intervalWidth(ctx context.Context, q findings.Querier, host, timescale string) (time.Duration, error) {
	if timescale != findings.Epoch {
		d, ok := findings.TimescaleWidth(timescale)
		if !ok {
			return 0, fmt.Errorf("unknown timescale %q (epoch, 5m, 1h or 1d)", timescale)
		}
		return d, nil
	}
	return findings.EpochLength(ctx, q, host)
}

// subtract is r without the ranges in cut (sorted by start).
func subtract(r findings.Range, cut []findings.Range) []findings.Range {
	var out []findings.Range
	at := r.StartNs
	for _, c := range cut {
		if c.EndNs <= at || c.StartNs >= r.EndNs {
			continue
		}
		if c.StartNs > at {
			out = append(out, findings.Range{StartNs: at, EndNs: c.StartNs})
		}
		at = max(at, c.EndNs)
	}
	if at < r.EndNs {
		out = append(out, findings.Range{StartNs: at, EndNs: r.EndNs})
	}
	return out
}
