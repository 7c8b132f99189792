package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

var committedLine = regexp.MustCompile(`epoch (\d+) committed`)

// recording is a `holter record` process under test.
type recording struct {
	cmd       *exec.Cmd
	committed chan int64
	started   chan struct{}
	log       *bytes.Buffer
	done      chan struct{}
}

// It stores every sample (--storage-budget off) unless args say otherwise:
// the tests that use it check what was recorded, with epochs of a second
// or two that a day's budget would cut to a few samples each; the budget
// has tests of its own (internal/recorder TestCap*, TestDayBudget*,
// TestStorageBudgetAtDefaults). Tests that stop the recorder with SIGINT
// and do not test its online analysis turn that off (--online=false): a
// recorder stopping first judges its last minute, at nice 10, which a
// loaded machine stretches to tens of seconds.
func startRecord(t *testing.T, bin string, args ...string) *recording {
	t.Helper()
	if !slices.Contains(args, "--storage-budget") {
		args = append(args, "--storage-budget", "off")
	}
	return startRecordCmd(t, exec.Command(bin, append([]string{"record"}, args...)...))
}

// startRecordCmd starts a prepared `holter record` command (e.g. one run
// in a network namespace).
func startRecordCmd(t testing.TB, cmd *exec.Cmd) *recording {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &recording{cmd: cmd, committed: make(chan int64, 1000), started: make(chan struct{}),
		log: &bytes.Buffer{}, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(stderr)
		startedOnce := false
		for sc.Scan() {
			line := sc.Text()
			r.log.WriteString(line + "\n")
			if !startedOnce && strings.HasPrefix(line, "recording host") {
				startedOnce = true
				close(r.started)
			}
			if m := committedLine.FindStringSubmatch(line); m != nil {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				r.committed <- n
			}
		}
	}()
	return r
}

// brief is the recorder's log without its routine epoch lines but the
// last few: what a failing test prints before its own messages' end, so
// a CI log cut to its tail still shows why the test failed.
// It says whether the recorder has exited (its process a zombie not yet
// waited for), after giving what it printed last the time to be read.
func (r *recording) brief() string {
	state := "running"
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid)); err != nil || strings.Contains(string(st), ") Z ") {
		state = "exited"
		select {
		case <-r.done:
		case <-time.After(3 * time.Second):
		}
	}
	lines := strings.Split(strings.TrimRight(r.log.String(), "\n"), "\n")
	var out []string
	for i, l := range lines {
		if i >= len(lines)-3 || !committedLine.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n") + "\nthe recorder is " + state
}

// waitEpochs waits until n epochs have been committed.
func (r *recording) waitEpochs(t testing.TB, n int) []int64 {
	t.Helper()
	// Generous: the first epoch loads kernel symbols, slow on a machine
	// shared with other builds and tests.
	return r.waitEpochsWithin(t, n, 90*time.Second)
}

// waitEpochsWithin waits up to d until n epochs have been committed: a
// recorder starting beside others on a loaded machine needs longer.
func (r *recording) waitEpochsWithin(t testing.TB, n int, d time.Duration) []int64 {
	t.Helper()
	var got []int64
	timeout := time.After(d)
	for len(got) < n {
		select {
		case e := <-r.committed:
			got = append(got, e)
		case <-timeout:
			t.Fatalf("only %d of %d epochs committed; log:\n%s", len(got), n, r.log)
		}
	}
	return got
}

// TestKill9KeepsCommittedEpochs kills the recorder with SIGKILL at random
// moments, 20 times, restarting it on the same store each time: every
// epoch it reported committed must be there, whole, afterwards. The kills
// are shared by four stores, each with a recorder of its own killed five
// times, side by side with each other and the other waiting tests
// (TestMain): each round mostly waits (for a start, a commit, a random
// moment), and one store's recorder is only load to another's.
func TestKill9KeepsCommittedEpochs(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	bin := testutil.BuildHolter(t)
	for _, name := range []string{"a", "b", "c", "d"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			killRepeatedly(t, bin, 5)
		})
	}
}

// killRepeatedly kills a recorder on one store kills times, and checks the
// store afterwards.
func killRepeatedly(t *testing.T, bin string, kills int) {
	dir := t.TempDir()
	committed := map[int64]bool{}
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for i := 0; i < kills; i++ {
		// The OTLP receivers on ports of their own: the other store's
		// recorder runs beside.
		r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "", "--otlp-grpc", "127.0.0.1:0", "--otlp-http", "127.0.0.1:0")
		select {
		case <-r.started:
		case <-r.done:
			t.Fatalf("run %d: recorder did not start on the store left by the previous kill:\n%s", i, r.log)
		case <-time.After(20 * time.Second):
			t.Fatalf("run %d: recorder did not start:\n%s", i, r.log)
		}
		// Every other run is killed at a random moment after a commit, so
		// that commits are in the store however slow a loaded machine
		// makes them; the rest at a random moment after the start, the
		// store's opening and a first epoch's commit among them.
		if i%2 == 1 {
			var first int64
			select {
			case first = <-r.committed:
			case <-time.After(90 * time.Second):
				t.Fatalf("run %d: no epoch committed in 90 s:\n%s", i, r.log)
			}
			committed[first] = true
			time.Sleep(time.Duration(rng.IntN(2500)) * time.Millisecond)
		} else {
			time.Sleep(time.Duration(1000+rng.IntN(2500)) * time.Millisecond)
		}
		r.cmd.Process.Kill()
		r.cmd.Wait()
		<-r.done
		close(r.committed)
		for e := range r.committed {
			committed[e] = true
		}
	}
	if len(committed) < kills/2 {
		t.Fatalf("only %d epochs committed over %d runs", len(committed), kills)
	}

	st, err := store.Open(dir, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("store does not open cleanly after %d kills: %v", kills, err)
	}
	defer st.Close()
	ctx := context.Background()
	present := map[int64]bool{}
	res, err := st.Query(ctx, `SELECT epoch FROM epochs`)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range res.Rows {
		present[row[0].(int64)] = true
	}
	for e := range committed {
		if !present[e] {
			t.Errorf("epoch %d was reported committed but is missing", e)
		}
	}
	// Every present epoch is whole: its sample count matches, it has every
	// vital, and every stack its samples name exists.
	checks := map[string]string{
		"sample count": `SELECT e.epoch FROM epochs e LEFT JOIN (SELECT epoch, count(*) n FROM samples GROUP BY epoch) s
			ON s.epoch = e.epoch WHERE e.samples <> coalesce(s.n, 0)`,
		"vitals": `SELECT e.epoch, count(v.vital) FROM epochs e LEFT JOIN vitals v ON v.epoch = e.epoch
			GROUP BY e.epoch HAVING count(v.vital) <> (SELECT count(DISTINCT vital) FROM vitals)`,
		"orphan vitals":  `SELECT DISTINCT epoch FROM vitals WHERE epoch NOT IN (SELECT epoch FROM epochs)`,
		"orphan samples": `SELECT DISTINCT epoch FROM samples WHERE epoch NOT IN (SELECT epoch FROM epochs)`,
		"stacks": `SELECT DISTINCT s.epoch FROM samples s WHERE (s.kstack_id IS NOT NULL AND s.kstack_id NOT IN (SELECT stack_id FROM stacks))
			OR (s.ustack_id IS NOT NULL AND s.ustack_id NOT IN (SELECT stack_id FROM stacks))`,
	}
	for name, q := range checks {
		res, err := st.Query(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(res.Rows) > 0 {
			t.Errorf("%s inconsistent in epochs %v", name, res.Rows)
		}
	}
	t.Logf("%d kills: %d epochs reported committed, %d present", kills, len(committed), len(present))
}

// epochsSince waits until an epoch begun from now on is committed, and
// counts the epochs begun since, and those of them with a row of vitals
// matching cond.
func epochsSince(t *testing.T, r *recording, bin, dir, cond string) (n struct{ epochs, matching int }) {
	t.Helper()
	since := time.Now().UnixNano()
	for range 10 {
		r.waitNewEpochs(t, 1)
		res := queryJSON(t, bin, dir, fmt.Sprintf(`SELECT count(DISTINCT e.epoch) AS epochs, count(DISTINCT v.epoch) AS matching
			FROM epochs e LEFT JOIN vitals v ON v.host = e.host AND v.epoch = e.epoch AND %s WHERE e.start_ns > %d`, cond, since))
		if n.epochs, n.matching = int(res[0]["epochs"].(float64)), int(res[0]["matching"].(float64)); n.epochs > 0 {
			return n
		}
	}
	t.Fatalf("no epoch begun since %s committed in ten commits", time.Unix(0, since).Format(time.RFC3339Nano))
	return n
}

func queryJSON(t *testing.T, bin, dir, q string) []map[string]any {
	t.Helper()
	out, errOut, code := runHolter(t, bin, "query", "--data", dir, "--format", "json", q)
	if code != 0 {
		t.Fatalf("%s: exit %d: %s", q, code, errOut)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return rows
}

func runHolter(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runHolterWithin(t, 0, bin, args...)
}

// runHolterWithin is runHolter killing the command after d (0: never): a
// command that should return at once does not hang the test when it does
// not.
func runHolterWithin(t *testing.T, d time.Duration, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx := context.Background()
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	return runCmd(t, exec.CommandContext(ctx, bin, args...))
}

// runCmd runs a prepared holter command and gives its output and exit status.
func runCmd(t *testing.T, cmd *exec.Cmd) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// TestQueryAndStatus checks `holter query` through a running recorder's
// API and directly on the store once it stopped, in every output format,
// and `holter status`.
func TestQueryAndStatus(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	bin := testutil.BuildHolter(t)
	dir := t.TempDir()
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--online=false", "--otlp-grpc", "off", "--otlp-http", "off",
		"--budget", "off") // vitals are switched by hand below, not shed by the budget
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	r.waitEpochs(t, 2)

	// Through the API: the recorder holds the store, so only the API can answer.
	out, errOut, code := runHolter(t, bin, "query", "--data", dir, "--format", "json",
		"SELECT count(*) AS n, min(epoch) AS first FROM epochs")
	if code != 0 {
		t.Fatalf("query through API: exit %d: %s", code, errOut)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0]["n"].(float64) < 2 {
		t.Fatalf("query through API answered %q (%v)", out, err)
	}

	out, errOut, code = runHolter(t, bin, "status", "--data", dir)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"cpu", "recording", "l2", "unsupported", "no hardware PMU", "THRESHOLD", "CAPPED", "LOST"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	_, errOut, code = runHolter(t, bin, "query", "--data", dir, "DROP TABLE samples")
	if code == 0 || !strings.Contains(errOut, "read-only") {
		t.Errorf("DROP through the API: exit %d, %s", code, errOut)
	}
	_, errOut, code = runHolter(t, bin, "query", "--data", dir, "SELECT nope FROM epochs")
	if code == 0 || !strings.Contains(errOut, "nope") {
		t.Errorf("bad column: exit %d, %s", code, errOut)
	}

	// Vitals stop and start at run time. Each change is checked in the
	// epochs begun after the command returned, the store's own times: on a
	// loaded machine the commits reported while it ran may be of epochs
	// begun before it.
	out, errOut, code = runHolter(t, bin, "vitals", "--data", dir, "--disable", "syscall,kmem")
	if code != 0 || !regexp.MustCompile(`(?m)^syscall\s+disabled`).MatchString(out) || !regexp.MustCompile(`(?m)^kmem\s+disabled`).MatchString(out) {
		t.Fatalf("vitals --disable: exit %d %s\n%s", code, errOut, out)
	}
	since := epochsSince(t, r, bin, dir, `v.vital IN ('syscall', 'kmem')`)
	if since.matching != 0 {
		t.Errorf("%d of the %d epochs begun since the vitals were disabled recorded them", since.matching, since.epochs)
	}
	out, errOut, code = runHolter(t, bin, "vitals", "--data", dir, "--enable", "syscall")
	if code != 0 || !regexp.MustCompile(`(?m)^syscall\s+recording`).MatchString(out) {
		t.Fatalf("vitals --enable: exit %d %s\n%s", code, errOut, out)
	}
	since = epochsSince(t, r, bin, dir, `v.vital = 'syscall' AND v.events > 0`)
	if since.matching != since.epochs {
		t.Errorf("%d of the %d epochs begun since syscall was enabled again have syscall events", since.matching, since.epochs)
	}
	_, errOut, code = runHolter(t, bin, "vitals", "--data", dir, "--enable", "heart")
	if code == 0 || !strings.Contains(errOut, `unknown vital "heart"`) {
		t.Errorf("vitals --enable heart: exit %d, %s", code, errOut)
	}

	// A second recorder on the same data directory is refused clearly.
	_, errOut, code = runHolter(t, bin, "record", "--data", dir, "--api", "")
	if code == 0 || !strings.Contains(errOut, "already recording") {
		t.Errorf("second recorder: exit %d, %s", code, errOut)
	}

	r.cmd.Process.Signal(syscall.SIGINT)
	r.cmd.Wait()
	<-r.done

	// Directly on the store now.
	out, errOut, code = runHolter(t, bin, "query", "--data", dir, "--format", "csv", "SELECT vital, count(*) AS n FROM vitals GROUP BY vital ORDER BY vital")
	if code != 0 {
		t.Fatalf("direct query: exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "vital,n\nblck,") || !strings.Contains(out, "\ncpu,") {
		t.Errorf("csv output:\n%s", out)
	}
	out, _, code = runHolter(t, bin, "query", "--data", dir, "SELECT 'a' AS x, 42 AS answer")
	if code != 0 || !regexp.MustCompile(`(?m)^x\s+answer\n^a\s+42$`).MatchString(strings.TrimSpace(out)) {
		t.Errorf("table output:\n%s", out)
	}
	out, _, code = runHolter(t, bin, "status", "--data", dir)
	if code != 0 || !strings.Contains(out, "no recorder is running") {
		t.Errorf("status without recorder: exit %d\n%s", code, out)
	}
}

// TestRecordErrors checks the errors a user can act on.
func TestRecordErrors(t *testing.T) {
	bin := testutil.BuildHolter(t)
	cases := []struct {
		name     string
		args     []string
		setup    func(t *testing.T) []string // extra args
		asNobody bool
		code     int
		want     string
	}{
		{name: "unknown vital", args: []string{"record", "--vitals", "cpu,heart"}, code: 2, want: `unknown vital "heart"`},
		{name: "bad threshold", args: []string{"record", "--threshold", "3"}, code: 2, want: "not a power of 2"},
		{name: "short epoch", args: []string{"record", "--epoch", "100ms"}, code: 2, want: `--epoch: "100ms" is not a duration in [1s, 24h]`},
		{name: "negative storage budget", args: []string{"record", "--storage-budget", "-1MB"}, code: 2, want: `--storage-budget: "-1MB" is not 0 (off) or a size in [1MiB, 1PiB]`},
		{name: "bad retention", args: []string{"record", "--retain-raw", "a week"}, code: 2, want: "--retain-raw"},
		{name: "bad size limit", args: []string{"record", "--retain-size", "lots"}, code: 2, want: `--retain-size: "lots" is not 0 (no bound) or a size in [1MiB, 1PiB]`},
		{name: "unknown command", args: []string{"recrod"}, code: 2, want: `unknown command "recrod"`},
		{name: "not root", args: []string{"record"}, asNobody: true, code: 1, want: "CAP_BPF"},
		{name: "corrupt store", args: []string{"record", "--api", ""}, code: 1, want: "left untouched",
			setup: func(t *testing.T) []string {
				dir := t.TempDir()
				os.WriteFile(filepath.Join(dir, store.FileName), bytes.Repeat([]byte("junk"), 4096), 0o644)
				return []string{"--data", dir}
			}},
		{name: "data dir is a file", args: []string{"record", "--api", ""}, code: 1, want: "cannot be created",
			setup: func(t *testing.T) []string {
				f := filepath.Join(t.TempDir(), "f")
				os.WriteFile(f, nil, 0o644)
				return []string{"--data", filepath.Join(f, "data")}
			}},
		{name: "query without recording", args: []string{"query", "SELECT 1"}, code: 1, want: "no recording in",
			setup: func(t *testing.T) []string { return []string{"--data", filepath.Join(t.TempDir(), "none")} }},
		{name: "ui without recording", args: []string{"ui"}, code: 1, want: "no recording in",
			setup: func(t *testing.T) []string { return []string{"--data", filepath.Join(t.TempDir(), "none")} }},
		{name: "ui on a public address without a token", args: []string{"ui", "--api", "0.0.0.0:0"}, code: 1, want: "give a token",
			setup: func(t *testing.T) []string {
				dir := t.TempDir()
				st, err := store.Open(dir, nil)
				if err != nil {
					t.Fatal(err)
				}
				st.Close()
				return []string{"--data", dir}
			}},
		{name: "query bad format", args: []string{"query", "--format", "xml", "SELECT 1"}, code: 2, want: `--format: "xml" is not one of`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if c.setup != nil {
				args = append(append([]string{args[0]}, c.setup(t)...), args[1:]...)
			}
			cmd := exec.Command(bin, args...)
			cmd.Dir = t.TempDir()
			if c.asNobody {
				if os.Geteuid() != 0 {
					t.Skip("needs root to run as nobody")
				}
				// t.TempDir's parent is private to root: nobody needs a path it can reach.
				shared, err := os.MkdirTemp("", "holter-nobody-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(shared) })
				os.Chmod(shared, 0o777)
				cmd.Dir = shared
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
				copied := filepath.Join(cmd.Dir, "holter")
				copyFile(t, bin, copied)
				cmd.Path = copied
			}
			var e bytes.Buffer
			cmd.Stderr = &e
			cmd.Stdout = io.Discard
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.code || !strings.Contains(e.String(), c.want) {
				t.Errorf("exit %d (want %d), stderr:\n%s\nwant it to contain %q", code, c.code, e.String(), c.want)
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
