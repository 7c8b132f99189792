package tracequery

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// fixture is a tracefs tree copied from a 6.18 kernel, so the compiler is
// tested without privileges and without depending on the host's kernel.
var fixture = &Catalog{TraceFS: "testdata/tracefs", KernelFuncProbe: func(string) error { return os.ErrPermission }}

func TestCompileGolden(t *testing.T) {
	cases := []struct{ name, query string }{
		{"count_by_comm", "SELECT comm, count() AS n FROM syscall.getppid GROUP BY comm ORDER BY n DESC LIMIT 10"},
		{"read_hist_filtered", "SELECT comm, hist(ret) AS sizes, sum(ret) FROM syscall.read WHERE ret >= 0 AND pid != 1 GROUP BY comm"},
		{"latency_stats", "SELECT fd, count(), min(latency), max(latency), avg(latency), p99(latency), quantile(latency, 0.5) FROM syscall.read GROUP BY fd HAVING count() > 10"},
		{"lhist_distinct_sample", "SELECT lhist(count, 0, 4096, 512), count_distinct(fd), sample(count) FROM syscall.read"},
		{"string_filter_stack_key", "SELECT kstack, count() FROM tracepoint.sched.sched_switch WHERE prev_comm = 'swapper/0' GROUP BY kstack"},
		{"user_string_key", "SELECT str(filename) AS file, count() FROM syscall.openat GROUP BY file"},
		{"stream_rows", "SELECT time, pid, ret FROM syscall.read WHERE ret < 0"},
		{"user_space_fallback", "SELECT lower(comm) AS c, count() FROM syscall.read WHERE ret > 0 GROUP BY c"},
		{"user_space_hist", "SELECT lower(comm) AS c, hist(ret) AS h, lhist(ret, 0, 100, 10), p99(latency), count_distinct(fd), sample(fd) FROM syscall.read GROUP BY c HAVING p99(latency) > 1000"},
		{"like_prefix_suffix", "SELECT comm, count() FROM syscall.getppid WHERE comm LIKE 'ba%' OR comm LIKE '%sh' GROUP BY comm"},
		{"like_contains_one_char", "SELECT count() FROM syscall.openat WHERE str(filename) LIKE '%ab%' AND comm NOT LIKE 'a_c'"},
		{"string_fields_equal", "SELECT count() FROM tracepoint.sched.sched_switch WHERE prev_comm <> next_comm AND next_comm = 'swapper/1'"},
		{"join_recorded", "WITH cpu AS (SELECT comm, sum(weight)::BIGINT AS cpu_ns FROM samples WHERE vital = 'cpu' GROUP BY comm), live AS (SELECT comm, count() AS calls FROM syscall.getppid GROUP BY comm) SELECT live.comm, calls, cpu_ns, calls * 1e9 / cpu_ns AS per_cpu_s FROM live LEFT JOIN cpu USING (comm), vitals v WHERE v.vital = 'cpu' ORDER BY calls DESC LIMIT 10"},
		{"uprobe_args", "SELECT arg0 % 4 AS k, count(), sum(arg1), sum(ret), max(latency) FROM uprobe.\"/bin/sh\".main GROUP BY k"},
		{"runq", "SELECT hist(latency) FROM sched.runq_latency WHERE pid > 100"},
		{"profile", "SELECT comm, ustack, count() FROM profile.hz_99 GROUP BY comm, ustack"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Compile(c.query, fixture, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Explain(true)
			if err != nil {
				t.Fatal(err)
			}
			got = "query: " + c.query + "\n" + got
			path := filepath.Join("testdata", "golden", c.name+".txt")
			if *update {
				os.MkdirAll(filepath.Dir(path), 0o755)
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("plan differs from %s (go test -run TestCompileGolden -update rewrites it):\n%s", path, got)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name, query string
		want        []string // in the message
		caret       string   // the part the caret underlines
	}{
		{"unknown source", "SELECT count() FROM syscall.nosuchcall", []string{"unknown source syscall.nosuchcall"}, "syscall.nosuchcall"},
		{"unknown source kind", "SELECT count() FROM frobnicate.x", []string{"unknown source frobnicate.x", "--list"}, "frobnicate.x"},
		{"unknown tracepoint", "SELECT count() FROM tracepoint.sched.nope", []string{"no tracepoint sched:nope"}, "tracepoint.sched.nope"},
		{"unknown field", "SELECT count() FROM syscall.read WHERE bytes > 3", []string{"unknown field bytes of syscall.read", "fd, buf, count, ret, latency"}, "bytes"},
		{"type mismatch string int", "SELECT count() FROM syscall.read WHERE comm > 3", []string{"type mismatch", "comm is a string"}, "comm"},
		{"type mismatch sum of string", "SELECT sum(comm) FROM syscall.read", []string{"type mismatch: sum() needs a number, comm is a string"}, "comm"},
		{"type mismatch arithmetic on stack", "SELECT sum(kstack + 1) FROM syscall.read", []string{"type mismatch", "kstack is a stack"}, "kstack"},
		{"aggregate in where", "SELECT count() FROM syscall.read WHERE count() > 1", []string{"aggregates are not allowed in WHERE"}, "count()"},
		{"bare field", "SELECT comm, fd, count() FROM syscall.read GROUP BY comm", []string{"fd must appear in GROUP BY"}, "fd"},
		{"unsafe read", "SELECT str(arg0) FROM uprobe.\"/bin/sh\".main", []string{"--unsafe-read"}, "str(arg0)"},
		{"kernel functions", "SELECT count() FROM kprobe.vfs_read", []string{"kernel function probes unavailable"}, "kprobe.vfs_read"},
		{"syntax", "SELECT count( FROM syscall.read", []string{"expected an expression, found FROM"}, "FROM"},
		{"lhist args", "SELECT lhist(count, 0, 10) FROM syscall.read", []string{"lhist takes 4 argument(s)"}, "lhist(count, 0, 10)"},
		{"quantile range", "SELECT quantile(count, 2) FROM syscall.read", []string{"between 0 and 1"}, "2"},
		{"like on an integer", "SELECT count() FROM syscall.read WHERE fd LIKE '1%'", []string{"type mismatch: LIKE matches a string, fd is a int"}, "fd"},
		{"like pattern not a string", "SELECT count() FROM syscall.read WHERE comm LIKE 3", []string{"type mismatch: a LIKE pattern is a string"}, "3"},
		{"recorded table as source", "SELECT count() FROM samples", []string{"samples is not a probe source", "WITH live AS"}, "samples"},
		{"no probe source in with", "WITH a AS (SELECT 1 FROM samples) SELECT * FROM a", []string{"no part of WITH reads a probe source"}, "WITH a AS (SELECT 1 FROM samples)"},
		{"two probe sources", "WITH a AS (SELECT count() FROM syscall.read), b AS (SELECT count() FROM syscall.getppid) SELECT * FROM a, b", []string{"a second probe source", "here in a"}, "syscall.getppid"},
		{"probe source outside with", "WITH a AS (SELECT count() AS n FROM syscall.read) SELECT * FROM a, tracepoint.sched.sched_switch", []string{"tracepoint.sched.sched_switch is a probe source, read only in the WITH part a"}, "tracepoint.sched.sched_switch"},
		{"error inside the live part", "WITH a AS (SELECT count() AS n FROM syscall.read GROUP BY nope) SELECT * FROM a", []string{"unknown field nope of syscall.read"}, "nope"},
		{"bad profile", "SELECT count() FROM profile.hz_0", []string{"want 1 to 10000 Hz"}, "profile.hz_0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Compile(c.query, fixture, nil)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			qe, ok := err.(*Error)
			if !ok {
				t.Fatalf("error %T is not a *Error with a position", err)
			}
			if got := c.query[qe.Pos:qe.End]; got != c.caret {
				t.Errorf("caret under %q, want %q\n%s", got, c.caret, msg)
			}
		})
	}
}

func TestUserSpaceFallbackIsExplained(t *testing.T) {
	p, err := Compile("SELECT lower(comm) AS c, count() FROM syscall.read GROUP BY c", fixture, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != ModeStream {
		t.Fatalf("mode %v, want stream", p.Mode)
	}
	ex, _ := p.Explain(false)
	if !strings.Contains(ex, "aggregation runs in user space: lower() runs in user space, not in the probe (lower(comm))") ||
		!strings.Contains(ex, "group by: k0=lower(comm); aggregates: a0=count()") || !strings.Contains(ex, "evaluator: SELECT") {
		t.Errorf("EXPLAIN does not say why:\n%s", ex)
	}
}

func TestLikeExplainedInKernel(t *testing.T) {
	p, err := Compile("SELECT count() FROM syscall.getppid WHERE comm LIKE '%ab%' AND pid > 1", fixture, nil)
	if err != nil {
		t.Fatal(err)
	}
	ex, _ := p.Explain(false)
	kernel, user, _ := strings.Cut(ex, "user-space part:")
	if p.Mode != ModeAggregate || !strings.Contains(kernel, "filter: comm LIKE '%ab%' AND pid > 1") || strings.Contains(user, "LIKE") {
		t.Errorf("LIKE is not in the kernel part:\n%s", ex)
	}
	// A pattern that is not a constant is DuckDB's, and EXPLAIN says so.
	p, err = Compile("SELECT count() FROM syscall.getppid WHERE comm LIKE lower('A%')", fixture, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ex, _ := p.Explain(false); p.Mode != ModeStream || !strings.Contains(ex, "filter runs in user space") || !strings.Contains(ex, "user-space part:\n  filter: comm LIKE lower('A%')") {
		t.Errorf("non-constant pattern:\n%s", ex)
	}
}

func TestLibraryCompiles(t *testing.T) {
	for _, r := range Library {
		t.Run(r.Name, func(t *testing.T) {
			p, err := Compile(r.Query, fixture, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.Mode != ModeAggregate {
				t.Errorf("ready query %s does not aggregate in the probe: %v", r.Name, p.Notes)
			}
			if _, err := p.Programs(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
