package tracequery

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// workload starts tracecalls waiting at its gate; open the gate with the
// returned function, which waits for the workload to finish.
func workload(t *testing.T, n, r, m int) (bin string, pid int, run func()) {
	t.Helper()
	bin, pid, run, _ = heldWorkload(t, n, r, m, false)
	return bin, pid, run
}

// heldWorkload is workload; with hold, the workload then waits until
// release, and run returns once its calls are made.
func heldWorkload(t *testing.T, n, r, m int, hold bool) (bin string, pid int, run, release func()) {
	t.Helper()
	bin = testutil.BuildWorkload(t, "tracecalls")
	dir := t.TempDir()
	gate, held := filepath.Join(dir, "gate"), filepath.Join(dir, "held")
	args := []string{gate, fmt.Sprint(n), fmt.Sprint(r), fmt.Sprint(m)}
	if hold {
		if err := os.WriteFile(held, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, held)
	}
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitGateLoop(t, cmd.Process.Pid)
	wait := func() {
		t.Helper()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("workload: %v", err)
		}
	}
	return bin, cmd.Process.Pid, func() {
			t.Helper()
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if !hold {
				wait()
				return
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				if _, err := os.Stat(held + ".ran"); err == nil {
					return
				}
				if time.Now().After(deadline) {
					t.Fatal("the workload did not make its calls in 10 s")
				}
			}
		}, func() {
			os.Remove(held)
			wait()
		}
}

// waitGateLoop waits until the workload sleeps in its gate loop: until
// then the dynamic loader's own reads (libc's ELF header) belong to it,
// and a probe attached meanwhile would count them.
func waitGateLoop(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if err != nil {
			t.Fatalf("workload %d: %v", pid, err)
		}
		// nanosleep (35) or clock_nanosleep (230) on x86-64.
		if nr, _, _ := strings.Cut(string(b), " "); nr == "35" || nr == "230" {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("workload %d did not reach its gate loop in 10 s", pid)
}

func start(t *testing.T, q string, opts *Options) *Session {
	t.Helper()
	if _, err := EnsureTraceFS(); err != nil {
		t.Fatal(err)
	}
	p, err := Compile(q, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func flush(t *testing.T, s *Session) *Interval {
	t.Helper()
	iv, err := s.Flush(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return iv
}

func TestExactCounts(t *testing.T) {
	testutil.RequireRoot(t)
	const n, r, m = 1234, 400, 777
	bin, pid, run := workload(t, n, r, m)
	getppid := start(t, fmt.Sprintf("SELECT comm, count() AS n FROM syscall.getppid WHERE pid = %d GROUP BY comm", pid), nil)
	reads := start(t, fmt.Sprintf(`SELECT count() AS n, sum(ret) AS bytes, min(count) AS lo, max(count) AS hi,
		hist(ret) AS h, lhist(count, 0, 6000, 1000) AS lh, count_distinct(count) AS sizes
		FROM syscall.read WHERE pid = %d AND fd > 2`, pid), nil)
	calls := start(t, fmt.Sprintf(`SELECT count() AS n, sum(arg0) AS a, sum(arg1) AS b, sum(ret) AS ret, min(latency) >= 0 AS ok
		FROM uprobe.%q.traced_add WHERE pid = %d`, bin, pid), nil)
	entries := start(t, fmt.Sprintf(`SELECT arg0 %% 3 AS k, count() AS n FROM uprobe.%q.traced_add GROUP BY k ORDER BY k`, bin), nil)
	run()
	time.Sleep(20 * time.Millisecond)

	row := func(iv *Interval, cols ...string) []any {
		t.Helper()
		if len(iv.Result.Rows) != 1 {
			t.Fatalf("%d rows, want 1: %v", len(iv.Result.Rows), iv.Result.Rows)
		}
		return iv.Result.Rows[0]
	}
	if got := row(flush(t, getppid)); got[0] != "tracecalls" || got[1] != int64(n) {
		t.Errorf("getppid by comm = %v, want [tracecalls %d]", got, n)
	}
	iv := flush(t, reads)
	got := row(iv)
	wantBytes := int64(r / 4 * (1 + 100 + 1000 + 5000))
	if got[0] != int64(r) || got[1] != wantBytes || got[2] != int64(1) || got[3] != int64(5000) || got[6] != int64(4) {
		t.Errorf("reads = %v, want n=%d bytes=%d lo=1 hi=5000 sizes=4", got, r, wantBytes)
	}
	// log2: 1 in [1,2), 100 in [64,128), 1000 in [512,1K), 5000 in [4K,8K).
	wantHist := map[int64]int64{1: r / 4, 64: r / 4, 512: r / 4, 4096: r / 4}
	checkBuckets(t, "hist(ret)", got[4], wantHist)
	// linear 0..6000 by 1000: 1, 100 and 1000-… : [0,1000) has 1 and 100.
	checkBuckets(t, "lhist(count)", got[5], map[int64]int64{0: r / 2, 1000: r / 4, 5000: r / 4})
	if len(iv.Counters) != 0 {
		t.Errorf("losses on a quiet workload: %v", iv.Counters)
	}
	got = row(flush(t, calls))
	sumI := int64(m * (m - 1) / 2)
	if got[0] != int64(m) || got[1] != sumI || got[2] != 2*sumI || got[3] != 3*sumI || got[4] != true {
		t.Errorf("traced_add = %v, want n=%d a=%d b=%d ret=%d ok=true", got, m, sumI, 2*sumI, 3*sumI)
	}
	rows := flush(t, entries).Result.Rows
	if len(rows) != 3 || rows[0][1] != int64(259) || rows[1][1] != int64(259) || rows[2][1] != int64(259) {
		t.Errorf("traced_add entries by arg0%%3 = %v, want 259 each", rows)
	}
}

func checkBuckets(t *testing.T, what string, v any, want map[int64]int64) {
	t.Helper()
	got := map[int64]int64{}
	l, _ := v.([]any)
	for _, e := range l {
		b := e.(map[string]any)
		got[toInt(b["lo"])] = toInt(b["count"])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s buckets = %v, want %v", what, got, want)
	}
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int32:
		return int64(x)
	case uint64:
		return int64(x)
	}
	return -1
}

// TestMapFullAccounting overloads a tiny map: every event is either in a
// group or counted as dropped, never silently lost.
func TestMapFullAccounting(t *testing.T) {
	testutil.RequireRoot(t)
	const m = 5000
	bin, pid, run := workload(t, 0, 0, m)
	s := start(t, fmt.Sprintf(`SELECT arg0 AS k, count() AS n FROM uprobe.%q.traced_add WHERE pid = %d GROUP BY k`, bin, pid),
		&Options{MapSize: 64})
	run()
	iv := flush(t, s)
	var kept int64
	for _, r := range iv.Result.Rows {
		kept += r[1].(int64)
	}
	dropped := int64(iv.Counters["map_full"])
	if len(iv.Result.Rows) > 64 || dropped == 0 || kept+dropped != m {
		t.Errorf("%d groups, %d events kept + %d dropped = %d, want ≤64 groups and %d in all", len(iv.Result.Rows), kept, dropped, kept+dropped, m)
	}
}

// TestStreamRingLost overloads a small ring buffer with a streaming query.
func TestStreamRingLost(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 20000
	_, pid, run := workload(t, n, 0, 0)
	s := start(t, fmt.Sprintf(`SELECT tid, time FROM syscall.getppid WHERE pid = %d`, pid), &Options{RingSize: 4096})
	run()
	iv := flush(t, s)
	got, lost := int64(len(iv.Result.Rows)), int64(iv.Counters["ring_lost"])
	if got+lost != n || lost == 0 {
		t.Errorf("%d rows + %d lost = %d, want %d with some lost", got, lost, got+lost, n)
	}
}

func TestIntervalsSplitEvents(t *testing.T) {
	testutil.RequireRoot(t)
	_, pid, run := workload(t, 300, 0, 0)
	s := start(t, fmt.Sprintf(`SELECT count() AS n FROM syscall.getppid WHERE pid = %d`, pid), nil)
	before := flush(t, s)
	run()
	after := flush(t, s)
	empty := flush(t, s)
	if len(before.Result.Rows) != 1 || before.Result.Rows[0][0] != int64(0) {
		t.Errorf("before: %v", before.Result.Rows)
	}
	if after.Result.Rows[0][0] != int64(300) || empty.Result.Rows[0][0] != int64(0) {
		t.Errorf("after: %v, next: %v; want 300 then 0", after.Result.Rows, empty.Result.Rows)
	}
}

// TestStreamModeAggregates runs the same aggregates twice over one
// workload: pushed into the probe, and in user space because a DuckDB
// function in WHERE forces stream mode. hist, lhist and the quantiles must
// give the same answer both ways, and the known one; sample() the values
// at counts 1, 2, 4, ….
func TestStreamModeAggregates(t *testing.T) {
	testutil.RequireRoot(t)
	const r = 400
	_, pid, run := workload(t, 0, r, 0)
	sel := `SELECT comm, count() AS n, hist(ret) AS h, lhist(count, 0, 6000, 1000) AS lh, p50(ret) AS p50, p99(ret) AS p99,
		quantile(ret, 0.9) AS q90, count_distinct(count) AS sizes, sample(count) AS s FROM syscall.read WHERE pid = %d AND fd > 2 %s GROUP BY comm`
	kernel := start(t, fmt.Sprintf(sel, pid, ""), nil)
	user := start(t, fmt.Sprintf(sel, pid, "AND upper(comm) = 'TRACECALLS'"), nil)
	if kernel.plan.Mode != ModeAggregate || user.plan.Mode != ModeStream {
		t.Fatalf("modes %v and %v, want aggregate and stream", kernel.plan.Mode, user.plan.Mode)
	}
	run()
	time.Sleep(20 * time.Millisecond)
	k, u := flush(t, kernel).Result, flush(t, user).Result
	if len(k.Rows) != 1 || len(u.Rows) != 1 {
		t.Fatalf("rows: kernel %v, user space %v; want one each", k.Rows, u.Rows)
	}
	for i, col := range k.Columns {
		// The probe keeps sample() per map cell, and hist and lhist make
		// a cell per bucket: its union of samples differs by design.
		if col != "s" && fmt.Sprint(k.Rows[0][i]) != fmt.Sprint(u.Rows[0][i]) {
			t.Errorf("%s: kernel %v, user space %v", col, k.Rows[0][i], u.Rows[0][i])
		}
	}
	got := u.Rows[0]
	if got[0] != "tracecalls" || got[1] != int64(r) || got[7] != int64(4) {
		t.Errorf("user space: comm %v n %v sizes %v, want tracecalls %d 4", got[0], got[1], got[7], r)
	}
	checkBuckets(t, "user-space hist(ret)", got[2], map[int64]int64{1: r / 4, 64: r / 4, 512: r / 4, 4096: r / 4})
	checkBuckets(t, "user-space lhist(count)", got[3], map[int64]int64{0: r / 2, 1000: r / 4, 5000: r / 4})
	// The sizes cycle 1, 100, 1000, 5000: the values at counts 1, 2, 4, 8…
	if fmt.Sprint(got[8]) != "[1 100 5000 5000 5000 5000 5000 5000]" {
		t.Errorf("sample(count) = %v, want [1 100 5000 5000 5000 5000 5000 5000]", got[8])
	}
	// p99 of {1, 100, 1000, 5000} × 100 lies in 5000's log-linear bucket [4096, 5120).
	if p := got[5].(float64); p < 4096 || p >= 5120 {
		t.Errorf("p99(ret) = %v, want in [4096, 5120)", p)
	}
}
