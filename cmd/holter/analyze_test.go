package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/incident"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestAnalysisBadInput: unknown and empty ranges, malformed parameters
// give a clear error and a non-zero exit, never a panic.
func TestAnalysisBadInput(t *testing.T) {
	bin := testutil.BuildHolter(t)
	dir := t.TempDir()
	st, err := store.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	for e := int64(0); e < 3; e++ {
		if err := st.WriteEpoch(context.Background(), &store.Epoch{Host: "h", Epoch: e, StartNs: now - (3-e)*1e9, EndNs: now - (2-e)*1e9,
			Vitals: []store.Vital{{Name: "cpu", Events: 1, WeightSum: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"diff", "--data", dir, "--target", "nosuchrun", "--reference", "-1m/now"}, 2, `unknown range "nosuchrun"`},
		{[]string{"diff", "--data", dir, "--target", "-1m/-2m", "--reference", "-1m/now"}, 2, "is empty"},
		{[]string{"diff", "--data", dir, "--target", "yesterday/now", "--reference", "-1m/now"}, 2, "not a time like"},
		{[]string{"diff", "--data", dir, "--target", "-1m/now"}, 2, "give both"},
		{[]string{"diff", "--data", dir, "--target", "-10h/-9h", "--reference", "-1m/now"}, 1, "no epochs recorded"},
		{[]string{"findings", "--data", dir, "--range", "-10h/-9h"}, 1, "nothing recorded"},
		{[]string{"findings", "--data", dir, "--timescale", "2m"}, 2, `--timescale: "2m" is not one of "epoch", "5m", "1h", "1d"`},
		{[]string{"run", "--data", dir, "--param", "size", "--", "true"}, 2, `"size" is not NAME=VALUE`},
		{[]string{"run", "--data", dir, "--param", "=4", "--", "true"}, 2, "not NAME=VALUE"},
		{[]string{"run", "--data", dir, "--param", "a=1", "--perf-regex", "(", "--", "true"}, 2, "--perf-regex"},
		{[]string{"run", "--data", dir, "--param", "a=1"}, 2, "missing command"},
		{[]string{"runs", "--data", dir, "--threshold", "2"}, 2, `--threshold: "2" is not a probability in (0, 1]`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args[3:], " "), func(t *testing.T) {
			_, errOut, code := runHolter(t, bin, c.args...)
			if code != c.code || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "panic") {
				t.Errorf("exit %d (want %d), stderr %q, want %q", code, c.code, errOut, c.want)
			}
		})
	}
	// The good path on this tiny store: no findings, l2 unevaluable.
	out, errOut, code := runHolter(t, bin, "findings", "--data", dir, "--since", "1h")
	if code != 0 || !strings.Contains(out, "rule1-busy-loop") || !strings.Contains(out, "l2 not recorded") {
		t.Errorf("findings: exit %d %s\n%s", code, errOut, out)
	}
}

// TestDirectWritesOnARealRecording records with 1 s epochs the machine's
// usual background for about 25 s, then a workload's fdatasync'd O_DIRECT
// writes for 20 s, and asks two things of that one recording (each
// recording is a minute of the suite's time): the recorder's online
// analysis found the writes a drift from what came before
// (onlineDriftOverWrites), and holter findings and holter diff name them
// (findingsAndDiffOverWrites).
func TestDirectWritesOnARealRecording(t *testing.T) {
	testutil.RequireRoot(t)
	bin, dir, r, began, ended := recordDirectWrite(t, 25, 20)
	// The recorder analyses every onlineEvery's worth of epochs, after
	// they are committed: the check whose target holds the end of the
	// workload may come that much later, and more on a loaded machine.
	// Until its epochs are in, the test waits without starting processes:
	// each holter it runs faults in pages, allocates and talks to the
	// recorder, and that would be recorded in the same epochs as the
	// workload.
	r.waitNewEpochs(t, int((incident.OnlineEvery+incident.OnlineTarget*time.Second)/time.Second)+2)
	t.Run("online drift", func(t *testing.T) { onlineDriftOverWrites(t, bin, dir, r, began, ended) })
	t.Run("findings and diff", func(t *testing.T) { findingsAndDiffOverWrites(t, bin, dir, began, ended) })
	if t.Failed() {
		t.Logf("recorder log (epoch lines but the last left out):\n%s", r.brief())
	}
}

// findingsAndDiffOverWrites: over the writes, an incident names the
// workload (as its culprit, blocked on the disk, or as the process held
// from a CPU when the machine is loaded), and holter diff between their
// first 8 s and the 10 s before ranks a block I/O metric among the top
// five. (Not all 20 s of them: the longer the target, the more of a shared
// machine's other work it holds against the reference.)
func findingsAndDiffOverWrites(t *testing.T, bin, dir string, before, after time.Time) {
	waitRecorded(t, bin, dir, after)
	rng := func(a, b time.Time) string {
		return a.UTC().Format(time.RFC3339Nano) + "/" + b.UTC().Format(time.RFC3339Nano)
	}
	out2, errOut, code := runHolter(t, bin, "findings", "--data", dir, "--range", rng(before, after.Add(time.Second)), "--json")
	if code != 0 {
		t.Fatalf("findings: exit %d %s", code, errOut)
	}
	var fs struct {
		Incidents []struct {
			Rank      int
			Summary   string
			Processes []struct{ Comm string }
			Findings  []struct{ Rule, Subject string }
		}
		Unevaluated []struct{ Rule, Reason string }
	}
	if err := json.Unmarshal([]byte(out2), &fs); err != nil {
		t.Fatal(err)
	}
	named := false
	for _, in := range fs.Incidents {
		for _, p := range in.Processes {
			if p.Comm == "direct_write" && !named {
				named = true
				t.Logf("incident %d names direct_write: %s", in.Rank, in.Summary)
			}
		}
	}
	if !named {
		var got []string
		for _, in := range fs.Incidents {
			got = append(got, fmt.Sprintf("incident %d: %s; processes %v; findings %v", in.Rank, in.Summary, in.Processes, in.Findings))
		}
		t.Errorf("no incident names direct_write among %d:\n%s", len(fs.Incidents), strings.Join(got, "\n"))
	}
	l2 := false
	for _, u := range fs.Unevaluated {
		l2 = l2 || u.Rule == "rule1-busy-loop" && strings.Contains(u.Reason, "l2")
	}
	if !l2 {
		t.Errorf("rule 1 not reported unevaluable: %+v", fs.Unevaluated)
	}

	out3, errOut, code := runHolter(t, bin, "diff", "--data", dir, "--target", rng(before, before.Add(8*time.Second)),
		"--reference", rng(before.Add(-10*time.Second), before), "--json")
	if code != 0 {
		t.Fatalf("diff: exit %d %s", code, errOut)
	}
	var d struct {
		Ranked []struct {
			Name string
			EMD  float64
		}
	}
	if err := json.Unmarshal([]byte(out3), &d); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, m := range d.Ranked {
		if i < 5 {
			names = append(names, m.Name)
		}
	}
	t.Logf("top metrics: %v", names)
	// Among the top five, as in session 2: the machine's other syscalls and
	// allocations can move as much in the same seconds (quiet CI runs
	// ranked syscall latency first, and kmem inter-arrival first with block
	// I/O fifth); ranking the workload's own metric first is issue 6's open
	// work.
	io := false
	for _, n := range names {
		io = io || strings.Contains(n, "blio") || strings.Contains(n, "block")
	}
	if !io {
		t.Errorf("no block I/O metric among the top five: %v", names)
	}
}

// recordDirectWrite records with 1 s epochs and the budget off (a vital
// shed on a loaded machine would hide the workload the analysis must
// name), lets quiet epochs commit one by one, then runs the direct_write
// workload for seconds; the recorder is stopped when the test ends.
func recordDirectWrite(t *testing.T, quiet, seconds int) (bin, dir string, r *recording, began, ended time.Time) {
	t.Helper()
	bin = testutil.BuildHolter(t)
	work := testutil.BuildWorkload(t, "direct_write")
	dir = t.TempDir()
	r = startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--budget", "off")
	t.Cleanup(func() { r.cmd.Process.Kill(); r.cmd.Wait() })
	r.waitEach(t, quiet)
	began, ended = directWrite(t, work, seconds)
	return bin, dir, r, began, ended
}

// directWrite runs the direct_write workload for the given seconds on a
// disk (testutil.BlockDir: t.TempDir may be a tmpfs without block I/O) and
// returns when it began and ended.
func directWrite(t *testing.T, work string, seconds int) (began, ended time.Time) {
	t.Helper()
	began = time.Now()
	if out, err := exec.Command(work, filepath.Join(testutil.BlockDir(t), "data"), fmt.Sprint(seconds)).CombinedOutput(); err != nil {
		t.Fatalf("workload: %v\n%s", err, out)
	}
	return began, time.Now()
}

// waitRecorded waits until the store holds an epoch that starts after ts,
// so every epoch holding ts is committed: counting commits is not enough
// when the recorder is behind, and a slow commit stretches its epoch.
func waitRecorded(t *testing.T, bin, dir string, ts time.Time) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, errOut, code := runHolter(t, bin, "query", "--data", dir, "--format", "csv",
			fmt.Sprintf("SELECT count(*) FROM epochs WHERE start_ns > %d", ts.UnixNano()))
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if n, err := strconv.Atoi(lines[len(lines)-1]); code == 0 && err == nil && n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no epoch starting after %s recorded: exit %d %s%s", ts.Format(time.RFC3339Nano), code, out, errOut)
		}
		time.Sleep(time.Second)
	}
}

// waitEach waits for n epochs one at a time, each within two minutes: a
// loaded machine starts the recorder and commits slowly, and a commit
// stretches its epoch.
func (r *recording) waitEach(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-r.committed:
		case <-time.After(2 * time.Minute):
			t.Fatalf("only %d of %d epochs committed; log:\n%s", i, n, r.log)
		}
	}
}

// waitNewEpochs waits for n epochs committed from now on: those reported
// while the caller was busy are passed over, so the store holds every epoch
// of what the caller just did.
func (r *recording) waitNewEpochs(t *testing.T, n int) {
	t.Helper()
	for {
		select {
		case <-r.committed:
			continue
		default:
		}
		break
	}
	r.waitEach(t, n)
}

// TestRunCatalogFindsThePlantedAnomaly adds runs of a parameterised
// workload to the catalog through a running recorder: sixteen pairs differing
// only in sleep (0 → 2 ms), one of which secretly sleeps 40 ms. holter runs
// reports that run against its reference with p <= 0.05.
func TestRunCatalogFindsThePlantedAnomaly(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildHolter(t)
	work := testutil.BuildWorkload(t, "param_work")
	dir := t.TempDir()
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0")
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	r.waitEpochs(t, 1)
	file := filepath.Join(t.TempDir(), "f")
	for rep := 0; rep < 16; rep++ {
		for _, sleep := range []string{"0", "2"} {
			actual := sleep
			if rep == 3 && sleep == "2" {
				actual = "40" // the planted anomaly
			}
			_, errOut, code := runHolter(t, bin, "run", "--data", dir, "--param", "sleep="+sleep, "--param", "rep="+string(rune('a'+rep)),
				"--perf-regex", `ops/s: ([0-9.]+)`, "--", work, file, "30", actual)
			if code != 0 {
				t.Fatalf("run: exit %d %s", code, errOut)
			}
		}
	}
	res, out := holterRuns(t, bin, dir)
	if len(res.Runs) != 32 {
		t.Fatalf("%d runs in the catalog", len(res.Runs))
	}
	found := false
	for _, a := range res.Anomalies {
		t.Logf("anomaly: %s against %s, p %.4f, metrics %v", a.Target, a.Reference, a.PValue, a.Metrics)
		found = found || a.Target == "r8" && a.PValue <= 0.05
	}
	if !found {
		t.Errorf("the planted anomaly r8 was not found:\n%s", out)
	}
	text, _, _ := runHolter(t, bin, "runs", "--data", dir)
	t.Log(text)
}

// reportFinding is the part of a finding in `holter findings --json` the
// tests read.
type reportFinding struct {
	Rule, Subject, Summary string
	StartNs                int64 `json:"start_ns"`
	EndNs                  int64 `json:"end_ns"`
	Severity               float64
	Processes              []struct {
		Pid  int
		Comm string
	}
	Culprit *struct {
		Pid            int
		Comm, Function string
	}
	Evidence []struct{ Name, Relation string }
}

// reportFindings are the findings of every incident of `holter findings
// --json`.
func reportFindings(t *testing.T, out string) []reportFinding {
	t.Helper()
	var rep struct {
		Incidents []struct{ Findings []reportFinding }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("holter findings --json: %v\n%s", err, out)
	}
	var fs []reportFinding
	for _, in := range rep.Incidents {
		fs = append(fs, in.Findings...)
	}
	return fs
}

// runsResult is the part of `holter runs --json` the tests read.
type runsResult struct {
	Runs      []struct{ ID string }
	Anomalies []struct {
		Target, Reference string
		PValue            float64
		Metrics           []struct {
			Name                string
			EMD, Noise, Score   float64
			TargetN, ReferenceN int
		}
		Error string
	}
	CatalogError string `json:"catalog_error"`
}

// holterRuns runs `holter runs --json` on dir and returns its answer, and
// the text of it.
func holterRuns(t *testing.T, bin, dir string, args ...string) (runsResult, string) {
	t.Helper()
	out, errOut, code := runHolter(t, bin, append([]string{"runs", "--data", dir, "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("runs: exit %d %s", code, errOut)
	}
	var res runsResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("runs --json: %v\n%s", err, out)
	}
	return res, out
}

// TestRule10ExitAndKillOnARealRecording: a shell loop that exits when told
// to, and a process that spins until it is sent SIGKILL, both stop showing
// vital signs; rule 10 names the second as killed, and says nothing of the
// first, which died as it meant to (its exit_group, which the recorder
// samples at entry since the call never returns): a process exiting is not
// a problem.
func TestRule10ExitAndKillOnARealRecording(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildHolter(t)
	spin := testutil.BuildWorkload(t, "cpu_spin")
	dir := t.TempDir()
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--budget", "off")
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	r.waitEpochs(t, 2)
	start := time.Now()
	stop := filepath.Join(t.TempDir(), "stop")
	exited := exec.Command("sh", "-c", `while [ ! -e "$1" ]; do :; done`, "sh", stop)
	killed := exec.Command(spin, "600")
	for _, c := range []*exec.Cmd{exited, killed} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer c.Process.Kill()
	}
	// Seen in rule 10's GoneAfter (3) intervals running, counted in
	// epochs: a loaded machine commits them late.
	r.waitNewEpochs(t, 5)
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	killed.Process.Signal(syscall.SIGKILL)
	if err := exited.Wait(); err != nil {
		t.Fatalf("the shell loop: %v", err)
	}
	killed.Wait()
	waitRecorded(t, bin, dir, time.Now().Add(time.Second))
	out, errOut, code := runHolter(t, bin, "findings", "--data", dir, "--range",
		start.UTC().Format(time.RFC3339Nano)+"/"+time.Now().UTC().Format(time.RFC3339Nano), "--json")
	if code != 0 {
		t.Fatalf("findings: exit %d %s", code, errOut)
	}
	cause := map[int]string{}
	for _, f := range reportFindings(t, out) {
		if f.Rule != "rule10-died" {
			continue
		}
		for _, p := range f.Processes {
			if p.Pid == exited.Process.Pid || p.Pid == killed.Process.Pid {
				cause[p.Pid] = f.Summary
			}
		}
	}
	t.Logf("exited %d: %q", exited.Process.Pid, cause[exited.Process.Pid])
	t.Logf("killed %d: %q", killed.Process.Pid, cause[killed.Process.Pid])
	if c, ok := cause[exited.Process.Pid]; ok {
		t.Errorf("the process that returned from main is a finding: %q", c)
	}
	if !strings.Contains(cause[killed.Process.Pid], "SIGKILL") {
		t.Errorf("the process killed: %q, want SIGKILL", cause[killed.Process.Pid])
	}
	if t.Failed() {
		q, _, _ := runHolter(t, bin, "query", "--data", dir, fmt.Sprintf(`SELECT epoch, pid, vital, count(*), max(signal), max(target_pid), max(syscall_nr)
			FROM samples WHERE pid IN (%d, %d) OR target_pid IN (%d, %d) GROUP BY ALL ORDER BY 1, 2`,
			exited.Process.Pid, killed.Process.Pid, exited.Process.Pid, killed.Process.Pid))
		t.Logf("findings:\n%s\nsamples:\n%s", out, q)
	}
}

// onlineDriftOverWrites: the recorder's own analysis, while it records
// with 1 s epochs, checks each recent stretch against the ones before it:
// a reference-drift finding over the writes appears in holter findings,
// stored by the recorder, with a block I/O metric among its top five.
func onlineDriftOverWrites(t *testing.T, bin, dir string, r *recording, began, ended time.Time) {
	type finding = reportFinding
	// The workload's block I/O must be among the metrics that differ most
	// in some drift over it: in its evidence (the top five), with a score
	// near the top one's. Its rates of block I/O, memory, CPU and system
	// calls rise together, so which ranks first is a matter of hundredths;
	// on a busy machine another process's syscall latency can change as
	// much in the same seconds, and the first check over the workload's
	// onset may rank it lower than a later one.
	isIO := func(name string) bool { return strings.Contains(name, "blio") || strings.Contains(name, "block") }
	hasIO := func(f finding) bool {
		var top float64
		for i, e := range f.Evidence {
			var score float64
			if _, err := fmt.Sscanf(e.Relation, "score %g", &score); err != nil {
				t.Fatalf("drift evidence %+v: %v", e, err)
			}
			if i == 0 {
				top = score
			}
			if isIO(e.Name) && score >= 0.85*top {
				return true
			}
		}
		return isIO(f.Subject)
	}
	var drift []finding
	io := false
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline) && !io; time.Sleep(2 * time.Second) {
		out, errOut, code := runHolter(t, bin, "findings", "--data", dir, "--since", "5m", "--json")
		if code != 0 {
			t.Fatalf("findings: exit %d %s", code, errOut)
		}
		drift = drift[:0]
		// Only the recorder's online analysis stores reference drifts
		// (a report's own comparison of its range is a "diff").
		for _, f := range reportFindings(t, out) {
			if f.Rule == findings.DriftRule && f.StartNs < ended.UnixNano() && f.EndNs > began.UnixNano() {
				drift = append(drift, f)
				io = io || hasIO(f)
			}
		}
		if len(drift) > 0 && time.Now().After(ended.Add(40*time.Second)) {
			break // every check over the workload has been made
		}
	}
	if len(drift) == 0 {
		t.Fatalf("no reference-drift finding over the workload; recorder log:\n%s", r.log)
	}
	for _, f := range drift {
		t.Logf("%s: %s (evidence %+v)", f.Subject, f.Summary, f.Evidence)
	}
	if !io {
		// Each drift's metrics as holter diff ranks them (by EMD, not
		// beyond the reference's variation), to see where block I/O
		// stood.
		for _, f := range drift {
			rng := func(a, b int64) string { return fmtNs(a) + "/" + fmtNs(b) }
			out, errOut, _ := runHolter(t, bin, "diff", "--data", dir, "--top", "25",
				"--target", rng(f.StartNs, f.EndNs), "--reference", rng(f.StartNs-3*(f.EndNs-f.StartNs), f.StartNs))
			t.Logf("%s:\n%s%s", f.Subject, out, errOut)
		}
		t.Errorf("no drift over the workload has a block I/O metric among its top five within 15%% of the top one's score")
	}
}
