package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/storetest"

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
	lines := traceLines(t, resp.Body)
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

// TestTraceJoinsRecordedTables runs a live query joined with the agent's
// own recording: the counts come from the probe, the CPU from the store.
func TestTraceJoinsRecordedTables(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := tracequery.EnsureTraceFS(); err != nil {
		t.Fatal(err)
	}
	st := storetest.Open(t)
	err := st.WriteEpoch(context.Background(), &store.Epoch{Host: "h", Epoch: 1, StartNs: 1, EndNs: 2,
		Vitals:  []store.Vital{{Name: "cpu", Events: 2}},
		Samples: []store.Sample{{TsNs: 1, Vital: "cpu", Weight: 700, EstCount: 1, Comm: "srvjoin"}, {TsNs: 1, Vital: "cpu", Weight: 5, EstCount: 1, Comm: "other"}}})
	if err != nil {
		t.Fatal(err)
	}
	base := startServer(t, Options{Store: st})
	// A thread named srvjoin calls getppid until the answer is in.
	defer testutil.CallGetppidAs(t, "srvjoin")()
	q := fmt.Sprintf(`WITH live AS (SELECT comm, count() AS calls FROM syscall.getppid WHERE pid = %d GROUP BY comm)
		SELECT comm, calls, cpu FROM live JOIN (SELECT comm, sum(weight)::BIGINT AS cpu FROM samples GROUP BY ALL) USING (comm)`, os.Getpid())
	body, _ := json.Marshal(TraceRequest{Query: q, Interval: "200ms", For: "650ms"})
	resp, err := http.Post(base+"/api/trace", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var calls int64
	lines := traceLines(t, resp.Body)
	for _, l := range lines {
		for _, r := range l.Result.Rows {
			// Only comms in both: srvjoin (recorded "other" never calls).
			// Numbers arrive exact: BIGINTs as int64.
			if r[0] != "srvjoin" || r[2] != int64(700) {
				t.Errorf("row %v, want srvjoin with cpu 700", r)
			}
			calls += r[1].(int64)
		}
	}
	intervals := len(lines)
	if intervals < 3 || calls == 0 {
		t.Errorf("%d intervals, %d calls joined; want ≥3 and some", intervals, calls)
	}
	// An unknown table is named as such, apart from probe sources.
	bad, _ := json.Marshal(TraceRequest{Query: "WITH live AS (SELECT count() AS n FROM syscall.getppid) SELECT * FROM live, nosuch", For: "1s"})
	resp2, err := http.Post(base+"/api/trace", "application/json", bytes.NewReader(bad))
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	b, _ := io.ReadAll(resp2.Body)
	if !strings.Contains(string(b), "unknown table nosuch") || !strings.Contains(string(b), "recorded: ") {
		t.Errorf("unknown table: %s", b)
	}
}

// traceLines reads an answer of POST /api/trace: a line saying the probes
// are attached, then the lines returned; an error line fails.
func traceLines(t *testing.T, r io.Reader) []TraceLine {
	t.Helper()
	var lines []TraceLine
	attached := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var l TraceLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if l.Error != "" {
			t.Fatal(l.Error)
		}
		if l.Attached {
			attached = true
			continue
		}
		if !attached {
			t.Fatalf("line %q before the one saying the probes are attached", sc.Text())
		}
		lines = append(lines, l)
	}
	return lines
}

// TestTracePerEventRows: a query without aggregation streams its columns,
// then each row as its event comes.
func TestTracePerEventRows(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := tracequery.EnsureTraceFS(); err != nil {
		t.Fatal(err)
	}
	base := startServer(t, Options{})
	defer testutil.CallGetppidAs(t, "srvrows")()
	body, _ := json.Marshal(TraceRequest{Query: "SELECT tid, comm FROM syscall.getppid WHERE comm = 'srvrows'", Interval: "100ms", For: "300ms"})
	resp, err := http.Post(base+"/api/trace", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := traceLines(t, resp.Body)
	if len(lines) < 2 || fmt.Sprint(lines[0].Columns) != "[tid comm]" {
		t.Fatalf("lines %+v, want the columns then rows", lines)
	}
	for _, l := range lines[1:] {
		if l.Row == nil && l.Counters == nil || l.Row != nil && l.Row[1] != "srvrows" {
			t.Errorf("line %+v, want a row of srvrows (or an interval's losses)", l)
		}
	}
}
