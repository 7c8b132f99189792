package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/holter-dev/holter/internal/diagnose"
	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/recorder"
	"github.com/holter-dev/holter/internal/store"
)

// Online analysis in the recorder, at most every onlineEvery:
//
//   - the filters and rules run over the epochs committed since the last
//     run, with onlineHistory epochs before them as the detectors'
//     baseline (the EWMA keeps 0.7^10 = 3% of a value ten intervals old),
//     and their findings are stored (a condition lasting several epochs
//     extends one finding);
//   - the epochs since the last drift check, at least onlineTarget of
//     them, are the target, and the previous onlineReferenceSpans checks'
//     targets the reference (Shen et al. §3.2: the most recent interval
//     against earlier ones). If the top-ranked metric's EMD reaches
//     onlineEMD, a
//     "reference-drift" finding is stored with the top metrics.
//
// It runs off the commit path, in a goroutine of its own: committing an
// epoch only notes it. Its CPU time is the recorder's but not the vitals',
// so the budget does not shed vitals for it; to keep it small, each run
// reads only what is new: the filters' short history, and for the drift check
// the target's metrics, the reference's being kept from earlier checks.
//
// Failures are logged: analysis never stops the recording.
const (
	onlineEvery          = 10 * time.Second
	onlineHistory        = 10
	onlineTarget         = 10
	onlineReferenceSpans = 3
	onlineEMD            = 0.5
)

type online struct {
	st     *store.Store
	epoch  time.Duration
	status func() recorder.Status
	logf   func(string, ...any)

	mu sync.Mutex
	// latest is the newest committed epoch; pendingNs the start of the
	// first one not analysed yet (0: none).
	latest    *store.Epoch
	pendingNs int64
	wake      chan struct{}
	stop      chan struct{}
	done      chan struct{}

	// Owned by the worker.
	lastDrift int64     // end of the last drift check's target
	previous  []checked // the last onlineReferenceSpans targets, oldest first
	last      time.Time
}

func newOnline(st *store.Store, epoch time.Duration, status func() recorder.Status, logf func(string, ...any)) *online {
	o := &online{st: st, epoch: epoch, status: status, logf: logf,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go o.run()
	return o
}

// afterEpoch notes a committed epoch for the worker; it does not wait.
func (o *online) afterEpoch(e *store.Epoch) {
	o.mu.Lock()
	o.latest = e
	if o.pendingNs == 0 {
		o.pendingNs = e.StartNs
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// close stops the worker, letting a run under way finish.
func (o *online) close() {
	close(o.stop)
	<-o.done
}

func (o *online) run() {
	defer close(o.done)
	var timer <-chan time.Time
	for {
		select {
		case <-o.stop:
			return
		case <-o.wake:
		case <-timer:
			timer = nil
		}
		if wait := onlineEvery - time.Since(o.last); wait > 0 {
			if timer == nil {
				timer = time.After(wait)
			}
			continue
		}
		o.mu.Lock()
		e, from := o.latest, o.pendingNs
		o.pendingNs = 0
		o.mu.Unlock()
		if e == nil || from == 0 {
			continue
		}
		o.last = time.Now()
		o.analyse(e, from)
	}
}

// analyse judges the epochs from fromNs to the end of e.
func (o *online) analyse(e *store.Epoch, fromNs int64) {
	ctx := context.Background()
	if o.lastDrift == 0 {
		o.lastDrift = fromNs
	}
	rows, err := o.filters(ctx, e, fromNs)
	if err == nil {
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

// drift compares the epochs since the last check with the ones before
// them; nil when the target is still short, the reference shorter than it,
// or nothing differs enough. The reference is the previous checks' targets,
// whose metrics are kept, so a check reads only its own epochs.
func (o *online) drift(ctx context.Context, e *store.Epoch) (*findings.Finding, error) {
	target := findings.Range{StartNs: o.lastDrift, EndNs: e.EndNs}
	if target.EndNs-target.StartNs < int64(onlineTarget*o.epoch) {
		return nil, nil
	}
	o.lastDrift = target.EndNs
	t, err := findings.Metrics(ctx, findings.FromStore(o.st), e.Host, target)
	if err != nil {
		return nil, err
	}
	var sets []*findings.MetricSet
	ref := target
	for _, p := range o.previous {
		sets = append(sets, p.set)
		ref.StartNs = min(ref.StartNs, p.r.StartNs)
	}
	ref.EndNs = target.StartNs
	o.previous = append(o.previous, checked{target, t})
	if len(o.previous) > onlineReferenceSpans {
		o.previous = o.previous[1:]
	}
	if len(sets) == 0 || ref.EndNs-ref.StartNs < target.EndNs-target.StartNs {
		// Too little recorded before the target: it becomes reference.
		return nil, nil
	}
	ranked, _, err := findings.Compare(t, findings.Join(sets...), &diagnose.RankOptions{MinSamples: onlineTarget})
	if err != nil || len(ranked) == 0 || ranked[0].EMD < onlineEMD {
		return nil, err
	}
	return driftFinding(target, ref, ranked), nil
}

// checked is a drift check's target and its metrics.
type checked struct {
	r   findings.Range
	set *findings.MetricSet
}

// driftFinding reports a target range that differs from its reference,
// with the top metrics of the ranking as the evidence.
func driftFinding(target, ref findings.Range, ranked []diagnose.Ranked) *findings.Finding {
	top := ranked[0]
	f := &findings.Finding{Rule: "reference-drift", Timescale: findings.Epoch, Subject: top.Name,
		StartNs: target.StartNs, EndNs: target.EndNs, Score: top.EMD,
		Summary: fmt.Sprintf("%s to %s differs from the %s before it most in %s (EMD %.2f, %.2f between the halves of the reference; mean %.4g against %.4g)",
			fmtNs(target.StartNs), fmtNs(target.EndNs), time.Duration(ref.EndNs-ref.StartNs).Round(time.Second),
			top.Name, top.EMD, top.Noise, top.TargetMean, top.ReferenceMean)}
	for i, r := range ranked {
		if i == 5 {
			break
		}
		f.Evidence = append(f.Evidence, findings.Evidence{Name: r.Name, Value: r.TargetMean, Against: r.ReferenceMean,
			Relation: fmt.Sprintf("EMD %.3f", r.EMD)})
	}
	return f
}
