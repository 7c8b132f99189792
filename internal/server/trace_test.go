package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/testutil"
	"github.com/holter-dev/holter/internal/tracequery"
)

func TestTraceStreamsIntervals(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := tracequery.EnsureTraceFS(); err != nil {
		t.Fatal(err)
	}
	base := startServer(t, Options{})
	body := `{"query": "SELECT comm, count() AS n FROM syscall.getppid GROUP BY comm", "interval": "100ms", "for": "350ms", "save": "getppid"}`
	resp, err := http.Post(base+"/api/trace", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d, type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var lines []TraceLine
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l TraceLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if l.Error != "" {
			t.Fatal(l.Error)
		}
		lines = append(lines, l)
	}
	if len(lines) < 3 || lines[0].Result == nil || strings.Join(lines[0].Result.Columns, ",") != "comm,n" {
		t.Fatalf("want ≥3 intervals with columns comm,n; got %+v", lines)
	}
	// Saved in the store, visible to queries.
	code, res := get(t, mustReq(t, "POST", base+"/api/query", "SELECT count(*) AS intervals FROM (SELECT DISTINCT interval_start FROM trace_getppid)"))
	if code != 200 {
		t.Fatalf("query saved trace: %d %v", code, res)
	}

	// Bad queries are refused with the position.
	resp2, err := http.Post(base+"/api/trace", "application/json", strings.NewReader(`{"query": "SELECT count() FROM syscall.nosuch"}`))
	if err != nil {
		t.Fatal(err)
	}
	var e Error
	json.NewDecoder(resp2.Body).Decode(&e)
	resp2.Body.Close()
	if resp2.StatusCode != 400 || !strings.Contains(e.Error, "unknown source syscall.nosuch") || !strings.Contains(e.Error, "^") {
		t.Errorf("bad query: %d %q", resp2.StatusCode, e.Error)
	}
}

func mustReq(t *testing.T, method, u, body string) *http.Request {
	r, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}
