package tracequery

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestTemporalJoinsExact runs both kinds of join over a workload whose
// pairs are known: FOLLOWED BY pairs each call of traced_add with its
// return (@start[tid] as a query: m pairs, every return the sum of its
// call's arguments, after it), and JOIN meets each read with the latest
// open of its file descriptor in the same process (the workload reads r
// times from the one file it opens).
func TestTemporalJoinsExact(t *testing.T) {
	testutil.RequireRoot(t)
	const r, m = 400, 777
	bin, pid, run := workload(t, 0, r, m)
	followed := start(t, fmt.Sprintf(`SELECT count() AS pairs, sum(b.ret) AS rets, sum(b.ret - a.arg0 - a.arg1) AS diff,
		min(b.time - a.time) >= 0 AS after, max(b.tid - a.tid) AS same_thread
		FROM uprobe.%q.traced_add AS a FOLLOWED BY uretprobe.%q.traced_add AS b ON a.tid = b.tid WHERE a.pid = %d`, bin, bin, pid), nil)
	latest := start(t, fmt.Sprintf(`SELECT count() AS reads, sum(r.count) AS bytes, min(o.ret) AS fd, max(o.ret) AS fd2
		FROM syscall.openat AS o JOIN syscall.read AS r ON o.ret = r.fd AND o.pid = r.pid
		WHERE o.pid = %d AND o.ret >= 0 AND r.time BETWEEN o.time AND o.time + 60000000000`, pid), nil)
	run()
	time.Sleep(20 * time.Millisecond)
	iv := flush(t, followed)
	sum := int64(m * (m - 1) / 2)
	if got := fmt.Sprint(iv.Result.Rows); got != fmt.Sprintf("[[%d %d 0 true 0]]", m, 3*sum) {
		t.Errorf("FOLLOWED BY: %s, want [[%d %d 0 true 0]]", got, m, 3*sum)
	}
	if len(iv.Counters) != 0 {
		t.Errorf("FOLLOWED BY lost or dropped %v on a quiet workload", iv.Counters)
	}
	iv = flush(t, latest)
	row := iv.Result.Rows[0]
	if row[0] != int64(r) || row[1] != int64(r/4*(1+100+1000+5000)) || row[2] != row[3] {
		t.Errorf("JOIN: %v, want %d reads of %d bytes from one descriptor", row, r, r/4*(1+100+1000+5000))
	}
	if len(iv.Counters) != 0 {
		t.Errorf("JOIN lost or dropped %v on a quiet workload", iv.Counters)
	}
}

// TestJoinEvictionsCounted fills a small join state with more keys than
// it holds: every left event is either still in the state or counted as
// evicted, never silently gone.
func TestJoinEvictionsCounted(t *testing.T) {
	testutil.RequireRoot(t)
	const m, size = 3000, 64
	bin, pid, run := workload(t, 0, 0, m)
	s := start(t, fmt.Sprintf(`SELECT count() AS n FROM uprobe.%q.traced_add AS a JOIN uretprobe.%q.traced_add AS b ON a.arg0 = b.ret + 1000000
		WHERE a.pid = %d`, bin, bin, pid), &Options{StashSize: size})
	run()
	iv := flush(t, s)
	present := 0
	var k, v []byte
	it := s.coll.Maps["stash"].Iterate()
	for it.Next(&k, &v) {
		present++
	}
	evicted := int(iv.Counters["evicted"])
	if present > size || evicted == 0 || evicted+present != m {
		t.Errorf("%d left events kept + %d evicted = %d, want %d, with at most %d kept", present, evicted, present+evicted, m, size)
	}
	if iv.Result.Rows[0][0] != int64(0) {
		t.Errorf("%v matches, want none (no key meets)", iv.Result.Rows)
	}
}

// TestJoinErrors: what a join needs, said before anything runs.
func TestJoinErrors(t *testing.T) {
	cases := []struct{ query, msg, caret string }{
		{"SELECT count() FROM syscall.openat JOIN syscall.read AS r ON tid = r.tid", "each stream of a join needs its own alias", "syscall.openat"},
		{"SELECT count() FROM syscall.openat AS o JOIN syscall.read AS r ON o.ret > r.fd", "a join needs a key: an equality of a field of o and one of r", "o.ret > r.fd"},
		{"SELECT count() FROM syscall.openat AS o JOIN syscall.read AS r ON o.ret = r.fd AND nope = 3", "unknown field nope of the join", "nope"},
		{"SELECT count() FROM syscall.openat AS o JOIN syscall.read AS r ON o.ret = r.fd WHERE comm = 'x' AND r.count > 1 AND count > 2", "", ""},
		{"SELECT o.latency FROM syscall.openat AS o JOIN syscall.read AS r ON o.tid = r.tid", "o.latency: a stream of a join is one probe", "syscall.openat"},
		{"SELECT o.ret, o.flags FROM syscall.openat AS o JOIN syscall.read AS r ON o.tid = r.tid", "a stream of a join is one probe: o reads flags at its entry and ret at its return", "syscall.openat"},
		{"SELECT count() FROM syscall.openat AS o JOIN syscall.read AS r ON o.tid = r.tid AND lower(r.comm) = 'x'", "a join's conditions run in the probe", "lower(r.comm) = 'x'"},
		{"SELECT count() FROM syscall.openat AS o JOIN syscall.read AS r ON str(o.filename) = r.fd", "a join's key is integers", "str(o.filename)"},
	}
	for _, c := range cases {
		_, err := Compile(c.query, fixture, nil)
		if c.msg == "" {
			// Unqualified: comm is the right side's task's, count the
			// only side's with that field.
			if err != nil {
				t.Errorf("%s: %v", c.query, err)
			}
			continue
		}
		qe, ok := err.(*Error)
		if !ok || !strings.Contains(err.Error(), c.msg) || c.query[qe.Pos:qe.End] != c.caret {
			t.Errorf("%s: %v, want %q at %q", c.query, err, c.msg, c.caret)
		}
	}
}
