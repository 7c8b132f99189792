package account

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
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
// below the fsync, and the block I/O it submitted.
func TestAccountsOneThreadExactly(t *testing.T) {
	testutil.RequireRoot(t)
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, err := New(Options{Host: "h", Write: st.WriteThreadActivity, FlushEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	if err := a.Track(uint32(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)

	type result struct {
		tid        int
		t0, t1, t2 int64
		cpu        time.Duration
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
		r.t1 = time.Now().UnixNano()
		f, _ := os.Create(file)
		f.Write(make([]byte, 1<<20))
		f.Sync()
		f.Close()
		r.t2 = time.Now().UnixNano()
		res <- r
	}()
	r := <-res
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-done

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
	over := func(kind string, a, b int64) int64 {
		out := q(`SELECT coalesce(sum(least(end_ns, ` + i64(b) + `) - greatest(start_ns, ` + i64(a) + `)), 0)::BIGINT
			FROM thread_activity WHERE kind = '` + kind + `' AND tid = ` + i64(int64(r.tid)) +
			` AND start_ns < ` + i64(b) + ` AND end_ns > ` + i64(a))
		return out.Rows[0][0].(int64)
	}
	cpu = over("cpu", r.t0, r.t1)
	blocked = over("blocked", r.t1, r.t2)
	out := q(`SELECT coalesce(sum(bytes), 0)::BIGINT FROM thread_activity WHERE kind = 'io' AND tid = ` + i64(int64(r.tid)))
	ioBytes = out.Rows[0][0].(int64)
	out = q(`SELECT DISTINCT kstack[1] FROM thread_activity WHERE kind = 'blocked' AND tid = ` + i64(int64(r.tid)) +
		` AND start_ns >= ` + i64(r.t1) + ` AND kstack IS NOT NULL`)
	for _, row := range out.Rows {
		sites = append(sites, row[0].(string))
	}
	t.Logf("thread %d: burnt %v (thread clock), recorded cpu %v; fsync: blocked %v at %v, %d bytes of block I/O",
		r.tid, r.cpu, time.Duration(cpu), time.Duration(blocked), sites, ioBytes)
	if ratio := float64(cpu) / float64(r.cpu); ratio < 0.9 || ratio > 1.1 {
		t.Errorf("recorded CPU %v is not within 10%% of the thread's %v", time.Duration(cpu), r.cpu)
	}
	if blocked <= 0 || len(sites) == 0 {
		t.Errorf("no blocked time with a kernel site recorded during fsync")
	}
	// Write-back may flush part of the 1 MiB from a kernel worker before
	// fsync does: the thread is charged what it submitted itself.
	if ioBytes < 4<<10 {
		t.Errorf("block I/O of the thread: %d bytes, want at least a 4 KiB block of the 1 MiB it wrote", ioBytes)
	}
	if s := a.Stats(); s.Lost != 0 || !s.Attached || s.Tracked != 1 {
		t.Errorf("stats %+v", s)
	}
}

func i64(v int64) string { return strconv.FormatInt(v, 10) }
