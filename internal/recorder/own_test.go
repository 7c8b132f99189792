package recorder

import (
	"context"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/engine"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// The recorder's engine processes are its own: a store's engine that
// burns CPU, faults pages in and makes system calls for seconds leaves no
// sample, neither from the moment the recorder is told of it (the
// programs leave it out) nor before, between its fork and the end of its
// exec, when it runs the recorder's code under its comm (ownChild), while
// a shell doing the same beside it is recorded.
func TestEngineProcessesAreNotRecorded(t *testing.T) {
	testutil.RequireRoot(t)
	var mu sync.Mutex
	sampled := map[uint32]int{}
	var all []store.Sample
	rec, stop := startRecorder(t, Config{Epoch: time.Second, Budget: -1, Vitals: []Vital{CPU, Umem, Kmem, Syscall}},
		func(e *store.Epoch) error {
			mu.Lock()
			defer mu.Unlock()
			for _, s := range e.Samples {
				sampled[s.Pid]++
				all = append(all, s)
			}
			return nil
		})
	told := map[int]int64{} // engine pid: when the recorder was told, wall ns
	engine.WatchPids(func(pids []int) {
		rec.SetOwnProcesses(pids)
		mu.Lock()
		defer mu.Unlock()
		for _, p := range pids {
			if _, ok := told[p]; !ok {
				told[p] = time.Now().UnixNano()
			}
		}
	})
	defer engine.WatchPids(nil)
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	shell := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`)
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	var engines []int
	ctx := context.Background()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		// A sort of fresh rows: CPU, new pages, and the system calls
		// that get them.
		if _, err := st.Query(ctx, `SELECT count(DISTINCT i * 7919 % 1000003) FROM range(2000000) t(i)`); err != nil {
			t.Fatal(err)
		}
		for _, p := range engine.Pids() {
			if !slices.Contains(engines, p) {
				engines = append(engines, p)
			}
		}
	}
	shell.Wait()
	time.Sleep(1500 * time.Millisecond) // the last epoch ends
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(engines) == 0 {
		t.Fatal("no engine process ran the queries")
	}
	t.Logf("engine processes %v; samples by pid: %v", engines, sampled)
	for _, p := range engines {
		for _, s := range all {
			if s.Pid == uint32(p) {
				t.Errorf("engine process %d: a %s sample %v after the recorder was told of it (comm %s)",
					p, s.Vital, time.Duration(s.TsNs-told[p]), s.Comm)
			}
		}
	}
	if sampled[uint32(shell.Process.Pid)] == 0 {
		t.Errorf("the shell beside the engine (pid %d) has no sample: the recording missed the work", shell.Process.Pid)
	}
}
