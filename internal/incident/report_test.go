package incident

import (
	"context"
	"errors"
	"testing"

	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/store"
)

// writeBusyLoop writes n one-second epochs of host h in which pid 9
// ("spinner") spins in spin_here on one of two CPUs from epoch from on.
func writeBusyLoop(t *testing.T, st *store.Store, n, from int) {
	t.Helper()
	for e := 0; e < n; e++ {
		start := int64(e) * sec
		ep := &store.Epoch{Host: "h", Epoch: int64(e), StartNs: start, EndNs: start + sec,
			Stacks: []store.Stack{{ID: 5, Kind: "user", Frames: []string{"spin_here", "main"}, Modules: []string{"/bin/spinner", "/bin/spinner"}}}}
		cpu := store.Vital{Name: "cpu", Events: 10, WeightSum: 10000}
		ep.Samples = append(ep.Samples, store.Sample{TsNs: start + 1, Vital: "cpu", LabelHash: 1, Weight: 1000, EstCount: 10000,
			Pid: 3, Tid: 3, Comm: "idle", Exe: "/bin/idle"})
		if e >= from {
			cpu.Events += 99
			cpu.WeightSum += 990000
			for k, est := range []uint64{1, 2, 4, 8, 16, 32, 64, 99} {
				ep.Samples = append(ep.Samples, store.Sample{TsNs: start + int64(k+2)*1e8, Vital: "cpu", LabelHash: 2, Weight: 10000,
					EstCount: est * 10000, Pid: 9, Tid: 9, Comm: "spinner", Exe: "/bin/spinner", UStackID: 5})
			}
		}
		ep.Vitals = []store.Vital{cpu, {Name: "syscall", Events: 5, WeightSum: 50}}
		if err := st.WriteEpoch(context.Background(), ep); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBuildReadsTheAnalysedAndEvaluatesTheRest: a report reads the
// findings the online analysis stored for the range it analysed, evaluates
// the filters over the rest, and ranks them together; a range nothing was
// recorded in is an error that says so.
func TestBuildReadsTheAnalysedAndEvaluatesTheRest(t *testing.T) {
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	writeBusyLoop(t, st, 30, 20)
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
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	writeBusyLoop(t, st, 25, 12)
	o := NewOnline(st, 1e9, nil, t.Logf)
	for e := 0; e < 25; e++ {
		o.Committed(&store.Epoch{Host: "h", Epoch: int64(e), StartNs: int64(e) * sec, EndNs: int64(e+1) * sec})
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
