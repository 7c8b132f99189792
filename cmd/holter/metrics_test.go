package main

import (
	"bytes"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestMetricsVitals scrapes a running recorder's /metrics as Prometheus
// does (with a bearer token; without one it is refused) while a CPU spinner
// and a sleeper run, checks it with promtool, and finds the host's vitals
// in it: CPU in cores, the sleeper's blocking in the blck delay counter and
// histogram, the recorder's own CPU and memory, each vital's state.
func TestMetricsVitals(t *testing.T) {
	testutil.RequireRoot(t)
	promtool := testutil.RequireTool(t, "promtool")
	bin := testutil.BuildHolter(t)
	dir := t.TempDir()
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--vitals", "cpu,sched,blck,syscall",
		"--budget", "off") // the vitals must stay on to be seen, not be shed on a loaded machine
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	spin := exec.Command("sh", "-c", "while :; do :; done")
	sleeper := exec.Command("sh", "-c", "while :; do sleep 0.01; done")
	for _, c := range []*exec.Cmd{spin, sleeper} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func(c *exec.Cmd) { c.Process.Kill(); c.Wait() }(c)
	}
	r.waitEpochs(t, 3)
	s := recorderSession(t, bin, dir)

	if code, _ := testutil.HTTPGet(t, s.base+"/metrics"); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	code, body := s.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = bytes.NewReader(body)
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s\n%s", err, out, body)
	}

	values := promValues(t, body)
	positive := []string{
		"holter_cpu_seconds_total", `holter_delay_seconds_total{vital="blck"}`,
		`holter_vital_events_total{vital="syscall"}`, "holter_syscall_seconds_total",
		`holter_sampled_delay_seconds_count{vital="blck"}`, `holter_sampled_delay_seconds_sum{vital="blck"}`,
		"holter_recorder_cpu_seconds_total", "holter_recorder_resident_memory_bytes", "holter_epochs_total",
		`holter_vital_state{vital="cpu",state="recording"}`, `holter_vital_state{vital="kmem",state="disabled"}`,
	}
	for _, k := range positive {
		if values[k] <= 0 {
			t.Errorf("%s = %v, want > 0", k, values[k])
		}
	}
	// The last epoch's rates are there (an epoch on a loaded machine may
	// be short, and its rates 0: their values are checked over scrapes).
	for _, k := range []string{"holter_cpu_cores", `holter_vital_weight_per_second{vital="blck",unit="seconds_per_second"}`,
		`holter_vital_events_per_second{vital="sched"}`, "holter_epoch_seconds"} {
		if _, ok := values[k]; !ok {
			t.Errorf("no %s", k)
		}
	}
	if inf, n := values[`holter_sampled_delay_seconds_bucket{vital="blck",le="+Inf"}`], values[`holter_sampled_delay_seconds_count{vital="blck"}`]; inf != n {
		t.Errorf("blck histogram: +Inf bucket %v, count %v", inf, n)
	}
	if _, ok := values[`holter_vital_lost_samples_total{vital="cpu",reason="ringbuf"}`]; !ok {
		t.Error("no lost-samples counter for cpu")
	}
	// Counters grow from one scrape to the next; the spinner keeps one CPU
	// busy, so the host's CPU counter grew by at least half a core.
	time.Sleep(4 * time.Second)
	_, body2 := s.get(t, "/metrics")
	later := promValues(t, body2)
	if later["holter_epochs_total"] <= values["holter_epochs_total"] {
		t.Errorf("holter_epochs_total did not grow: %v then %v", values["holter_epochs_total"], later["holter_epochs_total"])
	}
	span := later["holter_last_epoch_end_timestamp_seconds"] - values["holter_last_epoch_end_timestamp_seconds"]
	cores := (later["holter_cpu_seconds_total"] - values["holter_cpu_seconds_total"]) / span
	if span <= 0 || cores < 0.5 || cores > 2.5 {
		t.Errorf("rate(holter_cpu_seconds_total) = %v cores over %v s with a spinner on a 2-CPU machine", cores, span)
	}
	t.Logf("%.2f cores over %.1f s", cores, span)
}

// promValues reads Prometheus text into name{labels} → value.
func promValues(t *testing.T, body []byte) map[string]float64 {
	t.Helper()
	values := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		values[line[:i]] = v
	}
	return values
}
