package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestTraceFlagsAfterQuery: flags may come after a ready query and after
// SQL (holter trace @runqlat --for 2s failed with "no ready query"); a
// --for of whole intervals gives as many intervals, no sliver after.
func TestTraceFlagsAfterQuery(t *testing.T) {
	testutil.RequireRoot(t)
	for _, args := range [][]string{
		{"trace", "--local", "@runqlat", "--for", "600ms", "--interval", "200ms", "--json"},
		{"trace", "--local", "SELECT count() AS n FROM syscall.getppid", "--interval=200ms", "--json", "--for", "600ms"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		// 3; 2 when the process was off the CPU for two intervals (a
		// ticker drops the ticks nobody took); 1 (the default 1 s interval) or a
		// fourth sliver would be wrong.
		if lines := strings.Count(out.String(), "\n"); lines < 2 || lines > 3 {
			t.Errorf("%v: %d intervals, want 3:\n%s", args, lines, out.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"trace", "--local", "@nosuch", "--for", "1s"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "no ready query @nosuch (ready:") {
		t.Errorf("unknown ready query: exit %d: %s", code, errb.String())
	}
}

// TestTraceChecksBeforeAttaching: --explain fails on the mistakes a run
// would make, with the same message, before anything attaches.
func TestTraceChecksBeforeAttaching(t *testing.T) {
	for _, c := range []struct{ query, msg string }{
		{"SELECT foo(ret) FROM syscall.read", "foo(ret): Scalar Function with name foo does not exist"},
		{"SELECT sum(comm) FROM syscall.read", "type mismatch: sum() needs a number, comm is a string"},
		{"SELECT comm, count() AS n FROM syscall.read GROUP BY comm HAVING n > 'x'", "type mismatch: n > 'x' compares an int with a string"},
		{"SELECT hist(filename) FROM syscall.openat", "filename is a pointer (const char *): str(filename) reads the string"},
		{"SELECT sum(ret / 0) FROM syscall.read", "division by zero"},
	} {
		for _, explain := range []bool{true, false} {
			args := []string{"trace", "--local", c.query}
			if explain {
				args = append(args, "--explain")
			}
			var out, errb bytes.Buffer
			code := run(args, &out, &errb)
			if code == 0 || !strings.Contains(errb.String(), c.msg) || !strings.Contains(errb.String(), "^") {
				t.Errorf("%v: exit %d, %q; want %q with a caret", args, code, errb.String(), c.msg)
			}
		}
	}
}

// TestReadHostsOnce: a host listed twice (in --hosts, or there and in the
// file) is one agent.
func TestReadHostsOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(file, []byte("b:2 # again\nc:3\n\n"), 0o644)
	list, err := addressList("a:1, b:2,a:1")
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := readHosts(list, file)
	if err != nil || !reflect.DeepEqual(hosts, []string{"a:1", "b:2", "c:3"}) {
		t.Errorf("hosts %v, %v", hosts, err)
	}
}

// TestTraceTableLayout: a histogram stands beside its row's keys, one
// bucket a line, bars scaled to the row's largest bucket; topk's entries
// likewise; floats are rounded.
func TestTraceTableLayout(t *testing.T) {
	res := &store.Result{Columns: []string{"comm", "sizes", "avg", "top"}, Rows: [][]any{
		{"bash", []any{map[string]any{"lo": int64(1), "hi": int64(2), "count": int64(10)},
			map[string]any{"lo": int64(1024), "hi": int64(2048), "count": int64(5)}}, 1234.56789,
			[]any{map[string]any{"value": "read", "count": int64(12), "error": int64(1)}}},
		{"zsh", []any{}, 0.000123456, []any{}},
	}}
	var b strings.Builder
	writeTable(&b, res)
	want := "comm  sizes                                                         avg       top\n" +
		"bash  [1, 2)         10 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|  1234.57   read       12 ±1\n" +
		"      [1K, 2K)        5 |@@@@@@@@@@@@@@@@@@@@                    |            \n" +
		"zsh                                                                 0.000123  \n"
	if b.String() != want {
		t.Errorf("table\n%s\nwant\n%s", b.String(), want)
	}
}

// workloadPid starts tracecalls at its gate (see internal/tracequery).
func workloadCmd(t *testing.T, gate string, n int) *exec.Cmd {
	t.Helper()
	bin := testutil.BuildWorkload(t, "tracecalls")
	cmd := exec.Command(bin, gate, fmt.Sprint(n), "0", "0")
	return cmd
}

// jsonCount sums the n of --json interval lines, and the counters.
func jsonCount(t *testing.T, out []byte) (n int64, counters map[string]int64) {
	t.Helper()
	counters = map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var l struct {
			Rows     []map[string]any
			Counters map[string]int64
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		for _, r := range l.Rows {
			if v, ok := r["n"].(float64); ok {
				n += int64(v)
			}
		}
		for k, v := range l.Counters {
			counters[k] += v
		}
	}
	return n, counters
}

// installed copies a binary as a package manager would (with write(2)):
// the file the linker wrote through a shared mapping sits in the page cache
// in large folios that are mapped whole, and a process started from it
// counts tens of MB more RSS (bench/trace.sh installs it the same way).
func installed(t *testing.T, bin string) string {
	t.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "holter")
	if err := os.WriteFile(out, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// startAttached starts holter trace --local --verbose ARGS, its output to
// stdout, and returns once it says its probes are attached.
func startAttached(t *testing.T, bin string, stdout io.Writer, args ...string) *exec.Cmd {
	t.Helper()
	tr := exec.Command(bin, append([]string{"trace", "--local", "--verbose"}, args...)...)
	tr.Stdout = stdout
	stderr, _ := tr.StderrPipe()
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Process.Kill() })
	if line, _ := bufio.NewReader(stderr).ReadString('\n'); !strings.Contains(line, "probes attached") {
		t.Fatalf("holter trace %v: %q", args, line)
	}
	go io.Copy(io.Discard, stderr)
	return tr
}

// TestTraceCommandAndProcess traces one command (-c) and one process (-p)
// while another process makes the same calls: each counts its own calls
// exactly and ends when its process does.
func TestTraceCommandAndProcess(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildHolter(t)
	stop := testutil.CallGetppidAs(t, "noise")
	defer stop()
	const n = 4321
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	os.WriteFile(gate, nil, 0o644) // open: -c holds the command itself
	work := testutil.BuildWorkload(t, "tracecalls")
	out, err := exec.Command(bin, "trace", "--local", "--json", "--interval", "10s", "-c", fmt.Sprintf("%s %s %d 0 0", work, gate, n),
		"SELECT count() AS n FROM syscall.getppid").Output()
	if err != nil {
		t.Fatalf("-c: %v\n%s", err, out)
	}
	if got, counters := jsonCount(t, out); got != n || len(counters) != 0 {
		t.Errorf("-c: %d calls, %v lost; want %d", got, counters, n)
	}

	gate2 := filepath.Join(dir, "gate2")
	w := workloadCmd(t, gate2, n)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { w.Process.Kill(); w.Wait() }()
	var trOut bytes.Buffer
	tr := startAttached(t, bin, &trOut, "--json", "--interval", "10s", "-p", fmt.Sprint(w.Process.Pid), "SELECT count() AS n FROM syscall.getppid")
	os.WriteFile(gate2, nil, 0o644)
	w.Wait()
	done := make(chan error, 1)
	go func() { done <- tr.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("-p: %v", err)
		}
	case <-time.After(10 * time.Second):
		tr.Process.Kill()
		t.Fatal("holter trace -p did not end with its process")
	}
	if got, counters := jsonCount(t, trOut.Bytes()); got != n || len(counters) != 0 {
		t.Errorf("-p: %d calls, %v lost; want %d", got, counters, n)
	}
}

// TestPerEventMemoryBounded streams every getppid of a flood of calls as a
// row: holter's peak RSS stays under 64 MB however fast they come (6 s of
// them took 1.2 GB when rows waited for their interval), and every call is
// a row or counted lost.
func TestPerEventMemoryBounded(t *testing.T) {
	testutil.RequireRoot(t)
	bin := installed(t, testutil.BuildHolter(t))
	const n = 1000000
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	w := workloadCmd(t, gate, n)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { w.Process.Kill(); w.Wait() }()
	stdout, out := io.Pipe()
	tr := startAttached(t, bin, out, "--json", "--interval", "500ms", "-p", fmt.Sprint(w.Process.Pid), "SELECT time, tid, comm FROM syscall.getppid")
	// The process's own high-water mark, read while it runs: wait4's
	// ru_maxrss of a process Go started counts the test's own memory too
	// (the child exec'd from the test's address space).
	var hwm atomic.Int64
	go func() {
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tr.Process.Pid))
			if err != nil {
				return
			}
			for _, l := range strings.Split(string(b), "\n") {
				var kb int64
				if _, err := fmt.Sscanf(l, "VmHWM: %d kB", &kb); err == nil {
					hwm.Store(kb)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() { tr.Wait(); out.Close() }()
	os.WriteFile(gate, nil, 0o644)
	var rows, lost int64
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(`"counters"`)) {
			rows++
			continue
		}
		var l struct{ Counters map[string]int64 }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		for _, v := range l.Counters {
			lost += v
		}
	}
	w.Wait()
	if !tr.ProcessState.Success() {
		t.Fatal(tr.ProcessState)
	}
	rss := hwm.Load() / 1024
	t.Logf("%d calls: %d rows, %d lost; holter peak RSS %d MB", n, rows, lost, rss)
	if rows+lost != n {
		t.Errorf("%d rows + %d lost = %d, want %d", rows, lost, rows+lost, n)
	}
	if rss > 64 {
		t.Errorf("peak RSS %d MB, want at most 64", rss)
	}
}
