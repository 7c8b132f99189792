package account

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// A thread that burns a known amount of CPU, then writes and fsyncs a file,
// is recorded with that CPU (±10%), blocked time whose kernel stack is
// below the fsync, the 1 MiB of block I/O (submitted by itself or flushed
// for it), and the 1 MiB of page cache it dirtied. A second 1 MiB it only
// dirties, flushed by another process, is written back on its behalf.
func TestAccountsOneThreadExactly(t *testing.T) {
	testutil.RequireRoot(t)
	// A process that is not tracked (started before the test's process
	// is, so not its tracked child) flushes the second file when told.
	flusher := exec.Command("sh", "-c", `read f && sync "$f" && echo synced`)
	toFlusher, _ := flusher.StdinPipe()
	fromFlusher, _ := flusher.StdoutPipe()
	if err := flusher.Start(); err != nil {
		t.Fatal(err)
	}
	defer flusher.Wait()
	defer toFlusher.Close()
	st := openStore(t)
	a, stop := startAccountant(t, Options{Host: "h", Write: st.WriteThreadActivity, FlushEvery: 100 * time.Millisecond, KStackMin: -1})
	if err := a.Track(uint32(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)

	type result struct {
		tid            int
		t0, t1, t2, t3 int64
		cpu            time.Duration
	}
	res := make(chan result)
	file := filepath.Join(t.TempDir(), "data")
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r := result{tid: unix.Gettid(), t0: time.Now().UnixNano()}
		c0 := threadCPU()
		for threadCPU()-c0 < 150*time.Millisecond {
		}
		r.cpu = threadCPU() - c0
		// The data's pages are touched first: a copy from a page not yet
		// faulted in comes up short, and the kernel marks the folio dirty
		// for its zeroed blocks before it retries the copy; a sync of
		// someone else's in between cleans it, and the retry dirties it
		// again, which the kernel counts twice (2 MiB for the 1 MiB, 1 in 4
		// runs under stress-ng --io).
		data := make([]byte, 1<<20)
		for i := 0; i < len(data); i += 4096 {
			data[i] = 1
		}
		r.t1 = time.Now().UnixNano()
		f, _ := os.Create(file)
		f.Write(data)
		f.Sync()
		f.Close()
		r.t2 = time.Now().UnixNano()
		os.WriteFile(file+"2", data, 0o600)
		r.t3 = time.Now().UnixNano()
		res <- r
	}()
	r := <-res
	fmt.Fprintln(toFlusher, file+"2")
	if line, err := bufio.NewReader(fromFlusher).ReadString('\n'); err != nil || line != "synced\n" {
		t.Fatalf("flusher: %q %v", line, err)
	}
	time.Sleep(300 * time.Millisecond)
	stop()

	var cpu, blocked, ioBytes int64
	var sites []string
	q := func(sql string) *store.Result {
		t.Helper()
		out, err := st.Query(context.Background(), sql)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The time of kind between a and b: an on-CPU interval's by the
	// thread's CPU clock (ns), in proportion to the part inside.
	over := func(kind string, a, b int64) int64 {
		out := q(`SELECT coalesce(sum((least(end_ns, ` + i64(b) + `) - greatest(start_ns, ` + i64(a) + `)) *
			coalesce(ns, end_ns - start_ns) / greatest(end_ns - start_ns, 1)), 0)::BIGINT
			FROM thread_activity WHERE kind = '` + kind + `' AND tid = ` + i64(int64(r.tid)) +
			` AND start_ns < ` + i64(b) + ` AND end_ns > ` + i64(a))
		return out.Rows[0][0].(int64)
	}
	cpu = over("cpu", r.t0, r.t1)
	blocked = over("blocked", r.t1, r.t2)
	out := q(`SELECT coalesce(sum(bytes), 0)::BIGINT FROM thread_activity WHERE kind = 'io' AND tid = ` + i64(int64(r.tid)))
	ioBytes = out.Rows[0][0].(int64)
	// Write-back a kernel flusher did of the file the thread dirtied is
	// charged back to the thread, when it dirtied the file.
	ino1, ino2 := inode(t, file), inode(t, file+"2")
	out = q(`SELECT coalesce(sum(bytes), 0)::BIGINT, count(*), count(*) FILTER (WHERE dirtied_ns BETWEEN ` + i64(r.t1) + ` AND ` + i64(r.t2) + `)
		FROM thread_activity WHERE kind = 'writeback' AND tid = ` + i64(int64(r.tid)) + ` AND ino = ` + i64(ino1))
	wbBytes, wbN, wbInSpan := out.Rows[0][0].(int64), out.Rows[0][1].(int64), out.Rows[0][2].(int64)
	out = q(`SELECT coalesce(sum(bytes), 0)::BIGINT, count(*) FILTER (WHERE start_ns NOT BETWEEN ` + i64(r.t1) + ` AND ` + i64(r.t2) + `)
		FROM thread_activity WHERE kind = 'dirty' AND tid = ` + i64(int64(r.tid)) + ` AND ino = ` + i64(ino1))
	dirtied, dirtiedOutside := out.Rows[0][0].(int64), out.Rows[0][1].(int64)
	out = q(`SELECT DISTINCT kstack[1] FROM thread_activity WHERE kind = 'blocked' AND tid = ` + i64(int64(r.tid)) +
		` AND start_ns >= ` + i64(r.t1) + ` AND kstack IS NOT NULL`)
	for _, row := range out.Rows {
		sites = append(sites, row[0].(string))
	}
	t.Logf("thread %d: burnt %v (thread clock), recorded cpu %v; fsync: blocked %v at %v, %d bytes of own block I/O, "+
		"%d bytes written back for it by others in %d requests; dirtied %d bytes of the file",
		r.tid, r.cpu, time.Duration(cpu), time.Duration(blocked), sites, ioBytes, wbBytes, wbN, dirtied)
	if ratio := float64(cpu) / float64(r.cpu); ratio < 0.9 || ratio > 1.1 {
		t.Errorf("recorded CPU %v is not within 10%% of the thread's %v", time.Duration(cpu), r.cpu)
	}
	if blocked <= 0 || len(sites) == 0 {
		t.Errorf("no blocked time with a kernel site recorded during fsync")
	}
	// A kernel worker may flush part of the 1 MiB before fsync does: the
	// thread is charged what it submitted itself plus that write-back.
	if ioBytes+wbBytes < 1<<20 || ioBytes+wbBytes > 1<<20+256<<10 {
		t.Errorf("block I/O charged to the thread: %d bytes own + %d written back, want the 1 MiB it wrote", ioBytes, wbBytes)
	}
	if wbN != wbInSpan {
		t.Errorf("%d of %d write-back requests are charged outside the write (dirtied_ns)", wbN-wbInSpan, wbN)
	}
	if dirtied != 1<<20 || dirtiedOutside != 0 {
		t.Errorf("page cache of the file dirtied: %d bytes (%d records outside the write), want 1 MiB", dirtied, dirtiedOutside)
	}
	out = q(`SELECT coalesce(sum(bytes), 0)::BIGINT, count(*) FILTER (WHERE dirtied_ns NOT BETWEEN ` + i64(r.t2) + ` AND ` + i64(r.t3) + `)
		FROM thread_activity WHERE kind = 'writeback' AND tid = ` + i64(int64(r.tid)) + ` AND ino = ` + i64(ino2))
	flushed, outside := out.Rows[0][0].(int64), out.Rows[0][1].(int64)
	out = q(`SELECT coalesce(sum(bytes), 0)::BIGINT FROM thread_activity WHERE kind = 'dirty' AND tid = ` + i64(int64(r.tid)) +
		` AND start_ns BETWEEN ` + i64(r.t2) + ` AND ` + i64(r.t3) + ` AND ino = ` + i64(ino2))
	dirtied2 := out.Rows[0][0].(int64)
	t.Logf("second file: dirtied %d bytes, %d bytes written back for the thread by the untracked sync", dirtied2, flushed)
	if dirtied2 != 1<<20 || flushed != 1<<20 || outside != 0 {
		t.Errorf("second file: dirtied %d bytes, written back %d bytes (%d requests charged outside the write), want 1 MiB and 1 MiB",
			dirtied2, flushed, outside)
	}
	if s := a.Stats(); s.Lost != 0 || !s.Attached || s.Tracked != 1 {
		t.Errorf("stats %+v", s)
	}
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// threadTimes lists, per thread of process pid, the time stored of each
// kind and the span the rows cover: where a thread's kinds do not add up
// to its span, intervals are missing.
func threadTimes(t *testing.T, st *store.Store, pid uint32) string {
	t.Helper()
	out, err := st.Query(context.Background(), fmt.Sprintf(`SELECT tid,
		(max(end_ns) - min(start_ns))::BIGINT,
		coalesce(sum(coalesce(ns, end_ns - start_ns)) FILTER (WHERE kind = 'cpu'), 0)::BIGINT,
		coalesce(sum(coalesce(ns, end_ns - start_ns)) FILTER (WHERE kind = 'runnable'), 0)::BIGINT,
		coalesce(sum(coalesce(ns, end_ns - start_ns)) FILTER (WHERE kind = 'blocked'), 0)::BIGINT,
		count(*) FROM thread_activity WHERE pid = %d GROUP BY tid ORDER BY tid`, pid))
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, r := range out.Rows {
		fmt.Fprintf(&b, "  tid %d: rows cover %v: cpu %v, runnable %v, blocked %v (%d rows)\n", r[0], time.Duration(r[1].(int64)),
			time.Duration(r[2].(int64)), time.Duration(r[3].(int64)), time.Duration(r[4].(int64)), r[5])
	}
	return b.String()
}

// startAccountant runs an accountant until stop, which commits what is left.
func startAccountant(t *testing.T, opts Options) (a *Accountant, stop func()) {
	t.Helper()
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	return a, func() { cancel(); <-done }
}

// accountSelf runs an accountant tracking the test's own process, and
// returns it, what stops it and the pid.
func accountSelf(t *testing.T, opts Options) (a *Accountant, stop func(), pid uint32) {
	t.Helper()
	a, stop = startAccountant(t, opts)
	pid = uint32(os.Getpid())
	if err := a.Track(pid); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	return a, stop, pid
}

// burst is a run of CPU one thread burnt, from t0 to t1 (wall ns).
type burst struct {
	tid    int
	t0, t1 int64
	cpu    time.Duration
}

// burnOnThread runs work on one locked OS thread, giving it the thread's
// CPU time spent so far, and returns the burst. The thread then sleeps a
// little, so its last on-CPU interval has ended when this returns.
func burnOnThread(work func(spent func() time.Duration)) burst {
	var r burst
	done := make(chan bool)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r.tid, r.t0 = unix.Gettid(), time.Now().UnixNano()
		c0 := threadCPU()
		work(func() time.Duration { return threadCPU() - c0 })
		r.cpu = threadCPU() - c0
		r.t1 = time.Now().UnixNano()
		time.Sleep(20 * time.Millisecond)
		done <- true
	}()
	<-done
	return r
}

// onCPU0 keeps the calling OS thread (locked) on CPU 0.
func onCPU0() error {
	var cpu0 unix.CPUSet
	cpu0.Set(0)
	return unix.SchedSetaffinity(0, &cpu0)
}

// spin burns d of the calling thread's CPU time.
func spin(d time.Duration) {
	for c := threadCPU(); threadCPU()-c < d; {
	}
}

func inode(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Ino)
}

func i64(v int64) string { return strconv.FormatInt(v, 10) }

// The test binary doubles as two child processes. With HOLTER_TEST_BURN,
// it is the process TestTracksProcessesFromExec starts: it burns that much
// CPU on one thread, then runs a shell loop (a forked child running
// another program). With HOLTER_TEST_HOG=ON/OFF, it is checkWakeSplit's
// hog: a real-time thread on CPU 0 that burns ON of CPU and sleeps OFF,
// until killed.
func TestMain(m *testing.M) {
	if on, off, ok := strings.Cut(os.Getenv("HOLTER_TEST_HOG"), "/"); ok {
		os.Exit(hog(on, off))
	}
	if d, err := time.ParseDuration(os.Getenv("HOLTER_TEST_BURN")); err == nil {
		runtime.LockOSThread()
		spin(d)
		sh := exec.Command("sh", "-c", `i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done`)
		if err := sh.Run(); err != nil {
			os.Exit(3)
		}
		fmt.Println(sh.Process.Pid)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// hog runs HOLTER_TEST_HOG's child (see TestMain); it says "ready" once
// real-time on CPU 0.
func hog(on, off string) int {
	busy, err1 := time.ParseDuration(on)
	idle, err2 := time.ParseDuration(off)
	runtime.LockOSThread()
	if err := errors.Join(err1, err2, onCPU0(), unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 1}, 0)); err != nil {
		fmt.Fprintln(os.Stderr, "hog:", err)
		return 3
	}
	fmt.Println("ready")
	ts := unix.NsecToTimespec(int64(idle))
	for {
		spin(busy)
		unix.Nanosleep(&ts, nil)
	}
}

// A process started after the accountant, matched by program name or by
// executable at its exec — or running an executable whose processes sent
// spans before (FollowExes) — is accounted from its start: all the CPU it
// burns (its rusage) is recorded, and so are the threads of a process it
// forks.
func TestTracksProcessesFromExec(t *testing.T) {
	testutil.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Two copies of the test binary under names no other process has.
	dir := t.TempDir()
	byComm := filepath.Join(dir, fmt.Sprintf("hacct%d", os.Getpid()%1000000))
	byExe := filepath.Join(dir, "by-exe")
	for _, p := range []string{byComm, byExe} {
		b, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	st := openStore(t)
	if _, err := New(Options{Host: "h", Write: st.WriteThreadActivity, Comms: []string{"a-name-longer-than-15"}}); err == nil {
		t.Errorf("a program name longer than the kernel keeps is accepted")
	}
	if _, err := New(Options{Host: "h", Write: st.WriteThreadActivity, Exes: []string{filepath.Join(dir, "missing")}}); err == nil {
		t.Errorf("a missing executable is accepted")
	}
	a, stop := startAccountant(t, Options{Host: "h", Write: st.WriteThreadActivity, FlushEvery: 100 * time.Millisecond,
		Comms: []string{filepath.Base(byComm)}, Exes: []string{byExe}, FollowExes: true})

	type child struct {
		pid, shPid uint32
		cpu        time.Duration
		started    int64
	}
	var children []child
	// A third copy is matched by no rule: tracked from its spans (Track)
	// while running, it makes the next process of it tracked from exec.
	followed := filepath.Join(dir, "followed")
	b, _ := os.ReadFile(self)
	if err := os.WriteFile(followed, b, 0o755); err != nil {
		t.Fatal(err)
	}
	first := exec.Command(followed)
	first.Env = append(os.Environ(), "HOLTER_TEST_BURN=300ms")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	if err := a.Track(uint32(first.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	for _, prog := range []string{byComm, byExe, followed} {
		cmd := exec.Command(prog)
		cmd.Env = append(os.Environ(), "HOLTER_TEST_BURN=200ms")
		started := time.Now().UnixNano()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", prog, err)
		}
		sh, _ := strconv.Atoi(string(out[:len(out)-1]))
		ps := cmd.ProcessState
		children = append(children, child{uint32(cmd.Process.Pid), uint32(sh), ps.UserTime() + ps.SystemTime(), started})
	}
	time.Sleep(300 * time.Millisecond)
	stop()

	for _, c := range children {
		out, err := st.Query(context.Background(), fmt.Sprintf(`SELECT
			(SELECT coalesce(sum(coalesce(ns, end_ns - start_ns)), 0)::BIGINT FROM thread_activity WHERE kind = 'cpu' AND pid IN (%d, %[2]d)),
			(SELECT count(*) FROM thread_activity WHERE kind = 'cpu' AND pid = %[2]d),
			(SELECT coalesce(sum(coalesce(ns, end_ns - start_ns)), 0)::BIGINT FROM thread_activity WHERE kind = 'cpu' AND pid = %[2]d)`, c.pid, c.shPid))
		if err != nil {
			t.Fatal(err)
		}
		cpu, shRuns, shCPU := out.Rows[0][0].(int64), out.Rows[0][1].(int64), time.Duration(out.Rows[0][2].(int64))
		since, ok := a.Since(a.opts.Host, c.pid)
		if _, elsewhere := a.Since("elsewhere", c.pid); elsewhere {
			t.Errorf("process %d of another host is accounted here", c.pid)
		}
		// The rusage wait returns includes the shell it waited for.
		t.Logf("process %d and its shell: rusage cpu %v, recorded %v; the shell %d ran %d times, %v; accounted since start+%v",
			c.pid, c.cpu, time.Duration(cpu), c.shPid, shRuns, shCPU, time.Duration(since-c.started))
		if ratio := float64(cpu) / float64(c.cpu); ratio < 0.9 || ratio > 1.1 {
			t.Errorf("process %d: recorded CPU %v is not within ±10%% of its rusage %v (stats %+v); its threads:\n%s",
				c.pid, time.Duration(cpu), c.cpu, a.Stats(), threadTimes(t, st, c.pid))
		}
		if !ok || since < c.started || since > c.started+int64(time.Second) {
			t.Errorf("process %d: accounted since %v (%v), want from its exec", c.pid, since, ok)
		}
		if shRuns == 0 {
			t.Errorf("the shell process %d that process %d forked is not accounted", c.shPid, c.pid)
		}
	}
	s := a.Stats()
	t.Logf("stats %+v", s)
	if s.FromExec < 6 || s.Rules != 3 || s.Lost != 0 {
		t.Errorf("stats %+v, want ≥ 6 processes tracked from exec or fork, 3 rules (2 given, 1 followed)", s)
	}
}

// With HoldUnnamed, the intervals of a thread are stored once a span names
// it — those from before the naming too — and a thread no span names is
// not stored.
func TestHoldsThreadsUntilASpanNamesThem(t *testing.T) {
	testutil.RequireRoot(t)
	st := openStore(t)
	a, stop := startAccountant(t, Options{Host: "h", Write: st.WriteThreadActivity, FlushEvery: 100 * time.Millisecond,
		HoldUnnamed: 700 * time.Millisecond})
	pid := uint32(os.Getpid())
	if err := a.Track(pid); err != nil {
		t.Fatal(err)
	}
	// Many short on-CPU intervals, a millisecond's sleep apart, for 1.5 s
	// of wall time: more than the hold, so that the unnamed thread's first
	// ones are dropped before its last ones are read, and hundreds within
	// the hold before the naming.
	burn := func(tids chan<- int) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tids <- unix.Gettid()
		for began := time.Now(); time.Since(began) < 1500*time.Millisecond; {
			time.Sleep(time.Millisecond)
		}
		tids <- 0
	}
	named, unnamed := make(chan int, 2), make(chan int, 2)
	go burn(named)
	go burn(unnamed)
	tn, tu := <-named, <-unnamed
	<-named
	<-unnamed
	time.Sleep(300 * time.Millisecond) // read from the ring, held
	a.SpanThreads([][2]uint32{{pid, uint32(tn)}})
	count := func(tid int) int64 {
		out, err := st.Query(context.Background(), `SELECT count(*) FROM thread_activity WHERE kind = 'cpu' AND tid = `+i64(int64(tid)))
		if err != nil {
			t.Fatal(err)
		}
		return out.Rows[0][0].(int64)
	}
	if n := count(tn); n < 10 {
		t.Errorf("the named thread has %d on-CPU intervals stored right after its naming, want its ≥ 10 of before", n)
	}
	time.Sleep(time.Second)
	stop()
	if n := count(tu); n != 0 {
		t.Errorf("the thread no span named has %d on-CPU intervals stored", n)
	}
	if s := a.Stats(); s.Dropped == 0 {
		t.Errorf("stats %+v: nothing dropped", s)
	}
}

// With Summarize, a thread's many on-CPU intervals are stored as a few
// rows per flush holding their total, while Activity gives them exact from
// memory (Recent) — both summing to the CPU the thread burnt (±10%) — until
// they are forgotten, when it says so.
func TestSummarizesAndKeepsRecentExact(t *testing.T) {
	testutil.RequireRoot(t)
	st := openStore(t)
	a, stop, pid := accountSelf(t, Options{Host: "h", Write: st.WriteThreadActivity, FlushEvery: 100 * time.Millisecond,
		Recent: time.Minute, Summarize: true})
	// 5 ms bursts between short sleeps, on one thread.
	r := burnOnThread(func(spent func() time.Duration) {
		for spent() < 150*time.Millisecond {
			for c1 := threadCPU(); threadCPU()-c1 < 5*time.Millisecond; {
			}
			time.Sleep(time.Millisecond)
		}
	})
	time.Sleep(300 * time.Millisecond)
	stop()

	acts, ok := a.Activity("h", pid, uint32(r.tid), r.t0, r.t1)
	if !ok {
		t.Fatalf("no recent activity of thread %d in memory", r.tid)
	}
	cpu, n := executed(acts, r.t0, r.t1)
	var sleeps, stackless int
	for _, x := range acts {
		// Sleeps of DefaultKStackMin and more have a kernel stack, taken
		// or, for a kind seen before, given (ACCT_F_SAME_STACK).
		if x.Kind == "blocked" && time.Duration(x.EndNs-x.StartNs) >= DefaultKStackMin {
			sleeps++
			if len(x.KStack) == 0 {
				stackless++
			}
		}
		// Only an on-CPU interval has Ns, its CPU clock's time in it.
		if x.Ns != 0 && (x.Kind != "cpu" || x.Ns > x.EndNs-x.StartNs) {
			t.Errorf("a summary in memory: %+v", x)
		}
	}
	same := a.Stats().SameStacks
	t.Logf("%d sleeps of %v or more, %d without a kernel stack; %d given the previous one's", sleeps, DefaultKStackMin, stackless, same)
	if sleeps < 10 || stackless > 0 || same == 0 {
		t.Errorf("%d of %d sleeps of %v or more have no kernel stack, %d given the previous one's; want ≥ 10 sleeps, all with one, some given",
			stackless, sleeps, DefaultKStackMin, same)
	}
	out, err := st.Query(context.Background(), `SELECT count(*), coalesce(sum(ns), 0)::BIGINT, count(*) FILTER (WHERE ns IS NULL)
		FROM thread_activity WHERE kind = 'cpu' AND tid = `+i64(int64(r.tid)))
	if err != nil {
		t.Fatal(err)
	}
	rows, stored, exact := out.Rows[0][0].(int64), time.Duration(out.Rows[0][1].(int64)), out.Rows[0][2].(int64)
	t.Logf("thread %d burnt %v: %d on-CPU intervals in memory, %v; %d summary rows stored, %v", r.tid, r.cpu, n, cpu, rows, stored)
	if ratio := float64(cpu) / float64(r.cpu); ratio < 0.9 || ratio > 1.1 || n < 25 {
		t.Errorf("memory: %d on-CPU intervals, %v, want ≥ 25 and the %v burnt (±10%%)", n, cpu, r.cpu)
	}
	// Flushed every 100 ms over some 300 ms: a handful of rows, not one a
	// context switch, holding the same intervals and the thread's CPU
	// just before and after.
	if ratio := float64(stored) / float64(cpu); ratio < 1 || ratio > 1.1 || rows > 20 || exact != 0 {
		t.Errorf("store: %d on-CPU rows (%d exact) holding %v, want ≤ 20 summaries of the %v in memory (+10%%)", rows, exact, stored, cpu)
	}
	if _, ok := a.Activity("other", pid, uint32(r.tid), r.t0, r.t1); ok {
		t.Errorf("activity of another host's thread answered from memory")
	}
	a.mu.Lock()
	a.forgetRecent(r.t1 + 1)
	a.mu.Unlock()
	if _, ok := a.Activity("h", pid, uint32(r.tid), r.t0, r.t1); ok {
		t.Errorf("forgotten activity answered from memory")
	}
}

// Two tracked threads taking turns on one CPU, each switching out for the
// other: the run of the one switched out is recorded with the other's
// off-CPU interval (Stats.Handoffs), and each thread's on-CPU intervals
// hold the CPU it burnt.
func TestTrackedThreadsTakingTurnsOnOneCPU(t *testing.T) {
	testutil.RequireRoot(t)
	st := openStore(t)
	a, stop, pid := accountSelf(t, Options{Host: "h", Write: st.WriteThreadActivity, FlushEvery: 100 * time.Millisecond,
		Recent: time.Minute})
	handoffs := a.Stats().Handoffs
	const turns = 100
	first, second := takeTurns(t, turns)
	time.Sleep(200 * time.Millisecond)
	stop()

	handoffs = a.Stats().Handoffs - handoffs
	checkTurns(t, a, pid, turns, first, second)
	t.Logf("%d runs recorded with the next thread's off-CPU interval", handoffs)
	if handoffs < turns {
		t.Errorf("%d runs recorded with the next thread's off-CPU interval, want ≥ %d of the %d turns", handoffs, turns, 2*turns)
	}
}

// A context switch that sched_switch does not report (on the test
// machines a few a second go missing, switches from the idle task or from
// a hypervisor agent's threads; here, every switch while the programs are
// detached) costs a thread none of its CPU time: its runs around the
// switch are recorded from its CPU clock (Stats.Unseen). Before, the run
// after an unseen switch-in was lost.
func TestRunsAroundUnseenSwitchesKeepTheirCPU(t *testing.T) {
	a, stop, pid := accountSelfRecent(t)
	// Long enough for several windows even where attaching takes tens of
	// milliseconds, as on a loaded machine.
	const turns = 600
	done, detached := make(chan bool), make(chan int)
	go func() {
		n := 0
		defer func() { detached <- n }()
		for {
			select {
			case <-done:
				return
			case <-time.After(4 * time.Millisecond):
			}
			a.mu.Lock()
			a.detach()
			a.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			a.mu.Lock()
			err := a.attach()
			a.mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			n++
		}
	}()
	first, second := takeTurns(t, turns)
	close(done)
	windows := <-detached
	time.Sleep(200 * time.Millisecond)
	stop()

	s := a.Stats()
	t.Logf("%d windows with the programs detached; %d switches unseen", windows, s.Unseen)
	// Switches in the windows are not recorded: fewer intervals, not less
	// CPU. How many turns fall in the windows depends on how long attaching
	// takes, which a loaded machine stretches; an eighth of the turns as
	// intervals still shows the turns were seen one by one.
	checkTurns(t, a, pid, turns/8, first, second)
	if windows < 5 || s.Unseen == 0 {
		t.Errorf("%d windows with the programs detached, %d switches inferred: want ≥ 5 and some", windows, s.Unseen)
	}
}

// takeTurns runs two threads that take turns on CPU 0, turns times each,
// burning 300 µs a turn, and returns their bursts.
func takeTurns(t *testing.T, turns int) (burst, burst) {
	// The first to play sends last; the other receives last.
	play := func(in <-chan bool, out chan<- bool, first bool) func(func() time.Duration) {
		return func(func() time.Duration) {
			if err := onCPU0(); err != nil {
				t.Error(err)
			}
			for i := 0; i < turns; i++ {
				if !first || i > 0 {
					<-in
				}
				spin(300 * time.Microsecond)
				if first || i < turns-1 {
					out <- true
				}
			}
		}
	}
	ping, pong := make(chan bool), make(chan bool)
	other := make(chan burst)
	go func() { other <- burnOnThread(play(pong, ping, true)) }()
	first := burnOnThread(play(ping, pong, false))
	return first, <-other
}

// checkTurns checks that the on-CPU intervals of each burst's thread hold
// the CPU it burnt (±10%), in at least minIntervals intervals.
func checkTurns(t *testing.T, a *Accountant, pid uint32, minIntervals int, bursts ...burst) {
	t.Helper()
	for _, r := range bursts {
		acts, ok := a.Activity("h", pid, uint32(r.tid), r.t0, r.t1)
		if !ok {
			t.Fatalf("no recent activity of thread %d in memory", r.tid)
		}
		cpu, n := executed(acts, r.t0, r.t1)
		t.Logf("thread %d burnt %v: %d on-CPU intervals, %v", r.tid, r.cpu, n, cpu)
		if ratio := float64(cpu) / float64(r.cpu); ratio < 0.9 || ratio > 1.1 || n < minIntervals {
			t.Errorf("thread %d: %d on-CPU intervals, %v, want ≥ %d and the %v burnt (±10%%)", r.tid, n, cpu, minIntervals, r.cpu)
		}
	}
}

// Two tracked threads handing a byte back and forth over pipes on one CPU
// switch some hundred thousand times a second (tens of thousands on a
// loaded machine): read only at each commit (FlushEvery, 10 s here, none
// in the 6 s they run), the 16 MiB ring buffer would overflow; drained
// every DrainEvery, it loses nothing.
func TestDrainsTheRingBetweenCommits(t *testing.T) {
	testutil.RequireRoot(t)
	st := openStore(t)
	a, stop, _ := accountSelf(t, Options{Host: "h", Write: st.WriteThreadActivity, FlushEvery: 10 * time.Second,
		Recent: time.Second, Summarize: true})
	before := a.Stats()
	var p1, p2 [2]int
	if err := unix.Pipe(p1[:]); err != nil {
		t.Fatal(err)
	}
	if err := unix.Pipe(p2[:]); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, fd := range []int{p1[0], p1[1], p2[0], p2[1]} {
			unix.Close(fd)
		}
	}()
	const runFor = 6 * time.Second
	var wg sync.WaitGroup
	// Each reads a byte from in and writes it to out until in closes.
	relay := func(in, out int, first bool) {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		onCPU0()
		b := []byte{1}
		if first {
			for end := time.Now().Add(runFor); time.Now().Before(end); {
				if _, err := unix.Write(out, b); err != nil {
					break
				}
				if _, err := unix.Read(in, b); err != nil {
					break
				}
			}
			unix.Close(out) // the other's read ends
			return
		}
		for {
			if n, err := unix.Read(in, b); n != 1 || err != nil {
				return
			}
			if _, err := unix.Write(out, b); err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go relay(p2[0], p1[1], true)
	go relay(p1[0], p2[1], false)
	wg.Wait()
	stop()
	s := a.Stats()
	records, lost := s.Records-before.Records, s.Lost-before.Lost
	t.Logf("%d records in %v (%.0f a second), %d lost", records, runFor, float64(records)/runFor.Seconds(), lost)
	// The premise: more records than the ring holds, all in one commit
	// period.
	if capacity := uint64(16<<20) / (uint64(recordHeader) + 8); records < capacity {
		t.Fatalf("%d records in %v: too few to fill the ring's %d", records, runFor, capacity)
	}
	if lost != 0 {
		t.Errorf("%d of %d records lost", lost, records+lost)
	}
}

// Processes past what the tracked map holds are refused, and the next
// flush says so in the log, once. (These pids have no process: the flush
// after forgets them.)
func TestReportsProcessesItCouldNotTrack(t *testing.T) {
	testutil.RequireRoot(t)
	st := openStore(t)
	var mu sync.Mutex
	var logged []string
	a, stop := startAccountant(t, Options{Host: "h", Write: st.WriteThreadActivity, FlushEvery: 50 * time.Millisecond,
		Logf: func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			logged = append(logged, fmt.Sprintf(format, args...))
		}})
	// Pids past any pid_max (2^22): no process has them.
	var pids []uint32
	for i := 0; i < MaxTracked+3; i++ {
		pids = append(pids, 1<<30+uint32(i))
	}
	if err := a.Track(pids...); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	stop()
	if s := a.Stats(); s.Refused != 3 {
		t.Errorf("%d processes refused, want 3", s.Refused)
	}
	mu.Lock()
	defer mu.Unlock()
	var reports []string
	for _, l := range logged {
		if strings.Contains(l, "not tracked") {
			reports = append(reports, l)
		}
	}
	want := fmt.Sprintf("accounting: 3 processes not tracked (%d tracked at most, 3 in all)", MaxTracked)
	if len(reports) != 1 || reports[0] != want {
		t.Errorf("reports %q, want one: %q", reports, want)
	}
}

// stepWallClock moves the system's wall clock by d, as a virtual machine's
// clock being set does.
func stepWallClock(t *testing.T, d time.Duration) {
	t.Helper()
	tv := unix.NsecToTimeval(time.Now().Add(d).UnixNano())
	if err := unix.Settimeofday(&tv); err != nil {
		t.Fatalf("step the wall clock by %v: %v", d, err)
	}
}

// accountSelfRecent accounts this process, keeping its intervals in memory
// (Activity) and writing them to a store.
func accountSelfRecent(t *testing.T) (a *Accountant, stop func(), pid uint32) {
	testutil.RequireRoot(t)
	st := openStore(t)
	return accountSelf(t, Options{Host: "h", Write: st.WriteThreadActivity, FlushEvery: 100 * time.Millisecond,
		Recent: time.Minute})
}

// executed is the CPU time the on-CPU intervals among acts ran between lo
// and hi, by the thread's CPU clock (Ns, in proportion to the part of an
// interval inside), and how many there are.
func executed(acts []store.ThreadActivity, lo, hi int64) (time.Duration, int) {
	var cpu float64
	n := 0
	for _, x := range acts {
		if x.Kind != "cpu" {
			continue
		}
		n++
		in := float64(max(0, min(x.EndNs, hi)-max(x.StartNs, lo)))
		if x.Ns != 0 {
			in *= float64(x.Ns) / float64(max(x.EndNs-x.StartNs, 1))
		}
		cpu += in
	}
	return time.Duration(cpu), n
}

// awaitWatermark waits until every interval of a's that ended before
// until is committed, and so in memory: a fixed sleep is not enough on a
// loaded machine, where a flush can come late.
func awaitWatermark(t *testing.T, a *Accountant, until int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for a.Watermark() < until {
		if time.Now().After(deadline) {
			t.Fatalf("the accountant's watermark is %v behind after 10s", time.Duration(until-a.Watermark()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hasFrame says whether a kernel stack has a frame whose name holds part.
func hasFrame(frames []string, part string) bool {
	return slices.ContainsFunc(frames, func(f string) bool { return strings.Contains(f, part) })
}

// sharedSince is how many sleeps of process pid in system call nr were
// given their kind's kernel stack since it was last taken (the most of
// its kinds: user PCs, states).
func sharedSince(a *Accountant, pid, nr uint32) uint32 {
	var k accountSleepKind
	var v accountSleepStack
	var most uint32
	for it := a.objs.SleepStacks.Iterate(); it.Next(&k, &v); {
		if k.Tgid == pid && k.Nr == nr+1 {
			most = max(most, v.Since)
		}
	}
	return most
}

// Interruptible sleeps of one kind (process, user PC, system call, state)
// share a kernel stack across threads: of twelve new threads that each
// sleep once in nanosleep and once in ppoll, most sleeps of each kind are
// given the stack taken of its first, and every sleep carries the stack of
// its kind.
//
// A system call is not always a sleep: a thread preempted after it set
// its sleeping state but before it called schedule() can have its timer
// fire while it waits for a CPU, and the whole call is then a run-queue
// wait. So the test counts the sleeps the kernel recorded, and wants
// most calls to have slept.
func TestSleepKindsShareKernelStacks(t *testing.T) {
	a, stop, pid := accountSelfRecent(t)
	defer stop()
	const threads = 12
	type sleeper struct {
		burst
		mid int64 // between the nanosleep and the ppoll
	}
	var runs []sleeper
	for range threads {
		done := make(chan sleeper)
		go func() {
			// Never unlocked: the thread exits with the goroutine, so
			// each sleeper is a new thread.
			runtime.LockOSThread()
			r := sleeper{burst: burst{tid: unix.Gettid(), t0: time.Now().UnixNano()}}
			ts := unix.NsecToTimespec(int64(3 * DefaultKStackMin))
			unix.Nanosleep(&ts, nil)
			r.mid = time.Now().UnixNano()
			unix.Ppoll(nil, &ts, nil)
			r.t1 = time.Now().UnixNano()
			done <- r
		}()
		runs = append(runs, <-done)
	}
	awaitWatermark(t, a, runs[len(runs)-1].t1)
	slept := map[uint32]uint32{} // sleeps found, by system call
	for _, r := range runs {
		acts, ok := a.Activity("h", pid, uint32(r.tid), r.t0, r.t1)
		if !ok {
			t.Fatalf("no recent activity of thread %d in memory", r.tid)
		}
		for _, x := range acts {
			// The Go runtime may park the thread on a futex around a
			// system call (an M waiting for a P): neither sleep.
			if x.Kind != "blocked" || time.Duration(x.EndNs-x.StartNs) < 2*DefaultKStackMin || hasFrame(x.KStack, "futex") {
				continue
			}
			nr, frame := uint32(unix.SYS_NANOSLEEP), "nanosleep"
			if x.StartNs >= r.mid {
				nr, frame = unix.SYS_PPOLL, "poll"
			}
			slept[nr]++
			if !hasFrame(x.KStack, frame) {
				t.Errorf("thread %d: a sleep in %s has the kernel stack %v", r.tid, frame, x.KStack)
			}
		}
	}
	// Each kind's count of sleeps since its stack was taken.
	given := map[uint32]uint32{unix.SYS_NANOSLEEP: sharedSince(a, pid, unix.SYS_NANOSLEEP), unix.SYS_PPOLL: sharedSince(a, pid, unix.SYS_PPOLL)}
	t.Logf("of %d threads, sleeps in nanosleep %d, ppoll %d; given their kind's stack: %d and %d (stats %+v)", threads,
		slept[unix.SYS_NANOSLEEP], slept[unix.SYS_PPOLL], given[unix.SYS_NANOSLEEP], given[unix.SYS_PPOLL], a.Stats())
	for _, nr := range []uint32{unix.SYS_NANOSLEEP, unix.SYS_PPOLL} {
		if slept[nr] < threads*3/4 {
			t.Errorf("system call %d: %d of %d calls recorded as sleeps of %v or more", nr, slept[nr], threads, 2*DefaultKStackMin)
		}
		// Most, not all: a thread preempted on its way into the sleep can
		// reach it by another site or state, a kind of its own.
		if given[nr] < slept[nr]*2/3 {
			t.Errorf("system call %d: of %d sleeps, %d were given the stack taken of the first, want at least %d", nr, slept[nr], given[nr], slept[nr]*2/3)
		}
	}
}

// Uninterruptible sleeps shorter than DefaultKStackMin, as O_DIRECT reads
// waiting for the disk, share their kind's kernel stack rather than each
// having theirs taken, and still carry a stack of the read.
func TestShortDiskWaitsShareKernelStacks(t *testing.T) {
	a, stop, pid := accountSelfRecent(t)
	defer stop()
	file := filepath.Join(testutil.BlockDir(t), "blocks")
	const block, reads = 4096, 24
	if err := os.WriteFile(file, make([]byte, reads*block), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatalf("open %s O_DIRECT: %v", file, err)
	}
	defer f.Close()
	if err := unix.Fsync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	// Each read on a thread of its own. On a loaded machine a read can be
	// preempted on its way into the wait and find its request done when
	// it runs again: a wait in the run queue, no sleep. Rounds of reads go
	// on until enough of them slept; what is under test is that every
	// sleep in a read carries a stack of the read.
	var short, long int
	var runs []burst
	for round := 0; round < 4 && short+long < reads/2; round++ {
		var these []burst
		for i := range reads {
			done := make(chan burst)
			go func() {
				runtime.LockOSThread()
				r := burst{tid: unix.Gettid(), t0: time.Now().UnixNano()}
				// O_DIRECT wants an aligned buffer: a page-aligned mapping.
				buf, err := unix.Mmap(-1, 0, block, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
				if err == nil {
					_, err = unix.Pread(int(f.Fd()), buf, int64(i*block))
					unix.Munmap(buf)
				}
				if err != nil {
					t.Errorf("O_DIRECT read: %v", err)
				}
				r.t1 = time.Now().UnixNano()
				done <- r
			}()
			these = append(these, <-done)
		}
		awaitWatermark(t, a, these[len(these)-1].t1)
		for _, r := range these {
			acts, ok := a.Activity("h", pid, uint32(r.tid), r.t0, r.t1)
			if !ok {
				t.Fatalf("no recent activity of thread %d in memory", r.tid)
			}
			// An interruptible sleep this short has no stack: a sleep in
			// the read with one is an uninterruptible wait for the disk.
			for _, x := range acts {
				switch {
				case x.Kind != "blocked" || !hasFrame(x.KStack, "pread"):
				case time.Duration(x.EndNs-x.StartNs) < DefaultKStackMin:
					short++
				default:
					long++
				}
			}
		}
		runs = append(runs, these...)
		t.Logf("round %d: %d uninterruptible sleeps in the reads so far", round+1, short+long)
	}
	given := sharedSince(a, pid, unix.SYS_PREAD64)
	t.Logf("of %d O_DIRECT reads, %d uninterruptible sleeps under %v and %d longer with a stack of the read; %d since the last stack taken (stats %+v)",
		len(runs), short, DefaultKStackMin, long, given, a.Stats())
	if short+long < reads/2 {
		took := make([]time.Duration, len(runs))
		for i, r := range runs {
			took[i] = time.Duration(r.t1 - r.t0)
		}
		slices.Sort(took)
		// What the reads' threads did instead, for the next look.
		for _, r := range runs[:3] {
			acts, _ := a.Activity("h", pid, uint32(r.tid), r.t0, r.t1)
			for _, x := range acts {
				t.Logf("thread %d: %s %v state %d stack %v", r.tid, x.Kind, time.Duration(x.EndNs-x.StartNs), x.SleepState, x.KStack)
			}
		}
		t.Fatalf("only %d of %d O_DIRECT reads slept with a kernel stack of the read (the reads took %v to %v, median %v)",
			short+long, len(runs), took[0], took[len(took)-1], took[len(took)/2])
	}
	if short >= 4 && given == 0 {
		t.Errorf("%d short uninterruptible sleeps in pread, none given its kind's stack", short)
	}
}

// A step of the wall clock between a thread's CPU burst and the flush that
// reads it does not shift the burst: the programs read the TAI clock,
// which the step moves too, so the burst stays where the thread's own wall
// clock put it, and a span around it is charged the burst.
func TestWallClockStepDoesNotShiftIntervals(t *testing.T) {
	testutil.RequireRoot(t)
	a, stop, pid := accountSelf(t, Options{Host: "h", Write: func(context.Context, []store.ThreadActivity) error { return nil },
		FlushEvery: time.Hour, Recent: time.Minute})
	r := burnOnThread(func(spent func() time.Duration) {
		for spent() < 100*time.Millisecond {
		}
	})
	const step = 400 * time.Millisecond
	stepWallClock(t, step)
	defer stepWallClock(t, -step)
	stop() // the one flush, after the step

	acts, ok := a.Activity("h", pid, uint32(r.tid), r.t0, r.t1)
	if !ok {
		t.Fatalf("no recent activity of thread %d in memory", r.tid)
	}
	cpu, _ := executed(acts, r.t0, r.t1)
	t.Logf("thread %d burnt %v; after a %v step of the wall clock, %v of on-CPU time found in its burst's time", r.tid, r.cpu, step, cpu)
	if ratio := float64(cpu) / float64(r.cpu); ratio < 0.9 || ratio > 1.1 {
		t.Errorf("%v of on-CPU time in the burst's time, want the %v burnt (±10%%)", cpu, r.cpu)
	}
}

// Activity skips the flushes that were done before the time asked about,
// yet finds an interval read late (dirtied pages end when the thread last
// dirtied, read when it leaves the CPU), and keeps doing so once older
// intervals are forgotten.
func TestActivitySkipsEarlierReads(t *testing.T) {
	a := &Accountant{opts: Options{Host: "h", Recent: time.Minute}, recent: map[[2]uint32]*recentThread{},
		since: map[uint32]int64{1: 0}, stackNames: [][]string{nil}}
	th := [2]uint32{1, 2}
	read := func(done int64, kind uint32, spans ...[2]uint64) {
		for _, s := range spans {
			a.remember(th, &accountAcctEvent{Kind: kind, Pid: 1, Tid: 2, Start: s[0], End: s[1]}, 0)
		}
		a.readDone(done)
	}
	read(150, kindCPU, [2]uint64{100, 110}, [2]uint64{120, 140})
	read(250, kindCPU, [2]uint64{160, 200}, [2]uint64{210, 240})
	read(350, kindDirty, [2]uint64{105, 180})
	read(350, kindCPU, [2]uint64{260, 300})
	got := func(lo, hi int64) (out []int64) {
		acts, ok := a.Activity("h", 1, 2, lo, hi)
		if !ok {
			t.Fatalf("activity %d..%d not in memory", lo, hi)
		}
		for _, x := range acts {
			out = append(out, x.StartNs)
		}
		return out
	}
	check := func(lo, hi int64, want ...int64) {
		t.Helper()
		if g := got(lo, hi); !slices.Equal(g, want) {
			t.Errorf("activity %d..%d starts at %v, want %v", lo, hi, g, want)
		}
	}
	check(1, 400, 100, 105, 120, 160, 210, 260)
	check(170, 400, 105, 160, 210, 260)
	check(205, 400, 210, 260)
	check(305, 400)
	a.forgetRecent(150) // the first flush's two intervals
	if n := len(a.recent[th].reads); n != 3 {
		t.Errorf("%d reads kept after forgetting the first, want 3", n)
	}
	check(170, 400, 105, 160, 210, 260)
	check(250, 400, 260)
}

// A thread's interval log keeps its intervals in order across chunks as
// they are appended and forgotten from the front, down to none.
func TestIntervalLog(t *testing.T) {
	var l intervalLog
	next, first := int64(0), int64(0) // next to append, first kept
	add := func(n int) {
		for i := 0; i < n; i++ {
			l.append(recentInterval{start: next})
			next++
		}
	}
	check := func(step string) {
		t.Helper()
		if l.len() != int(next-first) {
			t.Fatalf("%s: %d kept, want %d", step, l.len(), next-first)
		}
		for i := 0; i < l.len(); i++ {
			if got := l.at(i).start; got != first+int64(i) {
				t.Fatalf("%s: interval %d is %d, want %d", step, i, got, first+int64(i))
			}
		}
		if full := l.len() + l.off; len(l.chunks) != (full+intervalChunk-1)/intervalChunk {
			t.Fatalf("%s: %d chunks for %d intervals at offset %d", step, len(l.chunks), l.len(), l.off)
		}
	}
	forget := func(n int) {
		l.forget(n)
		first += int64(n)
	}
	add(3*intervalChunk + 5)
	check("appended")
	forget(10)
	check("forgot a few")
	forget(intervalChunk)
	check("forgot across a chunk")
	add(intervalChunk - 3)
	check("appended into a new chunk")
	forget(l.len())
	check("forgot all")
	add(7)
	check("appended after")
}

// However fast intervals come, memory keeps at most maxRecent of them, the
// latest: here a million and a half in the last second of a minute kept.
func TestRecentIntervalsBounded(t *testing.T) {
	a := &Accountant{opts: Options{Host: "h", Recent: time.Minute}, recent: map[[2]uint32]*recentThread{},
		since: map[uint32]int64{1: 0}, stackNames: [][]string{nil}}
	const n, now = maxRecent * 3 / 2, int64(100e9)
	for i := 0; i < n; i++ {
		end := uint64(now) - uint64(time.Second) + uint64(i)*uint64(time.Second)/n
		a.remember([2]uint32{1, uint32(2 + i%2)}, &accountAcctEvent{Kind: kindCPU, Pid: 1, Tid: uint32(2 + i%2), Start: end - 100, End: end}, 0)
	}
	a.readDone(now)
	a.forgetOldRecent(now)
	kept := a.recent[[2]uint32{1, 2}].intervals.len() + a.recent[[2]uint32{1, 3}].intervals.len()
	if a.recentN > maxRecent || kept != a.recentN || kept < maxRecent/4 {
		t.Errorf("%d intervals kept (counted %d), want at most %d and not far fewer", kept, a.recentN, maxRecent)
	}
	if acts, ok := a.Activity("h", 1, 2, now-int64(time.Millisecond), now); !ok || len(acts) == 0 || acts[len(acts)-1].EndNs < now-int64(10*time.Microsecond) {
		t.Errorf("the latest intervals are not kept: %d, %v", len(acts), ok)
	}
}

// A blocked interval is split where the thread was woken: asleep until
// then, waiting for a CPU after. A thread at nice 19 sleeps 5 ms at a time
// on a CPU a nice -10 thread keeps busy: each sleep is woken 5 ms in, and
// the sleeper then often waits for the busy thread to give up the CPU
// (how often, the scheduler decides), yet is asleep 5 ms of it. Both
// ways of knowing the wake-up agree: from the run queue's statistics at
// the switch-in (this kernel has them), and from account_wakeup.
func TestBlockedSplitsAtTheWakeup(t *testing.T) {
	testutil.RequireRoot(t)
	if !wakeFromQueue() {
		t.Errorf("this kernel's BTF lacks sched_info.last_queued or cfs_rq.rq: wake-ups need account_wakeup")
	}
	defer func(p func() bool) { probeWakeFromQueue = p }(probeWakeFromQueue)
	for _, fromQueue := range []bool{true, false} {
		t.Run(fmt.Sprintf("fromQueue=%v", fromQueue), func(t *testing.T) {
			probeWakeFromQueue = func() bool { return fromQueue }
			checkWakeSplit(t)
		})
	}
}

func checkWakeSplit(t *testing.T) {
	a, stop, pid := accountSelfRecent(t)
	defer stop()
	const sleeps, sleep = 40, 5 * time.Millisecond
	// A real-time hog on CPU 0 keeps the CPU 3 ms in every 4.3 ms: a sleeper
	// woken in its burst waits for the rest of it, whatever the fair
	// scheduler would do. The periods do not divide, so some wake-ups fall
	// in the bursts.
	hog := exec.Command(os.Args[0], "-test.run=^$")
	hog.Env = append(os.Environ(), "HOLTER_TEST_HOG=3ms/1.3ms")
	hog.Stderr = os.Stderr
	out, err := hog.StdoutPipe()
	if err == nil {
		err = hog.Start()
	}
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Wait()
	defer hog.Process.Kill()
	if l, err := bufio.NewReader(out).ReadString('\n'); l != "ready\n" {
		t.Fatalf("the hog did not start: %q, %v", l, err)
	}
	r := burnOnThread(func(func() time.Duration) {
		if err := onCPU0(); err != nil {
			t.Error(err)
		}
		ts := unix.NsecToTimespec(int64(sleep))
		for range sleeps {
			unix.Nanosleep(&ts, nil)
		}
	})
	awaitWatermark(t, a, r.t1)
	acts, ok := a.Activity("h", pid, uint32(r.tid), r.t0, r.t1)
	if !ok {
		t.Fatalf("no recent activity of thread %d in memory", r.tid)
	}
	var asleep, waited []time.Duration
	long, off := 0, 0 // sleeps that waited long for the CPU; of them, asleep not 5 ms
	unwoken := 0
	for _, x := range acts {
		if x.Kind != "blocked" || !hasFrame(x.KStack, "nanosleep") {
			continue
		}
		if x.WakeNs == 0 {
			// This VM loses a few scheduler events (Stats.Unseen counts
			// the switches): a wake-up lost with them leaves its sleep
			// unsplit, which the bound below allows for.
			unwoken++
			t.Logf("a sleep of %v has no wake-up time", time.Duration(x.EndNs-x.StartNs))
			continue
		}
		asleep = append(asleep, time.Duration(x.WakeNs-x.StartNs))
		waited = append(waited, time.Duration(x.EndNs-x.WakeNs))
		if waited[len(waited)-1] >= time.Millisecond {
			long++
			// The timer is armed just before the switch-out, and fires a
			// little late (its slack); on a loaded VM now and then much
			// later (the host ran another guest). A sleep not split at
			// the wake-up would have all of its wait in it: a millisecond
			// or more over.
			if a := asleep[len(asleep)-1]; a < sleep-200*time.Microsecond || a > sleep+time.Millisecond {
				off++
				t.Logf("a sleep of %v then a wait of %v for the CPU: asleep %v, not the %v slept",
					time.Duration(x.EndNs-x.StartNs), waited[len(waited)-1], a, sleep)
			}
		}
	}
	slices.Sort(asleep)
	slices.Sort(waited)
	if len(asleep) < sleeps*3/4 || unwoken > sleeps/8 {
		t.Fatalf("%d of %d sleeps found with a wake-up time, %d without", len(asleep), sleeps, unwoken)
	}
	t.Logf("%d sleeps of %v: asleep %v … %v (median %v), then waited for the CPU %v … %v (median %v), %d of them 1 ms or more",
		len(asleep), sleep, asleep[0], asleep[len(asleep)-1], asleep[len(asleep)/2], waited[0], waited[len(waited)-1], waited[len(waited)/2], long)
	if m := asleep[len(asleep)/2]; m < sleep || m > sleep+time.Millisecond {
		t.Errorf("median time asleep %v, want the %v slept (+1 ms)", m, sleep)
	}
	// About every other wake-up falls in a burst and waits a millisecond
	// or more of it. Unsplit, every one of them would be off; split,
	// only those whose timer the host delayed.
	if long < sleeps/5 || off*3 > long {
		t.Errorf("%d sleeps then waited 1 ms or more for the busy CPU, %d of them not asleep %v; want ≥ %d, ≥ 2/3 asleep %v",
			long, off, sleep, sleeps/5, sleep)
	}
}
