package incident

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/holter-dev/holter/internal/findings"
)

// A report weighs each finding against what the host showed before its
// range (issue 23's "no alarms for the normal"): a process that has been
// blocked in the same way, at a like severity, all along is not what went
// wrong now, however much it costs. The reference is the ReferenceSpan
// before the range, from the findings the recorder's online analysis
// stored for it: reading them is one query, where evaluating the filters
// again over half an hour would cost seconds.
//
// The reference is cut into ReferenceSlots stretches; a finding is as
// before when findings of the same rule, resource and subject showed in
// at least UsualShare of the stretches of each half of the reference, at
// a typical severity (the median of the stretches' strongest) no less
// than 1/Growth of its own. Both halves: a problem that began a little
// before the range shows only in the reference's later stretches, and is
// still new. A subject is known across restarts: by its executable and
// command name, not its pid.
const (
	ReferenceSpan  = 30 * time.Minute
	ReferenceSlots = 6
	UsualShare     = 2.0 / 3
	Growth         = 2.0
)

// History is what a host showed over the reference before a report's
// range: per subject, the strongest severity in each stretch.
type History struct {
	// Range is the reference, from the first analysed time in it.
	Range findings.Range
	seen  map[string]*seen
}

// seen is one subject's presence over the reference.
type seen struct {
	strongest [ReferenceSlots]float64 // -1 where it did not show
	sinceNs   int64
}

// Before is how an incident showed in the reference: since when, in what
// share of its stretches and at what typical severity.
type Before struct {
	SinceNs  int64   `json:"since_ns"`
	Share    float64 `json:"share"`
	Severity float64 `json:"severity"`
}

// NewHistory gathers the findings of a reference range. minNs is the
// least length of reference worth judging by (shorter, there is no
// history); a stretch's presence is only as fine as the findings' own
// intervals, so it is a few of them.
func NewHistory(ref findings.Range, fs []findings.Finding, minNs int64) *History {
	if ref.EndNs-ref.StartNs < max(minNs, ReferenceSlots) {
		return nil
	}
	h := &History{Range: ref, seen: map[string]*seen{}}
	slot := (ref.EndNs - ref.StartNs) / ReferenceSlots
	for _, f := range fs {
		from, to := max(f.StartNs, ref.StartNs), min(f.EndNs, ref.EndNs)
		if from >= to {
			continue
		}
		k := identity(f)
		s := h.seen[k]
		if s == nil {
			s = &seen{sinceNs: from}
			for i := range s.strongest {
				s.strongest[i] = -1
			}
			h.seen[k] = s
		}
		s.sinceNs = min(s.sinceNs, from)
		last := min(ReferenceSlots-1, (to-1-ref.StartNs)/slot)
		for i := min(ReferenceSlots-1, (from-ref.StartNs)/slot); i <= last; i++ {
			s.strongest[i] = max(s.strongest[i], f.Severity)
		}
	}
	return h
}

// Before says how a finding showed in the reference; nil when it is new:
// no history, not present through the reference, or much stronger now.
func (h *History) Before(f findings.Finding) *Before {
	if h == nil {
		return nil
	}
	s := h.seen[identity(f)]
	if s == nil {
		return nil
	}
	half := ReferenceSlots / 2
	var present []float64
	for _, part := range [][]float64{s.strongest[:half], s.strongest[half:]} {
		n := 0
		for _, v := range part {
			if v >= 0 {
				n++
				present = append(present, v)
			}
		}
		if float64(n) < UsualShare*float64(len(part)) {
			return nil
		}
	}
	slices.Sort(present)
	typical := present[len(present)/2]
	if f.Severity > Growth*typical {
		return nil
	}
	return &Before{SinceNs: s.sinceNs, Share: float64(len(present)) / ReferenceSlots, Severity: typical}
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
// analysed, or too little of it.
func history(ctx context.Context, q findings.Querier, host string, r findings.Range, epoch time.Duration) (*History, error) {
	ref := findings.Range{StartNs: r.StartNs - int64(ReferenceSpan), EndNs: r.StartNs}
	analysed, err := findings.Analysed(ctx, q, host, ref)
	if err != nil || len(analysed) == 0 {
		return nil, err
	}
	ref.StartNs = max(ref.StartNs, analysed[0].StartNs)
	fs, err := findings.Stored(ctx, q, host, ref)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return NewHistory(ref, fs, ReferenceSlots*int64(epoch)), nil
}
