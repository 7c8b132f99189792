package recorder

import (
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestSampledRunTimeMatchesTheKernels: what the recorder charges a run of
// its programs, priced by statistics on a tenth of the time (runClock), is
// what the kernel counts with them always on, less their clock reads. A
// steady system call storm, one thread, runs for 16 s under the syscall
// vital alone; for its second half kernel.bpf_stats_enabled keeps the
// statistics on, so every run is priced. The price per call, less the
// recorder's own windows' clock reads, must agree between the halves
// within a factor of 2 (on a quiet machine 205 and 208 ns before the fixed
// path lost its helper calls, 17 and 17 since; at load 10-20 from other
// work 71 and 80, 87 and 55), over the epochs wholly in each half
// but its first 2 s (the first windows' prices, and the recorder's start
// on a loaded machine: a first epoch of 3.3 s seen here): one each at
// least, which leaves room for an epoch loop that load makes late.
func TestSampledRunTimeMatchesTheKernels(t *testing.T) {
	testutil.RequireRoot(t)
	const sysctl = "/proc/sys/kernel/bpf_stats_enabled"
	was, err := os.ReadFile(sysctl)
	if err != nil {
		t.Fatal(err)
	}
	if string(was) != "0\n" {
		t.Fatalf("%s is %q: something else keeps the statistics on", sysctl, was)
	}
	defer os.WriteFile(sysctl, was, 0)
	bin := testutil.BuildWorkload(t, "syscall_loop")
	type point struct{ start, end, bpf, calls int64 }
	var mu sync.Mutex
	var points []point
	rec, stop := startRecorder(t, Config{Epoch: time.Second, Budget: -1, Vitals: []Vital{Syscall}}, func(e *store.Epoch) error {
		p := point{start: e.StartNs, end: e.EndNs, bpf: e.MonitorBPFNs}
		for _, v := range e.Vitals {
			if v.Name == "syscall" {
				p.calls = int64(v.Events)
			}
		}
		mu.Lock()
		points = append(points, p)
		mu.Unlock()
		return nil
	})
	storm := exec.Command(bin, "16")
	if err := storm.Start(); err != nil {
		t.Fatal(err)
	}
	begun := time.Now()
	time.Sleep(8 * time.Second)
	exact := time.Now()
	if err := os.WriteFile(sysctl, []byte("1\n"), 0); err != nil {
		t.Fatal(err)
	}
	storm.Wait()
	ended := time.Now()
	stop()
	// In the epochs wholly in each half, 2 s clear of its start.
	var bpf, calls, wall [2]int64
	var epochs [2]int
	for _, p := range points {
		half := -1
		switch {
		case p.start >= begun.Add(2*time.Second).UnixNano() && p.end <= exact.UnixNano():
			half = 0
		case p.start >= exact.Add(2*time.Second).UnixNano() && p.end <= ended.UnixNano():
			half = 1
		}
		t.Logf("epoch %.1f-%.1f s: %d calls, %.1f ms of BPF (half %d)", float64(p.start-begun.UnixNano())/1e9,
			float64(p.end-begun.UnixNano())/1e9, p.calls, float64(p.bpf)/1e6, half)
		if half >= 0 {
			bpf[half] += p.bpf
			calls[half] += p.calls
			wall[half] += p.end - p.start
			epochs[half]++
		}
	}
	if epochs[0] < 1 || epochs[1] < 1 || calls[0] == 0 || calls[1] == 0 {
		t.Fatalf("epochs wholly in each half: %v, with %v calls; want 1 or more with calls", epochs, calls)
	}
	// The first half's charge also holds the clock reads of the
	// recorder's own windows (windowCost, a tenth of the statistics'
	// overhead on every run, some 6 ns): a cost of its, but not of the
	// program's, and as much as the whole run of a cheap one (7-20 ns
	// here since the fixed path lost its helper calls). The prices are
	// compared without it.
	window := float64(rec.clock.overhead * statsWindow / statsPeriod)
	sampled, kernel := float64(bpf[0])/float64(calls[0])-window, float64(bpf[1])/float64(calls[1])
	t.Logf("BPF run time: %.3f of a CPU (%.0f ns a call, %.0f of them the windows' clock reads) from sampled statistics, %.3f (%.0f ns) from the kernel's",
		float64(bpf[0])/float64(wall[0]), sampled+window, window, float64(bpf[1])/float64(wall[1]), kernel)
	if r := sampled / kernel; r < 0.5 || r > 2 {
		t.Errorf("sampled statistics price a call at %.0f ns, %.2f times the kernel's %.0f", sampled, r, kernel)
	}
}

// TestQuietClockOpensWindowsFurtherApart: while the programs cost little
// the statistics' windows open about quietStatsPeriod apart, and once
// they cost more the next opens within statsPeriod of the last.
func TestQuietClockOpensWindowsFurtherApart(t *testing.T) {
	opened := 0
	c := newRunClock(func() (io.Closer, error) { opened++; return io.NopCloser(nil), nil })
	c.always = func() bool { return false }
	windows := func(from time.Time, d time.Duration) (int, time.Time) {
		n := opened
		now := from
		for ; now.Before(from.Add(d)); now = now.Add(statsWindow) {
			c.tick(now)
		}
		return opened - n, now
	}
	start := time.Unix(1000, 0)
	busy, now := windows(start, time.Minute)
	c.pace(true)
	quiet, now := windows(now, time.Minute)
	if busy < 40 || busy > 80 || quiet > 12 {
		t.Fatalf("windows a minute: %d busy (want about 60), %d quiet (want about 6)", busy, quiet)
	}
	last := c.opened
	c.pace(false)
	if c.next.Sub(last) > 3*statsPeriod/2 {
		t.Errorf("the next window after the programs cost more opens %v after the last, want within %v", c.next.Sub(last), 3*statsPeriod/2)
	}
	t.Logf("windows a minute: %d busy, %d quiet", busy, quiet)
}
