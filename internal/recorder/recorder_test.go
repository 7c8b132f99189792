package recorder

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// workload is a program run under the recorder and what it must provoke.
type workload struct {
	name     string   // testdata/workloads/NAME.c; its comm
	args     []string // after the binary
	vital    string
	function string // must appear in the samples' user stacks
	pid      int
}

// TestVitalsAttributeWorkloads runs one real recording while four
// workloads each provoke one vital, then checks from the store that each
// vital's weight and samples are charged to its workload, with a user stack
// through the workload's own function.
func TestVitalsAttributeWorkloads(t *testing.T) {
	testutil.RequireRoot(t)
	ioDir := testutil.BlockDir(t)
	workloads := []*workload{
		{name: "cpu_spin", args: []string{"3"}, vital: "cpu", function: "holter_cpu_spin"},
		{name: "sched_compete", args: []string{"3"}, vital: "sched", function: "holter_sched_compete"},
		{name: "block_pipe", args: []string{"3"}, vital: "blck", function: "holter_block_on_pipe"},
		{name: "direct_write", args: []string{filepath.Join(ioDir, "data"), "3"}, vital: "blio", function: "holter_direct_writes"},
		{name: "mem_touch", args: []string{"3"}, vital: "umem", function: "holter_touch_pages"},
		{name: "mem_touch", args: []string{"3"}, vital: "kmem", function: "holter_touch_pages"},
		{name: "syscall_loop", args: []string{"3"}, vital: "syscall", function: "holter_syscall_loop"},
		{name: "signal_kill", args: []string{"3"}, vital: "signal", function: "holter_signal_child"},
		{name: "tcp_transfer", args: []string{"3"}, vital: "sock", function: "holter_tcp_send"},
		{name: "mmap_contend", args: []string{"3"}, vital: "lock", function: "holter_mmap_contend"},
	}
	bins := map[string]string{}
	for _, w := range workloads {
		if bins[w.name] == "" {
			bins[w.name] = testutil.BuildWorkload(t, w.name)
		}
	}

	st := recordWhile(t, func(*Recorder) {
		runWorkloads(t, workloads, bins)
	})

	for _, w := range workloads {
		t.Run(w.vital, func(t *testing.T) {
			q := fmt.Sprintf(`SELECT count(*), coalesce(sum(s.weight), 0),
				count(*) FILTER (WHERE list_contains(u.frames, '%s')),
				any_value(u.frames) FILTER (WHERE u.frames IS NOT NULL)
				FROM samples s LEFT JOIN stacks u ON u.stack_id = s.ustack_id
				WHERE s.vital = '%s' AND s.pid = %d AND s.comm = '%s'`, w.function, w.vital, w.pid, w.name)
			row := queryRow(t, st, q)
			n, weight, withFunc := row[0].(int64), toInt(row[1]), row[2].(int64)
			t.Logf("%s: %d samples of pid %d, weight %d, %d with %s in the user stack; a stack: %v",
				w.vital, n, w.pid, weight, withFunc, w.function, row[3])
			if n == 0 || weight == 0 {
				t.Fatalf("no %s samples charged to %s (pid %d)", w.vital, w.name, w.pid)
			}
			if withFunc == 0 {
				t.Errorf("no %s sample of %s has %s in its user stack", w.vital, w.name, w.function)
			}
			total := queryRow(t, st, fmt.Sprintf(`SELECT sum(weight_sum), sum(events) FROM vitals WHERE vital = '%s'`, w.vital))
			if toInt(total[0]) < weight || toInt(total[1]) == 0 {
				t.Errorf("%s vital totals %v are below its samples' weight %d", w.vital, total, weight)
			}
		})
	}

	t.Run("blio fields", func(t *testing.T) {
		w := workloads[3]
		row := queryRow(t, st, fmt.Sprintf(`SELECT count(*), min(latency_ns), max(bytes_requested), bool_and(op = 'write')
			FROM samples WHERE vital = 'blio' AND pid = %d AND bytes_requested = 65536`, w.pid))
		if row[0].(int64) == 0 || toInt(row[1]) <= 0 || row[3] != true {
			t.Errorf("blio samples of 64 KiB writes: count, min latency, max bytes, all writes = %v", row)
		}
	})
	byVital := map[string]*workload{}
	for _, w := range workloads {
		byVital[w.vital] = w
	}
	fieldChecks := map[string]string{
		"syscall": `count(*) FILTER (WHERE syscall_nr = 110 AND ret > 0)`,                   // getppid
		"signal":  `count(*) FILTER (WHERE signal = 10 AND target_pid > 0 AND handler > 1)`, // SIGUSR1, a handler
		"sock":    `count(*) FILTER (WHERE direction = 'send' AND protocol = 'tcp' AND peer = '127.0.0.1' AND bytes > 0)`,
		"umem":    `count(*) FILTER (WHERE address > 0 AND ip > 0 AND free_kb > 0)`,
		"kmem":    `count(*) FILTER (WHERE alloc_order >= 0 AND free_kb > 0 AND kernel_kb > 0)`,
		"lock":    `count(*) FILTER (WHERE lock_addr > 0 AND delay_ns > 0)`,
	}
	for vital, agg := range fieldChecks {
		t.Run(vital+" fields", func(t *testing.T) {
			w := byVital[vital]
			row := queryRow(t, st, fmt.Sprintf(`SELECT %s FROM samples WHERE vital = '%s' AND pid = %d`, agg, vital, w.pid))
			if row[0].(int64) == 0 {
				t.Errorf("no %s sample of %s has the expected fields (%s)", vital, w.name, agg)
			}
		})
	}
	// A system call that blocked is timed from the context switches: the
	// pipe reader's reads wait 20 ms for its child's writes, each read
	// from its own sleep (the same call again, at the same place, is
	// another call: timed from its first sleep, they summed to seconds).
	t.Run("syscall latency of blocked calls", func(t *testing.T) {
		row := queryRow(t, st, fmt.Sprintf(`SELECT count(*) FILTER (WHERE latency_ns >= 5000000 AND latency_ns < 500000000),
			count(*) FILTER (WHERE latency_ns >= 500000000), max(latency_ns), count(*)
			FROM samples WHERE vital = 'syscall' AND syscall_nr = 0 AND pid = %d`, workloads[2].pid))
		t.Logf("%v of the pipe reader's %v sampled reads timed 5-500 ms, %v longer (the longest %v ns)", row[0], row[3], row[1], row[2])
		if toInt(row[0]) == 0 {
			t.Error("no sampled read of the pipe reader was timed as blocked for 5 ms or more")
		}
		if toInt(row[1]) > 0 {
			t.Errorf("%v reads that wait 20 ms were timed at 500 ms or more", row[1])
		}
	})
	t.Run("kmem frees", func(t *testing.T) {
		row := queryRow(t, st, `SELECT sum(secondary) FROM vitals WHERE vital = 'kmem'`)
		if toInt(row[0]) == 0 {
			t.Error("no pages freed were counted in the kmem vital")
		}
	})
	t.Run("kernel stacks", func(t *testing.T) {
		row := queryRow(t, st, fmt.Sprintf(`SELECT count(*) FROM samples s JOIN stacks k ON k.stack_id = s.kstack_id
			WHERE s.vital = 'blck' AND s.pid = %d AND len(list_filter(k.frames, f -> f LIKE '%%pipe_read')) > 0
			AND k.frames[1] NOT LIKE 'bpf_%%'`, workloads[2].pid))
		if row[0].(int64) == 0 {
			t.Error("no blck sample of the pipe reader has pipe_read in its kernel stack, without BPF frames on top")
		}
	})
}

// recordWhile records every vital, whatever it costs, into a fresh store
// in 1 s epochs while work runs, and returns the store once the last epoch
// is committed.
// startRecorder runs a recorder of cfg (logging to the test by default)
// that hands each epoch to sink. The function it returns stops it and
// fails the test if it stopped on an error; the test's end stops it too.
func startRecorder(t *testing.T, cfg Config, sink func(*store.Epoch) error) (*Recorder, func()) {
	t.Helper()
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	rec, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx, sink) }()
	var once sync.Once
	var runErr error
	end := func() {
		once.Do(func() {
			cancel()
			runErr = <-done
			rec.Close()
		})
	}
	t.Cleanup(end)
	return rec, func() {
		t.Helper()
		end()
		if runErr != nil {
			t.Fatalf("recorder: %v", runErr)
		}
	}
}

func recordWhile(t *testing.T, work func(*Recorder)) *store.Store {
	t.Helper()
	// No cap: the tests count their workloads' samples, which a cap shared
	// with the rest of a busy host thins (TestCapStoresCoarserAndCounts).
	return recordWhileWith(t, Config{Epoch: time.Second, Budget: -1}, work)
}

// recordWhileWith is recordWhile with the recorder configured by cfg.
func recordWhileWith(t *testing.T, cfg Config, work func(*Recorder)) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rec, stop := startRecorder(t, cfg,
		func(e *store.Epoch) error { return st.WriteEpoch(context.Background(), e) })
	time.Sleep(300 * time.Millisecond)
	work(rec)
	time.Sleep(200 * time.Millisecond)
	stop()
	return st
}

// runWorkloads starts every workload at once and waits for them all.
func runWorkloads(t *testing.T, workloads []*workload, bins map[string]string) {
	var wg sync.WaitGroup
	for _, w := range workloads {
		cmd := exec.Command(bins[w.name], w.args...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.pid = cmd.Process.Pid
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Wait(); err != nil {
				t.Errorf("workload %s: %v", w.name, err)
			}
		}()
	}
	wg.Wait()
}

func queryRow(t *testing.T, st *store.Store, q string) []any {
	t.Helper()
	res, err := st.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if len(res.Rows) != 1 {
		t.Fatalf("%s: %d rows", q, len(res.Rows))
	}
	return res.Rows[0]
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case uint64:
		return int64(x)
	case int32:
		return int64(x)
	case uint32:
		return int64(x)
	case nil:
		return 0
	}
	var n int64
	fmt.Sscan(fmt.Sprint(v), &n)
	return n
}

// TestSinkFailureSkipsEpoch checks that an epoch the sink refuses for good
// (not for a storage fault) is counted as skipped and recording goes on.
func TestSinkFailureSkipsEpoch(t *testing.T) {
	testutil.RequireRoot(t)
	rec, err := New(Config{Epoch: time.Second, Vitals: []Vital{CPU}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var seen []int64
	err = rec.Run(ctx, func(e *store.Epoch) error {
		seen = append(seen, e.Epoch)
		if len(seen) <= 2 {
			return fmt.Errorf("no space left on device")
		}
		if len(seen) == 3 {
			stop()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("recorder stopped on a failing sink: %v", err)
	}
	st := rec.Status()
	if st.SkippedEpochs != 2 || st.LastCommitted != seen[len(seen)-1] || len(seen) < 3 {
		t.Errorf("epochs handed over %v, skipped %d, last committed %d", seen, st.SkippedEpochs, st.LastCommitted)
	}
}

// TestStressNGProvokesEveryVital runs Debian's stress-ng — a workload nobody
// here wrote — with a stressor for each vital, and checks every vital
// recorded samples charged to stress-ng.
func TestStressNGProvokesEveryVital(t *testing.T) {
	testutil.RequireRoot(t)
	stressNG := testutil.RequireTool(t, "stress-ng")
	dir := testutil.BlockDir(t)
	cmd := exec.Command(stressNG, "--timeout", "4s", "--temp-path", dir,
		"--cpu", "1", // cpu
		"--switch", "1", // sched
		"--sleep", "1", // blck
		"--hdd", "1", "--hdd-opts", "direct", // blio
		"--fault", "1", "--vm", "1", // umem, kmem
		"--get", "1", // syscall
		"--kill", "1", // signal
		"--sock", "1", // sock
		"--dir", "2", "--dentry", "2") // lock: directory and dentry locks
	cmd.Dir = dir
	st := recordWhile(t, func(*Recorder) {
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("stress-ng: %v\n%s", err, out)
		}
	})
	res, err := st.Query(context.Background(), `SELECT vital, count(*) FILTER (WHERE comm LIKE 'stress-ng%'),
		sum(weight) FILTER (WHERE comm LIKE 'stress-ng%') FROM samples GROUP BY vital`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, row := range res.Rows {
		got[row[0].(string)] = row[1].(int64)
		t.Logf("%s: %v stress-ng samples, weight %v", row[0], row[1], row[2])
	}
	for _, v := range AllVitals() {
		if v == L2 {
			continue // no PMU on these machines: reported unsupported
		}
		if got[v.String()] == 0 {
			t.Errorf("%s: no samples charged to stress-ng", v)
		}
	}
}

// TestBudgetThrottlesAStormAndStillSamples: a system-call storm on one CPU
// under a 1% budget, in 10 s epochs: the syscall vital is throttled while
// the storm lasts, well before its epoch ends (the budget looks every
// 250 ms, not once an epoch); and while it is throttled, labels that make
// one call each — 32 processes, a call each at a stack depth of its own —
// are still sampled, all but a miss or two (the first event of a label
// always enters the sketch, and is sampled as new). How the vital comes
// back after the storm is TestBudgetSteps's: on a busy machine the
// recorder may stay over half its budget without any storm.
func TestBudgetThrottlesAStormAndStillSamples(t *testing.T) {
	testutil.RequireRoot(t)
	storm := testutil.BuildWorkload(t, "syscall_loop")
	once := testutil.BuildWorkload(t, "one_syscall")
	var mu sync.Mutex
	sampled := map[uint32]bool{}
	rec, stop := startRecorder(t, Config{Epoch: 10 * time.Second, Budget: 0.01}, func(e *store.Epoch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, v := range e.Vitals {
			if v.Name == "syscall" {
				t.Logf("epoch %d: syscall %d events, about %.0f labels", e.Epoch, v.Events, v.DistinctLabels)
			}
		}
		for _, s := range e.Samples {
			if nr, _ := s.Fields["syscall_nr"].(int32); s.Vital == "syscall" && nr == 110 && s.Comm == "one_syscall" {
				sampled[s.Pid] = true
			}
		}
		return nil
	})
	throttled := func() bool {
		v := rec.Status().Vitals[Syscall]
		return v.Thin > 1 || v.Threshold > 2
	}
	time.Sleep(time.Second)
	cmd := exec.Command("taskset", "-c", "0", storm, "8")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for !throttled() && time.Since(began) < 7*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	if !throttled() {
		cmd.Wait()
		t.Fatalf("the syscall vital was not throttled within 7 s of a storm: %+v", rec.Status().Vitals[Syscall])
	}
	t.Logf("throttled %v into the storm: %s", time.Since(began).Round(10*time.Millisecond), rec.Status().Vitals[Syscall].Reason)
	const labels = 32
	pids := oneCallLabels(t, once, labels)
	stillThrottled := throttled()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("storm: %v", err)
	}
	ended := time.Now()
	for throttled() && time.Since(ended) < 5*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("5 s after the storm: %s", rec.Status().Vitals[Syscall].Reason)
	stop()
	mu.Lock()
	defer mu.Unlock()
	n := countSampled(pids, sampled)
	t.Logf("%d of %d labels of one call each sampled during the storm (throttled throughout: %v)", n, labels, stillThrottled)
	if n < labels-2 {
		t.Errorf("%d of %d single system calls, each a label of its own, sampled while the vital was throttled; want all but 2 at most", n, labels)
	}
}

// TestBudgetLeavesOutTheProcessOtherWork: the recorder's process does more
// than record vitals (receiving and accounting spans, analyses, the API);
// that work costs what it costs whatever the thresholds, so it must not
// be charged to the vitals. Here a goroutine of the process burns a
// quarter of a CPU, 12% of a two-CPU machine against a 1% budget, under
// the cpu vital alone, whose programs cost a few hundredths of a percent
// and its samples' symbolization what the machine's processes make it
// (a busy machine's new programs to read: up to 2-3%): it is never
// charged half the burner's 12%, which it would be charged whole.
func TestBudgetLeavesOutTheProcessOtherWork(t *testing.T) {
	testutil.RequireRoot(t)
	var mu sync.Mutex
	var changes []string
	// Two-second epochs: at one second closing an epoch alone is a sizeable
	// part of a 1% budget.
	var user []float64
	logf := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		t.Log(line)
		if strings.HasPrefix(line, "budget:") {
			mu.Lock()
			changes = append(changes, line)
			mu.Unlock()
		}
	}
	_, stop := startRecorder(t, Config{Epoch: 2 * time.Second, Budget: 0.01, Vitals: []Vital{CPU}, Logf: logf}, func(e *store.Epoch) error {
		mu.Lock()
		user = append(user, float64(e.MonitorUserNs)/float64(e.EndNs-e.StartNs))
		mu.Unlock()
		return nil
	})
	burning := make(chan struct{})
	go func() {
		for {
			select {
			case <-burning:
				return
			default:
			}
			for t0 := time.Now(); time.Since(t0) < 25*time.Millisecond; {
			}
			time.Sleep(75 * time.Millisecond)
		}
	}()
	time.Sleep(9 * time.Second)
	close(burning)
	stop()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the process's CPU per epoch, as a share of one CPU: %.2f", user)
	if len(user) < 4 {
		t.Fatalf("%d epochs in 9 s of 2 s epochs", len(user))
	}
	for _, c := range changes {
		var pct float64
		if i := strings.Index(c, "("); i >= 0 {
			if _, err := fmt.Sscanf(c[i:], "(%g%%", &pct); err == nil && pct >= 6 {
				t.Errorf("a vital was charged %.2f%% of the machine: %s", pct, c)
			}
		}
	}
}

// TestUnavailableStoreHoldsEpochs: epochs the store cannot take for now
// (store.ErrUnavailable) are held and given again, in order, once it takes
// them: none is missing. Beyond the held bounds the oldest are dropped,
// and counted with their vitals' events and samples. The two cases, each
// a recorder of its own with its own sink, wait out their epochs at once:
// neither counts anything of the other's.
func TestUnavailableStoreHoldsEpochs(t *testing.T) {
	testutil.RequireRoot(t)
	for _, c := range []struct {
		name string
		hold int
	}{{"within the bounds", 0}, {"beyond them", 2}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rec, err := New(Config{Epoch: time.Second, Vitals: []Vital{CPU}, Logf: t.Logf, HoldEpochs: c.hold})
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Close()
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			// Another process on the CPU in every epoch (the recorder does
			// not record its own), so that a dropped epoch has events to
			// count on an idle machine.
			busy := exec.CommandContext(ctx, "sh", "-c", "while :; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.05; done")
			if err := busy.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { stop(); busy.Wait() }()
			var committed []int64
			var calls int
			failUntil := time.Now().Add(4500 * time.Millisecond)
			err = rec.Run(ctx, func(e *store.Epoch) error {
				calls++
				if time.Now().Before(failUntil) {
					return fmt.Errorf("write epoch %d: %w: disk full", e.Epoch, store.ErrUnavailable)
				}
				committed = append(committed, e.Epoch)
				if len(committed) >= 6 {
					stop()
				}
				return nil
			})
			if err != nil {
				t.Fatalf("recorder stopped on an unavailable store: %v", err)
			}
			st := rec.Status()
			for i := 1; i < len(committed); i++ {
				if committed[i] != committed[i-1]+1 {
					t.Fatalf("epochs committed out of order or with a gap: %v", committed)
				}
			}
			var unstored uint64
			for _, v := range st.Vitals {
				unstored += v.UnstoredEvents
			}
			t.Logf("committed %v after %d calls; dropped %d, held %d, unstored events %d", committed, calls, st.SkippedEpochs, st.HeldEpochs, unstored)
			if c.hold == 0 {
				if committed[0] != 1 || st.SkippedEpochs != 0 || unstored != 0 {
					t.Errorf("within the bounds nothing is dropped: committed %v, dropped %d", committed, st.SkippedEpochs)
				}
			} else if committed[0] == 1 || st.SkippedEpochs != uint64(committed[0]-1) || unstored == 0 {
				t.Errorf("beyond %d held epochs the oldest go and are counted: committed %v, dropped %d, unstored events %d",
					c.hold, committed, st.SkippedEpochs, unstored)
			}
			if st.HeldEpochs != 0 || calls <= len(committed) {
				t.Errorf("held %d at the end, %d calls for %d epochs committed", st.HeldEpochs, calls, len(committed))
			}
		})
	}
}

// TestVitalEnabledLaterLoadsItsPrograms checks that the recorder lets go of
// the vitals object once New has attached its vitals, and that a vital
// enabled afterwards, whose programs were never loaded, is loaded from the
// object parsed again and records.
func TestVitalEnabledLaterLoadsItsPrograms(t *testing.T) {
	testutil.RequireRoot(t)
	var mu sync.Mutex
	signals := uint64(0)
	rec, stop := startRecorder(t, Config{Epoch: time.Second, Budget: -1, Vitals: []Vital{CPU}}, func(e *store.Epoch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, v := range e.Vitals {
			if v.Name == Signal.String() {
				signals += v.Events
			}
		}
		return nil
	})
	if rec.spec != nil {
		t.Error("the recorder holds the vitals object after New")
	}
	if err := rec.SetEnabled(Signal, true); err != nil {
		t.Fatal(err)
	}
	if rec.spec != nil {
		t.Error("the recorder holds the vitals object after enabling a vital")
	}
	if s := rec.Status().Vitals[Signal]; s.State != "recording" || s.Trigger != "tp_btf signal_generate" {
		t.Errorf("signal after SetEnabled: state %q, trigger %q", s.State, s.Trigger)
	}
	// Shed and enabled again, the vital reuses its loaded programs.
	if err := rec.SetEnabled(Signal, false); err != nil {
		t.Fatal(err)
	}
	if err := rec.SetEnabled(Signal, true); err != nil {
		t.Fatal(err)
	}
	for range 200 {
		if err := exec.Command("sh", "-c", "trap : USR1; kill -USR1 $$").Run(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2500 * time.Millisecond)
	stop()
	mu.Lock()
	defer mu.Unlock()
	if signals < 200 {
		t.Errorf("the signal vital enabled at run time counted %d signals, want ≥ 200", signals)
	}
}
