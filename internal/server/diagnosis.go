package server

import (
	"errors"
	"net/http"
	"runtime"
	"slices"
	"strings"

	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/incident"
	"github.com/holter-dev/holter/internal/store"
)

// registerAnalysis serves the ranked incidents, the reference-driven metric
// ranking of `holter diff` (from a host's own store only) and the list of
// recent traces (traces.go).
func registerAnalysis(mux *http.ServeMux, a *api) {
	mux.HandleFunc("GET /api/findings", handle(a.findings))
	if !isFleet(a.store) {
		mux.HandleFunc("GET /api/diff", handle(a.diff))
	}
	mux.HandleFunc("GET /api/traces", handle(a.traces))
}

// FindingsAnswer is the ranked incidents of a range: what holter findings
// reports.
type FindingsAnswer struct {
	Host string `json:"host"` // the host asked for; empty for every host

	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Rules are the rules and detectors of every finding in the range,
	// before the rule filter.
	Rules []string `json:"rules"`
	// Incidents are ranked, the worst first; with a rule filter, those
	// with a finding of the rule.
	Incidents   []incident.Incident    `json:"incidents"`
	Unevaluated []findings.Unevaluated `json:"unevaluated"`
}

// ruleMatches: a rule filter names a rule ("rule5-blocking") or a family
// of detectors ("ewma" for every "ewma:…").
func ruleMatches(rule, filter string) bool {
	return filter == "" || rule == filter || strings.HasPrefix(rule, filter+":")
}

// findings answers GET /api/findings. A host's own store is reported on as
// holter findings does (incident.Build: the online analysis's findings,
// and the filters evaluated over what it has not analysed); a fleet's
// holds only what each host's online analysis stored, merged per host.
func (a *api) findings(r *http.Request) (any, error) {
	p := newParams(r.URL.Query(), "from", "to", "host", "rule")
	from, to := p.timeRange("from", "to")
	hostName, rule := p.str("host"), p.str("rule")
	if p.err != nil {
		return nil, p.err
	}
	ctx := r.Context()
	hosts, err := a.hosts(ctx, hostName)
	if err != nil {
		return nil, err
	}
	out := FindingsAnswer{Host: hostName, From: from, To: to, Rules: []string{}, Incidents: []incident.Incident{},
		Unevaluated: []findings.Unevaluated{}}
	q, rng := store.Plain(a.store), findings.Range{StartNs: from, EndNs: to}
	var all []incident.Incident
	for _, host := range hosts {
		if isFleet(a.store) {
			stored, err := findings.Stored(ctx, q, host, rng)
			if err != nil {
				return nil, err
			}
			all = append(all, incident.Ranked(stored, host, nil)...)
			continue
		}
		rep, err := incident.Build(ctx, q, incident.Options{Host: host, Range: rng, History: 20, CPUs: runtime.NumCPU(), Stacks: a.stackCache})
		if errors.Is(err, findings.ErrNoData) {
			continue
		}
		if err != nil {
			return nil, err
		}
		all = append(all, rep.Incidents...)
		out.Unevaluated = append(out.Unevaluated, rep.Unevaluated...)
	}
	for _, in := range all {
		match := false
		for _, f := range in.Rules {
			if !slices.Contains(out.Rules, f) {
				out.Rules = append(out.Rules, f)
			}
			match = match || ruleMatches(f, rule)
		}
		if match {
			out.Incidents = append(out.Incidents, in)
		}
	}
	incident.Rerank(out.Incidents)
	slices.Sort(out.Rules)
	return out, nil
}

func (a *api) diff(r *http.Request) (any, error) {
	p := newParams(r.URL.Query(), "target", "reference", "host", "min_samples")
	target, reference, hostName := p.str("target"), p.str("reference"), p.str("host")
	minSamples, ok := p.int("min_samples", 1, 1_000_000)
	if !ok {
		minSamples = 10
	}
	if p.err == nil && (target == "" || reference == "") {
		p.fail("target and reference are required: each FROM/TO (UTC nanoseconds, RFC 3339 times, -15m/now) or a run id")
	}
	if p.err != nil {
		return nil, p.err
	}
	ctx := r.Context()
	if hostName != "" {
		if _, err := a.hosts(ctx, hostName); err != nil {
			return nil, err
		}
	}
	d, err := findings.RankRanges(ctx, store.Plain(a.store), target, reference,
		findings.DiffOptions{Host: hostName, MinSamples: int(minSamples)})
	switch {
	case errors.Is(err, findings.ErrBadRange):
		return nil, httpError{http.StatusBadRequest, err.Error()}
	case errors.Is(err, findings.ErrNotRecorded):
		return nil, httpError{http.StatusNotFound, err.Error()}
	case err != nil:
		return nil, err
	}
	return d, nil
}
