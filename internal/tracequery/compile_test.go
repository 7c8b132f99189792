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
		{"uprobe_args", "SELECT arg0 % 4 AS k, count(), sum(arg1), sum(ret), max(latency) FROM uprobe.\"/bin/bash\".main GROUP BY k"},
		{"runq", "SELECT hist(latency) FROM sched.runq_latency WHERE pid > 100"},
		{"profile", "SELECT comm, ustack, count() FROM profile.hz_99 GROUP BY comm, ustack"},
		{"join_followed_by", "SELECT hist(b.time - a.time) AS lat, count() FROM uprobe.\"/bin/bash\".main AS a FOLLOWED BY uretprobe.\"/bin/bash\".main AS b ON a.tid = b.tid WHERE a.arg0 > 1"},
		{"join_latest", "SELECT o.pid, count() AS reads, sum(r.count) FROM syscall.openat AS o JOIN syscall.read AS r ON o.ret = r.fd AND o.pid = r.pid AND r.time BETWEEN o.time AND o.time + 1e9 GROUP BY o.pid"},
		{"case_in_between", "SELECT CASE WHEN count < 100 THEN 'small' WHEN count BETWEEN 100 AND 1000 THEN 'medium' ELSE 'large' END AS size, count() FROM syscall.read WHERE fd IN (3, 4, 5) AND (comm = 'a' OR comm = 'b') AND coalesce(count, 0) NOT BETWEEN 7 AND 9 GROUP BY size"},
		{"distinct", "SELECT DISTINCT comm, fd FROM syscall.read"},
		{"div_guard", "SELECT sum(count / fd), sum(count % 3) FROM syscall.read"},
		{"ntop_task_comm", "SELECT ntop(daddr) AS dst, task.comm AS sender, count() FROM tracepoint.sock.inet_sock_set_state WHERE newstate = 2 GROUP BY dst, sender"},
		{"kstack_depth", "SELECT kstack(3) AS s, count() FROM tracepoint.sched.sched_switch GROUP BY s"},
		{"syscall_names", "SELECT nr, count() FROM syscall.any WHERE nr IN ('read', 'write') GROUP BY nr"},
		{"topk", "SELECT comm, topk(fd, 4) AS top, topk(fd, 2, count) AS heaviest FROM syscall.read GROUP BY comm"},
		{"kmeans", "SELECT comm, kmeans(nr, 3) AS cluster FROM syscall.any GROUP BY comm"},
		{"per_event", "SELECT time, comm, str(filename) AS file, ret FROM syscall.openat WHERE ret < 0"},
		{"user_space_case", "SELECT comm, CASE WHEN lower(comm) LIKE 'ba%' THEN 'shell' ELSE 'other' END AS kind, count() FROM syscall.read GROUP BY comm, kind HAVING count() > 1 ORDER BY 3 DESC"},
		{"user_space_duck_having", "SELECT lower(comm) AS c, count() AS n FROM syscall.read GROUP BY c HAVING md5(c) <> ''"},
		{"tp_btf", "SELECT args.prev.comm AS prev, args.next.comm AS next, count() FROM tp_btf.sched_switch WHERE prev_state = 0 GROUP BY prev, next"},
		{"kfunc", "SELECT args.file.f_inode.i_ino AS inode, sum(count) FROM kfunc.vfs_read GROUP BY inode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cat := fixture
			if strings.HasPrefix(c.name, "tp_btf") || strings.HasPrefix(c.name, "kfunc") {
				cat = fixtureWithBTF
			}
			p, err := Compile(c.query, cat, nil)
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
		{"unsafe read", "SELECT str(arg0) FROM uprobe.\"/bin/bash\".main", []string{"--unsafe-read"}, "str(arg0)"},
		{"kernel functions", "SELECT count() FROM kprobe.vfs_read", []string{"kernel function probes unavailable"}, "kprobe.vfs_read"},
		{"syntax", "SELECT count( FROM syscall.read", []string{"expected an expression, found FROM"}, "FROM"},
		{"lhist args", "SELECT lhist(count, 0, 10) FROM syscall.read", []string{"lhist takes 4 argument(s)"}, "lhist(count, 0, 10)"},
		{"quantile range", "SELECT quantile(count, 2) FROM syscall.read", []string{"between 0 and 1"}, "2"},
		{"like on an integer", "SELECT count() FROM syscall.read WHERE fd LIKE '1%'", []string{"type mismatch: LIKE matches a string, fd is an int"}, "fd"},
		{"like pattern not a string", "SELECT count() FROM syscall.read WHERE comm LIKE 3", []string{"type mismatch: a LIKE pattern is a string"}, "3"},
		{"recorded table as source", "SELECT count() FROM samples", []string{"samples is not a probe source", "WITH live AS"}, "samples"},
		{"no probe source in with", "WITH a AS (SELECT 1 FROM samples) SELECT * FROM a", []string{"no part of WITH reads a probe source"}, "WITH a AS (SELECT 1 FROM samples)"},
		{"two probe sources", "WITH a AS (SELECT count() FROM syscall.read), b AS (SELECT count() FROM syscall.getppid) SELECT * FROM a, b", []string{"a second probe source", "here in a"}, "syscall.getppid"},
		{"probe source outside with", "WITH a AS (SELECT count() AS n FROM syscall.read) SELECT * FROM a, tracepoint.sched.sched_switch", []string{"tracepoint.sched.sched_switch is a probe source, read only in the WITH part a"}, "tracepoint.sched.sched_switch"},
		{"error inside the live part", "WITH a AS (SELECT count() AS n FROM syscall.read GROUP BY nope) SELECT * FROM a", []string{"unknown field nope of syscall.read"}, "nope"},
		{"bad profile", "SELECT count() FROM profile.hz_0", []string{"want 1 to 10000 Hz"}, "profile.hz_0"},
		// Checked before anything attaches: the user-space part too.
		{"unknown function", "SELECT comm, foo(ret) FROM syscall.read", []string{"foo(ret): Scalar Function with name foo does not exist"}, "foo(ret)"},
		{"unknown function in aggregation", "SELECT comm, count() AS n FROM syscall.read GROUP BY comm HAVING nosuch(n) > 1", []string{"nosuch(n): Scalar Function with name nosuch does not exist"}, "nosuch(n)"},
		{"having with a string", "SELECT comm, count() AS n FROM syscall.read GROUP BY comm HAVING n > 'x'", []string{"type mismatch: n > 'x' compares an int with a string"}, "n > 'x'"},
		{"order by a histogram", "SELECT comm, hist(ret) AS h FROM syscall.read GROUP BY comm ORDER BY h", []string{"ORDER BY a histogram"}, "h"},
		{"hist of a pointer", "SELECT hist(filename) FROM syscall.openat", []string{"type mismatch: hist() needs a number, filename is a pointer (const char *): str(filename) reads the string it points to"}, "filename"},
		{"arithmetic on a pointer", "SELECT count() FROM syscall.openat WHERE filename + 1 > 0", []string{"type mismatch: + needs integers, filename is a pointer (const char *): str(filename)"}, "filename"},
		{"str of an array of strings", "SELECT str(argv) FROM syscall.execve", []string{"argv is a const char *const *, an array of strings: str() reads one char *; str(argv[0]) reads the first"}, "argv"},
		{"index of a non-array", "SELECT str(filename[1]) FROM syscall.execve", []string{"[ ] reads an element of a pointer array field"}, "filename[1]"},
		{"division by zero", "SELECT sum(ret / 0) FROM syscall.read", []string{"division by zero: ret / 0"}, "0"},
		{"no such syscall name", "SELECT count() FROM syscall.any WHERE nr = 'nosuchcall'", []string{`no system call named "nosuchcall"`}, "'nosuchcall'"},
		{"case of mixed results", "SELECT CASE WHEN ret > 0 THEN 'ok' ELSE ret END FROM syscall.read", []string{"type mismatch: the results of CASE are of different types"}, "CASE WHEN ret > 0 THEN 'ok' ELSE ret END"},
		{"ordinal out of range", "SELECT comm, count() FROM syscall.read GROUP BY 3", []string{"there is no output column 3"}, "3"},
		// SQL a trace query does not take is named, not "expected FROM".
		{"window function", "SELECT comm, count() OVER (PARTITION BY comm) FROM syscall.read", []string{"not supported: window functions (OVER); holter trace --window"}, "OVER"},
		{"union", "SELECT comm FROM syscall.read UNION SELECT comm FROM syscall.write", []string{"not supported: UNION"}, "UNION"},
		{"left join", "SELECT count() FROM syscall.read AS r LEFT JOIN syscall.openat AS o ON r.fd = o.ret", []string{"not supported: LEFT joins"}, "LEFT"},
		{"subquery", "SELECT count() FROM syscall.read WHERE fd IN (SELECT fd FROM syscall.openat)", []string{"not supported: subqueries"}, "SELECT"},
		{"subquery in from", "SELECT count() FROM (SELECT fd FROM syscall.read)", []string{"not supported: subqueries in FROM"}, "(SELECT"},
		{"ilike", "SELECT count() FROM syscall.read WHERE comm ILIKE 'a%'", []string{"not supported: ILIKE: use lower(x) LIKE"}, "ILIKE"},
		{"offset", "SELECT comm FROM syscall.read LIMIT 10 OFFSET 5", []string{"not supported: OFFSET"}, "OFFSET"},
		{"aggregate filter", "SELECT count() FILTER (WHERE ret < 0) FROM syscall.read", []string{"not supported: aggregate FILTER clauses"}, "FILTER"},
		{"interval literal", "SELECT count() FROM syscall.read WHERE latency > INTERVAL 1 SECOND", []string{"not supported: INTERVAL literals"}, "INTERVAL"},
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
