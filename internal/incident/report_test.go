package incident

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/store"
)

// writeBusyLoop writes n one-second epochs of host h in which pid 9
// ("spinner") spins in spin_here on one of two CPUs from epoch from on.
func writeBusyLoop(t *testing.T, st *store.Store, n, from int) []*store.Epoch {
	return writeSpins(t, st, n, spin{pid: 9, function: "spin_here", from: from, to: n})
}

// busyLoopStore is a new store holding writeBusyLoop's epochs, and the
// epochs.
func busyLoopStore(t *testing.T, n, from int) (*store.Store, []*store.Epoch) {
	t.Helper()
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, writeBusyLoop(t, st, n, from)
}

// spin is a process spinning in one function of its program on one of
// two CPUs, over epochs from to to-1.
type spin struct {
	pid      uint32
	function string
	from, to int
}

// writeSpins writes n one-second epochs of host h in which an idle process
// takes a little CPU and the spins take one CPU each, when they run, and
// returns them.
func writeSpins(t *testing.T, st *store.Store, n int, spins ...spin) []*store.Epoch {
	t.Helper()
	var epochs []*store.Epoch
	for e := 0; e < n; e++ {
		start := int64(e) * sec
		ep := &store.Epoch{Host: "h", Epoch: int64(e), StartNs: start, EndNs: start + sec}
		cpu := store.Vital{Name: "cpu", Events: 10, WeightSum: 10000}
		ep.Samples = append(ep.Samples, store.Sample{TsNs: start + 1, Vital: "cpu", LabelHash: 1, Weight: 1000, EstCount: 10000,
			Pid: 3, Tid: 3, Comm: "idle", Exe: "/bin/idle"})
		for k, s := range spins {
			stack := uint64(5 + k)
			ep.Stacks = append(ep.Stacks, store.Stack{ID: stack, Kind: "user", Frames: []string{s.function, "main"},
				Modules: []string{"/bin/spinner", "/bin/spinner"}})
			if e < s.from || e >= s.to {
				continue
			}
			cpu.Events += 99
			cpu.WeightSum += 990000
			for i, est := range []uint64{1, 2, 4, 8, 16, 32, 64, 99} {
				ep.Samples = append(ep.Samples, store.Sample{TsNs: start + int64(i+2)*1e8, Vital: "cpu", LabelHash: 2 + uint64(k), Weight: 10000,
					EstCount: est * 10000, Pid: s.pid, Tid: s.pid, Comm: "spinner", Exe: "/bin/spinner", UStackID: stack})
			}
		}
		ep.Vitals = []store.Vital{cpu, {Name: "syscall", Events: 5, WeightSum: 50}}
		if err := st.WriteEpoch(context.Background(), ep); err != nil {
			t.Fatal(err)
		}
		epochs = append(epochs, ep)
	}
	return epochs
}

// TestBuildReadsTheAnalysedAndEvaluatesTheRest: a report reads the
// findings the online analysis stored for the range it analysed, evaluates
// the filters over the rest, and ranks them together; a range nothing was
// recorded in is an error that says so.
func TestBuildReadsTheAnalysedAndEvaluatesTheRest(t *testing.T) {
	st, _ := busyLoopStore(t, 30, 20)
	ctx := context.Background()
	// The recorder analysed epochs 0-19 and found a stall there (made up:
	// evaluating them finds nothing, so it can only come from the store).
	stall := findings.Finding{Rule: "rule5-blocking", Timescale: findings.Epoch, Subject: "pid 4 (writer) disk", StartNs: 10 * sec, EndNs: 12 * sec,
		Severity: 0.7, Resource: findings.ResourceDisk, Summary: "writer waits for the disk",
		Culprit: &findings.Culprit{Pid: 4, Comm: "writer", Function: "write_all"}}
	if err := st.AddAnalysis(ctx, "h", []store.Finding{stall.Row("h")}, 0, 0, 20*sec); err != nil {
		t.Fatal(err)
	}
	rep, err := Build(ctx, findings.FromStore(st), Options{Range: findings.Range{StartNs: 5 * sec, EndNs: 30 * sec}, History: 5, CPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Host != "h" || rep.AnalysedNs != 15*sec || rep.EvaluatedNs != 10*sec {
		t.Fatalf("report of host %q analysed %d ns, evaluated %d ns", rep.Host, rep.AnalysedNs, rep.EvaluatedNs)
	}
	if len(rep.Incidents) != 2 {
		t.Fatalf("incidents %+v", rep.Incidents)
	}
	// The stall costs 70% of its thread's time, the loop half the machine.
	if in := rep.Incidents[0]; in.Rules[0] != "rule5-blocking" || in.Culprit.Function != "write_all" {
		t.Errorf("first incident %+v", in)
	}
	if in := rep.Incidents[1]; in.Rules[0] != "busy-loop" || in.Culprit == nil || in.Culprit.Function != "spin_here" ||
		in.StartNs != 20*sec || in.Severity < 0.45 || in.Severity > 0.55 || len(in.Drill) != 3 {
		t.Errorf("second incident %+v", in)
	}
	// A range the online analysis judged whole still names the filters
	// short of a vital (no l2 is recorded here), with the caller's reason.
	rep, err = Build(ctx, findings.FromStore(st), Options{Range: findings.Range{StartNs: 5 * sec, EndNs: 15 * sec},
		Unavailable: map[string]string{"l2": "needs a hardware PMU"}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.EvaluatedNs != 0 {
		t.Errorf("evaluated %d ns of an analysed range", rep.EvaluatedNs)
	}
	said := map[string]string{}
	for _, u := range rep.Unevaluated {
		said[u.Rule] = u.Reason
	}
	if r := said["rule1-busy-loop"]; r != "l2 needs a hardware PMU" {
		t.Errorf("rule1-busy-loop unevaluated because %q; all: %+v", r, rep.Unevaluated)
	}
	if _, ok := said["busy-loop"]; ok {
		t.Errorf("busy-loop, which needs only cpu, said unevaluable: %+v", rep.Unevaluated)
	}
	if _, err := Build(ctx, findings.FromStore(st), Options{Range: findings.Range{StartNs: 100 * sec, EndNs: 200 * sec}}); !errors.Is(err, findings.ErrNoData) {
		t.Errorf("a range with nothing recorded: %v", err)
	}
	if _, err := Build(ctx, findings.FromStore(st), Options{Range: findings.Range{StartNs: 5 * sec, EndNs: 30 * sec}, Timescale: "2m"}); err == nil {
		t.Error("an unknown timescale was accepted")
	}
}

// TestOnlineStoresWhatItAnalysed: the recorder's online analysis, given
// the epochs as they are committed, stores the findings of each with the
// range it judged, the last ones when it is closed; a report over that
// range then reads them and evaluates nothing.
func TestOnlineStoresWhatItAnalysed(t *testing.T) {
	st, epochs := busyLoopStore(t, 25, 12)
	ctx := context.Background()
	o := NewOnline(st, 1e9, nil, t.Logf)
	for _, e := range epochs {
		o.Committed(e)
	}
	o.Close()
	q := findings.FromStore(st)
	analysed, err := findings.Analysed(ctx, q, "h", findings.Range{StartNs: 0, EndNs: 100 * sec})
	if err != nil || len(analysed) != 1 || analysed[0] != (findings.Range{StartNs: 0, EndNs: 25 * sec}) {
		t.Fatalf("analysed %v (%v)", analysed, err)
	}
	rep, err := Build(ctx, q, Options{Range: findings.Range{StartNs: 0, EndNs: 25 * sec}, CPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.EvaluatedNs != 0 || len(rep.Incidents) == 0 || rep.Incidents[0].Culprit == nil || rep.Incidents[0].Culprit.Function != "spin_here" ||
		rep.Incidents[0].StartNs != 12*sec || rep.Incidents[0].EndNs != 25*sec {
		t.Fatalf("report evaluated %d ns: %+v", rep.EvaluatedNs, rep.Incidents)
	}
}

// countingQuerier counts the queries a report makes, and those that read
// samples.
type countingQuerier struct {
	q                findings.Querier
	queries, samples int
}

func (c *countingQuerier) Query(ctx context.Context, sql string) (*store.Result, error) {
	c.queries++
	if strings.Contains(sql, "FROM samples") {
		c.samples++
	}
	return c.q.Query(ctx, sql)
}

// TestReportQueriesDoNotGrowWithEpochsOrIncidents: a report reads the
// online analysis's findings in one query and evaluates the rest of its
// range in a fixed number, whatever the number of epochs or of incidents
// (no query per incident, epoch or finding); and a range the analysis
// judged to its last epoch has no samples read.
func TestReportQueriesDoNotGrowWithEpochsOrIncidents(t *testing.T) {
	ctx := context.Background()
	report := func(epochs, analysed int, spins ...spin) (*Report, *countingQuerier) {
		t.Helper()
		st, err := store.Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		writeSpins(t, st, epochs, spins...)
		// The first epochs are judged as the online analysis does: their
		// findings stored with the range.
		q := findings.FromStore(st)
		judged, err := Build(ctx, q, Options{Range: findings.Range{StartNs: 0, EndNs: int64(analysed) * sec}, CPUs: 2})
		if err != nil {
			t.Fatal(err)
		}
		var rows []store.Finding
		for _, in := range judged.Incidents {
			for _, f := range in.Findings {
				rows = append(rows, f.Row("h"))
			}
		}
		if err := st.AddAnalysis(ctx, "h", rows, 0, 0, int64(analysed)*sec); err != nil {
			t.Fatal(err)
		}
		c := &countingQuerier{q: q}
		rep, err := Build(ctx, c, Options{Range: findings.Range{StartNs: -100 * sec, EndNs: int64(epochs+100) * sec}, History: 20, CPUs: 2, Diff: true})
		if err != nil {
			t.Fatal(err)
		}
		return rep, c
	}
	// Ten epochs analysed online, ten evaluated now: one incident.
	small, cs := report(20, 10, spin{pid: 9, function: "spin_here", from: 12, to: 16})
	// Sixty analysed, sixty evaluated: six incidents, three in each part.
	var spins []spin
	for k := range 6 {
		spins = append(spins, spin{pid: uint32(20 + k), function: fmt.Sprintf("spin_%d", k), from: 5 + 20*k, to: 10 + 20*k})
	}
	big, cb := report(120, 60, spins...)
	named := func(r *Report) int {
		n := 0
		for _, in := range r.Incidents {
			if in.Culprit != nil && strings.HasPrefix(in.Culprit.Function, "spin_") {
				n++
			}
		}
		return n
	}
	if named(small) != 1 || named(big) != 6 || big.AnalysedNs != 60*sec || big.EvaluatedNs == 0 {
		t.Fatalf("spinning incidents: %d of 1, %d of 6 (analysed %d ns, evaluated %d ns)", named(small), named(big), big.AnalysedNs, big.EvaluatedNs)
	}
	if cb.queries != cs.queries {
		t.Errorf("a report made %d queries over 20 epochs and 1 incident, %d over 120 epochs and 6", cs.queries, cb.queries)
	}
	// Analysed to its last epoch: nothing is left to evaluate.
	judged, c := report(120, 120, spins...)
	if named(judged) != 6 || judged.AnalysedNs != 120*sec {
		t.Fatalf("judged online: %d spinning incidents of 6, analysed %d ns", named(judged), judged.AnalysedNs)
	}
	if c.samples > 0 {
		t.Errorf("a report of a range judged online to its last epoch made %d queries of samples", c.samples)
	}
}

// TestOnlineJudgesAgainWhatItCouldNotLoad: epochs the online analysis could
// not load (here their stacks, given without them as after a restart of
// the recorder, for want of a query slot, which a busy API can take) are
// judged with the next ones, so that the analysed range has no gap for
// every report to evaluate again.
func TestOnlineJudgesAgainWhatItCouldNotLoad(t *testing.T) {
	st, err := store.Open(t.TempDir(), &store.Options{MaxQueries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	epochs := writeBusyLoop(t, st, 30, 0)
	held, err := st.QueryRows(ctx, "SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	failed := make(chan string, 10)
	o := NewOnline(st, time.Second, nil, func(format string, a ...any) {
		t.Logf(format, a...)
		select {
		case failed <- fmt.Sprintf(format, a...):
		default:
		}
	})
	commit := func(from, to int) {
		for _, e := range epochs[from:to] {
			bare := *e
			bare.Stacks = nil
			o.Committed(&bare)
		}
	}
	commit(0, 10)
	select {
	case <-failed: // its loads found no free slot
	case <-time.After(time.Minute):
		t.Fatal("the online analysis of epochs 0-9 did not fail while every query slot was taken")
	}
	held.Close()
	commit(10, 30)
	o.Close()
	analysed, err := findings.Analysed(ctx, findings.FromStore(st), "h", findings.Range{StartNs: 0, EndNs: 100 * sec})
	if err != nil || len(analysed) != 1 || analysed[0] != (findings.Range{StartNs: 0, EndNs: 30 * sec}) {
		t.Fatalf("analysed %v (%v), want 0-30 s whole", analysed, err)
	}
}

// TestOnlineLastAnalysisIsBounded: when the recorder stops, the analysis
// of its last epochs gives up at its deadline (OnlineClosingLimit; here
// one already past) rather than hold the stop, stores nothing and says
// the reports will evaluate the range.
func TestOnlineLastAnalysisIsBounded(t *testing.T) {
	st, epochs := busyLoopStore(t, 10, 4)
	var said []string
	o := NewOnline(st, time.Second, nil, func(format string, a ...any) { said = append(said, fmt.Sprintf(format, a...)) })
	defer o.Close()
	var es []committed
	for _, e := range epochs {
		w, err := findings.EpochWindow(e, 2, nil)
		es = append(es, committed{e, w, err})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	o.analyse(ctx, es, true)
	if d := time.Since(start); d > OnlineClosingLimit {
		t.Errorf("the last analysis past its deadline took %v", d)
	}
	analysed, err := findings.Analysed(context.Background(), findings.FromStore(st), "h", findings.Range{StartNs: 0, EndNs: 100 * sec})
	if err != nil || len(analysed) != 0 {
		t.Errorf("analysed %v (%v), want nothing", analysed, err)
	}
	if len(said) != 1 || !strings.Contains(said[0], "not judged when stopping") || len(o.pending) != 0 {
		t.Errorf("said %q; %d epochs put back", said, len(o.pending))
	}
}
