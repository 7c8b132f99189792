package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/incident"
	"github.com/holter-dev/holter/internal/planted"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestPlantedIncidentsRankFirst plants three incidents of bench/incidents'
// suite — a busy loop, threads contending for a mutex, a process waiting
// on a slow network peer — one after another on a host the test makes busy
// (processes starting and stopping, an HTTP service answering, periodic
// synced writes; other tests and builds may share it too), each with a
// culprit function named anew, and asks holter findings over each one's
// time: the first incident must name the culprit.
func TestPlantedIncidentsRankFirst(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "gcc")
	testutil.RequireTool(t, "python3")
	testutil.RequireTool(t, "curl")
	bin := testutil.BuildHolter(t)
	dir, work := t.TempDir(), testutil.BlockDir(t)
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--budget", "off")
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	stop, err := planted.Background(work)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	r.waitEach(t, 15) // the background is recorded as history first
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	for _, c := range []planted.Class{planted.CPUHog, planted.LockStorm, planted.SlowPeer} {
		t.Run(string(c), func(t *testing.T) {
			in, err := planted.New(c, rng, planted.Options{Dir: t.TempDir(), DataDir: work, Seconds: 15})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			start := time.Now()
			if err := in.Run(); err != nil {
				t.Fatal(err)
			}
			end := time.Now()
			if err := planted.WaitAnalysed(context.Background(), bin, dir, end, 5*time.Minute); err != nil {
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
			rank, _ := planted.Rank(rep.Incidents, in.Culprit)
			var lines []string
			for _, i := range rep.Incidents {
				if i.Rank > 5 {
					break
				}
				lines = append(lines, fmt.Sprintf("  %d. [%.2f %s] %s", i.Rank, i.Severity, i.Resource, i.Summary))
			}
			t.Logf("%s in %s (%s): rank %d\n%s", c, in.Culprit, in.Params, rank, strings.Join(lines, "\n"))
			if rank != 1 {
				t.Errorf("the culprit %s is ranked %d, want 1", in.Culprit, rank)
			}
		})
	}
}
