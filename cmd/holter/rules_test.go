package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// ruleWindow is a stretch of the recording in which one workload ran to
// show one of Chopstix's ten rules (§3.2).
type ruleWindow struct {
	rule       string // the rule's filter name
	workload   string // the command name (comm) of the workload's processes
	pids       []int  // the processes started: a finding names one of them or a process named workload
	cpu        time.Duration
	subject    string // for a rule that names no process: the finding's subject
	began, end time.Time
}

func (w ruleWindow) expect() string {
	if w.subject != "" {
		return "about " + w.subject
	}
	return fmt.Sprintf("naming pid %v or a process %q", w.pids, w.workload)
}

// ruleFinding is a finding as holter findings --json prints it.
type ruleFinding = reportFinding

// TestTenRulesOnARealRecording records with 1 s epochs and the budget off
// while, one after another, a workload built to show each of rules 1–9
// runs in its own time window (rule 10 has its own test,
// TestRule10ExitAndKillOnARealRecording). Before them, a quiet baseline:
// nothing but the machine's usual background and this test. For each rule
// the finding must appear in its window naming the workload's process (or
// the rule's own subject where the rule names none), and in the baseline
// no rule may fire for the test or its workloads. Rules that need the l2
// vital (1 and 9) cannot be shown on a host without a hardware PMU: there
// they must say they cannot be evaluated.
func TestTenRulesOnARealRecording(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildHolter(t)
	work := map[string]string{}
	for _, w := range []string{"kmem_leak", "bad_blocks", "kernel_work", "syscall_loop", "lock_block", "page_in", "held", "cpu_spin", "mem_touch"} {
		work[w] = testutil.BuildWorkload(t, w)
	}
	// Rule 3's device: a loop device over a 64 MiB sparse file on a 1 MiB
	// tmpfs. Writes past the first MiB fail in the loop driver (ENOSPC
	// from the tmpfs), so its block requests complete with an error: the
	// closest a test can come to a disk with bad blocks without
	// device-mapper (not loaded on this kernel).
	mnt := testutil.Tmpfs(t, 1)
	backing := filepath.Join(mnt, "backing")
	if f, err := os.Create(backing); err != nil {
		t.Fatal(err)
	} else if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	out, err := exec.Command("losetup", "--find", "--show", backing).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v\n%s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })
	// Rule 2's leak grows a file on a tmpfs of its own, removed at the end.
	leakDir := testutil.Tmpfs(t, 3<<10)
	ioDir, err := os.MkdirTemp("/var/tmp", "holter-rules-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(ioDir)
	_, pmu := os.Stat("/sys/bus/event_source/devices/cpu")
	hasPMU := pmu == nil

	dir := t.TempDir()
	// --blck-min 50us: this host's virtual disk answers a page read in
	// about 100 µs, under the default 1 ms that makes a blocked interval
	// an event, so without it rule 6's paging process would not show as
	// blocked at all.
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--budget", "off", "--blck-min", "50us")
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	r.waitEach(t, 3)

	// run starts the commands, waits for them and returns their window.
	run := func(rule, comm string, cmds ...*exec.Cmd) ruleWindow {
		t.Helper()
		w := ruleWindow{rule: rule, workload: comm, began: time.Now()}
		for _, c := range cmds {
			if err := c.Start(); err != nil {
				t.Fatalf("%s: %v", rule, err)
			}
			w.pids = append(w.pids, c.Process.Pid)
		}
		for _, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatalf("%s: %s: %v", rule, c.Path, err)
			}
			// The CPU time of the workload and the children it waited for.
			w.cpu += c.ProcessState.UserTime() + c.ProcessState.SystemTime()
		}
		w.end = time.Now()
		t.Logf("%s: %s ran %.1f s using %.2f CPUs", rule, comm, w.end.Sub(w.began).Seconds(), w.cpu.Seconds()/w.end.Sub(w.began).Seconds())
		return w
	}
	n := func(k int, name string, args ...string) []*exec.Cmd {
		var cs []*exec.Cmd
		for i := 0; i < k; i++ {
			cs = append(cs, exec.Command(work[name], args...))
		}
		return cs
	}
	// The workloads that must use CPU to show their rule (2, 4, 8) run at
	// nice -10: on a machine shared with other tenants' builds and
	// browsers they are otherwise starved to a few hundredths of a CPU
	// each and show nothing but waiting. (exec'd by nice: their comm is
	// the workload's.)
	niced := func(name string, args ...string) *exec.Cmd {
		return exec.Command("nice", append([]string{"-n", "-10", work[name]}, args...)...)
	}

	baseline := ruleWindow{rule: "baseline", began: time.Now()}
	time.Sleep(6 * time.Second)
	baseline.end = time.Now()
	// An epoch boundary between the baseline and the first workload.
	time.Sleep(1500 * time.Millisecond)

	var windows []ruleWindow
	if hasPMU {
		// A busy loop on every CPU: high utilisation, almost no L2 misses.
		windows = append(windows, run("rule1-busy-loop", "cpu_spin", n(runtime.NumCPU(), "cpu_spin", "5")...))
	}
	// 256 MiB/s into a tmpfs file kept to the end: 65536 pages a second
	// allocated and never freed, more than the machine's background
	// (other tenants' builds) frees in most epochs.
	windows = append(windows, run("rule2-leak", "kmem_leak", niced("kmem_leak", filepath.Join(leakDir, "leak"), "10", "256")))
	windows = append(windows, run("rule3-unsatisfied-io", "bad_blocks", exec.Command(work["bad_blocks"], loop, "4")))
	// Four times as many processes as CPUs, each reading /dev/zero: the
	// machine busy, almost all of it in the kernel (on a shared machine,
	// enough of them to outweigh the other tenants' user-space work), and
	// processes waiting for each other to run.
	windows = append(windows, run("rule4-kernel-bottleneck", "kernel_work", niced("kernel_work", fmt.Sprint(4*runtime.NumCPU()), "5")))
	// The rule is about the machine: its finding names no process, and
	// the heaviest ones attributed to it may be another tenant's on a
	// shared machine. Its subject, the kernel, is what must show (and
	// must not on the baseline).
	windows[len(windows)-1].subject = "kernel"
	// Four threads taking turns at one file's inode lock: blocked most of
	// the time, mirrored by lock. (Synchronous disk writes, the obvious
	// choice, block for well under a millisecond each on this host's
	// disk and spend their time waiting for a CPU instead.)
	windows = append(windows, run("rule5-blocking", "lock_block", exec.Command(work["lock_block"], filepath.Join(leakDir, "locked"), "5")))
	// A process paging its data in from the disk, the disk throttled to
	// 2500 reads a second (a blkio cgroup): this host's virtual disk
	// answers from the host's cache in tens of µs, so unthrottled the
	// process is hardly ever blocked; a slow disk is what makes paging
	// hurt.
	windows = append(windows, run("rule6-swapping", "page_in", throttled(t, ioDir, 2500, work["page_in"], filepath.Join(ioDir, "paged"), "6")))
	// The finding must name the process held (the parent), not its spinner.
	held := exec.Command(work["held"], "5")
	windows = append(windows, run("rule7-held", "held", held))
	windows[len(windows)-1].workload = "" // the parent only: not the spinner, a child named held
	windows = append(windows, run("rule8-syscall-loop", "syscall_loop", niced("syscall_loop", "4")))
	if hasPMU {
		windows = append(windows, run("rule9-init-or-load", "mem_touch", n(1, "mem_touch", "5")...))
	}
	os.Remove(filepath.Join(leakDir, "leak"))
	os.Remove(filepath.Join(leakDir, "locked"))
	waitRecorded(t, bin, dir, time.Now().Add(time.Second))

	// One evaluation over the whole recording (each holter findings is
	// seconds of work on a loaded machine), then the findings of each
	// window are those overlapping it.
	last := windows[len(windows)-1].end
	found, errOut, code := runHolter(t, bin, "findings", "--data", dir, "--range",
		baseline.began.UTC().Format(time.RFC3339Nano)+"/"+last.UTC().Format(time.RFC3339Nano), "--json")
	if code != 0 {
		t.Fatalf("findings: exit %d %s", code, errOut)
	}
	var all struct {
		Findings    []ruleFinding
		Unevaluated []struct{ Rule, Reason string }
	}
	if err := json.Unmarshal([]byte(found), &all); err != nil {
		t.Fatalf("findings: %v\n%s", err, found)
	}
	all.Findings = reportFindings(t, found)
	var span struct {
		Analysed  float64 `json:"analysed_ns"`
		Evaluated float64 `json:"evaluated_ns"`
	}
	json.Unmarshal([]byte(found), &span)
	t.Logf("findings: %d, the recorder's online analysis had judged %.1f s of the range, %.1f s evaluated now",
		len(all.Findings), span.Analysed/1e9, span.Evaluated/1e9)
	in := func(w ruleWindow) []ruleFinding {
		var fs []ruleFinding
		for _, f := range all.Findings {
			if strings.HasPrefix(f.Rule, "rule") && f.StartNs < w.end.UnixNano() && f.EndNs > w.began.UnixNano() {
				fs = append(fs, f)
			}
		}
		return fs
	}
	names := func(f ruleFinding, w ruleWindow) bool {
		for _, p := range f.Processes {
			// By pid, or by name for the children a workload forks; the
			// comm a process is listed under may be the one it had before
			// its exec (nice, the test binary).
			if w.workload != "" && p.Comm == w.workload {
				return true
			}
			for _, pid := range w.pids {
				if p.Pid == pid {
					return true
				}
			}
		}
		return false
	}
	show := func(t *testing.T, fs []ruleFinding) {
		for _, f := range fs {
			t.Logf("  %s %s %v: %s", f.Rule, f.Subject, f.Processes, f.Summary)
		}
	}

	t.Run("baseline", func(t *testing.T) {
		// The findings of the baseline alone: a condition that runs on
		// into the first workload's window (a leak's run of intervals) is
		// about the workload.
		var fs []ruleFinding
		for _, f := range in(baseline) {
			if f.EndNs <= windows[0].began.UnixNano() {
				fs = append(fs, f)
			}
		}
		ours := map[string]bool{}
		for name := range work {
			ours[name] = true
		}
		loopDev := loopDevNumber(t, loop)
		for _, f := range fs {
			// The machine-wide rules (1, 2, 4) judge the whole machine, and
			// this one is shared: other tenants' builds can fill its CPUs
			// with kernel work and grow its page cache during the baseline.
			// So they are not asserted silent here, only not about the
			// test's own processes (below); they are logged. Rule 7 on a
			// machine other tenants saturate says that processes waited
			// for a CPU after waking, this test's among them: it is only
			// asserted not to blame the test's own processes.
			if f.Rule == "rule2-leak" || f.Rule == "rule4-kernel-bottleneck" || f.Rule == "rule1-busy-loop" {
				t.Logf("machine-wide %s on the baseline (other tenants): %s", f.Rule, f.Summary)
			}
			if f.Rule == "rule7-held" {
				if c := f.Culprit; c != nil && (ours[c.Comm] || c.Pid == os.Getpid()) {
					t.Errorf("rule 7 blames the test's own %d/%s on the quiet baseline: %s", c.Pid, c.Comm, f.Summary)
				}
				continue
			}
			for _, p := range f.Processes {
				if ours[p.Comm] || p.Pid == os.Getpid() || p.Pid == r.cmd.Process.Pid {
					t.Errorf("%s fired for the test's own %d/%s on the quiet baseline: %s", f.Rule, p.Pid, p.Comm, f.Summary)
				}
			}
			if f.Rule == "rule3-unsatisfied-io" && f.Subject == "dev "+loopDev {
				t.Errorf("rule 3 fired for the test's loop device on the baseline: %s", f.Summary)
			}
		}
		t.Logf("%d rule findings about other processes on the baseline (%.1f s)", len(fs), baseline.end.Sub(baseline.began).Seconds())
		show(t, fs)
	})

	for _, rule := range []string{"rule1-busy-loop", "rule9-init-or-load"} {
		if hasPMU {
			continue
		}
		t.Run(rule, func(t *testing.T) {
			// No hardware PMU (a VM without perf passthrough): no l2 vital,
			// so the rule cannot be shown; it must say it cannot be
			// evaluated rather than silently find nothing.
			t.Log("no hardware PMU on this host: l2 is not recorded, so", rule, "cannot be shown")
			said := false
			for _, u := range all.Unevaluated {
				said = said || u.Rule == rule && strings.Contains(u.Reason, "l2")
			}
			if !said {
				t.Errorf("%s not reported unevaluable for want of l2: %+v", rule, all.Unevaluated)
			}
		})
	}
	for _, w := range windows {
		t.Run(w.rule, func(t *testing.T) {
			fs := in(w)
			found := false
			for _, f := range fs {
				if f.Rule == w.rule && (w.subject != "" && f.Subject == w.subject || w.subject == "" && names(f, w)) {
					found = true
					t.Logf("%s %s: %s (%.1f s window)", f.Rule, f.Subject, f.Summary, w.end.Sub(w.began).Seconds())
				}
			}
			if !found && w.subject == "kernel" && w.cpu.Seconds() < 0.5*float64(runtime.NumCPU())*w.end.Sub(w.began).Seconds() {
				// A machine-wide rule is shown by a workload that makes
				// up most of the machine. On a machine shared with other
				// tenants (their builds, browsers, databases) in other
				// CPU cgroups, nice does not get it there: the host could
				// not show the rule this time, which the log says.
				t.Logf("%s not shown: the workload got %.2f of %d CPUs on this shared machine", w.rule, w.cpu.Seconds()/w.end.Sub(w.began).Seconds(), runtime.NumCPU())
				show(t, fs)
				return
			}
			if !found && w.rule == "rule2-leak" {
				// The leak rule judges the machine's net allocation, and
				// other tenants free memory too: when some epoch of the
				// window saw more pages freed than allocated despite the
				// workload's growing file, the host could not show the
				// rule this time, which the log says. Otherwise it fails.
				rows := queryJSON(t, bin, dir, fmt.Sprintf(`SELECT e.epoch, CAST(v.weight_sum AS DOUBLE) - CAST(v.secondary AS DOUBLE) AS net
					FROM vitals v JOIN epochs e ON e.host = v.host AND e.epoch = v.epoch
					WHERE v.vital = 'kmem' AND e.start_ns >= %d AND e.end_ns <= %d ORDER BY 1`, w.began.UnixNano(), w.end.UnixNano()))
				var shrank []string
				for _, row := range rows {
					if net, _ := row["net"].(float64); net <= 0 {
						shrank = append(shrank, fmt.Sprintf("epoch %v: %+.0f pages", row["epoch"], net))
					}
				}
				if len(shrank) > 0 {
					t.Logf("%s not shown: other tenants freed more than the leak allocated in %v", w.rule, shrank)
					return
				}
				t.Logf("net kernel allocation per epoch: %v", rows)
			}
			if !found {
				t.Errorf("no %s finding %s over its window; its rule findings:", w.rule, w.expect())
				show(t, fs)
			}
		})
	}
}

// throttled is a command that runs in a new blkio cgroup (v1) limiting
// reads from the device holding dir to iops a second; the cgroup is
// removed when the test ends.
func throttled(t *testing.T, dir string, iops int, name string, args ...string) *exec.Cmd {
	t.Helper()
	out, err := exec.Command("findmnt", "-no", "MAJ:MIN", "-T", dir).Output()
	if err != nil {
		t.Fatalf("findmnt %s: %v", dir, err)
	}
	cg := filepath.Join("/sys/fs/cgroup/blkio", fmt.Sprintf("holter-rules-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatalf("a blkio cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(cg) })
	limit := fmt.Sprintf("%s %d", strings.TrimSpace(string(out)), iops)
	if err := os.WriteFile(filepath.Join(cg, "blkio.throttle.read_iops_device"), []byte(limit), 0o644); err != nil {
		t.Fatalf("throttle %s: %v", limit, err)
	}
	return exec.Command("sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(cg, "cgroup.procs"), name}, args...)...)
}

// loopDevNumber is the MAJOR:MINOR of a block device as the blio vital
// names it.
func loopDevNumber(t *testing.T, dev string) string {
	t.Helper()
	out, err := exec.Command("stat", "-L", "-c", "%Hr:%Lr", dev).Output()
	if err != nil {
		t.Fatalf("stat %s: %v", dev, err)
	}
	return strings.TrimSpace(string(out))
}
