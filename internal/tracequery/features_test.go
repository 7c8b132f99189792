package tracequery

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/testutil"
)

// onThread runs fn on a locked OS thread renamed name and returns once fn
// has; it may be called from any goroutine.
func onThread(t *testing.T, name string, fn func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the renamed thread ends with the goroutine
		if err := testutil.SetThreadName(name); err != nil {
			errc <- err
			return
		}
		fn()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Error(err)
	}
}

// TestSQLConstructsExact runs CASE, BETWEEN, IN, NOT IN, coalesce and
// DISTINCT over reads of known sizes: in the probe, and (forced by a
// function only user space has) in the evaluator; both give the counts
// the sizes imply, and EXPLAIN says where each part ran.
func TestSQLConstructsExact(t *testing.T) {
	testutil.RequireRoot(t)
	const r = 400
	_, pid, run := workload(t, 0, r, 0)
	q := `SELECT CASE WHEN count < 100 THEN 'small' WHEN count BETWEEN 100 AND 1000 THEN 'medium' ELSE 'large' END AS size,
		count() AS n, sum(coalesce(count, 0)) AS bytes
		FROM syscall.read WHERE pid = %d AND fd > 2 AND count IN (1, 100, 1000, 5000) AND count NOT IN (7, 8) %s GROUP BY size ORDER BY size`
	kernel := start(t, fmt.Sprintf(q, pid, ""), nil)
	user := start(t, fmt.Sprintf(q, pid, "AND lower(comm) = 'tracecalls'"), nil)
	distinct := start(t, fmt.Sprintf("SELECT DISTINCT count FROM syscall.read WHERE pid = %d AND fd > 2 ORDER BY count", pid), nil)
	if kernel.plan.Mode != ModeAggregate || user.plan.Mode != ModeStream || distinct.plan.Mode != ModeAggregate {
		t.Fatalf("modes %v %v %v, want the probe, user space, the probe", kernel.plan.Mode, user.plan.Mode, distinct.plan.Mode)
	}
	kx, _ := kernel.plan.Explain(false)
	ux, _ := user.plan.Explain(false)
	kk, _, _ := strings.Cut(kx, "user-space part:")
	_, uu, _ := strings.Cut(ux, "user-space part:")
	if !strings.Contains(kk, "group by: k0=CASE WHEN count < 100 THEN 'small' WHEN count BETWEEN 100 AND 1000 THEN 'medium' ELSE 'large' END string (the probe keeps the CASE's branch)") ||
		!strings.Contains(kk, "count IN (1, 100, 1000, 5000) AND count NOT IN (7, 8)") ||
		!strings.Contains(uu, "group by: k0=CASE WHEN count < 100") {
		t.Errorf("EXPLAIN does not say where CASE and IN run:\n%s\n%s", kx, ux)
	}
	run()
	time.Sleep(20 * time.Millisecond)
	want := fmt.Sprintf("[[large %d %d] [medium %d %d] [small %d %d]]", r/4, r/4*5000, r/2, r/4*1100, r/4, r/4)
	for _, s := range []*Session{kernel, user} {
		if got := fmt.Sprint(flush(t, s).Result.Rows); got != want {
			t.Errorf("%s mode: %s, want %s", map[Mode]string{ModeAggregate: "probe", ModeStream: "user-space"}[s.plan.Mode], got, want)
		}
	}
	if got := fmt.Sprint(flush(t, distinct).Result.Rows); got != "[[1] [100] [1000] [5000]]" {
		t.Errorf("DISTINCT count: %s", got)
	}
}

// TestDivisionByZeroCounted: an event whose division in the probe has a
// zero divisor is skipped and counted, not aggregated as 0.
func TestDivisionByZeroCounted(t *testing.T) {
	testutil.RequireRoot(t)
	const r = 200
	_, pid, run := workload(t, 0, r, 0)
	s := start(t, fmt.Sprintf("SELECT count() AS n, sum(count / (count - count)) AS s FROM syscall.read WHERE pid = %d AND fd > 2", pid), nil)
	run()
	iv := flush(t, s)
	if fmt.Sprint(iv.Result.Rows) != "[[0 0]]" || iv.Counters["div_zero"] != r {
		t.Errorf("rows %v, counters %v; want no event aggregated and div_zero=%d", iv.Result.Rows, iv.Counters, r)
	}
}

// TestPerEventRows runs a per-event query with a 10-second interval: each
// row reaches Row within milliseconds of its event, every event once; and
// one with LIMIT ends the run by itself once its rows went out.
func TestPerEventRows(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := EnsureTraceFS(); err != nil {
		t.Fatal(err)
	}
	const n = 300
	_, pid, run := workload(t, n, 0, 0)
	p, err := Compile(fmt.Sprintf("SELECT time, tid, comm FROM syscall.getppid WHERE pid = %d", pid), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.PerEvent {
		t.Fatal("not planned per event")
	}
	var mu sync.Mutex
	var lags []time.Duration
	attached := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, p, RunOptions{Interval: 10 * time.Second, Attached: func() { close(attached) },
			Row: func(row []any) error {
				now := time.Now().UnixNano()
				mu.Lock()
				lags = append(lags, time.Duration(now-row[0].(int64)))
				mu.Unlock()
				if row[2] != "tracecalls" {
					return fmt.Errorf("row %v of another thread", row)
				}
				return nil
			}}, func(iv *Interval) error {
			if len(iv.Counters) > 0 {
				return fmt.Errorf("lost %v", iv.Counters)
			}
			return nil
		})
	}()
	<-attached
	run()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := len(lags)
		mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	if len(lags) != n {
		t.Fatalf("%d rows, want %d", len(lags), n)
	}
	t.Logf("event to row: median %v, max %v", lags[n/2], lags[n-1])
	if lags[n/2] > 100*time.Millisecond || lags[n-1] > 3*time.Second {
		t.Errorf("event to row: median %v, max %v; want milliseconds, not the interval", lags[n/2], lags[n-1])
	}

	_, pid, run = workload(t, n, 0, 0)
	p, err = Compile(fmt.Sprintf("SELECT tid FROM syscall.getppid WHERE pid = %d LIMIT 10", pid), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	attached = make(chan struct{})
	go func() {
		<-attached
		run()
	}()
	err = Run(context.Background(), p, RunOptions{Interval: time.Hour, Attached: func() { close(attached) },
		Row: func([]any) error { rows++; return nil }}, func(*Interval) error { return nil })
	if err != nil || rows != 10 {
		t.Errorf("LIMIT 10: %d rows, %v", rows, err)
	}
}

// TestKernelData reads what a bpftrace user reaches for, on events whose
// answer is known: the sender of signals by task.comm where the
// tracepoint's comm is the target's, the same through the BTF
// tracepoint's argument, connections' destination by ntop(), a timer's
// function by ksym(), a user function by usym(ip), a library function by
// the library's name, syscall numbers by name, and time in Unix ns.
func TestKernelData(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := EnsureTraceFS(); err != nil {
		t.Fatal(err)
	}
	me := os.Getpid()
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	const k = 25
	signals := start(t, fmt.Sprintf(`SELECT task.comm AS sender, comm AS target, sig, count() AS n FROM tracepoint.signal.signal_generate
		WHERE task.pid = %d AND pid = %d GROUP BY sender, target, sig`, me, child.Process.Pid), nil)
	btfSignals := start(t, fmt.Sprintf(`SELECT task.comm AS sender, args.task.comm AS target, count() AS n FROM tp_btf.signal_generate
		WHERE task.pid = %d AND args.task.pid = %d GROUP BY sender, target`, me, child.Process.Pid), nil)
	connects := start(t, fmt.Sprintf(`SELECT ntop(daddr) AS dst, ntop(saddr) AS src, dport, task.comm AS who, count() AS n FROM tracepoint.sock.inet_sock_set_state
		WHERE newstate = 2 AND dport = %d GROUP BY dst, src, dport, who`, port), nil)
	timers := start(t, `SELECT ksym(function) AS f, count() AS n FROM tracepoint.timer.hrtimer_start WHERE task.comm = 'hsleep' GROUP BY f`, nil)
	onThread(t, "hsignal", func() {
		for i := 0; i < k; i++ {
			unix.Kill(child.Process.Pid, unix.SIGWINCH)
		}
	})
	onThread(t, "hconn", func() {
		for i := 0; i < k; i++ {
			if c, err := net.Dial("tcp4", ln.Addr().String()); err == nil {
				c.Close()
			}
		}
	})
	onThread(t, "hsleep", func() {
		for i := 0; i < k; i++ {
			unix.Nanosleep(&unix.Timespec{Nsec: 100000}, nil)
		}
	})
	time.Sleep(20 * time.Millisecond)
	if got := fmt.Sprint(flush(t, signals).Result.Rows); got != fmt.Sprintf("[[hsignal sleep 28 %d]]", k) {
		t.Errorf("signals by sender: %s, want [[hsignal sleep 28 %d]]", got, k)
	}
	if got := fmt.Sprint(flush(t, btfSignals).Result.Rows); got != fmt.Sprintf("[[hsignal sleep %d]]", k) {
		t.Errorf("signals by sender through tp_btf: %s, want [[hsignal sleep %d]]", got, k)
	}
	if got := fmt.Sprint(flush(t, connects).Result.Rows); got != fmt.Sprintf("[[127.0.0.1 127.0.0.1 %d hconn %d]]", port, k) {
		t.Errorf("connections: %s, want [[127.0.0.1 127.0.0.1 %d hconn %d]]", got, port, k)
	}
	// Timers an interrupt arms while the thread runs count as its too.
	if rows := flush(t, timers).Result.Rows; !strings.Contains(fmt.Sprint(rows), fmt.Sprintf("[hrtimer_wakeup %d]", k)) {
		t.Errorf("timers armed by nanosleep: %v, want [hrtimer_wakeup %d] among them", rows, k)
	}

	const n, m = 333, 555
	bin, pid, run, release := heldWorkload(t, n, 0, m, true)
	funcs := start(t, fmt.Sprintf("SELECT usym(ip) AS f, count() AS n FROM uprobe.%q.traced_add WHERE pid = %d GROUP BY f", bin, pid), nil)
	libc := start(t, fmt.Sprintf("SELECT count() AS n FROM uprobe.libc.syscall WHERE pid = %d", pid), nil)
	names := start(t, fmt.Sprintf("SELECT nr, count() AS n FROM syscall.any WHERE pid = %d AND nr IN ('getppid', 'nanosleep') AND nr <> 'nanosleep' GROUP BY nr", pid), nil)
	times := start(t, fmt.Sprintf("SELECT min(time) AS lo, max(time) AS hi, count() FROM syscall.getppid WHERE pid = %d", pid), nil)
	before := time.Now().UnixNano()
	run()
	after := time.Now().UnixNano()
	time.Sleep(20 * time.Millisecond)
	if got := fmt.Sprint(flush(t, funcs).Result.Rows); got != fmt.Sprintf("[[traced_add %d]]", m) {
		t.Errorf("usym(ip): %s, want [[traced_add %d]]", got, m)
	}
	release()
	if got := fmt.Sprint(flush(t, libc).Result.Rows); got != fmt.Sprintf("[[%d]]", n) {
		t.Errorf("uprobe.libc.syscall: %s, want [[%d]] (%s)", got, n, libc.plan.Source.Name)
	}
	if got := fmt.Sprint(flush(t, names).Result.Rows); got != fmt.Sprintf("[[getppid %d]]", n) {
		t.Errorf("syscall names: %s, want [[getppid %d]]", got, n)
	}
	row := flush(t, times).Result.Rows[0]
	lo, hi := row[0].(int64), row[1].(int64)
	if lo < before-int64(time.Millisecond) || hi > after+int64(time.Millisecond) || lo > hi || row[2] != int64(n) {
		t.Errorf("time: %d..%d over %v events, want within the run %d..%d (Unix ns)", lo, hi, row[2], before, after)
	}
}

// TestStackDepth keeps three frames of each kernel stack: no stack has
// more, every event is in one, and stacks alike in their first frames are
// one group (no more groups than with whole stacks, no two alike).
func TestStackDepth(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 500
	_, pid, run := workload(t, n, 0, 0)
	short := start(t, fmt.Sprintf("SELECT kstack(3) AS s, count() AS n FROM syscall.getppid WHERE pid = %d GROUP BY s", pid), nil)
	whole := start(t, fmt.Sprintf("SELECT kstack AS s, count() AS n FROM syscall.getppid WHERE pid = %d GROUP BY s", pid), nil)
	run()
	sr, wr := flush(t, short).Result.Rows, flush(t, whole).Result.Rows
	total := int64(0)
	seen := map[string]bool{}
	for _, r := range sr {
		s := r[0].(string)
		if strings.Count(s, ";") > 2 || s == "" || seen[s] {
			t.Errorf("kstack(3) gave %q (seen before: %v)", s, seen[s])
		}
		seen[s] = true
		total += r[1].(int64)
	}
	if total != n || len(sr) > len(wr) || len(wr) == 0 {
		t.Errorf("kstack(3): %d groups of %d events; kstack: %d groups; want %d events, no more groups", len(sr), total, len(wr), n)
	}
}

// TestTopKBound finds the heavy hitters of a skewed key with 8 slots per
// CPU: every count reported is at least the key's true count and at most
// its error above it, every error is within N/8, and every key truly
// heavier than N/8 is reported. The exact counts are the workload's.
func TestTopKBound(t *testing.T) {
	testutil.RequireRoot(t)
	const m, slots = 6000, 8
	key := func(i int64) int64 {
		if i%10 < 5 {
			return i % 5
		}
		return 100 + i%997
	}
	exact, weight := map[int64]int64{}, map[int64]int64{}
	for i := int64(0); i < m; i++ {
		exact[key(i)]++
		weight[key(i)] += 2 * i
	}
	bin, pid, run := workload(t, 0, 0, m)
	s := start(t, fmt.Sprintf(`SELECT topk(CASE WHEN arg0 %% 10 < 5 THEN arg0 %% 5 ELSE 100 + arg0 %% 997 END, %d) AS top,
		topk(CASE WHEN arg0 %% 10 < 5 THEN arg0 %% 5 ELSE 100 + arg0 %% 997 END, %d, arg1) AS heavy
		FROM uprobe.%q.traced_add WHERE pid = %d`, slots, slots, bin, pid), nil)
	run()
	row := flush(t, s).Result.Rows[0]
	for i, c := range []struct {
		name string
		want map[int64]int64
		n    int64
	}{{"by count", exact, m}, {"by weight", weight, 2 * m * (m - 1) / 2}} {
		got := map[int64]bool{}
		for _, e := range row[i].([]any) {
			en := e.(map[string]any)
			var v int64
			fmt.Sscan(en["value"].(string), &v)
			count, errb := en["count"].(int64), en["error"].(int64)
			got[v] = true
			if tr := c.want[v]; tr > count || tr < count-errb || errb > c.n/slots {
				t.Errorf("%s: key %d reported %d ±%d, true %d, bound N/k = %d", c.name, v, count, errb, tr, c.n/slots)
			}
		}
		for v, tr := range c.want {
			if tr > c.n/slots && !got[v] {
				t.Errorf("%s: key %d (true %d > N/k = %d) not reported: %v", c.name, v, tr, c.n/slots, row[i])
			}
		}
	}
}

// TestKMeansFindsTheOddThread clusters threads by their system calls:
// four threads mostly call getppid, one mostly reads; with two clusters,
// the reader is alone in its own.
func TestKMeansFindsTheOddThread(t *testing.T) {
	testutil.RequireRoot(t)
	s := start(t, fmt.Sprintf(`SELECT comm, kmeans(nr, 2) AS c, count() AS n FROM syscall.any
		WHERE pid = %d AND comm LIKE 'km-%%' GROUP BY comm ORDER BY comm`, os.Getpid()), nil)
	f, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 16)
	var wg sync.WaitGroup
	for _, name := range []string{"km-a", "km-b", "km-c", "km-d", "km-odd"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			onThread(t, name, func() {
				calls, reads := 300, 30
				if name == "km-odd" {
					calls, reads = 30, 300
				}
				for i := 0; i < calls; i++ {
					unix.Getppid()
				}
				for i := 0; i < reads; i++ {
					unix.Read(int(f.Fd()), buf)
				}
			})
		}()
	}
	wg.Wait()
	rows := flush(t, s).Result.Rows
	if len(rows) != 5 {
		t.Fatalf("%d threads: %v", len(rows), rows)
	}
	for _, r := range rows {
		c := r[1].(map[string]any)
		wantCluster, wantMembers := int64(0), int64(4)
		if r[0] == "km-odd" {
			wantCluster, wantMembers = 1, 1
		}
		if c["cluster"] != wantCluster || c["members"] != wantMembers {
			t.Errorf("%v: %v, want cluster %d of %d", r[0], c, wantCluster, wantMembers)
		}
	}
}

// TestSlidingWindow answers over the last three intervals: the calls made
// right after each flush (so in the next interval) are summed over their
// window exactly.
func TestSlidingWindow(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := EnsureTraceFS(); err != nil {
		t.Fatal(err)
	}
	p, err := Compile("SELECT count() AS n, sum(1) AS s FROM syscall.getppid WHERE comm = 'hwindow'", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	bursts := []int{5, 11, 17, 23, 29, 31}
	calls := make(chan int)
	done := make(chan struct{})
	go func() {
		onThread(t, "hwindow", func() {
			for k := range calls {
				for i := 0; i < k; i++ {
					unix.Getppid()
				}
				done <- struct{}{}
			}
		})
	}()
	defer close(calls)
	var got []int64
	i := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = Run(ctx, p, RunOptions{Interval: 300 * time.Millisecond, Window: 900 * time.Millisecond}, func(iv *Interval) error {
		got = append(got, iv.Result.Rows[0][0].(int64))
		if i == len(bursts) {
			cancel()
			return nil
		}
		calls <- bursts[i]
		<-done
		i++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for j := 1; j < len(got) && j <= len(bursts); j++ {
		want := 0
		for b := max(0, j-3); b < j; b++ {
			want += bursts[b]
		}
		if got[j] != int64(want) {
			t.Errorf("window %d: %d, want %d (all: %v)", j, got[j], want, got)
		}
	}
	if got[0] != 0 || len(got) < len(bursts) {
		t.Errorf("windows %v", got)
	}
}

// TestListFunctions lists a library's functions by a wildcard, found by
// the library's name, and a binary's by its path.
func TestListFunctions(t *testing.T) {
	ls, err := (&Catalog{}).List("uprobe.libc.getppi*")
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || !strings.HasSuffix(ls[0].Source, ".getppid") || !strings.Contains(ls[0].Source, "libc.so") || len(ls[0].Fields) == 0 {
		t.Errorf("uprobe.libc.getppi*: %+v", ls)
	}
	ls, err = (&Catalog{}).List(`uretprobe."/bin/bash".readlin*`)
	if err != nil || len(ls) == 0 || ls[0].Source != `uretprobe."/bin/bash".readline` {
		t.Errorf(`uretprobe."/bin/bash".readlin*: %+v %v`, ls, err)
	}
	if _, err := (&Catalog{}).List("uprobe.nosuchlibrary.x*"); err == nil || !strings.Contains(err.Error(), "no library nosuchlibrary") {
		t.Errorf("unknown library: %v", err)
	}
}
