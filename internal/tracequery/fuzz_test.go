package tracequery

import (
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/store"
)

// FuzzTraceQuery parses what it is given: parsing must not panic, nor
// must planning what parses (against the tracefs fixture), generating its
// BPF instructions and maps, or explaining it.
func FuzzTraceQuery(f *testing.F) {
	for _, q := range []string{
		"SELECT comm, count() AS n FROM syscall.getppid GROUP BY comm ORDER BY n DESC LIMIT 10",
		"SELECT comm, hist(ret) AS sizes, sum(ret) FROM syscall.read WHERE ret >= 0 AND pid != 1 GROUP BY comm",
		"SELECT fd, count(), min(latency), max(latency), avg(latency), p99(latency), quantile(latency, 0.5) FROM syscall.read GROUP BY fd HAVING count() > 10",
		"SELECT lhist(count, 0, 4096, 512), count_distinct(fd), sample(count) FROM syscall.read",
		"SELECT kstack, count() FROM tracepoint.sched.sched_switch WHERE prev_comm = 'swapper/0' GROUP BY kstack",
		"SELECT str(filename) AS file, count() FROM syscall.openat GROUP BY file",
		"SELECT time, pid, ret FROM syscall.read WHERE ret < 0",
		"SELECT lower(comm) AS c, hist(ret) AS h, lhist(ret, 0, 100, 10), p99(latency), count_distinct(fd), sample(fd) FROM syscall.read GROUP BY c HAVING p99(latency) > 1000",
		"SELECT count() FROM syscall.openat WHERE str(filename) LIKE '%ab%' AND comm NOT LIKE 'a_c'",
		"WITH cpu AS (SELECT comm, sum(weight)::BIGINT AS cpu_ns FROM samples WHERE vital = 'cpu' GROUP BY comm), live AS (SELECT comm, count() AS calls FROM syscall.getppid GROUP BY comm) SELECT live.comm, calls, cpu_ns FROM live LEFT JOIN cpu USING (comm) ORDER BY calls DESC LIMIT 10",
		"SELECT arg0 % 4 AS k, count(), sum(arg1), sum(ret), max(latency) FROM uprobe.\"/bin/sh\".main GROUP BY k",
		"SELECT hist(latency) FROM sched.runq_latency WHERE pid > 100",
		"SELECT comm, ustack, count() FROM profile.hz_99 GROUP BY comm, ustack",
		"EXPLAIN SELECT count() FROM syscall.any WHERE comm LIKE 'ba%'",
		"SELECT count( FROM syscall.read",
		"SELECT quantile(count, 2) FROM syscall.read",
		"SELECT count() FROM profile.hz_0",
		"SELECT -9223372036854775808 / -1, 1 << 70, 'a''b' FROM syscall.read WHERE (((fd)))",
	} {
		f.Add(q)
	}
	for _, r := range Library {
		f.Add(r.Query)
	}
	f.Fuzz(func(t *testing.T, q string) {
		// A query names files (uprobe."PATH") the catalog reads: none
		// outside the fixture and the usual binaries.
		if strings.Contains(q, "/dev") || strings.Contains(q, "/proc") || strings.Contains(q, "/sys") {
			return
		}
		parsed, err := Parse(q)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("Parse(%q) failed with %T, not *Error: %v", q, err, err)
			}
			return
		}
		p, err := CompileQuery(parsed, fixture, nil)
		if err != nil {
			return
		}
		if p.Query.With != nil {
			row := make([]any, len(p.Columns))
			p.JoinSQL(&store.Result{Columns: p.Columns, Rows: [][]any{row}})
		}
		p.Programs()
		p.Maps()
		p.Explain(true)
	})
}
