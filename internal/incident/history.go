package incident

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/holter-dev/holter/internal/findings"
)

// A report weighs each finding against what the host showed before its
// range (issue 23's "no alarms for the normal"): a process that has been
// blocked in the same way, as often and at a like severity, all along is
// not what went wrong now, however much it costs. The reference is the
// ReferenceSpan before the range, from the findings the recorder's online
// analysis stored for it: reading them is one query, where evaluating the
// filters again over half an hour would cost seconds.
//
// A subject (a rule and resource about one program, known across its
// restarts by executable and command name, not pid; or about a vital)
// showed in a share p of the reference's intervals. If each interval of
// the range showed it with that probability, the chance of seeing it in
// at least as many of them as it did is the binomial tail; when that is
// at least Usual, and its severity is no more than Growth times its
// typical severity before (the median of its findings'), the finding is
// as before. A subject the reference never showed is new; so is one that
// showed in a few intervals before and now in all of them, or one that
// began a little before the range (p is its share of the whole reference).
const (
	ReferenceSpan = 30 * time.Minute
	Usual         = 0.05
	Growth        = 2.0
	// MinReference is the least reference, in intervals, a history is
	// kept of: with less, every finding is new.
	MinReference = 6
)

// History is what a host showed over the reference before a report's
// range, to judge the findings of that range by.
type History struct {
	// Reference is the stretch before the range, from the first analysed
	// time in it; Now the report's range.
	Reference, Now findings.Range
	intervalNs     int64
	seen           map[string]*seen
}

// seen is one subject's findings over the reference.
type seen struct {
	covered    []findings.Range
	severities []float64
}

// Before is how an incident showed in the reference: since when, in what
// share of its time and at what typical severity.
type Before struct {
	SinceNs  int64   `json:"since_ns"`
	Share    float64 `json:"share"`
	Severity float64 `json:"severity"`
}

// NewHistory gathers the findings of the reference before the range now,
// whose intervals are interval long; nil when the reference is shorter
// than MinReference intervals.
func NewHistory(ref, now findings.Range, fs []findings.Finding, interval time.Duration) *History {
	if interval <= 0 || ref.EndNs-ref.StartNs < MinReference*int64(interval) {
		return nil
	}
	h := &History{Reference: ref, Now: now, intervalNs: int64(interval), seen: map[string]*seen{}}
	for _, f := range fs {
		if f.StartNs >= ref.EndNs || f.EndNs <= ref.StartNs {
			continue
		}
		k := identity(f)
		s := h.seen[k]
		if s == nil {
			s = &seen{}
			h.seen[k] = s
		}
		s.covered = append(s.covered, findings.Range{StartNs: f.StartNs, EndNs: f.EndNs})
		s.severities = append(s.severities, f.Severity)
	}
	return h
}

// Judge says how each finding of the range showed in the reference (nil:
// it is new). All of them are judged together: a subject's presence in
// the range is that of all its findings.
func (h *History) Judge(fs []findings.Finding) []*Before {
	out := make([]*Before, len(fs))
	if h == nil {
		return out
	}
	now := map[string][]findings.Range{}
	for _, f := range fs {
		k := identity(f)
		now[k] = append(now[k], findings.Range{StartNs: f.StartNs, EndNs: f.EndNs})
	}
	likely := map[string]*Before{}
	for k, rs := range now {
		likely[k] = h.likely(k, rs)
	}
	for i, f := range fs {
		if b := likely[identity(f)]; b != nil && f.Severity <= Growth*b.Severity {
			out[i] = b
		}
	}
	return out
}

// likely is how subject k showed in the reference, if that makes its
// showing over the ranges now likely; nil otherwise.
func (h *History) likely(k string, now []findings.Range) *Before {
	s := h.seen[k]
	if s == nil {
		return nil
	}
	refLen, nowLen := h.Reference.EndNs-h.Reference.StartNs, h.Now.EndNs-h.Now.StartNs
	share := min(1, float64(covered(s.covered, h.Reference))/float64(refLen))
	n := max(1, int((nowLen+h.intervalNs/2)/h.intervalNs))
	// Counted to the nearest interval, one at least: on a loaded host an
	// epoch, and a finding over it, stretches a little past its length.
	m := 0
	if c := covered(now, h.Now); c > 0 {
		m = min(n, max(1, int((c+h.intervalNs/2)/h.intervalNs)))
	}
	if atLeast(m, n, share) < Usual {
		return nil
	}
	severities := slices.Sorted(slices.Values(s.severities))
	since := h.Reference.EndNs
	for _, c := range s.covered {
		since = min(since, max(c.StartNs, h.Reference.StartNs))
	}
	return &Before{SinceNs: since, Share: share, Severity: severities[len(severities)/2]}
}

// covered is how much of r the ranges cover.
func covered(rs []findings.Range, r findings.Range) int64 {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b findings.Range) int { return cmp.Compare(a.StartNs, b.StartNs) })
	var total int64
	at := r.StartNs
	for _, c := range rs {
		from, to := max(c.StartNs, at), min(c.EndNs, r.EndNs)
		if from < to {
			total += to - from
			at = to
		}
	}
	return total
}

// atLeast is the chance of at least m successes in n trials of
// probability p (the binomial tail), summed in logarithms: n is a range's
// intervals, up to thousands.
func atLeast(m, n int, p float64) float64 {
	switch {
	case m <= 0:
		return 1
	case p <= 0:
		return 0
	case p >= 1:
		return 1
	}
	lgN, _ := math.Lgamma(float64(n + 1))
	var sum float64
	for k := m; k <= n; k++ {
		lgK, _ := math.Lgamma(float64(k + 1))
		lgRest, _ := math.Lgamma(float64(n - k + 1))
		sum += math.Exp(lgN - lgK - lgRest + float64(k)*math.Log(p) + float64(n-k)*math.Log1p(-p))
	}
	return min(1, sum)
}

// identity is what a finding is about, the same across a process's
// restarts: its rule and resource, and the culprit's (or first named
// process's) executable and command name; without a process, its subject
// (a vital).
func identity(f findings.Finding) string {
	who := f.Subject
	if c := f.Culprit; c != nil {
		who = "exe " + c.Exe + " comm " + c.Comm
	} else if len(f.Processes) > 0 {
		who = "exe " + f.Processes[0].Exe + " comm " + f.Processes[0].Comm
	}
	return f.Rule + "\x00" + f.Resource + "\x00" + who
}

// history reads the findings the online analysis stored over the
// reference before r: from the later of r's start less ReferenceSpan and
// the first analysed time, to r's start. nil when nothing before r was
// analysed, or too little of it. Unanalysed gaps in the reference count
// as stretches where nothing showed: findings are then judged new, as
// without a history. Its intervals are the reference's epochs.
func history(ctx context.Context, q findings.Querier, host string, r findings.Range) (*History, error) {
	ref := findings.Range{StartNs: r.StartNs - int64(ReferenceSpan), EndNs: r.StartNs}
	analysed, err := findings.Analysed(ctx, q, host, ref)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	if len(analysed) == 0 {
		return nil, nil
	}
	ref.StartNs = max(ref.StartNs, analysed[0].StartNs)
	epoch, err := findings.MedianEpochLength(ctx, q, host, ref)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	fs, err := findings.Stored(ctx, q, host, ref)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return NewHistory(ref, r, fs, epoch), nil
}
