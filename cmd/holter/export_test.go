package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestExportPprof records a spinning workload and exports the range's cpu
// samples with holter export pprof: go tool pprof reads the profile, its
// top function by own weight is the flame graph's (/api/flame JSON for the
// same range) heaviest leaf, with the same weight, and the workload's
// executable is a mapping carrying its build id. The folded export's
// stacks and weights are the flame graph's.
func TestExportPprof(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	gotool := testutil.RequireTool(t, "go")
	bin := testutil.BuildHolter(t)
	spin := testutil.BuildWorkload(t, "cpu_spin")
	dir := t.TempDir()
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--vitals", "cpu", "--budget", "off")
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	r.waitEpochs(t, 1)
	from := time.Now().UnixNano()
	if out, err := exec.Command(spin, "4").CombinedOutput(); err != nil {
		t.Fatalf("cpu_spin: %v %s", err, out)
	}
	// Every epoch holding the spin is committed before the flame graph
	// and the profile are read: the commits reported while it ran may be
	// of earlier epochs when the recorder lags.
	waitRecorded(t, bin, dir, time.Now())
	to := time.Now().UnixNano()
	rng := fmt.Sprintf("%d/%d", from, to)

	s := recorderSession(t, bin, dir)
	code, body := s.get(t, fmt.Sprintf("/api/flame?vital=cpu&comm=cpu_spin&from=%d&to=%d", from, to))
	if code != 200 {
		t.Fatalf("/api/flame: %d %s", code, body)
	}
	var flame server.FlameAnswer
	if err := json.Unmarshal(body, &flame); err != nil {
		t.Fatal(err)
	}
	leaf := map[string]float64{}
	for _, st := range flame.Stacks {
		leaf[st.Frames[len(st.Frames)-1]] += math.Round(st.Weight)
	}
	top, topW := "", 0.0
	for f, w := range leaf {
		if w > topW || w == topW && f < top {
			top, topW = f, w
		}
	}
	if !strings.Contains(top, "holter_cpu_spin") {
		t.Errorf("the flame graph's heaviest leaf is %q, not the workload's spinning function", top)
	}

	prof := filepath.Join(t.TempDir(), "cpu.pb.gz")
	if _, errOut, code := runHolter(t, bin, "export", "pprof", "--data", dir, "--range", rng, "--vital", "cpu", "--comm", "cpu_spin", "--out", prof); code != 0 {
		t.Fatalf("export pprof: exit %d: %s", code, errOut)
	}
	out, err := exec.Command(gotool, "tool", "pprof", "-top", "-nodecount=5", "-symbolize=none", prof).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, out)
	}
	// The first row after the header: flat flat% sum% cum cum% name.
	lines := strings.Split(string(out), "\n")
	var first []string
	for i, l := range lines {
		if strings.Contains(l, "flat%") && i+1 < len(lines) {
			first = strings.Fields(lines[i+1])
			break
		}
	}
	if len(first) < 6 {
		t.Fatalf("go tool pprof -top:\n%s", out)
	}
	name := strings.Join(first[5:], " ")
	if name != top {
		t.Errorf("pprof's top function %q, the flame graph's heaviest leaf %q (%v µs)\n%s", name, top, topW, out)
	}
	flat, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSuffix(first[0], "us"), "ms"), 64)
	if strings.HasSuffix(first[0], "ms") {
		flat *= 1000
	} else if strings.HasSuffix(first[0], "s") && !strings.HasSuffix(first[0], "us") {
		flat, _ = strconv.ParseFloat(strings.TrimSuffix(first[0], "s"), 64)
		flat *= 1e6
	}
	if err != nil || math.Abs(flat-topW) > 0.01*topW+1 {
		t.Errorf("pprof's top flat %s, the flame graph's %v µs", first[0], topW)
	}
	raw, err := exec.Command(gotool, "tool", "pprof", "-raw", "-symbolize=none", prof).CombinedOutput()
	if err != nil || !strings.Contains(string(raw), spin) {
		t.Errorf("pprof -raw has no mapping of %s: %v\n%s", spin, err, raw)
	}
	if !regexp.MustCompile(regexp.QuoteMeta(spin) + ` [0-9a-f]{40} \[FN\]`).Match(raw) {
		t.Errorf("the workload's mapping carries no build id:\n%s", raw)
	}

	folded := filepath.Join(t.TempDir(), "cpu.folded")
	if _, errOut, code := runHolter(t, bin, "export", "folded", "--data", dir, "--range", rng, "--vital", "cpu", "--comm", "cpu_spin", "--out", folded); code != 0 {
		t.Fatalf("export folded: exit %d: %s", code, errOut)
	}
	fb, _ := os.ReadFile(folded)
	want := map[string]int64{}
	for _, st := range flame.Stacks {
		if w := int64(math.Round(st.Weight)); w > 0 {
			want[strings.Join(st.Frames, ";")] += w
		}
	}
	got := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(fb)), "\n") {
		i := strings.LastIndexByte(line, ' ')
		w, err := strconv.ParseInt(line[i+1:], 10, 64)
		if i < 0 || err != nil {
			t.Fatalf("folded line %q", line)
		}
		got[line[:i]] += w
	}
	if len(got) != len(want) {
		t.Errorf("folded: %d stacks, the flame graph %d", len(got), len(want))
	}
	for k, w := range want {
		if got[k] != w && !strings.Contains(k, ";") {
			continue
		}
		if got[k] != w {
			t.Errorf("folded %q = %d, flame graph %d", k, got[k], w)
			break
		}
	}
	if _, errOut, code := runHolter(t, bin, "export", "pprof", "--data", dir, "--out", prof, "--range", "-1m/now", "--vital", "heart"); code == 0 || !bytes.Contains([]byte(errOut), []byte("heart")) {
		t.Errorf("export of an unknown vital: exit %d %s", code, errOut)
	}
	t.Logf("top %q %v µs of %v", top, topW, flame.Total)
}
