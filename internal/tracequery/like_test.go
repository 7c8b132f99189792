package tracequery

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/testutil"
)

// likeNames are the thread names the string tests run under; each makes
// as many calls as its position in the list plus one.
var likeNames = []string{"bash", "basic", "ba", "b", "zsh", "sh", "crabby", "abc", "axc", "abxc", "a_c", "ac", "xabx",
	"holter-ab-long1", "abababababababa", "a%c"}

// likeRef is LIKE by a regular expression: an implementation of the
// pattern's meaning that shares nothing with the probe's.
func likeRef(pattern, s string) bool {
	var re strings.Builder
	re.WriteString("^")
	for _, c := range pattern {
		switch c {
		case '%':
			re.WriteString("(?s:.*)")
		case '_':
			re.WriteString("(?s:.)")
		default:
			re.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String()).MatchString(s)
}

// asThreads runs, for each name, a thread renamed to it that calls fn
// i+1 times (i: the name's index).
func asThreads(t *testing.T, names []string, fn func(name string)) {
	t.Helper()
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			onThread(t, name, func() {
				for j := 0; j <= i; j++ {
					fn(name)
				}
			})
		}()
	}
	wg.Wait()
}

// TestStringMatchExact runs LIKE, = and <> on comm, on a tracepoint's
// string field and on a file name read from user memory, each both in the
// probe and (forced by a DuckDB function) in DuckDB, over threads and
// files with chosen names; all must give the counts the names imply.
func TestStringMatchExact(t *testing.T) {
	testutil.RequireRoot(t)
	pid := os.Getpid()
	dir := t.TempDir()
	files := map[string]string{}
	for _, n := range likeNames {
		p := filepath.Join(dir, "f-"+strings.ReplaceAll(n, "%", "pct"))
		files[n] = p
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	patterns := []string{"ba%", "%sh", "%ab%", "a_c", "%", "", "b%c", "%a%b%", "_", "a%", "ab%ab%ab%a", "%x", "__", "abc"}
	type check struct {
		query  string
		kernel bool
		want   map[string]int64
		sess   *Session
	}
	var checks []*check
	add := func(q string, want map[string]int64) {
		for _, kernel := range []bool{true, false} {
			qq := q
			duck := len(checks)%4 == 1
			if !kernel {
				// The last condition, with a function beside it that only
				// user space has, runs there: in holter's evaluator, or
				// (every other query) in DuckDB.
				i, j := strings.LastIndex(q, " AND ")+5, strings.Index(q, " GROUP BY")
				other := "abs(pid) < 0"
				if duck {
					other = "md5(comm) = ''"
				}
				qq = q[:i] + "(" + q[i:j] + " OR " + other + ")" + q[j:]
			}
			c := &check{query: qq, kernel: kernel, want: want}
			c.sess = start(t, qq, nil)
			u := c.sess.plan.user
			if got := c.sess.plan.Mode == ModeAggregate; got != kernel ||
				!kernel && (duck && !strings.Contains(c.sess.plan.UserSQL, "WHERE") || !duck && (u.where == nil || u.duck != "")) {
				t.Fatalf("%s: in the probe %v, want %v (%v)", qq, got, kernel, c.sess.plan.Notes)
			}
			checks = append(checks, c)
		}
	}
	count := func(match func(name string) bool) map[string]int64 {
		m := map[string]int64{}
		for i, n := range likeNames {
			if match(n) {
				m[n] = int64(i + 1)
			}
		}
		return m
	}
	for _, pat := range patterns {
		lit := "'" + strings.ReplaceAll(pat, "'", "''") + "'"
		add(fmt.Sprintf("SELECT comm AS k, count() AS n FROM syscall.getppid WHERE pid = %d AND comm LIKE %s GROUP BY comm", pid, lit),
			count(func(n string) bool { return likeRef(pat, n) }))
		add(fmt.Sprintf("SELECT newcomm AS k, count() AS n FROM tracepoint.task.task_rename WHERE oldcomm = 'holter-like' AND newcomm NOT LIKE %s GROUP BY newcomm", lit),
			count(func(n string) bool { return !likeRef(pat, n) }))
		full := dir + "/f-" + pat
		add(fmt.Sprintf("SELECT comm AS k, count() AS n FROM syscall.openat WHERE pid = %d AND str(filename) LIKE '%s' GROUP BY comm", pid, strings.ReplaceAll(full, "'", "''")),
			count(func(n string) bool { return likeRef(full, files[n]) }))
	}
	// Equality: with a constant, and of two string fields.
	add(fmt.Sprintf("SELECT comm AS k, count() AS n FROM syscall.getppid WHERE pid = %d AND comm = 'crabby' GROUP BY comm", pid),
		map[string]int64{"crabby": 7})
	add(fmt.Sprintf("SELECT comm AS k, count() AS n FROM syscall.getppid WHERE pid = %d AND comm <> 'crabby' GROUP BY comm", pid),
		count(func(n string) bool { return n != "crabby" }))
	// Buffers of different sizes (64 and 16 bytes).
	add(fmt.Sprintf("SELECT comm AS k, count() AS n FROM syscall.openat WHERE pid = %d AND str(filename) LIKE '%s%%' AND str(filename) <> comm GROUP BY comm", pid, dir),
		count(func(string) bool { return true }))
	// task_rename fires before the rename: comm is still the old name.
	add("SELECT newcomm AS k, count() AS n FROM tracepoint.task.task_rename WHERE oldcomm = 'holter-like' AND newcomm = comm GROUP BY newcomm", map[string]int64{})
	add("SELECT newcomm AS k, count() AS n FROM tracepoint.task.task_rename WHERE oldcomm = 'holter-like' AND oldcomm = comm GROUP BY newcomm", count(func(string) bool { return true }))
	time.Sleep(10 * time.Millisecond)
	asThreads(t, likeNames, func(name string) {
		unix.Getppid()
		f, err := os.Open(files[name])
		if err == nil {
			f.Close()
		}
	})
	// task_rename: each thread renamed from holter-like to its name once
	// per call.
	asThreads(t, likeNames, func(name string) {
		testutil.SetThreadName("holter-like")
		testutil.SetThreadName(name)
	})
	time.Sleep(20 * time.Millisecond)
	for _, c := range checks {
		iv := flush(t, c.sess)
		got := map[string]int64{}
		for _, r := range iv.Result.Rows {
			got[r[0].(string)] = r[1].(int64)
		}
		if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(c.want)) {
			where := "probe"
			if !c.kernel {
				where = "DuckDB"
			}
			t.Errorf("%s (in the %s):\n got %v\nwant %v\nlost: %v", c.query, where, sorted(got), sorted(c.want), iv.Counters)
		}
	}
}

func sorted(m map[string]int64) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	return out
}

// TestStringFiltersLoad has the verifier accept string matching in the
// places it is hardest: after pairing (end side), deep in an expression,
// on a __data_loc field, and on the longest strings with many segments.
func TestStringFiltersLoad(t *testing.T) {
	testutil.RequireRoot(t)
	for _, c := range []struct {
		q    string
		opts *Options
	}{
		{"SELECT comm, hist(latency) FROM syscall.read WHERE ret > 0 AND (comm LIKE 'ba%sh' OR comm NOT LIKE '%_x_%') GROUP BY comm", nil},
		{"SELECT count() FROM syscall.read WHERE (fd = 3 OR comm LIKE '%a%b%c%d%') AND ret >= 0 AND comm <> 'x'", nil},
		{"SELECT count() FROM tracepoint.sched.sched_process_exec WHERE filename LIKE '/usr/%bin/%' AND filename <> comm", nil},
		{"SELECT comm, count() FROM syscall.openat WHERE str(filename) LIKE '%/lib/%.so%' GROUP BY comm", &Options{StrSize: 256}},
		{"SELECT count() FROM syscall.openat WHERE str(filename) LIKE '%a%b%c%' AND str(filename) <> comm", &Options{StrSize: 256}},
		{"SELECT count() FROM tracepoint.sched.sched_switch WHERE prev_comm LIKE 'kworker/%' AND next_comm = prev_comm", nil},
	} {
		p, err := Compile(c.q, nil, c.opts)
		if err != nil {
			t.Errorf("%s: %v", c.q, err)
			continue
		}
		if p.Filter == nil || p.Mode != ModeAggregate && !strings.Contains(c.q, "hist") {
			t.Errorf("%s: the filter is not in the probe (%v)", c.q, p.Notes)
		}
		s, err := Start(p)
		if err != nil {
			t.Errorf("%s: %v", c.q, err)
			continue
		}
		s.Close()
	}
}
