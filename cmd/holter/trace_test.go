package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// cpuRecording writes a recording in a new directory whose one cpu sample
// gives comm the weight w.
func cpuRecording(t *testing.T, comm string, w uint64) string {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = st.WriteEpoch(context.Background(), &store.Epoch{Host: "h", Epoch: 1, StartNs: 1, EndNs: 2,
		Vitals:  []store.Vital{{Name: "cpu", Events: 1}},
		Samples: []store.Sample{{TsNs: 1, Vital: "cpu", Weight: w, EstCount: 1, Comm: comm}}})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// joinedRows runs holter trace ARGS and returns the rows of its NDJSON.
func joinedRows(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(append([]string{"trace", "--interval", "200ms", "--for", "700ms", "--json"}, args...), &out, &errb); code != 0 {
		t.Fatalf("holter trace %v: exit %d: %s", args, code, errb.String())
	}
	var rows []map[string]any
	lines := 0
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var l struct{ Rows []map[string]any }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines++
		rows = append(rows, l.Rows...)
	}
	if lines < 3 {
		t.Errorf("%d intervals, want ≥3:\n%s", lines, out.String())
	}
	return rows
}

// checkJoined says whether rows are comm's, with calls and the recorded cpu_ns.
func checkJoined(t *testing.T, rows []map[string]any, comm string, cpu float64) {
	t.Helper()
	var calls float64
	for _, r := range rows {
		if r["comm"] != comm || r["cpu_ns"] != cpu {
			t.Errorf("row %v, want %s with cpu_ns %v", r, comm, cpu)
		}
		calls += r["calls"].(float64)
	}
	if calls == 0 {
		t.Errorf("no calls of %s joined: %v", comm, rows)
	}
}

// TestTraceJoinsRecordingStandalone: with no recorder running, holter
// trace --data DIR attaches the recording read-only and joins live counts
// with its table; --explain shows the join in the user-space part.
func TestTraceJoinsRecordingStandalone(t *testing.T) {
	testutil.RequireRoot(t)
	dir := cpuRecording(t, "clijoin", 4242)
	q := fmt.Sprintf(`WITH live AS (SELECT comm, count() AS calls FROM syscall.getppid WHERE pid = %d AND comm = 'clijoin' GROUP BY comm)
		SELECT comm, calls, cpu_ns FROM live LEFT JOIN (SELECT comm, sum(weight)::BIGINT AS cpu_ns FROM samples GROUP BY comm) USING (comm)`, os.Getpid())

	var out, errb bytes.Buffer
	if code := run([]string{"trace", "--data", dir, "--explain", q}, &out, &errb); code != 0 {
		t.Fatalf("explain: exit %d: %s", code, errb.String())
	}
	kernel, user, _ := strings.Cut(out.String(), "user-space part:")
	if !strings.Contains(kernel, "filter: pid = ") || !strings.Contains(user, "joined with recorded tables samples") || strings.Contains(kernel, "samples") {
		t.Errorf("EXPLAIN does not show the join in user space:\n%s", out.String())
	}

	stop := testutil.CallGetppidAs(t, "clijoin")
	checkJoined(t, joinedRows(t, "--data", dir, q), "clijoin", 4242)
	stop()

	// A table the recording lacks is named as a table, not a source.
	errb.Reset()
	bad := strings.Replace(q, "FROM samples", "FROM sampels", 1)
	if code := run([]string{"trace", "--data", dir, "--for", "1s", bad}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "unknown table sampels: not in WITH, and not a recorded table") {
		t.Errorf("misspelt table: exit %d, %s", code, errb.String())
	}
}

// TestTraceJoinsThroughAgent: with --api, the query runs in that recorder,
// which joins with its own store.
func TestTraceJoinsThroughAgent(t *testing.T) {
	testutil.RequireRoot(t)
	st, err := store.Open(cpuRecording(t, "apijoin", 777), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("join-token-0123456789\n"), 0o600)
	srv, err := server.Listen(server.Options{Addr: "127.0.0.1:0", Token: "join-token-0123456789", Store: st})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Shutdown(context.Background())
	q := fmt.Sprintf(`WITH live AS (SELECT comm, count() AS calls FROM syscall.getppid WHERE pid = %d AND comm = 'apijoin' GROUP BY comm)
		SELECT comm, calls, cpu_ns FROM live JOIN (SELECT comm, sum(weight)::BIGINT AS cpu_ns FROM samples GROUP BY comm) USING (comm)`, os.Getpid())
	stop := testutil.CallGetppidAs(t, "apijoin")
	defer stop()
	checkJoined(t, joinedRows(t, "--api", srv.Addr(), "--token-file", tokenFile, "--data", t.TempDir(), q), "apijoin", 777)
}

// TestTraceJoinWhenStoreHeld: a store another process holds (a recorder
// whose API does not answer) is not attached, and the error says why.
func TestTraceJoinWhenStoreHeld(t *testing.T) {
	testutil.RequireRoot(t)
	dir := cpuRecording(t, "heldjoin", 1)
	holder := exec.Command(os.Args[0], "-test.run=^TestHelperHoldStore$")
	holder.Env = append(os.Environ(), "HOLTER_TEST_HOLD_STORE="+dir)
	in, _ := holder.StdinPipe()
	outp, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); holder.Wait() }()
	if line, err := bufio.NewReader(outp).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("the holder did not open the store: %q %v", line, err)
	}
	var out, errb bytes.Buffer
	q := "WITH live AS (SELECT count() AS n FROM syscall.getppid) SELECT * FROM live, samples"
	code := run([]string{"trace", "--local", "--data", dir, "--for", "1s", q}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "held by a recorder whose API does not answer") {
		t.Errorf("exit %d: %s", code, errb.String())
	}

}

// TestHelperHoldStore is not a test: TestTraceJoinWhenStoreHeld runs the
// test binary through it, with HOLTER_TEST_HOLD_STORE set, to hold a store
// open for writing from another process until its stdin closes.
func TestHelperHoldStore(t *testing.T) {
	dir := os.Getenv("HOLTER_TEST_HOLD_STORE")
	if dir == "" {
		return
	}
	st, err := store.Open(dir, nil)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("held")
	io.Copy(io.Discard, os.Stdin)
	st.Close()
	os.Exit(0)
}
