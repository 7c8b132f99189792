package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/holter-dev/holter/internal/diagnose"
	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/recorder"
	"github.com/holter-dev/holter/internal/store"
)

// Online analysis in the recorder, after each committed epoch:
//
//   - the filters and rules run over the last onlineHistory epochs and
//     their findings for the new epoch are stored (a condition lasting
//     several epochs extends one finding);
//   - every onlineTarget epochs, those epochs are the target and the
//     onlineReference epochs before them the reference (Shen et al. §3.2:
//     the most recent interval against earlier ones); if the top-ranked
//     metric's EMD reaches onlineEMD, a "reference-drift" finding is stored
//     with the top metrics.
//
// With short epochs the analysis runs at most every onlineEvery, over the
// epochs committed since it last ran: its cost is the recorder's own.
//
// Failures are logged: analysis never stops the recording.
const (
	onlineEvery     = 10 * time.Second
	onlineHistory   = 30
	onlineTarget    = 10
	onlineReference = 30
	onlineEMD       = 0.5
)

type online struct {
	st     *store.Store
	epoch  time.Duration
	status func() recorder.Status
	logf   func(string, ...any)
	n      int
	// last is when the analysis last ran; pendingNs is the start of the
	// first epoch it has not seen (0: none).
	last      time.Time
	pendingNs int64
	lastDrift int
}

func newOnline(st *store.Store, epoch time.Duration, status func() recorder.Status, logf func(string, ...any)) *online {
	return &online{st: st, epoch: epoch, status: status, logf: logf}
}

func (o *online) afterEpoch(e *store.Epoch) {
	ctx := context.Background()
	o.n++
	if o.pendingNs == 0 {
		o.pendingNs = e.StartNs
	}
	if time.Since(o.last) < onlineEvery {
		return
	}
	o.last = time.Now()
	from := o.pendingNs
	o.pendingNs = 0
	rows, err := o.filters(ctx, e, from)
	if err == nil && o.n-o.lastDrift >= onlineTarget && o.n >= onlineTarget+onlineReference/2 {
		o.lastDrift = o.n
		var drift *findings.Finding
		if drift, err = o.drift(ctx, e); drift != nil {
			rows = append(rows, drift.Row(e.Host))
		}
	}
	if err == nil {
		err = o.st.AddFindings(ctx, rows, int64(o.epoch/2))
	}
	if err != nil {
		o.logf("findings after epoch %d: %v", e.Epoch, err)
	}
}

// filters evaluates the filters over the history before fromNs and reports
// what they find from fromNs to the end of e.
func (o *online) filters(ctx context.Context, e *store.Epoch, fromNs int64) ([]store.Finding, error) {
	w, err := findings.Load(ctx, findings.FromStore(o.st), findings.LoadOptions{Host: e.Host, CPUs: runtime.NumCPU(),
		From: time.Unix(0, fromNs).Add(-onlineHistory * o.epoch), To: time.Unix(0, e.EndNs), ReportFrom: time.Unix(0, fromNs)})
	if err != nil {
		return nil, err
	}
	for _, v := range o.status().Vitals {
		if _, missing := w.Unavailable[v.Name]; missing && v.Reason != "" {
			w.Unavailable[v.Name] = v.State + ": " + v.Reason
		}
	}
	found, _ := findings.Evaluate(w, findings.DefaultFilters(nil))
	if err := findings.Attribute(ctx, findings.FromStore(o.st), e.Host, found); err != nil {
		return nil, err
	}
	var rows []store.Finding
	for _, f := range found {
		rows = append(rows, f.Row(e.Host))
	}
	return rows, nil
}

func (o *online) drift(ctx context.Context, e *store.Epoch) (*findings.Finding, error) {
	target := findings.Range{StartNs: e.EndNs - int64(onlineTarget*o.epoch), EndNs: e.EndNs}
	ref := findings.Range{StartNs: target.StartNs - int64(onlineReference*o.epoch), EndNs: target.StartNs}
	ranked, _, err := findings.CompareRanges(ctx, findings.FromStore(o.st), e.Host, target, ref, &diagnose.RankOptions{MinSamples: onlineTarget})
	if err != nil || len(ranked) == 0 || ranked[0].EMD < onlineEMD {
		return nil, err
	}
	top := ranked[0]
	f := &findings.Finding{Rule: "reference-drift", Timescale: findings.Epoch, Subject: top.Name,
		StartNs: target.StartNs, EndNs: target.EndNs, Score: top.EMD,
		Summary: fmt.Sprintf("the last %d epochs differ from the %d before them most in %s (EMD %.2f, mean %.4g against %.4g)",
			onlineTarget, onlineReference, top.Name, top.EMD, top.TargetMean, top.ReferenceMean)}
	for i, r := range ranked {
		if i == 5 {
			break
		}
		f.Evidence = append(f.Evidence, findings.Evidence{Name: r.Name, Value: r.TargetMean, Against: r.ReferenceMean,
			Relation: fmt.Sprintf("EMD %.3f", r.EMD)})
	}
	return f, nil
}
