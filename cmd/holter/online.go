package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/holter-dev/holter/internal/diagnose"
	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/recorder"
	"github.com/holter-dev/holter/internal/store"
)

// Online analysis in the recorder, every onlineEvery's worth of epochs (ten
// epochs of 1 s; every epoch when epochs are longer):
//
//   - the filters and rules run over the epochs committed since the last
//     run, with onlineHistory epochs before them as the detectors'
//     baseline (the EWMA keeps 0.7^10 = 3% of a value ten intervals old),
//     and their findings are stored (a condition lasting several epochs
//     extends one finding);
//   - the epochs since the last drift check, at least onlineTarget of
//     them, are the target, and the previous onlineReferenceSpans checks'
//     targets the reference (Shen et al. §3.2: the most recent interval
//     against earlier ones). Both are counted in epochs, not read off the
//     clock: a run that came a few milliseconds before the tenth epoch's
//     commit would otherwise find the target short, and the next check's
//     target of nineteen epochs longer than its reference, and skip both
//     — a workload that started in them went into the reference unseen.
//     The metrics are ranked by their EMD beyond the reference's own
//     variation (diagnose.RankOptions.Denoise): a machine's heavy-tailed
//     latencies and the bursts of its near-idle rates differ from one
//     stretch to the next as much as anything a workload changes, and
//     ranked by EMD alone one of them tops every check, an idle
//     machine's too. If the top metric's score reaches onlineEMD, a
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
	// first one not analysed yet (0: none), and pending how many there
	// are.
	latest    *store.Epoch
	pendingNs int64
	pending   int
	wake      chan struct{}
	stop      chan struct{}
	done      chan struct{}

	// every is the number of epochs between runs.
	every int

	// Owned by the worker.
	lastDrift    int64     // end of the last drift check's target
	targetEpochs int       // epochs since then
	previous     []checked // the last onlineReferenceSpans targets, oldest first
}

func newOnline(st *store.Store, epoch time.Duration, status func() recorder.Status, logf func(string, ...any)) *online {
	o := &online{st: st, epoch: epoch, status: status, logf: logf, every: max(1, int(onlineEvery/epoch)),
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
	o.pending++
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
	for {
		select {
		case <-o.stop:
			return
		case <-o.wake:
		}
		o.mu.Lock()
		e, from, n := o.latest, o.pendingNs, o.pending
		if n < o.every {
			o.mu.Unlock()
			continue
		}
		o.pendingNs, o.pending = 0, 0
		o.mu.Unlock()
		o.analyse(e, from, n)
	}
}

// analyse judges the n epochs from fromNs to the end of e.
func (o *online) analyse(e *store.Epoch, fromNs int64, n int) {
	ctx := context.Background()
	if o.lastDrift == 0 {
		o.lastDrift = fromNs
	}
	o.targetEpochs += n
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
	if err != nil && !errors.Is(err, store.ErrUnavailable) { // a storage fault is the store's to report
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
	target, n := findings.Range{StartNs: o.lastDrift, EndNs: e.EndNs}, o.targetEpochs
	if n < onlineTarget {
		return nil, nil
	}
	o.lastDrift, o.targetEpochs = target.EndNs, 0
	t, err := findings.Metrics(ctx, findings.FromStore(o.st), e.Host, target)
	if err != nil {
		return nil, err
	}
	var sets []*findings.MetricSet
	ref, refEpochs := target, 0
	for _, p := range o.previous {
		sets = append(sets, p.set)
		ref.StartNs = min(ref.StartNs, p.r.StartNs)
		refEpochs += p.epochs
	}
	ref.EndNs = target.StartNs
	o.previous = append(o.previous, checked{target, n, t})
	if len(o.previous) > onlineReferenceSpans {
		o.previous = o.previous[1:]
	}
	if refEpochs < n {
		// Too little recorded before the target: it becomes reference.
		return nil, nil
	}
	ranked, _, err := findings.Compare(t, findings.Join(sets...), &diagnose.RankOptions{MinSamples: onlineTarget, Denoise: true})
	if err != nil || len(ranked) == 0 || ranked[0].Score < onlineEMD {
		return nil, err
	}
	return driftFinding(target, ref, ranked), nil
}

// checked is a drift check's target, its number of epochs and its metrics.
type checked struct {
	r      findings.Range
	epochs int
	set    *findings.MetricSet
}

// driftFinding reports a target range that differs from its reference,
// with the top metrics of the ranking as the evidence.
func driftFinding(target, ref findings.Range, ranked []diagnose.Ranked) *findings.Finding {
	top := ranked[0]
	f := &findings.Finding{Rule: "reference-drift", Timescale: findings.Epoch, Subject: top.Name,
		StartNs: target.StartNs, EndNs: target.EndNs, Score: top.Score,
		Summary: fmt.Sprintf("%s to %s differs from the %s before it most in %s (EMD %.2f, %.2f between the halves of the reference; mean %.4g against %.4g)",
			fmtNs(target.StartNs), fmtNs(target.EndNs), time.Duration(ref.EndNs-ref.StartNs).Round(time.Second),
			top.Name, top.EMD, top.Noise, top.TargetMean, top.ReferenceMean)}
	for i, r := range ranked {
		if i == 5 {
			break
		}
		f.Evidence = append(f.Evidence, findings.Evidence{Name: r.Name, Value: r.TargetMean, Against: r.ReferenceMean,
			Relation: fmt.Sprintf("score %.3f: EMD %.3f, %.3f within the reference", r.Score, r.EMD, r.Noise)})
	}
	return f
}
