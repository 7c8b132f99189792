package metrics

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// ParseText reads Prometheus text into name{labels} → value, failing on a
// line that is not a comment or a sample.
func parseText(t *testing.T, text string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("not a sample: %q", line)
		}
		m[line[:i]] = line[i+1:]
	}
	return m
}

// TestVitalsTotalsAndRates: two epochs' totals in base units, the last
// epoch's rates, and the sampled delays as a cumulative histogram whose
// +Inf bucket is its count; promtool accepts the text.
func TestVitalsTotalsAndRates(t *testing.T) {
	m := NewVitals()
	second := int64(1e9)
	m.Add(&store.Epoch{Epoch: 1, StartNs: 0, EndNs: 2 * second, MonitorBPFNs: 5e6, Vitals: []store.Vital{
		{Name: "cpu", Events: 10, WeightSum: 3e6, Samples: 4},
		{Name: "blck", Events: 3, WeightSum: 2500, Samples: 3, LostRingbuf: 1},
		{Name: "sock", Events: 2, WeightSum: 700, Secondary: 300},
	}, Samples: []store.Sample{
		{Vital: "blck", Fields: map[string]any{"delay_ns": int64(2e6)}},
		{Vital: "blck", Fields: map[string]any{"delay_ns": int64(3e6)}},
		{Vital: "blck", Fields: map[string]any{"delay_ns": int64(4e9)}},
		{Vital: "cpu", Fields: map[string]any{"ip": uint64(1)}},
	}})
	m.Add(&store.Epoch{Epoch: 2, StartNs: 2 * second, EndNs: 4 * second, Vitals: []store.Vital{
		{Name: "cpu", Events: 20, WeightSum: 1e6, Samples: 2},
		{Name: "blck", Events: 1, WeightSum: 1000, Samples: 0},
		{Name: "sock", Events: 1, WeightSum: 100, Secondary: 100},
	}})
	var buf bytes.Buffer
	m.Write(&buf, Recorder{Vitals: []State{{Name: "cpu", State: "recording", Threshold: 4}, {Name: "syscall", State: "shed"}}, BudgetPercent: 1})
	got := parseText(t, buf.String())
	for k, want := range map[string]string{
		`holter_cpu_seconds_total`:                                       "4",
		`holter_delay_seconds_total{vital="blck"}`:                       "0.0035",
		`holter_socket_bytes_total`:                                      "800",
		`holter_socket_received_bytes_total`:                             "400",
		`holter_vital_events_total{vital="cpu"}`:                         "30",
		`holter_vital_lost_samples_total{vital="blck",reason="ringbuf"}`: "1",
		`holter_cpu_cores`:                                               "0.5",
		`holter_vital_weight_per_second{vital="cpu",unit="cores"}`:       "0.5",
		`holter_vital_events_per_second{vital="cpu"}`:                    "10",
		`holter_epoch_seconds`:                                           "2",
		`holter_sampled_delay_seconds_bucket{vital="blck",le="0.001"}`:   "0",
		`holter_sampled_delay_seconds_bucket{vital="blck",le="0.0025"}`:  "1",
		`holter_sampled_delay_seconds_bucket{vital="blck",le="0.005"}`:   "2",
		`holter_sampled_delay_seconds_bucket{vital="blck",le="2.5"}`:     "2",
		`holter_sampled_delay_seconds_bucket{vital="blck",le="+Inf"}`:    "3",
		`holter_sampled_delay_seconds_count{vital="blck"}`:               "3",
		`holter_sampled_delay_seconds_sum{vital="blck"}`:                 "4.005",
		`holter_monitor_bpf_seconds_total`:                               "0.005",
		`holter_vital_shed{vital="syscall"}`:                             "1",
		`holter_vital_state{vital="cpu",state="recording"}`:              "1",
		`holter_vital_threshold{vital="cpu"}`:                            "4",
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %s", k, got[k], want)
		}
	}
	promtool := testutil.RequireTool(t, "promtool")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
