package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/incident"
	"github.com/holter-dev/holter/internal/planted"
	"github.com/holter-dev/holter/internal/symbol"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestPlantedIncidentsRankFirst plants three incidents of bench/incidents'
// suite — a busy loop, threads contending for a mutex, a process waiting
// on a slow network peer — one after another on a host the test makes busy
// (processes starting and stopping, an HTTP service answering, periodic
// synced writes; other tests and builds may share it too), each with a
// culprit function named anew, and asks holter findings over each one's
// time: the first incident must name the culprit, leaving out incidents
// about only other tests' processes.
func TestPlantedIncidentsRankFirst(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "gcc")
	testutil.RequireTool(t, "python3")
	testutil.RequireTool(t, "curl")
	bin := testutil.BuildHolter(t)
	dir, work := t.TempDir(), testutil.BlockDir(t)
	// Epochs of 2 s: the recorder keeps up on a loaded machine where 1 s
	// epochs fall behind their commits.
	r := startRecord(t, bin, "--data", dir, "--epoch", "2s", "--api", "127.0.0.1:0", "--budget", "off")
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	stop, err := planted.Background(work)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	others := watchOthers(os.Getpid())
	defer others.close()
	r.waitEach(t, 10) // the background is recorded as history first
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	for _, c := range []planted.Class{planted.CPUHog, planted.LockStorm, planted.SlowPeer} {
		t.Run(string(c), func(t *testing.T) {
			in, err := planted.New(c, rng, planted.Options{Dir: t.TempDir(), DataDir: work, Seconds: 16})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			start := time.Now()
			if err := in.Run(); err != nil {
				t.Fatal(err)
			}
			end := time.Now()
			if err := planted.WaitRecorded(context.Background(), bin, dir, end, 3*time.Minute); err != nil {
				t.Fatalf("%v; recorder log:\n%s", err, r.log)
			}
			out, errOut, code := runHolter(t, bin, "findings", "--data", dir, "--json", "--range",
				start.UTC().Format(time.RFC3339Nano)+"/"+end.UTC().Format(time.RFC3339Nano))
			if code != 0 {
				t.Fatalf("findings: exit %d %s", code, errOut)
			}
			var rep incident.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			// The host is shared: incidents about other tests' processes
			// only, or that blame one of them (a run queue that another's
			// build filled, this test's processes among those waiting),
			// are real, but not this test's to rank.
			var ours []incident.Incident
			var lines []string
			for _, i := range rep.Incidents {
				culprit := ""
				if c := i.Culprit; c != nil {
					culprit = fmt.Sprintf(" — culprit %d/%s in %q %v", c.Pid, c.Comm, c.Function, c.User[:min(len(c.User), 4)])
				}
				if len(i.Processes) > 0 && !slices.ContainsFunc(i.Processes, func(p findings.Process) bool { return !others.has(p.Pid) }) ||
					i.Culprit != nil && others.has(i.Culprit.Pid) {
					lines = append(lines, fmt.Sprintf("  %d. (another's) [%.2f %s] %s%s", i.Rank, i.Severity, i.Resource, i.Summary, culprit))
					continue
				}
				ours = append(ours, i)
				lines = append(lines, fmt.Sprintf("  %d. [%.2f %s] %s%s", i.Rank, i.Severity, i.Resource, i.Summary, culprit))
			}
			rank := slices.IndexFunc(ours, func(i incident.Incident) bool { return planted.Names(i, in.Culprit) }) + 1
			t.Logf("%s in %s (%s): rank %d among this test's incidents\n%s", c, in.Culprit, in.Params, rank, strings.Join(lines[:min(len(lines), 8)], "\n"))
			if rank != 1 {
				t.Errorf("the culprit %s is ranked %d among this test's incidents, want 1", in.Culprit, rank)
			}
		})
	}
}

// others are the processes seen running that this test did not start
// (other tests and builds on a shared host), by pid, found by scanning
// /proc every half second.
type others struct {
	mu   sync.Mutex
	pids map[uint32]bool // true: another's
	done chan struct{}
}

func watchOthers(self int) *others {
	o := &others{pids: map[uint32]bool{}, done: make(chan struct{})}
	go func() {
		for {
			o.scan(self)
			select {
			case <-o.done:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return o
}

func (o *others) scan(self int) {
	entries, _ := os.ReadDir("/proc")
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if _, seen := o.pids[uint32(pid)]; err != nil || seen {
			continue
		}
		// A process is the test's when its parents lead to the test.
		ours := false
		for p, hops := pid, 0; p > 1 && hops < 64; hops++ {
			if p == self {
				ours = true
				break
			}
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
			if err != nil {
				break
			}
			parent, err := symbol.StatField(stat, 4)
			if err != nil {
				break
			}
			p = int(parent)
		}
		o.pids[uint32(pid)] = !ours
	}
}

// has says whether pid was seen as another's process; a process never
// seen counts as the test's.
func (o *others) has(pid uint32) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pids[pid]
}

func (o *others) close() { close(o.done) }
