package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/requests"
	"github.com/holter-dev/holter/internal/testutil"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startService starts one demo service and returns its URL and pid.
func startService(t *testing.T, demo, role string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(demo, append([]string{role}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("%s did not start: %v", role, err)
	}
	go io.Copy(io.Discard, out)
	return strings.TrimSpace(strings.TrimPrefix(line, "listening ")), cmd.Process.Pid
}

type demoRequest struct {
	Op      string `json:"op"`
	TraceID string `json:"trace_id"`
	Client  string `json:"client"`
	Bytes   int    `json:"bytes"`
	Error   string `json:"error"`
}

func runDemoClient(t *testing.T, demo, front, otlpHTTP, client string, gets, puts int) []demoRequest {
	t.Helper()
	out, err := exec.Command(demo, "client", "-front", front, "-otlp-http", otlpHTTP, "-client", client,
		"-gets", fmt.Sprint(gets), "-puts", fmt.Sprint(puts)).Output()
	if err != nil {
		t.Fatalf("demo client %s: %v", client, err)
	}
	var reqs []demoRequest
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var r demoRequest
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		if r.Error != "" {
			t.Fatalf("demo request failed: %s", r.Error)
		}
		reqs = append(reqs, r)
	}
	return reqs
}

func stopRecording(t *testing.T, r *recording) {
	r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
	case <-time.After(20 * time.Second):
		r.cmd.Process.Kill()
	}
	r.cmd.Wait()
}

// TestDemoSystemRequestTracing runs a demo system of three services plus a
// client, instrumented with the OpenTelemetry SDK, against `holter record`:
// reads (client → front → middle, which burns 30 ms of CPU, → storage,
// which reads from disk with O_DIRECT) and writes (acknowledged by middle
// when buffered, coalesced three at a time into a batched write whose span
// links them, weighted by bytes, plus an asynchronous index write-back).
func TestDemoSystemRequestTracing(t *testing.T) {
	testutil.RequireRoot(t)
	d := startDemo(t, "30ms", "3")
	defer stopRecording(t, d.r)
	bin, demo, dir, httpAddr, r, front := d.bin, d.demo, d.dir, d.httpAddr, d.r, d.front
	spid, mpid, fpid := d.pids[0], d.pids[1], d.pids[2]

	// Spans name their process; holter follows its threads from then on.
	runDemoClient(t, demo, front, httpAddr, "warmup", 1, 3)
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range []int{spid, mpid, fpid} {
		for !strings.Contains(r.log.String(), fmt.Sprintf("accounting the threads of process %d\n", pid)) {
			if time.Now().After(deadline) {
				t.Fatalf("holter does not account process %d:\n%s", pid, r.log)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	reads := runDemoClient(t, demo, front, httpAddr, "alice", 4, 0)
	writes := runDemoClient(t, demo, front, httpAddr, "bob", 0, 3)
	var ids []string
	for _, q := range append(append([]demoRequest{}, reads...), writes...) {
		ids = append(ids, "'"+q.TraceID+"'")
	}
	// Wait for every span (7 per read and per write, 3 in the batch) to be
	// stored and charged.
	var last string
	for deadline := time.Now().Add(30 * time.Second); ; {
		out, errOut, _ := runHolter(t, bin, "query", "--data", dir, "--format", "csv", fmt.Sprintf(`
			SELECT (SELECT count(*) FROM span_costs WHERE trace_id IN (%[1]s)),
			       (SELECT count(*) FROM span_costs WHERE tid IS NOT NULL AND accounted IS NULL AND (trace_id IN (%[1]s)
			           OR trace_id IN (SELECT trace_id FROM span_links WHERE linked_trace_id IN (%[1]s)))),
			       (SELECT count(*) FROM span_links WHERE linked_trace_id IN (%[1]s))`, strings.Join(ids, ",")))
		last = fmt.Sprintf("stdout %q stderr %q", out, errOut)
		if strings.Contains(out, fmt.Sprintf("%d,0,3", 7*len(reads)+7*len(writes))) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans not all stored and charged (count, uncharged, links): %s\n%s", last, r.log)
		}
		time.Sleep(300 * time.Millisecond)
	}

	checkTracingStatus(t, bin, dir, 7*(len(reads)+len(writes)))

	path := func(id string) *requests.Path { return tracePath(t, bin, "--data", dir, id) }
	find := func(n *requests.Node, service, op string) *requests.Node { return findSpan(t, n, service, op) }

	blockedReads := 0
	for _, q := range reads {
		p := path(q.TraceID)
		if len(p.Roots) != 1 || p.Client != "alice" || p.Spans != 7 {
			t.Fatalf("read %s: %d roots, client %q, %d spans", q.TraceID, len(p.Roots), p.Client, p.Spans)
		}
		// client → front → middle → storage, each hop a remote child.
		chain := [][2]string{{"client", "client get"}, {"client", "call front"}, {"front", "GET /item"},
			{"front", "call middle get"}, {"middle", "middle get"}, {"middle", "call storage read"}, {"storage", "storage read"}}
		n := p.Roots[0]
		for i, want := range chain {
			if n.Service != want[0] || n.Operation != want[1] {
				t.Fatalf("read %s: hop %d is %s %s, want %s %s", q.TraceID, i, n.Service, n.Operation, want[0], want[1])
			}
			if wantRemote := i == 2 || i == 4 || i == 6; n.Remote != wantRemote {
				t.Errorf("read %s: %s remote=%v", q.TraceID, n.Operation, n.Remote)
			}
			if i+1 < len(chain) {
				if len(n.Children) != 1 {
					t.Fatalf("read %s: %s has %d children", q.TraceID, n.Operation, len(n.Children))
				}
				n = n.Children[0]
			}
		}
		// The CPU middle burnt, by its own thread clock, is what the
		// kernel's scheduling events charge its span.
		mid := find(p.Roots[0], "middle", "middle get")
		burn := checkBurnCharged(t, bin, dir, q.TraceID, mid)
		k := mid.Kernel
		// Storage reads the disk: the block I/O it submitted, and, when
		// the thread slept for it — an O_DIRECT read the device completes
		// before the thread goes to sleep does not block — blocked time
		// with its kernel site.
		st := find(p.Roots[0], "storage", "storage read").Kernel
		if st == nil || st.IOCount < 1 || st.IOBytes < 64<<10 {
			t.Fatalf("read %s: storage read charged %+v, want ≥ 64 KiB of block I/O", q.TraceID, st)
		}
		if st.BlockedNs > 0 {
			blockedReads++
			if st.BlockedSites == "[]" {
				t.Errorf("read %s: storage read blocked %v at no kernel site", q.TraceID, time.Duration(st.BlockedNs))
			}
		}
		t.Logf("read %s: middle burnt %v, charged cpu %v; storage blocked %v at %s, %v bytes of block I/O",
			q.TraceID[:8], burn, time.Duration(k.SelfCPUNs), time.Duration(st.BlockedNs), st.BlockedSites, st.IOBytes)
	}
	if blockedReads*2 < len(reads) {
		t.Errorf("only %d of %d storage reads were charged blocked time", blockedReads, len(reads))
	}

	// Writes: an async write-back outlives its request; the batch is billed
	// to the three requests in proportion to their bytes.
	var shareSum, billedSum, batchCPU float64
	for _, q := range writes {
		p := path(q.TraceID)
		wb := find(p.Roots[0], "middle", "index write-back")
		if !wb.Async || wb.AfterNs >= 0 {
			t.Errorf("write %s: the index write-back is not marked as outliving its parent: %+v", q.TraceID, wb)
		}
		if len(p.Coalesced) != 1 {
			t.Fatalf("write %s: coalesced into %d batches, want 1", q.TraceID, len(p.Coalesced))
		}
		c := p.Coalesced[0]
		if want := float64(q.Bytes) / 6000; c.Requests != 3 || math.Abs(c.Share-want) > 1e-9 {
			t.Errorf("write %s (%d bytes): share %.4f of a batch of %d, want %.4f of 3", q.TraceID, q.Bytes, c.Share, c.Requests, want)
		}
		var subtreeCPU float64
		var walk func(*requests.Node)
		walk = func(n *requests.Node) {
			if n.Kernel != nil {
				subtreeCPU += n.Kernel.SelfCPUNs
			}
			for _, ch := range n.Children {
				walk(ch)
			}
		}
		walk(c.Batch)
		if subtreeCPU <= 0 || math.Abs(c.Billed.CPUNs-c.Share*subtreeCPU) > 1 {
			t.Errorf("write %s: billed cpu %.0f, want share × batch cpu = %.0f", q.TraceID, c.Billed.CPUNs, c.Share*subtreeCPU)
		}
		if math.Abs(p.Total.CPUNs-(p.Own.CPUNs+c.Billed.CPUNs)) > 1 {
			t.Errorf("write %s: total cpu %.0f ≠ own %.0f + billed %.0f", q.TraceID, p.Total.CPUNs, p.Own.CPUNs, c.Billed.CPUNs)
		}
		shareSum += c.Share
		billedSum += c.Billed.CPUNs
		batchCPU = subtreeCPU
	}
	if math.Abs(shareSum-1) > 1e-9 || math.Abs(billedSum-batchCPU) > 3 {
		t.Errorf("the batch is billed %.4f of itself (%.0f of %.0f ns of CPU), want all of it", shareSum, billedSum, batchCPU)
	}

	// Per-client demand: alice's reads carry middle's burnt CPU.
	out, _, _ := runHolter(t, bin, "query", "--data", dir, "--format", "csv",
		`SELECT requests, cpu_ns FROM client_demand WHERE client = 'alice'`)
	var n int
	var cpu float64
	fmt.Sscanf(strings.Split(strings.TrimSpace(out), "\n")[1], "%d,%g", &n, &cpu)
	if n != 4 || cpu < 4*0.9*30e6 {
		t.Errorf("client_demand for alice: %d requests, %v of CPU", n, time.Duration(cpu))
	}

	// The latency graph of alice's reads entering front, as DOT.
	dot, errOut, code := runHolter(t, bin, "latency-graph", "--data", dir, "--service", "front", "--operation", "GET /item", "--client", "alice", "--dot")
	if code != 0 {
		t.Fatalf("latency-graph: %s", errOut)
	}
	for _, want := range []string{`digraph latency`, `(4 paths)`, `"front:call middle get:start" -> "middle:middle get:start"`, `style=dashed`,
		`"storage:storage read:start" -> "storage:storage read:end"`, `n=4`} {
		if !strings.Contains(dot, want) {
			t.Errorf("latency graph DOT lacks %q:\n%s", want, dot)
		}
	}

	// Prometheus counters through the API.
	session := recorderSession(t, bin, dir)
	_, body := session.get(t, "/metrics")
	for _, want := range []string{`holter_client_cpu_seconds_total{client="alice"}`, `holter_spans_total{service="middle",operation="middle get"} 5`,
		`holter_span_duration_seconds{service="storage",operation="storage read",quantile="0.99"}`, "# TYPE holter_spans_total counter"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if code, b := session.get(t, "/api/traces/"+reads[0].TraceID+"/path"); code != 200 {
		t.Errorf("GET /api/traces/{id}/path: %d %s", code, b)
	}
}

// demoSystem is a recorder and the demo's three services exporting to it.
type demoSystem struct {
	bin, demo, dir, httpAddr string
	r                        *recording
	front                    string
	pids                     [3]int // storage, middle, front
}

// startDemo starts `holter record` (with extra flags; DEMO stands for the
// demo binary's path), then storage, middle (burning burn per read,
// batching batch writes) and front. The caller stops the recording.
func startDemo(t *testing.T, burn, batch string, extra ...string) *demoSystem {
	t.Helper()
	d := &demoSystem{bin: testutil.BuildHolter(t), demo: testutil.BuildGo(t, "./internal/requests/testdata/demo"), dir: t.TempDir()}
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	d.httpAddr = httpAddr
	// A host name of its own (--host, as fleets name their recorders):
	// spans and kernel intervals are both that host's.
	args := []string{"--data", d.dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--otlp-grpc", grpcAddr, "--otlp-http", httpAddr,
		"--host", "demo-host", "--online=false"}
	for _, x := range extra {
		args = append(args, strings.ReplaceAll(x, "DEMO", d.demo))
	}
	d.r = startRecord(t, d.bin, args...)
	select {
	case <-d.r.started:
	case <-time.After(30 * time.Second):
		stopRecording(t, d.r)
		t.Fatalf("recorder did not start:\n%s", d.r.log)
	}
	storage, spid := startService(t, d.demo, "storage", "-dir", testutil.BlockDir(t), "-otlp-grpc", grpcAddr)
	middle, mpid := startService(t, d.demo, "middle", "-storage", storage, "-otlp-http", httpAddr, "-burn", burn, "-batch", batch)
	front, fpid := startService(t, d.demo, "front", "-middle", middle, "-otlp-grpc", grpcAddr)
	d.front, d.pids = front, [3]int{spid, mpid, fpid}
	return d
}

func findSpan(t *testing.T, n *requests.Node, service, op string) *requests.Node {
	t.Helper()
	var found *requests.Node
	var walk func(*requests.Node)
	walk = func(x *requests.Node) {
		if x.Service == service && x.Operation == op {
			found = x
		}
		for _, c := range x.Children {
			walk(c)
		}
	}
	walk(n)
	if found == nil {
		t.Fatalf("no span %s %s in the path", service, op)
	}
	return found
}

// checkBurnCharged checks that the CPU middle's thread ran during a read's
// span, by its own thread clock (demo.thread_cpu_ns: the burn of
// demo.burn_cpu_ns and the rest of the handler, the call to storage and
// the runtime's assists to the garbage collector, 1-9 ms more on a loaded
// machine), is what the kernel's scheduling events charge the span,
// within 10%; it returns the burn.
func checkBurnCharged(t *testing.T, bin, dir, traceID string, mid *requests.Node) time.Duration {
	t.Helper()
	out, _, _ := runHolter(t, bin, "query", "--data", dir, "--format", "csv",
		fmt.Sprintf(`SELECT attributes FROM spans WHERE span_id = '%s'`, mid.SpanID))
	var attrs struct {
		Burn   int64 `json:"demo.burn_cpu_ns"`
		Thread int64 `json:"demo.thread_cpu_ns"`
	}
	csvField := strings.TrimSpace(out[strings.Index(out, "\n")+1:])
	if err := json.Unmarshal([]byte(strings.ReplaceAll(strings.Trim(csvField, `"`), `""`, `"`)), &attrs); err != nil || attrs.Burn == 0 || attrs.Thread < attrs.Burn {
		t.Fatalf("middle span attributes %q: %v", csvField, err)
	}
	k := mid.Kernel
	if k == nil || !k.Accounted {
		t.Fatalf("read %s: middle span not accounted", traceID)
	}
	if ratio := k.SelfCPUNs / float64(attrs.Thread); ratio < 0.9 || ratio > 1.1 {
		t.Errorf("read %s: middle burnt %v of CPU, its thread ran %v in the span by its own clock, charged %v (ratio %.3f)", traceID,
			time.Duration(attrs.Burn), time.Duration(attrs.Thread), time.Duration(k.SelfCPUNs), ratio)
	}
	return time.Duration(attrs.Burn)
}

// TestDemoFirstRequestAccountedFromExec: with --account-exe, the demo's
// processes are accounted from their exec, so the very first request a
// freshly started middle serves — whose spans are exported only after it
// ended — is charged the CPU it burnt, and its write-back is followed.
func TestDemoFirstRequestAccountedFromExec(t *testing.T) {
	testutil.RequireRoot(t)
	d := startDemo(t, "40ms", "1", "--budget", "off", "--account-exe", "DEMO")
	defer stopRecording(t, d.r)
	bin, demo, dir, httpAddr, r, front := d.bin, d.demo, d.dir, d.httpAddr, d.r, d.front
	for _, pid := range d.pids {
		if !strings.Contains(r.log.String(), fmt.Sprintf("accounting the threads of process %d (demo) from its start", pid)) {
			// The line is written when the recorder next reads the ring.
			time.Sleep(time.Second)
			if !strings.Contains(r.log.String(), fmt.Sprintf("accounting the threads of process %d (demo) from its start", pid)) {
				t.Fatalf("process %d is not accounted from its start:\n%s", pid, r.log)
			}
		}
	}
	// The first request of each service; no warm-up.
	first := runDemoClient(t, demo, front, httpAddr, "carol", 1, 0)[0]
	var last string
	for deadline := time.Now().Add(30 * time.Second); ; {
		out, errOut, _ := runHolter(t, bin, "query", "--data", dir, "--format", "csv", fmt.Sprintf(`
			SELECT count(*), count(*) FILTER (WHERE tid IS NOT NULL AND accounted IS NULL) FROM span_costs WHERE trace_id = '%s'`, first.TraceID))
		last = fmt.Sprintf("stdout %q stderr %q", out, errOut)
		if strings.Contains(out, "7,0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first request's spans not all stored and charged (count, uncharged): %s\n%s", last, r.log)
		}
		time.Sleep(300 * time.Millisecond)
	}
	p := tracePath(t, bin, "--data", dir, first.TraceID)
	mid := findSpan(t, p.Roots[0], "middle", "middle get")
	burn := checkBurnCharged(t, bin, dir, first.TraceID, mid)
	st := findSpan(t, p.Roots[0], "storage", "storage read").Kernel
	if st == nil || !st.Accounted || st.IOBytes < 64<<10 {
		t.Errorf("first read: storage read charged %+v, want ≥ 64 KiB of block I/O", st)
	}
	t.Logf("first request %s: middle burnt %v, charged %v; storage %v bytes of block I/O", first.TraceID[:8], burn,
		time.Duration(mid.Kernel.SelfCPUNs), st.IOBytes)
}

// checkTracingStatus checks that the recorder's status (holter status, and
// its JSON) tells what request tracing took: at least spans spans stored,
// and the kernel accounting of the demo's processes, with nothing lost.
func checkTracingStatus(t *testing.T, bin, dir string, spans int) {
	t.Helper()
	out, errOut, code := runHolter(t, bin, "status", "--data", dir, "--json")
	var st agentStatus
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Requests == nil ||
		st.Requests.OTLP == nil || st.Requests.Accounting == nil {
		t.Fatalf("status --json: exit %d (%v), no request tracing in it:\n%s%s", code, err, out, errOut)
	}
	o, a := st.Requests.OTLP, st.Requests.Accounting
	if o.SpansAccepted < uint64(spans) || o.Commits == 0 || o.Refused != 0 || o.CommitErrors != 0 {
		t.Errorf("OTLP status %+v, want ≥ %d spans stored, none refused", *o, spans)
	}
	if !a.Attached || a.Tracked < 3 || a.Records == 0 || a.Committed == 0 || a.Lost != 0 || a.IOLost != 0 {
		t.Errorf("accounting status %+v, want attached, ≥ 3 processes, records committed, none lost", *a)
	}
	// The same counters on /metrics, for a Prometheus scraper.
	_, body := recorderSession(t, bin, dir).get(t, "/metrics")
	for _, want := range []string{"\nholter_otlp_spans_stored_total ", "\nholter_accounting_records_lost_total 0\n",
		"\nholter_accounting_processes ", "\nholter_spans_total{"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %q:\n%s", strings.TrimSpace(want), body)
		}
	}
	if m := regexp.MustCompile(`(?m)^holter_otlp_spans_stored_total (\d+)$`).FindStringSubmatch(string(body)); m == nil {
		t.Errorf("/metrics: no holter_otlp_spans_stored_total")
	} else if n, _ := strconv.Atoi(m[1]); n < spans {
		t.Errorf("/metrics: holter_otlp_spans_stored_total %d, want ≥ %d", n, spans)
	}
	out, _, code = runHolter(t, bin, "status", "--data", dir)
	t.Logf("holter status:\n%s", out)
	if code != 0 || !strings.Contains(out, "\nOTLP: ") || !strings.Contains(out, "\nkernel accounting: attached; ") ||
		strings.Contains(out, "ring buffer full") {
		t.Errorf("status does not tell request tracing's state:\n%s", out)
	}
}
