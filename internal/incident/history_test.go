package incident

import (
	"context"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/store"
)

// every is findings of one rule about one program every step seconds from
// from to to, each lasting step, at a severity; pid counts up from pid, as
// a program started again and again.
func every(rule string, sev float64, resource string, from, to, step int64, pid uint32, exe, fn string) []findings.Finding {
	var fs []findings.Finding
	for t := from; t < to; t += step {
		fs = append(fs, finding(rule, sev, resource, t, t+step, culprit(pid, exe, fn)))
		pid++
	}
	return fs
}

// ranked is the rule, culprit and whether it was as before of each
// incident, in rank order.
func ranked(ins []Incident) []string {
	var out []string
	for _, in := range ins {
		s := in.Rules[0]
		if in.Culprit != nil {
			s += " " + in.Culprit.Comm
		}
		if in.Before != nil {
			s += " as before"
		}
		out = append(out, s)
	}
	return out
}

// TestHistoryRanksTheUsualBelowTheNew: over a reference of 30 minutes of
// 5 s intervals, a writer blocked on the disk at severity 1 and a server
// blocked on its peer show all along (the server restarted, with new
// pids); in the report's minute they show again, beside a busy loop of
// severity 0.4 and a retrier that began 20 minutes before: the new ones
// lead, the usual ones follow, by severity, saying since when they were so.
func TestHistoryRanksTheUsualBelowTheNew(t *testing.T) {
	const start = 1800
	var ref []findings.Finding
	ref = append(ref, every("rule5-blocking", 1, findings.ResourceDisk, 0, start+5, 5, 100, "writer", "sync_file")...)
	ref = append(ref, every("rule5-blocking", 0.9, findings.ResourcePeer, 30, start, 60, 200, "server", "serve")...)
	// Began 20 minutes before the range: in two thirds of the reference,
	// and in every interval of the range.
	ref = append(ref, every("failing-syscall", 0.3, findings.ResourceSyscall, start-1200, start, 10, 300, "retrier", "retry")...)
	h := NewHistory(findings.Range{StartNs: 0, EndNs: start * sec}, findings.Range{StartNs: start * sec, EndNs: (start + 60) * sec}, ref, 5*time.Second)
	now := []findings.Finding{
		finding("rule5-blocking", 1, findings.ResourceDisk, start, start+60, culprit(500, "writer", "sync_file")),
		finding("rule5-blocking", 0.95, findings.ResourcePeer, start, start+60, culprit(600, "server", "serve")),
		finding("busy-loop", 0.4, findings.ResourceCPU, start+10, start+50, culprit(700, "spinner", "spin")),
		finding("failing-syscall", 0.3, findings.ResourceSyscall, start, start+60, culprit(800, "retrier", "retry")),
	}
	got := Merge(now, h)
	want := []string{"busy-loop spinner", "failing-syscall retrier", "rule5-blocking writer as before", "rule5-blocking server as before"}
	if r := ranked(got); !reflect.DeepEqual(r, want) {
		t.Fatalf("ranks %v, want %v", r, want)
	}
	if got[0].New != 0.4 || got[2].New != 0 || got[2].Severity != 1 {
		t.Errorf("new severities %v, %v (severity %v)", got[0].New, got[2].New, got[2].Severity)
	}
	if b := got[2].Before; b.SinceNs != 0 || b.Share != 1 || b.Severity != 1 || !strings.Contains(got[2].Summary, "as before since") {
		t.Errorf("the writer's history %+v, summary %q", b, got[2].Summary)
	}
	if b := got[3].Before; b.SinceNs != 30*sec || b.Share < 0.98 || b.Severity != 0.9 {
		t.Errorf("the server's history %+v", b)
	}
}

// TestHistoryFlagsGrowth: a background process whose blocking grew five
// times over its usual is new, and ranked by its severity among the new;
// one that grew by less than Growth is as before.
func TestHistoryFlagsGrowth(t *testing.T) {
	const start = 1800
	ref := every("rule5-blocking", 0.1, findings.ResourceDisk, 0, start, 5, 100, "writer", "sync_file")
	ref = append(ref, every("rule5-blocking", 0.4, findings.ResourcePeer, 0, start, 5, 200, "server", "serve")...)
	h := NewHistory(findings.Range{StartNs: 0, EndNs: start * sec}, findings.Range{StartNs: start * sec, EndNs: (start + 60) * sec}, ref, 5*time.Second)
	now := []findings.Finding{
		finding("rule5-blocking", 0.7, findings.ResourcePeer, start, start+60, culprit(600, "server", "serve")),
		finding("rule5-blocking", 0.5, findings.ResourceDisk, start, start+60, culprit(500, "writer", "sync_file")),
		finding("busy-loop", 0.3, findings.ResourceCPU, start, start+60, culprit(700, "spinner", "spin")),
	}
	want := []string{"rule5-blocking writer", "busy-loop spinner", "rule5-blocking server as before"}
	if r := ranked(Merge(now, h)); !reflect.DeepEqual(r, want) {
		t.Fatalf("ranks %v, want %v", r, want)
	}
}

// TestHistoryWeighsHowOften: a program that was blocked in one interval of
// sixty before, once every five minutes, and once in the report's minute
// (an epoch a loaded host stretched a little) is as before; in every
// interval of the minute, it is new.
func TestHistoryWeighsHowOften(t *testing.T) {
	const start = 1800
	ref := every("rule5-blocking", 1, findings.ResourceDisk, 0, start, 300, 100, "writer", "sync_file")
	for i := range ref {
		ref[i].EndNs = ref[i].StartNs + 5*sec
	}
	h := NewHistory(findings.Range{StartNs: 0, EndNs: start * sec}, findings.Range{StartNs: start * sec, EndNs: (start + 60) * sec}, ref, 5*time.Second)
	spin := finding("busy-loop", 0.3, findings.ResourceCPU, start, start+60, culprit(700, "spinner", "spin"))
	once := []findings.Finding{finding("rule5-blocking", 1, findings.ResourceDisk, start+20, start+25, culprit(500, "writer", "sync_file")), spin}
	once[0].EndNs += sec / 10
	if r := ranked(Merge(once, h)); !reflect.DeepEqual(r, []string{"busy-loop spinner", "rule5-blocking writer as before"}) {
		t.Errorf("blocked once: %v", r)
	}
	always := []findings.Finding{finding("rule5-blocking", 1, findings.ResourceDisk, start, start+60, culprit(500, "writer", "sync_file")), spin}
	if r := ranked(Merge(always, h)); !reflect.DeepEqual(r, []string{"rule5-blocking writer", "busy-loop spinner"}) {
		t.Errorf("blocked throughout: %v", r)
	}
}

// TestNoHistoryKeepsTheRanking: without a reference long enough to judge
// by, or with one in which none of the range's subjects showed, the
// ranking is severity's, as TestMerge's.
func TestNoHistoryKeepsTheRanking(t *testing.T) {
	now := []findings.Finding{
		finding("rule5-blocking", 1, findings.ResourceDisk, 100, 160, culprit(500, "writer", "sync_file")),
		finding("busy-loop", 0.4, findings.ResourceCPU, 110, 150, culprit(700, "spinner", "spin")),
		finding("failing-syscall", 0.4, findings.ResourceSyscall, 100, 160, culprit(800, "retrier", "retry")),
		finding("ewma:sock weight/s", 0, findings.ResourcePeer, 100, 105, nil),
	}
	want := ranked(Merge(now, nil))
	if want[0] != "rule5-blocking writer" {
		t.Fatalf("without history: %v", want)
	}
	now100 := findings.Range{StartNs: 100 * sec, EndNs: 160 * sec}
	past := every("rule5-blocking", 1, findings.ResourceDisk, 0, 100, 5, 100, "writer", "sync_file")
	if h := NewHistory(findings.Range{StartNs: 80 * sec, EndNs: 100 * sec}, now100, past, 5*time.Second); h != nil {
		t.Fatalf("a history of four intervals: %+v", h)
	}
	other := every("rule5-blocking", 1, findings.ResourceDisk, 0, 100, 5, 100, "other", "sync_file")
	h := NewHistory(findings.Range{StartNs: 0, EndNs: 100 * sec}, now100, other, 5*time.Second)
	if got := ranked(Merge(now, h)); !reflect.DeepEqual(got, want) {
		t.Errorf("with a history of other subjects: %v, want %v", got, want)
	}
}

// TestBuildWeighsTheStoredHistory: a report reads the findings the online
// analysis stored before its range as the history: a writer the analysis
// found blocked on the disk through it ranks below a busy loop that began
// in the range and costs less; a report on a range with too little
// analysed before it ranks by severity.
func TestBuildWeighsTheStoredHistory(t *testing.T) {
	st, _ := busyLoopStore(t, 30, 20)
	ctx := context.Background()
	var rows []store.Finding
	for e := int64(0); e < 30; e++ {
		f := findings.Finding{Rule: "rule5-blocking", Timescale: findings.Epoch, Subject: "pid 4 (writer) disk", StartNs: e * sec,
			EndNs: (e + 1) * sec, Severity: 0.9, Resource: findings.ResourceDisk, Summary: "writer waits for the disk",
			Culprit: &findings.Culprit{Pid: 4, Comm: "writer", Exe: "/bin/writer", Function: "write_all"}}
		rows = append(rows, f.Row("h"))
	}
	// Analysed up to epoch 20, the writer's findings stored through 30
	// (made up: evaluating the epochs finds no writer): the busy loop's
	// epochs are evaluated now.
	if err := st.AddAnalysis(ctx, "h", rows, 0, 0, 20*sec); err != nil {
		t.Fatal(err)
	}
	rep, err := Build(ctx, findings.FromStore(st), Options{Range: findings.Range{StartNs: 20 * sec, EndNs: 30 * sec}, History: 5, CPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Incidents) != 2 {
		t.Fatalf("incidents %+v", rep.Incidents)
	}
	if in := rep.Incidents[0]; in.Rules[0] != "busy-loop" || in.Before != nil {
		t.Errorf("first incident %+v", in)
	}
	if in := rep.Incidents[1]; in.Rules[0] != "rule5-blocking" || in.Before == nil || in.Before.SinceNs != 0 || in.Severity != 0.9 {
		t.Errorf("second incident %+v", in)
	}
	rep, err = Build(ctx, findings.FromStore(st), Options{Range: findings.Range{StartNs: 4 * sec, EndNs: 30 * sec}, History: 5, CPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if in := rep.Incidents[0]; in.Rules[0] != "rule5-blocking" || in.Before != nil {
		t.Errorf("first incident of a range with 4 s before it %+v", in)
	}
}

// TestAtLeast: the binomial tail against the cases that have a closed
// form, and a tail over thousands of intervals stays a probability.
func TestAtLeast(t *testing.T) {
	cases := []struct {
		m, n int
		p    float64
		want float64
	}{
		{0, 12, 0.3, 1},
		{1, 12, 1.0 / 60, 1 - math.Pow(59.0/60, 12)},
		{12, 12, 0.5, math.Pow(0.5, 12)},
		{2, 3, 0.5, 0.5},
		{1, 12, 0, 0},
		{12, 12, 1, 1},
	}
	for _, c := range cases {
		if got := atLeast(c.m, c.n, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("atLeast(%d, %d, %v) = %v, want %v", c.m, c.n, c.p, got, c.want)
		}
	}
	if got := atLeast(60, 3600, 0.02); got < 0.85 || got > 0.99 {
		t.Errorf("at least 60 of 3600 at 2%% (72 expected): %v", got)
	}
}
