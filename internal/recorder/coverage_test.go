package recorder

import (
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestRareFastSyscallsAreSampled: a label that makes one fast system call
// in an epoch is sampled (Chopstix §5.3), though the syscall vital adds
// only a random 1 in 8 of the fast calls that would not be to its sketch.
// Sixteen processes each make one getppid at a stack depth of their own,
// sixteen labels of one call each: all but a collision or two must have a
// sample. (When the 1 in 8 applied to every fast call, about 2 did.)
func TestRareFastSyscallsAreSampled(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildWorkload(t, "one_syscall")
	var mu sync.Mutex
	sampled := map[uint32]bool{}
	// No cap: over it, a label seen once is the first a busy host's epoch
	// drops (cap.go); this is the sketch's coverage without it.
	_, stop := startRecorder(t, Config{Epoch: 2 * time.Second, Budget: -1, Vitals: []Vital{Syscall}}, func(e *store.Epoch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range e.Samples {
			if nr, _ := s.Fields["syscall_nr"].(int32); s.Vital == "syscall" && nr == 110 {
				sampled[s.Pid] = true
			}
		}
		return nil
	})
	const labels = 16
	pids := oneCallLabels(t, bin, labels)
	time.Sleep(200 * time.Millisecond)
	stop()
	mu.Lock()
	defer mu.Unlock()
	n := countSampled(pids, sampled)
	t.Logf("%d of %d single getppid calls, each a label of its own, sampled", n, labels)
	if n < labels-2 {
		t.Errorf("%d of %d single fast system calls, each a label of its own, sampled; want all but 2 at most", n, labels)
	}
}

// oneCallLabels runs the one_syscall workload bin n times, each a getppid
// at a stack depth of its own: n labels of one call each. It returns the
// processes' ids.
func oneCallLabels(t *testing.T, bin string, n int) []uint32 {
	t.Helper()
	var pids []uint32
	for i := range n {
		cmd := exec.Command(bin, strconv.Itoa(4*i))
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		pids = append(pids, uint32(cmd.Process.Pid))
	}
	return pids
}

// countSampled is how many of pids are in sampled.
func countSampled(pids []uint32, sampled map[uint32]bool) int {
	n := 0
	for _, p := range pids {
		if sampled[p] {
			n++
		}
	}
	return n
}
