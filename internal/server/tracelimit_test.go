package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
	"github.com/holter-dev/holter/internal/tracequery"
)

// limitQuery is a cheap live trace (getppid is rarely called).
const limitQuery = "SELECT comm, count() AS n FROM syscall.getppid GROUP BY comm"

// startTrace posts a live trace running for a minute and returns once
// the server answered: its status, its error if it refused, and a func
// that ends the trace.
func startTrace(t *testing.T, base string, req TraceRequest) (int, string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	body, _ := json.Marshal(req)
	hr, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/trace", strings.NewReader(string(body)))
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		var e Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		cancel()
		return resp.StatusCode, e.Error, func() {}
	}
	return 200, "", func() { cancel(); resp.Body.Close() }
}

// TestTraceLimits: with at most two live traces, a third is refused with
// a 429 naming the limit until one ends; a trace whose maps exceed the
// memory all may hold is refused, and so is one that would take the
// running traces' memory beyond it.
func TestTraceLimits(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := tracequery.EnsureTraceFS(); err != nil {
		t.Fatal(err)
	}
	long := TraceRequest{Query: limitQuery, Interval: "1s", For: "60s"}
	base := startServer(t, Options{MaxTraces: 2})
	var stops []func()
	for i := 0; i < 2; i++ {
		code, msg, stop := startTrace(t, base, long)
		defer stop()
		if code != 200 {
			t.Fatalf("trace %d of 2: %d %s", i+1, code, msg)
		}
		stops = append(stops, stop)
	}
	code, msg, stop := startTrace(t, base, long)
	stop()
	if code != http.StatusTooManyRequests || !strings.Contains(msg, "2 live traces run already") || !strings.Contains(msg, "--max-traces 2") {
		t.Fatalf("third trace: %d %q, want 429 naming the limit", code, msg)
	}
	// An explanation loads nothing, and is not counted.
	explain := long
	explain.Explain = true
	if code, msg, stop := startTrace(t, base, explain); code != 200 {
		t.Errorf("explain beside two traces: %d %s", code, msg)
	} else {
		stop()
	}
	// Once one ends, a trace is admitted again.
	stops[0]()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, msg, stop := startTrace(t, base, long)
		stop()
		if code == 200 {
			break
		}
		if code != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("after one of two ended: %d %s", code, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}

	plan, err := tracequery.Compile(limitQuery, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	need := plan.MapBytes()
	if need == 0 {
		t.Fatal("the plan's maps hold nothing")
	}
	small := startServer(t, Options{MaxTraceBytes: need * 3 / 2})
	huge := long
	huge.MapSize = 1 << 22
	code, msg, stop = startTrace(t, small, huge)
	stop()
	if code != http.StatusBadRequest || !strings.Contains(msg, "--trace-memory") || !strings.Contains(msg, "map_size") {
		t.Errorf("a trace of 4 Mi keys: %d %q, want 400 naming the limit", code, msg)
	}
	code, msg, stop = startTrace(t, small, long)
	defer stop()
	if code != 200 {
		t.Fatalf("one trace within the memory limit: %d %s", code, msg)
	}
	code, msg, stop = startTrace(t, small, long)
	stop()
	if code != http.StatusTooManyRequests || !strings.Contains(msg, "--trace-memory") {
		t.Errorf("a second trace beyond the memory limit: %d %q, want 429 naming the limit", code, msg)
	}
}
