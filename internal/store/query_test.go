package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/engine"
	"golang.org/x/sys/unix"
)

// endless is a query that would run for hours.
const endless = `SELECT count(*) FROM range(1e12::BIGINT)`

// TestQueryTimeout: a query past its time limit is stopped with an error
// that says so, and gives its slot back.
func TestQueryTimeout(t *testing.T) {
	s, _ := sandboxStore(t, &Options{QueryTimeout: time.Second, MaxQueries: 1})
	began := time.Now()
	_, err := s.Query(context.Background(), endless)
	if !errors.Is(err, ErrQueryTimeout) {
		t.Fatalf("an endless query: %v, want the time limit's error", err)
	}
	t.Logf("stopped after %v: %v", time.Since(began).Round(time.Millisecond), err)
	if !strings.Contains(err.Error(), "--query-timeout") {
		t.Errorf("the error does not name the flag: %v", err)
	}
	// The one slot is free again.
	if _, err := s.Query(context.Background(), `SELECT 1`); err != nil {
		t.Fatalf("a query after the timeout: %v", err)
	}
}

// rssBytes is this process's resident memory.
func rssBytes(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// peakRSS samples the resident memory while fn runs and returns its peak
// above what it was before.
func peakRSS(t testing.TB, fn func()) int64 {
	before := rssBytes(t)
	var peak atomic.Int64
	peak.Store(before)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if r := rssBytes(t); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	fn()
	close(done)
	wg.Wait()
	return peak.Load() - before
}

// TestHugeResultIsCut: a 1 GB answer (100 000 rows of 10 kB) and one of
// 10 million small rows are cut at the limits, marked so, and the
// process's memory grows by a bounded amount, not by the answer's size.
func TestHugeResultIsCut(t *testing.T) {
	const maxBytes = 16 << 20
	s, _ := sandboxStore(t, &Options{MaxResultBytes: maxBytes, MaxResultRows: 50_000})
	var res *Result
	var err error
	grew := peakRSS(t, func() {
		res, err = s.Query(context.Background(), `SELECT repeat('x', 10000) || range AS s FROM range(100000)`)
	})
	if err != nil {
		t.Fatal(err)
	}
	var held int64
	for _, r := range res.Rows {
		held += valueBytes(r[0])
	}
	t.Logf("1 GB answer: %d rows, %d bytes kept, truncated %v; peak RSS grew %d MiB", len(res.Rows), held, res.Truncated, grew>>20)
	if !res.Truncated || held > maxBytes || len(res.Rows) == 0 {
		t.Errorf("1 GB answer: %d rows of %d bytes, truncated %v; want it cut under %d bytes", len(res.Rows), held, res.Truncated, maxBytes)
	}
	// Generous: DuckDB's memory limit and the cut, far from the answer's 1 GB.
	if grew > 512<<20 {
		t.Errorf("peak RSS grew by %d MiB for an answer cut at %d MiB", grew>>20, maxBytes>>20)
	}
	// What is kept is the answer's first rows, in its order.
	res, err = s.Query(context.Background(), `SELECT repeat('x', 1000) || range AS s FROM range(100000) ORDER BY range DESC`)
	if err != nil {
		t.Fatal(err)
	}
	if first := res.Rows[0][0].(string); !res.Truncated || !strings.HasSuffix(first, "x99999") {
		t.Errorf("100 MB answer in descending order: truncated %v, first row …%q", res.Truncated, first[len(first)-8:])
	}
	res, err = s.Query(context.Background(), `SELECT range FROM range(10000000)`)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Rows) != 50_000 {
		t.Errorf("10 million rows: got %d, truncated %v; want 50000 and truncated", len(res.Rows), res.Truncated)
	}
	res, err = s.Query(context.Background(), `SELECT range FROM range(50000)`)
	if err != nil || res.Truncated || len(res.Rows) != 50_000 {
		t.Errorf("50000 rows, the limit: %d rows, truncated %v, %v", len(res.Rows), res.Truncated, err)
	}
}

// TestQueriesNeverStarveCommits runs as many endless queries as the
// store takes while the recorder's commits go on: a query beyond the limit
// is refused as busy, epochs and span batches commit while the endless
// ones run (not only once they end), and each ends at its time limit.
func TestQueriesNeverStarveCommits(t *testing.T) {
	const timeout = 8 * time.Second
	s, _ := sandboxStore(t, &Options{QueryTimeout: timeout, MaxQueries: 4})
	ctx := context.Background()
	errs := make([]error, 4)
	ended := make(chan struct{}, 4)
	began := time.Now()
	for i := range errs {
		go func() {
			_, errs[i] = s.Query(ctx, endless)
			ended <- struct{}{}
		}()
	}
	for len(s.queries) < 4 {
		if time.Since(began) > timeout {
			t.Fatalf("the endless queries did not start: %v", errs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := s.Query(ctx, `SELECT 1`); !errors.Is(err, ErrBusy) {
		t.Errorf("a query past the limit of 4: %v, want ErrBusy", err)
	}
	// Commits while none of the endless queries has ended.
	var failed []error
	n, during := int64(1), 0
	var longest time.Duration
	last := time.Now()
commits:
	for {
		select {
		case <-ended:
			break commits
		default:
		}
		n++
		if err := recorderCommit(ctx, s, n); err != nil {
			failed = append(failed, err)
		} else {
			during++
		}
		longest = max(longest, time.Since(last))
		last = time.Now()
		time.Sleep(20 * time.Millisecond)
	}
	for range 3 {
		<-ended
	}
	t.Logf("%d epochs and span batches committed in %v while 4 endless queries ran; longest commit %v",
		during, time.Since(began).Round(time.Millisecond), longest.Round(time.Millisecond))
	if len(failed) > 0 {
		t.Fatalf("commits failed while queries ran: %v", errors.Join(failed...))
	}
	// The property, with a margin for a loaded machine: commits go on
	// while the queries run, rather than after they end.
	if during < 3 {
		t.Errorf("%d commits while the queries ran, want them to go on", during)
	}
	for i, err := range errs {
		if !errors.Is(err, ErrQueryTimeout) {
			t.Errorf("endless query %d: %v, want the time limit's error", i, err)
		}
	}
	res, err := s.Query(ctx, `SELECT count(*) FROM epochs`)
	if err != nil || res.Rows[0][0] != n {
		t.Errorf("epochs stored: %v, %v; want %d", res, err, n)
	}
}

// TestCloseStopsQueries: closing the store ends the queries running.
func TestCloseStopsQueries(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := s.Query(context.Background(), endless)
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	s.Close()
	if err := <-done; err == nil {
		t.Fatal("an endless query outlived Close")
	}
	if _, err := s.Query(context.Background(), `SELECT 1`); !errors.Is(err, ErrClosed) {
		t.Errorf("a query after Close: %v", err)
	}
}

// TestReadOnlyQueriesRunAtTheCallersPriority: the recorder's store runs
// its queries on threads at queryNice in its engine process, below its
// commits; a store opened read-only, which commits nothing, runs them at
// the caller's priority.
func TestReadOnlyQueriesRunAtTheCallersPriority(t *testing.T) {
	// getpriority(2) gives 20 - nice.
	if prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0); err != nil || 20-prio >= queryNice {
		t.Skipf("the test runs at nice %d (%v): its queries' threads could not be told from the caller's", 20-prio, err)
	}
	dir := t.TempDir()
	w, err := Open(dir, &Options{QueryTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// nicedThreads are the engine processes' threads at queryNice.
	nicedThreads := func() map[string]bool {
		out := map[string]bool{}
		for _, pid := range engine.Pids() {
			dir := fmt.Sprintf("/proc/%d/task/", pid)
			tasks, _ := os.ReadDir(dir)
			for _, task := range tasks {
				stat, err := os.ReadFile(dir + task.Name() + "/stat")
				if err != nil {
					continue
				}
				// Fields after the command's parenthesis, from the
				// third (state); the nice value is the nineteenth.
				fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
				if len(fields) > 16 && fields[16] == strconv.Itoa(queryNice) {
					out[dir+task.Name()] = true
				}
			}
		}
		return out
	}
	// niced says whether a thread of an engine process not at queryNice
	// before is at queryNice while an endless query runs on st.
	niced := func(st *Store) bool {
		t.Helper()
		before := nicedThreads()
		done := make(chan error, 1)
		go func() { _, err := st.Query(context.Background(), endless); done <- err }()
		defer func() {
			if err := <-done; !errors.Is(err, ErrQueryTimeout) {
				t.Errorf("the endless query: %v, want its time limit", err)
			}
		}()
		for began := time.Now(); time.Since(began) < 2*time.Second; time.Sleep(50 * time.Millisecond) {
			for tid := range nicedThreads() {
				if !before[tid] {
					return true
				}
			}
		}
		return false
	}
	if !niced(w) {
		t.Error("no thread at queryNice while the writable store ran a query")
	}
	w.Close()
	r, err := Open(dir, &Options{ReadOnly: true, QueryTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if niced(r) {
		t.Error("a thread at queryNice while the read-only store ran a query")
	}
}
