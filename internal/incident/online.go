package incident

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/diagnose"
	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/store"
)

// Online analysis in the recorder, every OnlineEvery's worth of epochs
// (ten epochs of 1 s; every epoch when epochs are longer). It is
// incremental: no committed epoch is read back from the store.
//
//   - The filters and rules run over the epochs committed since the last
//     run, with the OnlineHistory epochs before them as the detectors'
//     baseline (the EWMA keeps 0.7^10 = 3% of a value ten intervals old).
//     Each epoch's window (its vitals, its samples grouped by process and
//     stack) is made from the epoch as it is committed
//     (findings.EpochWindow: Load's window, without the queries that
//     were most of the engine's work for an epoch) and kept for the runs
//     that need it as history; the windows are joined (findings.Concat)
//     rather than the last minutes read again. The findings are stored with the
//     range judged (store.AddAnalysis), so that a report reads them
//     instead of evaluating those epochs again; a condition lasting
//     several epochs extends one finding.
//   - The epochs since the last drift check, at least OnlineTarget of
//     them, are the target, and the previous OnlineReferenceSpans checks'
//     targets the reference (Shen et al. §3.2: the most recent interval
//     against earlier ones), whose metrics are kept: a check reads only
//     its own epochs. Both are counted in epochs, not read off the clock:
//     a run that came a few milliseconds before the tenth epoch's commit
//     would otherwise find the target short, and the next check's target
//     of nineteen epochs longer than its reference, and skip both. The
//     metrics are ranked by their EMD beyond the reference's own variation
//     (diagnose.RankOptions.Denoise); if the top one's score reaches
//     DriftScore, a findings.DriftRule finding is stored.
//
// It runs off the commit path, in a goroutine of its own: committing an
// epoch never waits for it, and an analysis that fails is logged; it never
// stops the recording.
const (
	OnlineEvery          = 10 * time.Second
	OnlineHistory        = 10
	OnlineTarget         = 10
	OnlineReferenceSpans = 3
	OnlineClosing        = time.Minute
	// OnlineClosingLimit bounds the analysis of the last epochs when
	// the recorder stops: a service manager's stop, or a Ctrl-C, waits
	// for it (22 s on a loaded host, unbounded); what it leaves is
	// evaluated by the reports over it, as any range not judged.
	OnlineClosingLimit = 5 * time.Second
)

// Online is the recorder's online analysis of what it commits.
type Online struct {
	st          *store.Store
	epoch       time.Duration
	unavailable func() map[string]string
	logf        func(string, ...any)
	every       int

	mu sync.Mutex
	// pending are the committed epochs not analysed yet.
	pending []committed
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	// Owned by the worker.
	stacks       *findings.Stacks
	windows      []*findings.Window // the last epochs' windows, oldest first
	lastDrift    int64              // end of the last drift check's target
	targetEpochs int                // epochs since then
	previous     []checked          // the last OnlineReferenceSpans targets, oldest first
	// retried is the first epoch of the last run whose epochs could not
	// be loaded and were put back to be judged with the next ones, and
	// retriedN how many they were.
	retried  int64
	retriedN int
}

// committed is an epoch committed, and its window made from it
// (findings.EpochWindow) or why none could be.
type committed struct {
	e      *store.Epoch
	window *findings.Window
	err    error
}

// checked is a drift check's target, its number of epochs and its metrics.
type checked struct {
	r      findings.Range
	epochs int
	set    *findings.MetricSet
}

// NewOnline starts the online analysis of a store the recorder commits
// epochs of the given length to. unavailable gives the recorder's reasons
// for the vitals it cannot record (by vital name), logf its log.
func NewOnline(st *store.Store, epoch time.Duration, unavailable func() map[string]string, logf func(string, ...any)) *Online {
	o := &Online{st: st, epoch: epoch, unavailable: unavailable, logf: logf, every: max(1, int(OnlineEvery/epoch)),
		stacks: findings.NewStacks(), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), retried: -1}
	go o.run()
	return o
}

// Committed notes a committed epoch for the analysis; it does not wait.
func (o *Online) Committed(e *store.Epoch) {
	o.stacks.Add(e.Stacks)
	// The epoch's window is made now, from the epoch in hand: the store
	// is not asked for what was just given to it, and what is kept for
	// the analysis is the window, not the samples.
	w, err := findings.EpochWindow(e, runtime.NumCPU(), o.stacks)
	o.mu.Lock()
	o.pending = append(o.pending, committed{&store.Epoch{Host: e.Host, Epoch: e.Epoch, StartNs: e.StartNs, EndNs: e.EndNs}, w, err})
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Close stops the analysis after judging the epochs committed in the last
// OnlineClosing (one at least), so that the end of a recording is analysed
// too; on a loaded host the analysis may be far behind, and stopping the
// recorder does not wait for it to catch up: a report evaluates what it
// did not judge.
func (o *Online) Close() {
	close(o.stop)
	<-o.done
}

func (o *Online) run() {
	defer close(o.done)
	// The analysis runs on a thread of its own at nice 10, as queries:
	// on a busy host it waits rather than delay the recorder's reading of
	// its buffers and its commits. (The store's queries run on the thread
	// that makes them.) Without the right to renice, it runs as is.
	runtime.LockOSThread()
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 10); err != nil {
		o.logf("online analysis at normal priority: %v", err)
	}
	for {
		stopping := false
		select {
		case <-o.stop:
			stopping = true
		case <-o.wake:
		}
		o.mu.Lock()
		es := o.pending
		if len(es) < o.every && !stopping {
			o.mu.Unlock()
			continue
		}
		o.pending = nil
		o.mu.Unlock()
		if stopping && len(es) > 0 {
			// By their times: on a loaded host epochs stretch well past
			// their nominal length.
			from := es[len(es)-1].e.EndNs - OnlineClosing.Nanoseconds()
			es = es[min(len(es)-1, sort.Search(len(es), func(i int) bool { return es[i].e.StartNs >= from })):]
		}
		if len(es) > 0 && stopping {
			ctx, cancel := context.WithTimeout(context.Background(), OnlineClosingLimit)
			o.analyse(ctx, es, true)
			cancel()
		} else if len(es) > 0 {
			o.analyse(context.Background(), es, false)
		}
		if stopping {
			return
		}
	}
}

// analyse judges the epochs es, committed since the last run. Epochs that
// could not be loaded (the store short of memory or of query slots for a
// moment, on a busy host) are put back, once, to be judged with the next
// ones: a range left unanalysed is evaluated again by every report over
// it. If they fail again they are left out, and the epochs that came
// after them are put back to be judged on their own. The last analysis,
// when the recorder stops, puts nothing back: what it could not judge
// (within OnlineClosingLimit) is left to the reports.
func (o *Online) analyse(ctx context.Context, es []committed, last bool) {
	rows, err := o.filters(ctx, es)
	switch {
	case err != nil && last:
		o.logf("findings after epoch %d: not judged when stopping (%v): reports over them evaluate them", es[len(es)-1].e.Epoch, err)
		return
	case err != nil && o.retried != es[0].e.Epoch:
		o.retried, o.retriedN = es[0].e.Epoch, len(es)
		o.putBack(es)
		o.logf("findings after epoch %d: %v (judged again with the next epochs)", es[len(es)-1].e.Epoch, err)
		return
	case err != nil && o.retriedN < len(es):
		o.putBack(es[o.retriedN:])
		es = es[:o.retriedN]
	}
	end := es[len(es)-1].e
	fromNs, toNs := es[0].e.StartNs, end.EndNs
	if o.lastDrift == 0 {
		o.lastDrift = fromNs
	}
	o.targetEpochs += len(es)
	// A drift check that fails (its query found no slot on a busy host)
	// is lost, not the filters' findings with it.
	var driftErr error
	if err == nil {
		var drift *findings.Finding
		if drift, driftErr = o.drift(ctx, end); drift != nil {
			rows = append(rows, drift.Row(end.Host))
		}
		err = o.st.AddAnalysis(ctx, end.Host, rows, int64(o.epoch/2), fromNs, toNs)
	}
	switch {
	case err == nil && driftErr != nil:
		o.logf("drift check after epoch %d: %v", end.Epoch, driftErr)
	case err != nil && last:
		o.logf("findings after epoch %d: not judged when stopping (%v): reports over them evaluate them", end.Epoch, err)
	case err != nil && !errors.Is(err, store.ErrUnavailable): // a storage fault is the store's to report
		o.logf("findings after epoch %d: %v", end.Epoch, err)
	}
}

// putBack puts epochs back before the pending ones, to be judged next.
func (o *Online) putBack(es []committed) {
	o.mu.Lock()
	o.pending = append(slices.Clone(es), o.pending...)
	o.mu.Unlock()
}

// filters takes each new epoch's window, with the stacks its groups name
// that the cache lacks read from the store, joins them to the kept ones
// before them and evaluates the filters over the new ones.
func (o *Online) filters(ctx context.Context, es []committed) ([]store.Finding, error) {
	q := store.Internal(o.st)
	var fresh []*findings.Window
	for _, c := range es {
		err := c.err
		if err == nil {
			err = c.window.FetchStacks(ctx, q)
		}
		if err != nil {
			return nil, fmt.Errorf("load epoch %d: %w", c.e.Epoch, err)
		}
		fresh = append(fresh, c.window)
	}
	// The new epochs are reported on; the kept ones before them are the
	// history, and the last OnlineHistory of all are kept for next time.
	w := findings.Concat(append(slices.Clone(o.windows), findings.Concat(fresh...))...)
	o.windows = append(o.windows, fresh...)
	o.windows = o.windows[max(0, len(o.windows)-OnlineHistory):]
	if o.unavailable != nil {
		for v, reason := range o.unavailable() {
			if _, missing := w.Unavailable[v]; missing {
				w.Unavailable[v] = reason
			}
		}
	}
	found, _ := findings.Evaluate(w, findings.DefaultFilters(nil))
	var rows []store.Finding
	for _, f := range found {
		rows = append(rows, f.Row(w.Host))
	}
	return rows, nil
}

// drift compares the epochs since the last check with the ones before
// them; nil when the target is still short, the reference shorter than it,
// or nothing differs enough.
func (o *Online) drift(ctx context.Context, e *store.Epoch) (*findings.Finding, error) {
	target, n := findings.Range{StartNs: o.lastDrift, EndNs: e.EndNs}, o.targetEpochs
	if n < OnlineTarget {
		return nil, nil
	}
	o.lastDrift, o.targetEpochs = target.EndNs, 0
	t, err := findings.Metrics(ctx, store.Internal(o.st), e.Host, target)
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
	if len(o.previous) > OnlineReferenceSpans {
		o.previous = o.previous[1:]
	}
	if refEpochs < n {
		// Too little recorded before the target: it becomes reference.
		return nil, nil
	}
	ranked, _, err := findings.Compare(t, findings.Join(sets...), &diagnose.RankOptions{MinSamples: OnlineTarget, Denoise: true})
	if err != nil || len(ranked) == 0 || ranked[0].Score < DriftScore {
		return nil, err
	}
	return Drift(findings.DriftRule, target, ref, ranked), nil
}
