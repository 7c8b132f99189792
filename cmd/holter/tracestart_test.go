package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

var timingLine = regexp.MustCompile(`(?m)^holter trace: timing: (.+?)\s+at\s+([0-9.]+) ms`)

// TestTraceStartIsLean guards what holter trace costs to start, against
// holter version measured in the same run rather than absolute figures:
// the binary exports no DuckDB symbols (the dynamic loader would search
// them and keep them resident), a run of a query whose user-space part is
// a projection stays within a few MB of holter version's peak RSS (no
// DuckDB started), and from entering the command to the probes attached
// takes less than three times what holter version takes from exec to exit
// (it took six times when the aggregation maps were preallocated and
// filled through a map of maps).
func TestTraceStartIsLean(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildHolter(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.DynamicSymbols()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defined, duck := 0, 0
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF {
			continue // an import (zstd's weak trace hooks, libc's functions)
		}
		defined++
		if strings.Contains(s.Name, "duckdb") {
			duck++
		}
	}
	if duck > 0 || defined > 5000 {
		t.Errorf("the binary exports %d dynamic symbols, %d of DuckDB's (cmd/holter/link.go keeps them out)", defined, duck)
	}

	const q = "SELECT comm, count() FROM syscall.getpid GROUP BY comm"
	var versionMS, versionKB, attachMS, traceKB []float64
	for i := 0; i < 5; i++ {
		cmd := exec.Command(bin, "version")
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("holter version: %v\n%s", err, out)
		}
		versionMS = append(versionMS, float64(time.Since(start).Microseconds())/1000)
		versionKB = append(versionKB, float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss))

		cmd = exec.Command(bin, "trace", "--local", "--for", "200ms", q)
		cmd.Env = append(os.Environ(), "HOLTER_TRACE_TIMING=1")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("holter trace: %v\n%s", err, stderr.String())
		}
		at := map[string]float64{}
		for _, m := range timingLine.FindAllStringSubmatch(stderr.String(), -1) {
			at[m[1]], _ = strconv.ParseFloat(m[2], 64)
		}
		main, ok1 := at["main"]
		attached, ok2 := at["attached"]
		if !ok1 || !ok2 {
			t.Fatalf("HOLTER_TRACE_TIMING=1 holter trace printed no main and attached timings:\n%s", stderr.String())
		}
		attachMS = append(attachMS, attached-main)
		traceKB = append(traceKB, float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss))
	}
	med := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	vMS, vKB, aMS, tKB := med(versionMS), med(versionKB), med(attachMS), med(traceKB)
	t.Logf("holter version: %.1f ms exec to exit, peak RSS %.1f MB; holter trace: %.1f ms from the command to attached, peak RSS %.1f MB (medians of 5)",
		vMS, vKB/1024, aMS, tKB/1024)
	if tKB-vKB > 8*1024 {
		t.Errorf("holter trace's peak RSS %.1f MB is %.1f MB above holter version's (%.1f MB): more than 8 MB (did DuckDB start?)",
			tKB/1024, (tKB-vKB)/1024, vKB/1024)
	}
	if aMS > 3*vMS {
		t.Errorf("holter trace took %.1f ms from the command to attached probes, over 3 times holter version's %.1f ms from exec to exit", aMS, vMS)
	}
}
