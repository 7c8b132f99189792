package incident

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/findings"
)

const sec = int64(time.Second)

func finding(rule string, sev float64, resource string, from, to int64, c *findings.Culprit) findings.Finding {
	f := findings.Finding{Rule: rule, Severity: sev, Resource: resource, StartNs: from * sec, EndNs: to * sec, Culprit: c,
		Summary: rule + " summary"}
	if c != nil {
		f.Processes = []findings.Process{{Pid: c.Pid, Comm: c.Comm, Exe: c.Exe}}
	}
	return f
}

func culprit(pid uint32, exe, fn string) *findings.Culprit {
	return &findings.Culprit{Pid: pid, Comm: exe, Exe: "/bin/" + exe, Function: fn}
}

// held is a Rule #7 finding: victim waited, while hog used cpu CPUs.
func held(sev float64, from, to int64, victim uint32, hog *findings.Culprit, cpu float64) findings.Finding {
	f := finding("rule7-held", sev, findings.ResourceRunQueue, from, to, hog)
	f.Processes = []findings.Process{{Pid: victim, Comm: "victim"}, {Pid: hog.Pid, Comm: hog.Comm, Vital: "cpu", Weight: cpu}}
	return f
}

// TestMerge: findings about one culprit merge, the strongest leading;
// findings about one function of one program merge across its processes;
// waits for a CPU merge into one incident of CPU saturation blaming the
// process that used the most CPU; machine findings are evidence for the
// incident they overlap on their resource, and incidents of their own
// otherwise; incidents are ranked by severity, unmeasured ones last.
func TestMerge(t *testing.T) {
	spin := culprit(10, "spinner", "spin_forever")
	fs := []findings.Finding{
		// Two processes held from a CPU, by the spinner and by a
		// compiler that used less.
		held(0.3, 100, 105, 40, spin, 1.5),
		held(0.2, 104, 106, 41, culprit(50, "cc", "compile_pass"), 0.3),
		finding("busy-loop", 0.5, findings.ResourceCPU, 100, 160, spin),
		finding("ewma:cpu weight/s", 0, findings.ResourceCPU, 100, 105, nil),
		// The same program and function in three short-lived processes.
		finding("failing-syscall", 0.8, findings.ResourceSyscall, 110, 120, culprit(21, "retrier", "retry_connect")),
		finding("failing-syscall", 0.9, findings.ResourceSyscall, 121, 131, culprit(22, "retrier", "retry_connect")),
		finding("failing-syscall", 0.7, findings.ResourceSyscall, 132, 140, culprit(23, "retrier", "retry_connect")),
		// A process blocked on the disk, and the same process an hour
		// later: two incidents.
		finding("rule5-blocking", 0.6, findings.ResourceDisk, 100, 110, culprit(30, "writer", "write_blocks")),
		finding("rule5-blocking", 0.4, findings.ResourceDisk, 3700, 3710, culprit(30, "writer", "write_blocks")),
		// A drift of the block I/O metrics nothing on the disk explains
		// at its time, and a vital's rise with none either.
		finding(findings.DriftRule, 0, findings.ResourceDisk, 1000, 1050, nil),
		finding("ewma:sock weight/s", 0, findings.ResourcePeer, 1000, 1005, nil),
	}
	fs[9].Score, fs[10].Score = 0.9, 5
	got := Merge(fs, nil)
	type brief struct {
		rank     int
		severity float64
		rules    string
		pid      uint32
		from, to int64
	}
	var briefs []brief
	for _, in := range got {
		var pid uint32
		if in.Culprit != nil {
			pid = in.Culprit.Pid
		}
		briefs = append(briefs, brief{in.Rank, in.Severity, strings.Join(in.Rules, ","), pid, in.StartNs / sec, in.EndNs / sec})
	}
	want := []brief{
		{1, 0.9, "failing-syscall", 22, 110, 140},
		{2, 0.6, "rule5-blocking", 30, 100, 110},
		{3, 0.5, "busy-loop,ewma:cpu weight/s", 10, 100, 160},
		{4, 0.4, "rule5-blocking", 30, 3700, 3710},
		{5, 0.3, "rule7-held", 10, 100, 106},
		{6, 0, "ewma:sock weight/s", 0, 1000, 1005},
		{7, 0, findings.DriftRule, 0, 1000, 1050},
	}
	if !reflect.DeepEqual(briefs, want) {
		t.Fatalf("incidents\n%+v\nwant\n%+v", briefs, want)
	}
	if s := got[0].Summary; s != "failing-syscall summary" {
		t.Errorf("summary %q", s)
	}
	if s := got[2].Summary; !strings.Contains(s, "busy-loop summary (also ewma:cpu weight/s)") {
		t.Errorf("summary %q", s)
	}
	if s := got[4].Summary; s != "2 processes waited for a CPU after waking, pid 40 (victim) the most, 30% of its time, while pid 10 (spinner) used the most CPU in spin_forever" {
		t.Errorf("saturation summary %q", s)
	}
	if n := len(got[0].Processes); n != 3 {
		t.Errorf("the merged retries name %d processes: %+v", n, got[0].Processes)
	}
}

// TestSaturationOfMachineFindings: an incident of waits for a CPU made
// of a machine finding alone (the sched vital's rise) keeps that
// finding's summary rather than counting the processes that waited: it
// names none.
func TestSaturationOfMachineFindings(t *testing.T) {
	f := finding("ewma:sched weight/s", 0.2, findings.ResourceRunQueue, 100, 105, nil)
	got := Merge([]findings.Finding{f}, nil)
	if len(got) != 1 || got[0].Summary != f.Summary {
		t.Fatalf("incidents %+v, want one saying %q", got, f.Summary)
	}
}

func TestSubtract(t *testing.T) {
	r := findings.Range{StartNs: 0, EndNs: 100}
	cases := []struct {
		cut  []findings.Range
		want []findings.Range
	}{
		{nil, []findings.Range{{StartNs: 0, EndNs: 100}}},
		{[]findings.Range{{StartNs: -10, EndNs: 40}, {StartNs: 60, EndNs: 70}}, []findings.Range{{StartNs: 40, EndNs: 60}, {StartNs: 70, EndNs: 100}}},
		{[]findings.Range{{StartNs: -10, EndNs: 200}}, nil},
		{[]findings.Range{{StartNs: 20, EndNs: 30}, {StartNs: 25, EndNs: 50}}, []findings.Range{{StartNs: 0, EndNs: 20}, {StartNs: 50, EndNs: 100}}},
	}
	for _, c := range cases {
		if got := subtract(r, c.cut); !reflect.DeepEqual(got, c.want) {
			t.Errorf("subtract %v: %v, want %v", c.cut, got, c.want)
		}
	}
}

// TestRankIsATotalOrder: incidents of equal severity, some of one rule and
// some of others, rank the same whatever order they come in (they come
// from a map). The order once compared scores only within a rule, which
// is not transitive, and ranks changed from one run to the next on the
// same data.
func TestRankIsATotalOrder(t *testing.T) {
	mk := func(rule string, score float64, start int64, summary string) *Incident {
		return &Incident{Severity: 0.5, StartNs: start, EndNs: start + 10, Rules: []string{rule}, Summary: summary,
			Findings: []findings.Finding{{Rule: rule, Score: score}}}
	}
	base := []*Incident{
		mk("rule5-blocking", 3, 20, "a"), mk("rule2-cpu", 9, 30, "b"), mk("rule5-blocking", 7, 10, "c"),
		mk("rule2-cpu", 1, 5, "d"), mk("ewma-syscall", 4, 1, "e"), mk("rule5-blocking", 7, 10, "f"),
	}
	var want []string
	for seed := range 50 {
		in := append([]*Incident(nil), base...)
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		rng.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
		sortIncidents(in)
		var got []string
		for _, x := range in {
			got = append(got, x.Summary)
		}
		if want == nil {
			want = got
		} else if !reflect.DeepEqual(got, want) {
			t.Fatalf("order %v from one shuffle, %v from another", got, want)
		}
	}
}
