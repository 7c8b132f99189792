package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// checkChromeTrace checks data against the Chrome trace event format
// (JSON object form) as ui.perfetto.dev reads it: a traceEvents array;
// each event a name, a one-letter phase of the format's, a ts in µs (a
// number), integer pid and tid; complete events (X) a dur ≥ 0, instants
// (i) a scope g, p or t, metadata (M) a process or thread name in args.
// It returns the events by phase.
func checkChromeTrace(t *testing.T, data []byte) map[string][]map[string]any {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatalf("not a JSON object: %v", err)
	}
	if u, ok := top["displayTimeUnit"]; ok && string(u) != `"ms"` && string(u) != `"ns"` {
		t.Errorf("displayTimeUnit %s: ms or ns", u)
	}
	var events []map[string]any
	if err := json.Unmarshal(top["traceEvents"], &events); err != nil {
		t.Fatalf("traceEvents is not an array of objects: %v", err)
	}
	integer := func(v any) bool { f, ok := v.(float64); return ok && f == math.Trunc(f) && f >= 0 }
	byPhase := map[string][]map[string]any{}
	for i, e := range events {
		name, _ := e["name"].(string)
		ph, _ := e["ph"].(string)
		ts, tsOK := e["ts"].(float64)
		switch {
		case name == "":
			t.Errorf("event %d: no name: %v", i, e)
		case len(ph) != 1 || !containsRune("BEXiIbneMPOCsSTpftNDRrc", ph):
			t.Errorf("event %d: phase %q is not one of the format's", i, ph)
		case ph != "M" && (!tsOK || ts < 0):
			t.Errorf("event %d: ts %v", i, e["ts"])
		case !integer(e["pid"]) || !integer(e["tid"]):
			t.Errorf("event %d: pid %v, tid %v are not integers", i, e["pid"], e["tid"])
		}
		if a, ok := e["args"]; ok {
			if _, isObj := a.(map[string]any); !isObj {
				t.Errorf("event %d: args is not an object", i)
			}
		}
		switch ph {
		case "X":
			if d, ok := e["dur"].(float64); !ok || d < 0 {
				t.Errorf("event %d: complete event with dur %v", i, e["dur"])
			}
		case "i", "I":
			if s, ok := e["s"]; ok && s != "g" && s != "p" && s != "t" {
				t.Errorf("event %d: instant scope %v", i, s)
			}
		case "M":
			args, _ := e["args"].(map[string]any)
			if n, _ := args["name"].(string); (name == "process_name" || name == "thread_name") && n == "" {
				t.Errorf("event %d: %s without args.name", i, name)
			} else if name != "process_name" && name != "thread_name" && name != "process_sort_index" && name != "thread_sort_index" {
				t.Errorf("event %d: metadata %q", i, name)
			}
		}
		byPhase[ph] = append(byPhase[ph], e)
	}
	return byPhase
}

func containsRune(set, s string) bool {
	for _, r := range set {
		if string(r) == s {
			return true
		}
	}
	return false
}

// TestPerfettoExports: trace-path --perfetto writes a request's spans as
// complete events with their durations, and export perfetto a range's
// samples as instant events on named threads; both pass the Chrome trace
// event format's checks. (The perfetto Python package's trace processor
// downloads its binary from Google's storage, which this machine cannot
// reach: the format is checked by checkChromeTrace.)
func TestPerfettoExports(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	testutil.RequireTool(t, "curl")
	bin := testutil.BuildHolter(t)
	dir := t.TempDir()
	otlpAddr := freeAddr(t)
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "", "--vitals", "cpu,blck", "--budget", "off",
		"--otlp-grpc", "off", "--otlp-http", otlpAddr)
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	r.waitEpochs(t, 1)
	from := time.Now().UnixNano()
	trace := fmt.Sprintf("%032x", 7777)
	now := time.Now().UnixNano()
	spans := []testSpan{
		{service: "front", name: "GET /", trace: trace, id: "00000000000000a1", start: now, end: now + 30e6},
		{service: "db", name: "query", trace: trace, id: "00000000000000a2", parent: "00000000000000a1", start: now + 5e6, end: now + 25e6},
	}
	postSpans(t, nil, otlpAddr, spans)
	r.waitEpochs(t, 2)
	to := time.Now().UnixNano()

	out, errOut, code := runHolter(t, bin, "trace-path", "--data", dir, "--perfetto", trace)
	if code != 0 {
		t.Fatalf("trace-path --perfetto: exit %d %s", code, errOut)
	}
	ph := checkChromeTrace(t, []byte(out))
	if len(ph["X"]) != 2 {
		t.Fatalf("%d complete events for 2 spans:\n%s", len(ph["X"]), out)
	}
	for _, e := range ph["X"] {
		want := map[string]float64{"front GET /": 30000, "db query": 20000}[e["name"].(string)]
		if e["dur"].(float64) != want {
			t.Errorf("%v: dur %v µs, want %v", e["name"], e["dur"], want)
		}
	}
	if len(ph["M"]) < 2 {
		t.Errorf("no process names for the two services: %v", ph["M"])
	}

	file := filepath.Join(t.TempDir(), "samples.json")
	if _, errOut, code := runHolter(t, bin, "export", "perfetto", "--data", dir, "--range", fmt.Sprintf("%d/%d", from, to),
		"--vital", "all", "--out", file); code != 0 {
		t.Fatalf("export perfetto: exit %d %s", code, errOut)
	}
	data, _ := os.ReadFile(file)
	ph = checkChromeTrace(t, data)
	if len(ph["i"]) == 0 || len(ph["M"]) == 0 {
		t.Errorf("export perfetto: %d instant events, %d names", len(ph["i"]), len(ph["M"]))
	}
	for _, e := range ph["i"] {
		if ts := e["ts"].(float64) * 1e3; ts < float64(from)-1e3 || ts > float64(to)+1e3 {
			t.Errorf("sample at %v ns outside %d..%d", ts, from, to)
			break
		}
	}
	if _, errOut, code := runHolter(t, bin, "export", "perfetto", "--data", dir, "--vital", "heart", "--out", file); code != 2 {
		t.Errorf("export perfetto --vital heart: exit %d %s", code, errOut)
	}
	t.Logf("%d samples exported", len(ph["i"]))
}
