package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/store"
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
		t.Errorf("browser tests failed: %v", err) // the next script still runs: each reports its own
	}
}

// TestUIInBrowser records a few 1-second epochs while a spinning and a
// blocking workload run and a request's spans arrive over OTLP/HTTP JSON,
// then drives the UI in headless Chromium (ui/test/browser.test.mjs):
// graphs, overlay, drill-down to a sample's stack, flame graphs, top
// tables, the metric diff's overlaid histograms, the request's waterfall
// and latency graph, a live query. Once the recorder stops, it stores a
// finding evaluated over the recording and checks the Findings tab over
// `holter ui` (ui/test/findings.test.mjs). Screenshots are kept as
// artifacts.
func TestUIInBrowser(t *testing.T) {
	testutil.RequireRoot(t)
	requireBrowser(t)
	bin := testutil.BuildHolter(t)
	spin := testutil.BuildWorkload(t, "cpu_spin")
	block := testutil.BuildWorkload(t, "block_pipe")
	dir := t.TempDir()

	otlpHTTP := freeAddr(t)
	// The test is of the UI: no vital may be shed while it selects an
	// epoch (--budget off), and the online analysis is not under test
	// (--online=false, see startRecord).
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--otlp-grpc", "off", "--otlp-http", otlpHTTP,
		"--budget", "off", "--online=false")
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	<-r.started
	// The workloads outlast the browser tests (killed when the test ends):
	// the later tests select the second-to-last epoch and look for them,
	// and on a loaded machine the run takes minutes.
	var workloads []*exec.Cmd
	for _, w := range []string{spin, block} {
		cmd := exec.Command(w, "600")
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
	r.waitEpochsWithin(t, 4, 150*time.Second) // other recorders may be starting on a loaded machine
	traceID := postUITrace(t, otlpHTTP, workloads[0].Process.Pid)
	r.waitEpochsWithin(t, 1, 60*time.Second) // five in all, as the diff compares the recording's halves
	info, ok := readAgentInfo(dir)
	if !ok {
		t.Fatalf("no agent.json in %s", dir)
	}

	// While the recorder holds the store, `holter ui` says where its UI is.
	_, errOut, code := runHolter(t, bin, "ui", "--data", dir, "--api", "127.0.0.1:0")
	if code != 1 || !strings.Contains(errOut, "its UI is at http://"+info.API) {
		t.Errorf("holter ui beside a recorder: exit %d, %s", code, errOut)
	}

	// The browser logs in at the URL holter ui-url prints.
	session := recorderSession(t, bin, dir)
	timeUIEndpoints(t, session, traceID)

	runBrowserTests(t, "test/browser.test.mjs", "ui-browser", "HOLTER_URL="+session.loginURL,
		"HOLTER_CPU_FUNC=holter_cpu_spin", "HOLTER_CPU_COMM=cpu_spin", "HOLTER_BLCK_FUNC=holter_block_on_pipe", "HOLTER_TRACE_ID="+traceID)

	// Once the recorder stops, `holter ui` serves the stored recording.
	r.cmd.Process.Signal(syscall.SIGINT)
	stopped := time.Now()
	r.cmd.Wait()
	<-r.done
	finding := storeUIFinding(t, dir)
	// A second recording, 10 s after the first stopped and without blck,
	// leaves what the charts must explain rather than show as gaps: a
	// stretch without the recorder, and epochs recorded without one vital.
	time.Sleep(time.Until(stopped.Add(10 * time.Second)))
	r2 := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "", "--otlp-grpc", "off", "--otlp-http", "off", "--budget", "off",
		"--online=false", "--vitals", "cpu,sched,blio,kmem,umem,syscall,signal,sock,lock")
	defer func() { r2.cmd.Process.Kill(); r2.cmd.Wait() }()
	<-r2.started
	r2.waitEpochsWithin(t, 3, 60*time.Second)
	r2.cmd.Process.Signal(syscall.SIGINT)
	r2.cmd.Wait()
	<-r2.done
	stored := serveUI(t, bin, "--data", dir)
	var ov server.Overview
	code, b := stored.get(t, "/api/overview")
	if err := json.Unmarshal(b, &ov); code != 200 || err != nil || ov.Live || ov.Epochs < 5 {
		t.Errorf("stored recording's overview: %d %+v (%v)", code, ov, err)
	}

	runBrowserTests(t, "test/findings.test.mjs", "ui-browser-findings", "HOLTER_URL="+stored.loginURL,
		"HOLTER_FINDING_RULE="+finding.Rule, "HOLTER_CPU_COMM="+finding.Culprit.Comm, "HOLTER_CPU_FUNC="+finding.Culprit.Function,
		"HOLTER_UNRECORDED_VITAL=blck")
}

// storeUIFinding evaluates the busy-loop detector over the stored
// recording — the cpu_spin workload spins in holter_cpu_spin — and stores
// its findings, as the recorder's online analysis stores its own. The
// detector is asked for a loop of a twentieth of a CPU: the test is of the
// UI, and on a loaded machine the spinner may get little more.
func storeUIFinding(t *testing.T, dir string) findings.Finding {
	t.Helper()
	st, err := store.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	q := findings.FromStore(st)
	w, err := findings.Load(ctx, q, findings.LoadOptions{Timescale: findings.Epoch, CPUs: runtime.NumCPU(),
		From: time.Now().Add(-time.Hour), To: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	levels := findings.DefaultLevels
	levels.BusyCPU = 0.05
	var detector findings.Filter
	for _, d := range findings.Detectors(levels) {
		if d.Name() == "busy-loop" {
			detector = d
		}
	}
	found, _ := findings.Evaluate(w, []findings.Filter{detector})
	var rows []store.Finding
	var spin *findings.Finding
	for i, f := range found {
		rows = append(rows, f.Row(w.Host))
		if f.Culprit != nil && f.Culprit.Comm == "cpu_spin" && spin == nil {
			spin = &found[i]
		}
	}
	if spin == nil {
		t.Fatalf("no busy loop found in cpu_spin: %+v", found)
	}
	if err := st.AddFindings(ctx, rows, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("stored %d findings; cpu_spin's: %s", len(found), spin.Summary)
	return *spin
}

// postUITrace posts, as OTLP/HTTP JSON, three reads (client → front →
// storage, front's write-back outliving the request) whose storage spans
// one batched flush coalesces, and returns the first read's trace id.
// The storage spans carry the spinning workload's pid and thread, so the
// kernel accounting may charge them its CPU.
func postUITrace(t *testing.T, addr string, pid int) string {
	t.Helper()
	// The accounting follows a process once a span names it: a first
	// export names the workload, and the trace's spans come after, so
	// that their thread's CPU and waits are charged to them.
	postOTLPJSON(t, addr, map[string]any{"resourceSpans": []any{map[string]any{
		"resource": map[string]any{"attributes": []any{
			map[string]any{"key": "service.name", "value": map[string]any{"stringValue": "storage"}},
			map[string]any{"key": "process.pid", "value": map[string]any{"intValue": fmt.Sprint(pid)}}}},
		"scopeSpans": []any{map[string]any{"spans": []any{map[string]any{
			"traceId": "c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0", "spanId": "00000000000000c1", "name": "hello", "kind": 2,
			"startTimeUnixNano": fmt.Sprint(time.Now().UnixNano() - 1e6), "endTimeUnixNano": fmt.Sprint(time.Now().UnixNano()),
			"attributes": []any{map[string]any{"key": "thread.id", "value": map[string]any{"intValue": fmt.Sprint(pid)}}}}}}}}}})
	time.Sleep(2500 * time.Millisecond)
	now := time.Now().Add(-time.Second).UnixNano()
	ms := int64(time.Millisecond)
	type span struct {
		svc, trace, id, parent, name string
		start, end                   int64
		links                        []string // trace ids whose storage read this span coalesces
	}
	var spans []span
	traceOf := func(i int) string { return fmt.Sprintf("a1b2c3d4%024x", i+1) }
	for i := range 3 {
		tr, s0 := traceOf(i), now+int64(i)*200*ms
		spans = append(spans,
			span{"client", tr, "0000000000000001", "", "get", s0, s0 + 40*ms, nil},
			span{"front", tr, "0000000000000002", "0000000000000001", "GET /item", s0 + 2*ms, s0 + 38*ms, nil},
			span{"storage", tr, "0000000000000003", "0000000000000002", "read", s0 + 8*ms + int64(i)*ms, s0 + 20*ms + int64(i)*ms, nil},
			span{"front", tr, "0000000000000004", "0000000000000002", "write-back", s0 + 30*ms, s0 + 70*ms, nil})
	}
	spans = append(spans, span{"storage", "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0", "00000000000000b1", "", "flush", now + 700*ms, now + 720*ms,
		[]string{traceOf(0), traceOf(1), traceOf(2)}})
	bySvc := map[string][]map[string]any{}
	for _, s := range spans {
		js := map[string]any{"traceId": s.trace, "spanId": s.id, "name": s.name, "kind": 2,
			"startTimeUnixNano": fmt.Sprint(s.start), "endTimeUnixNano": fmt.Sprint(s.end)}
		if s.parent != "" {
			js["parentSpanId"] = s.parent
		} else if s.svc == "client" {
			js["attributes"] = []any{map[string]any{"key": "client.id", "value": map[string]any{"stringValue": "ui-test"}}}
		}
		if s.svc == "storage" {
			js["attributes"] = []any{map[string]any{"key": "thread.id", "value": map[string]any{"intValue": fmt.Sprint(pid)}}}
		}
		var links []any
		for _, l := range s.links {
			links = append(links, map[string]any{"traceId": l, "spanId": "0000000000000003"})
		}
		if links != nil {
			js["links"] = links
		}
		bySvc[s.svc] = append(bySvc[s.svc], js)
	}
	var rs []any
	for svc, ss := range bySvc {
		attrs := []any{map[string]any{"key": "service.name", "value": map[string]any{"stringValue": svc}}}
		if svc == "storage" {
			attrs = append(attrs, map[string]any{"key": "process.pid", "value": map[string]any{"intValue": fmt.Sprint(pid)}})
		}
		rs = append(rs, map[string]any{"resource": map[string]any{"attributes": attrs}, "scopeSpans": []any{map[string]any{"spans": ss}}})
	}
	postOTLPJSON(t, addr, map[string]any{"resourceSpans": rs})
	return traceOf(0)
}

// postOTLPJSON exports an OTLP/HTTP JSON request, which must be taken whole.
func postOTLPJSON(t *testing.T, addr string, req map[string]any) {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, err := http.Post("http://"+addr+"/v1/traces", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(b), "rejected") {
		t.Fatalf("OTLP/HTTP JSON export: %d %s", resp.StatusCode, b)
	}
}

// timeUIEndpoints reports how long the new tabs' API calls take on the
// live recording: three rounds each, min / median / max. The diff compares
// the recording's later epochs with its earlier ones.
func timeUIEndpoints(t *testing.T, s uiSession, traceID string) {
	t.Helper()
	var ov server.Overview
	_, b := s.get(t, "/api/overview")
	json.Unmarshal(b, &ov)
	// Epochs may be uneven when the recorder lags: split by their starts.
	_, b = s.get(t, "/api/query?q="+url.QueryEscape("SELECT start_ns FROM epochs ORDER BY start_ns"))
	var starts struct{ Rows [][]int64 }
	json.Unmarshal(b, &starts)
	if len(starts.Rows) < 2 {
		t.Fatalf("%d epochs recorded", len(starts.Rows))
	}
	mid := starts.Rows[len(starts.Rows)/2][0]
	for _, path := range []string{
		fmt.Sprintf("/api/diff?target=%d/%d&reference=%d/%d", mid, ov.LastNs, ov.FirstNs, mid),
		fmt.Sprintf("/api/findings?from=%d&to=%d", ov.FirstNs, ov.LastNs),
		"/api/traces",
		"/api/traces/" + traceID + "/path",
		"/api/latency-graph?service=client&operation=get",
	} {
		var ds []time.Duration
		for range 3 {
			began := time.Now()
			if code, b := s.get(t, path); code != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, code, b)
			}
			ds = append(ds, time.Since(began))
		}
		slices.Sort(ds)
		t.Logf("GET %s: %v (%v … %v) over a recording of %.0f s", strings.SplitN(path, "?", 2)[0], ds[1].Round(time.Millisecond),
			ds[0].Round(time.Millisecond), ds[2].Round(time.Millisecond), float64(ov.LastNs-ov.FirstNs)/1e9)
	}
}
