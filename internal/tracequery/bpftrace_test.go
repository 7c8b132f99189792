package tracequery

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// bpftrace runs a bpftrace script until stop is called and returns its
// printed maps. It returns once bpftrace says its probes are attached.
func bpftrace(t *testing.T, script string) (stop func() string) {
	t.Helper()
	bin := testutil.RequireTool(t, "bpftrace")
	cmd := exec.Command(bin, "-e", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	rd := bufio.NewReader(out)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "Attaching") {
		t.Fatalf("bpftrace did not attach: %q %v", line, err)
	}
	// It prints that before attaching; a SIGINT while it attaches is lost.
	waitAttached(t, cmd.Process.Pid, strings.Count(script, "tracepoint:"))
	return func() string {
		// bpftrace 0.17 on a loaded machine sometimes misses a SIGINT
		// that comes soon after it attached: ask again every 3 s.
		done := make(chan struct{})
		go func() {
			for {
				cmd.Process.Signal(syscall.SIGINT)
				select {
				case <-done:
					return
				case <-time.After(3 * time.Second):
				}
			}
		}()
		rest, _ := io.ReadAll(rd)
		close(done)
		cmd.Wait()
		return string(rest)
	}
}

var bpfBucket = regexp.MustCompile(`^\[(-?[0-9]+[KMG]?)(?:, [0-9]+[KMG]?\))?\]?\s+([0-9]+) \|`)

// parseHist reads bpftrace's hist() output into lower bound → count.
func parseHist(s string) map[int64]int64 {
	out := map[int64]int64{}
	for _, line := range strings.Split(s, "\n") {
		m := bpfBucket.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		lo := m[1]
		mult := int64(1)
		switch lo[len(lo)-1] {
		case 'K':
			mult, lo = 1<<10, lo[:len(lo)-1]
		case 'M':
			mult, lo = 1<<20, lo[:len(lo)-1]
		case 'G':
			mult, lo = 1<<30, lo[:len(lo)-1]
		}
		v, _ := strconv.ParseInt(lo, 10, 64)
		c, _ := strconv.ParseInt(m[2], 10, 64)
		if c > 0 {
			out[v*mult] += c
		}
	}
	return out
}

func holterHist(v any) map[int64]int64 {
	out := map[int64]int64{}
	l, _ := v.([]any)
	for _, e := range l {
		b := e.(map[string]any)
		lo := toInt(b["lo"])
		if lo < 0 {
			lo = 0 // holter's first bucket is (-inf, 1); bpftrace's is [0]
		}
		out[lo] += toInt(b["count"])
	}
	return out
}

// TestAgreesWithBpftrace runs bpftrace and holter on the same run of the
// same workload.
func TestAgreesWithBpftrace(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "bpftrace")
	const n, r = 2000, 800
	_, pid, run := workload(t, n, r, 0)
	stopCount := bpftrace(t, `tracepoint:syscalls:sys_enter_getppid /comm == "tracecalls"/ { @[comm] = count(); }`)
	stopHist := bpftrace(t, fmt.Sprintf(`tracepoint:syscalls:sys_exit_read /pid == %d/ { @ = hist(args->ret); }`, pid))
	stopRunq := bpftrace(t, `tracepoint:sched:sched_wakeup { @qt[args->pid] = nsecs; }
tracepoint:sched:sched_switch /@qt[args->next_pid]/ { @ = hist(nsecs - @qt[args->next_pid]); delete(@qt[args->next_pid]); }
END { clear(@qt); }`)
	count := start(t, `SELECT comm, count() AS n FROM syscall.getppid WHERE comm = 'tracecalls' GROUP BY comm`, nil)
	hist := start(t, fmt.Sprintf(`SELECT hist(ret) FROM syscall.read WHERE pid = %d`, pid), nil)
	runq := start(t, `SELECT hist(latency), count() FROM sched.runq_latency`, nil)
	flush(t, runq) // the runq window starts when both run
	run()
	time.Sleep(300 * time.Millisecond) // some scheduling for the runq comparison

	holterRunq := flush(t, runq).Result.Rows[0]
	bpfRunq := parseHist(stopRunq())
	holterCount := flush(t, count).Result.Rows
	bpfCount := stopCount()
	holterReads := flush(t, hist).Result.Rows[0][0]
	bpfReads := parseHist(stopHist())

	if want := fmt.Sprintf("@[tracecalls]: %d", n); !strings.Contains(bpfCount, want) {
		t.Errorf("bpftrace says %q, want %q", bpfCount, want)
	}
	if len(holterCount) != 1 || holterCount[0][1] != int64(n) {
		t.Errorf("holter says %v, want [[tracecalls %d]]", holterCount, n)
	}
	if got := holterHist(holterReads); fmt.Sprint(got) != fmt.Sprint(bpfReads) {
		t.Errorf("read size histograms differ: holter %v, bpftrace %v", got, bpfReads)
	}
	// Run-queue latency: the same distribution loosely (the two tools pair
	// wakeups and switches each on their own; scheduling differs run to run).
	hr := holterHist(holterRunq[0])
	var hTotal, bTotal int64
	for _, c := range hr {
		hTotal += c
	}
	for _, c := range bpfRunq {
		bTotal += c
	}
	// The windows differ (bpftrace attaches over a few hundred ms, and its
	// own start is scheduling noise), so only the shape is compared.
	if hTotal < 10 || bTotal < 10 {
		t.Errorf("run-queue latency events: holter %d, bpftrace %d; want some of each", hTotal, bTotal)
	}
	if hm, bm := median(hr), median(bpfRunq); hm > 4*bm || bm > 4*hm {
		t.Errorf("run-queue latency median bucket: holter %d ns, bpftrace %d ns; want within a factor of 4", hm, bm)
	}
	t.Logf("runq: holter %d events median bucket %d; bpftrace %d events median bucket %d", hTotal, median(hr), bTotal, median(bpfRunq))
}

func median(h map[int64]int64) int64 {
	var total int64
	var los []int64
	for lo, c := range h {
		total += c
		los = append(los, lo)
	}
	sortInts(los)
	var cum int64
	for _, lo := range los {
		cum += h[lo]
		if 2*cum >= total {
			return max(lo, 1)
		}
	}
	return 1
}

func sortInts(x []int64) {
	for i := 1; i < len(x); i++ {
		for j := i; j > 0 && x[j] < x[j-1]; j-- {
			x[j], x[j-1] = x[j-1], x[j]
		}
	}
}
