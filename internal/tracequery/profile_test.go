package tracequery

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestProfileSamplesAndStacks samples a CPU-bound workload at a known
// rate: its samples must be about rate × the CPU time it used (what it
// got of a shared machine, measured by the kernel's rusage), and its user
// stacks must name its spinning function.
func TestProfileSamplesAndStacks(t *testing.T) {
	testutil.RequireRoot(t)
	const hz = 199
	spin := testutil.BuildWorkload(t, "cpu_spin")
	// A name of its own, so that no other test's spinner is counted.
	name := fmt.Sprintf("hspin%d", os.Getpid()%100000)
	bin := filepath.Join(filepath.Dir(spin), name)
	if err := os.Rename(spin, bin); err != nil {
		t.Fatal(err)
	}
	s := start(t, fmt.Sprintf(`SELECT ustack, count() AS n FROM profile.hz_%d WHERE comm = '%s' GROUP BY ustack ORDER BY n DESC`, hz, name), nil)
	// Flushed while it runs: user stacks are symbolized from the live
	// process's mappings.
	cmd := exec.Command(bin, "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	time.Sleep(200 * time.Millisecond)
	flush(t, s) // the first starts DuckDB, which takes a while
	// An interval starts when a flush swaps the maps, at its beginning:
	// the CPU time is read just before each.
	cpu0 := onCPU(t, cmd.Process.Pid)
	flush(t, s)
	time.Sleep(1500 * time.Millisecond)
	cpu := onCPU(t, cmd.Process.Pid) - cpu0
	iv := flush(t, s)
	var total, inSpin int64
	seen := map[string]bool{}
	for _, r := range iv.Result.Rows {
		if s := r[0].(string); seen[s] {
			// Stacks of different addresses in the same functions.
			t.Errorf("stack %q in two rows: stacks that symbolize alike must be one group", s)
		} else {
			seen[s] = true
		}
		n := r[1].(int64)
		total += n
		if strings.Contains(r[0].(string), "holter_cpu_spin") {
			inSpin += n
		}
	}
	want := float64(hz) * cpu.Seconds()
	t.Logf("%d samples for %v of CPU (%.0f expected at %d Hz); %d in holter_cpu_spin; top stack %v", total, cpu, want, hz, inSpin, iv.Result.Rows[0])
	if r := float64(total) / want; (r < 0.75 || r > 1.25) && math.Abs(float64(total)-want) > 5 {
		t.Errorf("%d samples for %v of CPU at %d Hz: ratio %.2f to the %.0f expected, want 0.75–1.25", total, cpu, hz, r, want)
	}
	if float64(inSpin) < 0.9*float64(total) {
		t.Errorf("only %d of %d samples have holter_cpu_spin in their user stack: %v", inSpin, total, iv.Result.Rows)
	}
	if top := iv.Result.Rows[0][0].(string); !strings.HasSuffix(top, ";holter_cpu_spin") && !strings.HasSuffix(top, "holter_cpu_spin") {
		t.Errorf("the hottest user stack %q does not end in holter_cpu_spin", top)
	}
	if iv.Counters["stack_lost"] > 0 {
		t.Errorf("stacks lost: %v", iv.Counters)
	}
}

// TestIntervalSourceRate counts an interval timer's firings over a
// measured time.
func TestIntervalSourceRate(t *testing.T) {
	testutil.RequireRoot(t)
	for _, period := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond} {
		s := start(t, fmt.Sprintf("SELECT count() AS n, count_distinct(cpu) AS cpus FROM interval.%v", period), nil)
		flush(t, s)
		time.Sleep(time.Second)
		iv := flush(t, s)
		n := iv.Result.Rows[0][0].(int64)
		want := float64(iv.End.Sub(iv.Start)) / float64(period)
		t.Logf("interval.%v: %d firings in %v (%.1f expected)", period, n, iv.End.Sub(iv.Start), want)
		if r := float64(n) / want; r < 0.85 || r > 1.15 {
			t.Errorf("interval.%v fired %d times in %v: ratio %.2f to the %.1f expected, want 0.85–1.15", period, n, iv.End.Sub(iv.Start), r, want)
		}
		if cpus := iv.Result.Rows[0][1].(int64); cpus != 1 {
			t.Errorf("interval.%v fired on %d CPUs, want one", period, cpus)
		}
		s.Close()
	}
}

// onCPU is the time a process's main thread has run, from schedstat.
func onCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		t.Fatal(err)
	}
	var ns int64
	if _, err := fmt.Sscan(string(b), &ns); err != nil {
		t.Fatalf("schedstat %q: %v", b, err)
	}
	return time.Duration(ns)
}
