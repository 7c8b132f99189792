package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/testutil"
)

// artifactDir is where a test leaves what a person may want to look at
// (screenshots): $ARTIFACTS/NAME when set, else a directory kept in /tmp.
func artifactDir(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(os.Getenv("ARTIFACTS"), name)
	if os.Getenv("ARTIFACTS") == "" {
		var err error
		if dir, err = os.MkdirTemp("", "holter-"+name+"-"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// requireBrowser fails or skips the test unless node, Chromium and
// ui/node_modules' playwright-core are there.
func requireBrowser(t *testing.T) {
	t.Helper()
	testutil.RequireTool(t, "node")
	testutil.RequireTool(t, "chromium")
	if _, err := os.Stat(filepath.Join(testutil.RepoRoot(), "ui", "node_modules", "playwright-core")); err != nil {
		if testutil.InCI() {
			t.Fatal("ui/node_modules lacks playwright-core, and CI=true forbids skipping (scripts/setup.sh runs npm ci in ui/)")
		}
		t.Skip("ui/node_modules lacks playwright-core: run npm ci in ui/")
	}
}

// runBrowserTests runs the node test script (in ui/) with env added,
// HOLTER_ARTIFACTS naming the directory its screenshots go to.
func runBrowserTests(t *testing.T, script, artifactsName string, env ...string) {
	t.Helper()
	artifacts := artifactDir(t, artifactsName)
	cmd := exec.Command("node", "--test", "--test-concurrency=1", script)
	cmd.Dir = filepath.Join(testutil.RepoRoot(), "ui")
	cmd.Env = append(append(os.Environ(), "HOLTER_ARTIFACTS="+artifacts), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("browser tests:\n%s", out)
	t.Logf("screenshots in %s", artifacts)
	if err != nil {
		t.Fatalf("browser tests failed: %v", err)
	}
}

// TestUIInBrowser records a few 1-second epochs while a spinning and a
// blocking workload run, then drives the UI in headless Chromium
// (ui/test/browser.test.mjs): graphs, overlay, drill-down to a sample's
// stack, flame graphs, top tables. Screenshots are kept as artifacts.
func TestUIInBrowser(t *testing.T) {
	testutil.RequireRoot(t)
	requireBrowser(t)
	bin := testutil.BuildHolter(t)
	spin := testutil.BuildWorkload(t, "cpu_spin")
	block := testutil.BuildWorkload(t, "block_pipe")
	dir := t.TempDir()

	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0",
		"--budget", "off") // the test is of the UI: no vital may be shed while it selects an epoch
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	<-r.started
	var workloads []*exec.Cmd
	for _, w := range []string{spin, block} {
		cmd := exec.Command(w, "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		workloads = append(workloads, cmd)
	}
	defer func() {
		for _, w := range workloads {
			w.Process.Kill()
			w.Wait()
		}
	}()
	r.waitEpochs(t, 5)
	info, ok := readAgentInfo(dir)
	if !ok {
		t.Fatalf("no agent.json in %s", dir)
	}

	// While the recorder holds the store, `holter ui` says where its UI is.
	_, errOut, code := runHolter(t, bin, "ui", "--data", dir, "--api", "127.0.0.1:0")
	if code != 1 || !strings.Contains(errOut, "its UI is at http://"+info.API) {
		t.Errorf("holter ui beside a recorder: exit %d, %s", code, errOut)
	}

	runBrowserTests(t, "test/browser.test.mjs", "ui-browser", "HOLTER_URL=http://"+info.API+"/",
		"HOLTER_CPU_FUNC=holter_cpu_spin", "HOLTER_CPU_COMM=cpu_spin", "HOLTER_BLCK_FUNC=holter_block_on_pipe")

	// Once the recorder stops, `holter ui` serves the stored recording.
	r.cmd.Process.Signal(syscall.SIGINT)
	r.cmd.Wait()
	<-r.done
	ui := exec.Command(bin, "ui", "--data", dir, "--api", "127.0.0.1:0")
	stdout, err := ui.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ui.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { ui.Process.Kill(); ui.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("holter ui printed nothing: %v", err)
	}
	_, addr, _ := strings.Cut(strings.TrimSpace(line), " on ")
	var ov server.Overview
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(addr + "/api/overview")
	if err != nil {
		t.Fatalf("holter ui (%q): %v", line, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&ov); err != nil || ov.Live || ov.Epochs < 5 {
		t.Errorf("stored recording's overview: %+v (%v)", ov, err)
	}
}
