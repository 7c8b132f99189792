package tracequery

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// recordedCPU writes a recording whose cpu samples give each of names
// (but the last) a known weight: 1000 × (its index + 1), in two samples.
func recordedCPU(t *testing.T, dir string, names []string) map[string]int64 {
	t.Helper()
	st, err := store.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	want := map[string]int64{}
	var samples []store.Sample
	for i, n := range names[:len(names)-1] {
		w := uint64(1000 * (i + 1))
		samples = append(samples, store.Sample{TsNs: 10, Vital: "cpu", Weight: w / 4, EstCount: 1, Comm: n},
			store.Sample{TsNs: 11, Vital: "cpu", Weight: w - w/4, EstCount: 1, Comm: n})
		want[n] = int64(w)
	}
	err = st.WriteEpoch(context.Background(), &store.Epoch{Host: "h", Epoch: 1, StartNs: 1, EndNs: 20,
		Vitals: []store.Vital{{Name: "cpu", Events: uint64(len(samples))}}, Samples: samples})
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// joinQuery joins live getppid counts by comm with the recorded CPU per comm.
func joinQuery(pid int) string {
	return fmt.Sprintf(`WITH cpu AS (SELECT comm, sum(weight)::BIGINT AS cpu_ns FROM samples WHERE vital = 'cpu' GROUP BY comm),
	live AS (SELECT comm, count() AS calls, hist(ret) AS h FROM syscall.getppid WHERE pid = %d AND comm LIKE 'join%%' GROUP BY comm)
	SELECT live.comm AS comm, calls, cpu_ns, h FROM live LEFT JOIN cpu USING (comm) ORDER BY comm`, pid)
}

// TestJoinRecorded runs a live query joined with a recording's table
// through Run: the live counts by comm come from the probe, the CPU per
// comm from the store, and a comm the recording lacks gets NULL.
func TestJoinRecorded(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := EnsureTraceFS(); err != nil {
		t.Fatal(err)
	}
	names := []string{"join-a", "join-b", "join-c"}
	dir := t.TempDir()
	cpu := recordedCPU(t, dir, names)
	st, err := store.Open(dir, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, err := Compile(joinQuery(os.Getpid()), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attached := make(chan struct{})
	calls := map[string]int64{}
	var last [][]any
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, p, RunOptions{Interval: time.Hour, Recorded: store.Plain(st), Attached: func() { close(attached) }}, func(iv *Interval) error {
			if strings.Join(iv.Result.Columns, ",") != "comm,calls,cpu_ns,h" {
				return fmt.Errorf("columns %v", iv.Result.Columns)
			}
			for _, r := range iv.Result.Rows {
				calls[r[0].(string)] += r[1].(int64)
			}
			last = iv.Result.Rows
			return nil
		})
	}()
	<-attached
	asThreads(t, names, func(string) { // (index + 1) × 10 getppid calls
		for j := 0; j < 10; j++ {
			unix.Getppid()
		}
	})
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if len(last) != len(names) {
		t.Fatalf("rows %v, want one per name %v", last, names)
	}
	for i, r := range last {
		n := names[i]
		var wantCPU any
		if c, ok := cpu[n]; ok {
			wantCPU = c
		}
		if r[0] != n || calls[n] != int64(10*(i+1)) || r[2] != wantCPU {
			t.Errorf("row %v: want %s with %d calls and cpu_ns %v", r, n, 10*(i+1), wantCPU)
		}
		// Buckets survive the trip through SQL: getppid returns our parent.
		b, _ := r[3].([]any)
		ppid := int64(os.Getppid())
		if len(b) != 1 || toInt(b[0].(map[string]any)["lo"]) > ppid || toInt(b[0].(map[string]any)["hi"]) <= ppid {
			t.Errorf("%s: hist(ret) = %v, want one bucket holding %d", n, r[3], ppid)
		}
	}
}
