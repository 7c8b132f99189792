package tracequery

import (
	"context"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestAggregationMapsAreCheapToCreate guards holter trace's start: no map
// of maps (filling one waits for an RCU grace period, some 10 ms each)
// and no preallocated aggregation map (a per-CPU hash of 10240 keys took
// the kernel 15-20 ms to create).
func TestAggregationMapsAreCheapToCreate(t *testing.T) {
	for _, q := range []string{
		"SELECT comm, count() FROM syscall.getppid GROUP BY comm",
		"SELECT fd, hist(latency), p99(latency) FROM syscall.read GROUP BY fd",
		"SELECT lhist(count, 0, 4096, 512), count_distinct(fd), sample(count) FROM syscall.read",
		"SELECT kstack, count() FROM tracepoint.sched.sched_switch GROUP BY kstack",
	} {
		p, err := Compile(q, fixture, nil)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		aggs := 0
		for name, m := range p.Maps() {
			switch m.Type {
			case ebpf.ArrayOfMaps, ebpf.HashOfMaps:
				t.Errorf("%s: map %s is a map of maps", q, name)
			case ebpf.PerCPUHash:
				aggs++
				if m.Flags&unix.BPF_F_NO_PREALLOC == 0 {
					t.Errorf("%s: aggregation map %s of %d keys is preallocated", q, name, m.MaxEntries)
				}
			}
		}
		if aggs != 2 {
			t.Errorf("%s: %d aggregation maps, want the 2 swapped each interval", q, aggs)
		}
	}
}

// TestDirectQueriesDoNotStartDuckDB runs queries whose user-space part
// the evaluator computes (a projection, ORDER BY, HAVING) and queries that
// need DuckDB: only those start it.
func TestDirectQueriesDoNotStartDuckDB(t *testing.T) {
	testutil.RequireRoot(t)
	var phases []string
	for _, c := range []struct {
		q         string
		duck      bool
		addToUser string // appended to the planned user-space SQL
	}{
		{"SELECT comm, count() FROM syscall.getppid GROUP BY comm", false, ""},
		{"SELECT comm, count() AS n FROM syscall.getppid GROUP BY comm HAVING n > 0 ORDER BY n DESC", false, ""},
		{"SELECT md5(comm) AS h, count() AS n FROM syscall.getppid GROUP BY comm", true, ""},
		// A user-space part changed after planning is no longer the
		// projection planned: DuckDB runs it.
		{"SELECT comm, count() FROM syscall.getppid GROUP BY comm", true, " WHERE k0 <> ''"},
	} {
		if _, err := EnsureTraceFS(); err != nil {
			t.Fatal(err)
		}
		p, err := Compile(c.q, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.UserSQL += c.addToUser
		phases = nil
		s, err := startPhased(p, func(name string) { phases = append(phases, name) }, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(phases) != len(StartPhases) || phases[len(phases)-1] != "attached" {
			t.Errorf("%s: start reported phases %v, want %v", c.q, phases, StartPhases)
		}
		if s.duck.db != nil {
			t.Errorf("%s: DuckDB started before the first interval", c.q)
		}
		time.Sleep(10 * time.Millisecond)
		iv, err := s.Flush(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := s.duck.db != nil; got != c.duck {
			t.Errorf("%s: DuckDB started: %v, want %v (user-space part %s)", c.q, got, c.duck, p.UserSQL)
		}
		if len(iv.Result.Columns) != 2 {
			t.Errorf("%s: columns %v", c.q, iv.Result.Columns)
		}
		s.Close()
	}
}
