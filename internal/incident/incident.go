package incident

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/findings"
)

// Incident is one problem: the findings about the same culprit (process,
// or code in a program many processes ran) close together in time, with
// the strongest one's severity, resource and culprit.
type Incident struct {
	Rank int `json:"rank"`
	// Severity is the strongest finding's (findings.Finding.Severity): 0
	// when no finding could put a cost on the problem.
	Severity float64 `json:"severity"`
	// New is the severity of what is new in the incident against the
	// host's history before the report's range (History): the strongest
	// of its findings that were not as before. An incident is ranked by
	// it, below every new one when it is 0.
	New float64 `json:"new_severity"`
	// Before is, when nothing in the incident is new, how its strongest
	// finding showed before the range.
	Before   *Before `json:"before,omitempty"`
	Resource string  `json:"resource"`
	// Summary says in one line what is wrong, from the strongest finding.
	Summary string            `json:"summary"`
	StartNs int64             `json:"start_ns"`
	EndNs   int64             `json:"end_ns"`
	Culprit *findings.Culprit `json:"culprit,omitempty"`
	// Processes are the processes the findings involve, culprits first.
	Processes []findings.Process `json:"processes,omitempty"`
	// Rules are the rules and detectors that found it, strongest first.
	Rules []string `json:"rules"`
	// Findings are the evidence, strongest first: the incident's own and
	// the findings about the whole machine (a vital's rise, a drift of
	// the holter diff metrics) over its time and resource.
	Findings []findings.Finding `json:"findings"`
	// Drill are commands that show more.
	Drill []Drill `json:"drill"`
}

// Drill is a way to look closer at an incident.
type Drill struct {
	What    string `json:"what"`
	Command string `json:"command"`
}

// MergeGap is how far apart in time two findings about the same culprit
// may be and still be one incident.
const MergeGap = 2 * time.Minute

// Merge joins findings into incidents and ranks them: findings about the
// same culprit process, or about the same function of the same program
// (one command run over and over), that overlap or lie within MergeGap of
// each other are one incident. A finding about the whole machine (an EWMA
// rise, a drift, Rule #2's growth) is evidence for the strongest incident
// it overlaps on the same resource, and an incident of its own when none
// does. Incidents are ranked by the severity of what is new in them
// against the history h (nil: everything is new), then by severity, then
// by their findings' own scores, then by time.
func Merge(fs []findings.Finding, h *History) []Incident {
	n := len(fs)
	before := h.Judge(fs)
	parent := make([]int, n)
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		if parent[i] != i {
			parent[i] = find(parent[i])
		}
		return parent[i]
	}
	union := func(a, b int) {
		if ra, rb := find(a), find(b); ra != rb {
			parent[rb] = ra
		}
	}
	near := func(a, b findings.Finding) bool {
		return a.StartNs <= b.EndNs+int64(MergeGap) && b.StartNs <= a.EndNs+int64(MergeGap)
	}
	// Findings sharing a key, ordered by start, join their neighbours in
	// time.
	byKey := map[string][]int{}
	var machine []int
	for i, f := range fs {
		ks := keys(f)
		if len(ks) == 0 {
			machine = append(machine, i)
			continue
		}
		for _, k := range ks {
			byKey[k] = append(byKey[k], i)
		}
	}
	for _, members := range byKey {
		sort.Slice(members, func(a, b int) bool { return fs[members[a]].StartNs < fs[members[b]].StartNs })
		for k := 1; k < len(members); k++ {
			for j := k - 1; j >= 0; j-- {
				if near(fs[members[j]], fs[members[k]]) {
					union(members[j], members[k])
					break
				}
			}
		}
	}
	groups := map[int][]int{}
	for i := range fs {
		if len(keys(fs[i])) > 0 {
			groups[find(i)] = append(groups[find(i)], i)
		}
	}
	var out []*Incident
	for _, members := range groups {
		out = append(out, build(fs, members, before))
	}
	sortIncidents(out)
	// Machine findings go to the strongest incident they overlap on
	// their resource; the rest make incidents of their own, by resource
	// and time. A new one is not evidence for an incident that is as
	// before, where it would be ranked as that is.
	var loose []int
	for _, i := range machine {
		f := fs[i]
		placed := false
		for _, in := range out {
			if before[i] == nil && in.Before != nil {
				break // the rest are as before too
			}
			if in.Resource == f.Resource && f.StartNs < in.EndNs && in.StartNs < f.EndNs {
				in.Findings = append(in.Findings, f)
				if !slices.Contains(in.Rules, f.Rule) {
					in.Rules = append(in.Rules, f.Rule)
				}
				placed = true
				break
			}
		}
		if !placed {
			loose = append(loose, i)
		}
	}
	sort.SliceStable(loose, func(a, b int) bool { return fs[loose[a]].StartNs < fs[loose[b]].StartNs })
	used := map[int]bool{}
	for k, i := range loose {
		if used[i] {
			continue
		}
		members := []int{i}
		for _, j := range loose[k+1:] {
			if !used[j] && fs[j].Resource == fs[i].Resource && near(fs[i], fs[j]) {
				members = append(members, j)
				used[j] = true
			}
		}
		out = append(out, build(fs, members, before))
	}
	sortIncidents(out)
	res := make([]Incident, len(out))
	for i, in := range out {
		if len(in.Rules) > 1 {
			in.Summary += " (also " + strings.Join(in.Rules[1:], ", ") + ")"
		}
		if b := in.Before; b != nil {
			in.Summary += fmt.Sprintf("; as before since %s (%.0f%% of the time, severity %.2f)", fmtNs(b.SinceNs), b.Share*100, b.Severity)
		}
		in.Rank = i + 1
		res[i] = *in
	}
	return res
}

// keys are what a finding is about, for merging: its culprit process,
// and the culprit's function in its program; or, without a culprit, the
// first process it names. None: it is about the whole machine. Waits for
// a CPU are about the machine's CPUs being too few for what runs: they
// merge with each other, into one incident of CPU saturation, and not
// with the incidents of the processes that used the CPUs meanwhile.
func keys(f findings.Finding) []string {
	if f.Resource == findings.ResourceRunQueue {
		return []string{"run queue"}
	}
	if c := f.Culprit; c != nil {
		ks := []string{fmt.Sprintf("pid %d", c.Pid)}
		if c.Function != "" {
			ks = append(ks, "function "+filepath.Base(c.Exe)+" "+c.Function)
		}
		return ks
	}
	if len(f.Processes) > 0 {
		return []string{fmt.Sprintf("pid %d", f.Processes[0].Pid)}
	}
	return nil
}

// build makes an incident of some findings, before[i] saying how fs[i]
// showed before the report's range.
func build(fs []findings.Finding, members []int, before []*Before) *Incident {
	in := &Incident{StartNs: math.MaxInt64, EndNs: math.MinInt64}
	sort.SliceStable(members, func(a, b int) bool { return stronger(fs[members[a]], fs[members[b]]) })
	usual := true
	for _, i := range members {
		f := fs[i]
		in.Findings = append(in.Findings, f)
		in.StartNs, in.EndNs = min(in.StartNs, f.StartNs), max(in.EndNs, f.EndNs)
		if before[i] == nil && usual {
			usual, in.New = false, f.Severity
		}
	}
	if usual {
		in.Before = before[members[0]]
	}
	top := in.Findings[0]
	in.Severity, in.Resource, in.Summary = top.Severity, top.Resource, top.Summary
	// The culprit is the strongest finding's that names one; of CPU
	// saturation, the process that used the most CPU while others waited.
	for _, f := range in.Findings {
		if f.Culprit != nil {
			in.Culprit = f.Culprit
			break
		}
	}
	if in.Resource == findings.ResourceRunQueue {
		saturation(in)
	}
	seen := map[uint32]bool{}
	if in.Culprit != nil {
		in.Processes = append(in.Processes, findings.Process{Pid: in.Culprit.Pid, Comm: in.Culprit.Comm, Exe: in.Culprit.Exe})
		seen[in.Culprit.Pid] = true
	}
	for _, f := range in.Findings {
		if !slices.Contains(in.Rules, f.Rule) {
			in.Rules = append(in.Rules, f.Rule)
		}
		for _, p := range f.Processes {
			if !seen[p.Pid] && len(in.Processes) < 8 {
				seen[p.Pid] = true
				in.Processes = append(in.Processes, p)
			}
		}
	}
	return in
}

// saturation names a CPU saturation incident's culprit — the process that
// used the most CPU over the findings' intervals, as each held finding
// names the one that used the most in its interval — and sums it up.
func saturation(in *Incident) {
	used := map[uint32]float64{}
	culprits := map[uint32]*findings.Culprit{}
	victims := map[uint32]bool{}
	for _, f := range in.Findings {
		if f.Resource != findings.ResourceRunQueue {
			continue
		}
		if len(f.Processes) > 0 {
			victims[f.Processes[0].Pid] = true
		}
		if f.Culprit != nil && len(f.Processes) > 1 {
			used[f.Culprit.Pid] += f.Processes[1].Weight
			culprits[f.Culprit.Pid] = f.Culprit
		}
	}
	var hog uint32
	for pid, cpu := range used {
		if cpu > used[hog] || cpu == used[hog] && pid < hog {
			hog = pid
		}
	}
	// An incident of machine findings alone (a vital's rise) names no
	// process that waited: it keeps its strongest finding's summary.
	if top := in.Findings[0]; len(victims) > 0 && len(top.Processes) > 0 {
		in.Summary = fmt.Sprintf("%d processes waited for a CPU after waking, pid %d (%s) the most, %.0f%% of its time",
			len(victims), top.Processes[0].Pid, top.Processes[0].Comm, top.Severity*100)
	}
	if c := culprits[hog]; c != nil {
		in.Culprit = c
		fn := ""
		if c.Function != "" {
			fn = " in " + c.Function
		}
		in.Summary += fmt.Sprintf(", while pid %d (%s) used the most CPU%s", c.Pid, c.Comm, fn)
	}
}

// stronger orders findings by severity, then by their own score.
func stronger(a, b findings.Finding) bool {
	if a.Severity != b.Severity {
		return a.Severity > b.Severity
	}
	return a.Score > b.Score
}

func sortIncidents(out []*Incident) {
	// A total order, so that a report ranks the same data the same way
	// whatever order its incidents were gathered in (a map's): new
	// incidents before those as before, by the severity of what is new,
	// then by severity; between equal severities the same rule's stronger
	// finding, then the earlier, then by name.
	sort.SliceStable(out, func(a, b int) bool {
		x, y := out[a], out[b]
		if (x.Before == nil) != (y.Before == nil) {
			return x.Before == nil
		}
		if x.New != y.New {
			return x.New > y.New
		}
		if x.Severity != y.Severity {
			return x.Severity > y.Severity
		}
		if rx, ry := x.Findings[0].Rule, y.Findings[0].Rule; rx != ry {
			return rx < ry
		}
		if sx, sy := x.Findings[0].Score, y.Findings[0].Score; sx != sy {
			return sx > sy
		}
		if x.StartNs != y.StartNs {
			return x.StartNs < y.StartNs
		}
		if x.EndNs != y.EndNs {
			return x.EndNs < y.EndNs
		}
		if x.Rules[0] != y.Rules[0] {
			return x.Rules[0] < y.Rules[0]
		}
		return x.Summary < y.Summary
	})
}

// drill adds the commands that look closer at each incident: its
// culprit's samples, its flame graph in the UI, and the holter diff of its
// time against the stretch before it.
func drill(ins []Incident, host string) {
	for i := range ins {
		in := &ins[i]
		r := fmtNs(in.StartNs) + "/" + fmtNs(in.EndNs)
		in.Drill = nil
		if in.Culprit != nil {
			in.Drill = append(in.Drill, Drill{What: "samples",
				Command: fmt.Sprintf(`holter query "SELECT ts_ns, vital, weight, tid, comm, ustack_id, kstack_id FROM samples WHERE host = '%s' AND pid = %d AND ts_ns >= %d AND ts_ns < %d ORDER BY weight DESC LIMIT 50"`,
					host, in.Culprit.Pid, in.StartNs, in.EndNs)})
			in.Drill = append(in.Drill, Drill{What: "flame graph",
				Command: fmt.Sprintf(`holter ui, Findings tab, "flame graph" of this incident (the %s samples of pid %d from %s)`, vitalOf(in), in.Culprit.Pid, r)})
		}
		span := in.EndNs - in.StartNs
		in.Drill = append(in.Drill, Drill{What: "diff",
			Command: fmt.Sprintf("holter diff --target %s --reference %s/%s", r, fmtNs(in.StartNs-3*span), fmtNs(in.StartNs))})
	}
}

// vitalOf is the vital whose samples show an incident best.
func vitalOf(in *Incident) string {
	for _, f := range in.Findings {
		if len(f.Vitals) > 0 {
			return f.Vitals[0]
		}
	}
	return "cpu"
}

func fmtNs(ns int64) string { return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000") }

// Rerank sorts incidents from several reports (one per host) into one
// ranking and numbers them again.
func Rerank(ins []Incident) {
	ps := make([]*Incident, len(ins))
	for i := range ins {
		ps[i] = &ins[i]
	}
	sortIncidents(ps)
	out := make([]Incident, len(ins))
	for i, p := range ps {
		out[i] = *p
		out[i].Rank = i + 1
	}
	copy(ins, out)
}
