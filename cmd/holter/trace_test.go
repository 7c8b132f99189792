package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestTraceJoinsRecordingStandalone: with no recorder running, holter
// trace --data DIR attaches the recording read-only and joins live counts
// with its table; --explain shows the join in the user-space part.
func TestTraceJoinsRecordingStandalone(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	st, err := store.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = st.WriteEpoch(context.Background(), &store.Epoch{Host: "h", Epoch: 1, StartNs: 1, EndNs: 2,
		Vitals:  []store.Vital{{Name: "cpu", Events: 1}},
		Samples: []store.Sample{{TsNs: 1, Vital: "cpu", Weight: 4242, EstCount: 1, Comm: "clijoin"}}})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
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
	out.Reset()
	errb.Reset()
	code := run([]string{"trace", "--data", dir, "--interval", "200ms", "--for", "700ms", "--json", q}, &out, &errb)
	stop()
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var calls float64
	lines := 0
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var l struct{ Rows []map[string]any }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines++
		for _, r := range l.Rows {
			if r["comm"] != "clijoin" || r["cpu_ns"] != float64(4242) {
				t.Errorf("row %v, want clijoin with cpu_ns 4242", r)
			}
			calls += r["calls"].(float64)
		}
	}
	if lines < 3 || calls == 0 {
		t.Errorf("%d intervals, %v calls; want ≥3 and some:\n%s", lines, calls, out.String())
	}

	// A table the recording lacks is named as a table, not a source.
	errb.Reset()
	bad := strings.Replace(q, "FROM samples", "FROM sampels", 1)
	if code := run([]string{"trace", "--data", dir, "--for", "1s", bad}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "unknown table sampels: not in WITH, and not a recorded table") {
		t.Errorf("misspelt table: exit %d, %s", code, errb.String())
	}
}
