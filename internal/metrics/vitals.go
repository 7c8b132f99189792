package metrics

import (
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/holter-dev/holter/internal/engine"
	"github.com/holter-dev/holter/internal/store"
)

// weight is how a vital's weight reads in base units: the counter family
// it adds to, the divisor from its recorded unit (µs → s), and the unit of
// its rate.
type weight struct {
	family   string
	div      float64
	rateUnit string
	labelled bool // the family has a vital label (several vitals share it)
}

var weights = map[string]weight{
	"cpu":     {"holter_cpu_seconds_total", 1e6, "cores", false},
	"sched":   {"holter_delay_seconds_total", 1e6, "seconds_per_second", true},
	"blck":    {"holter_delay_seconds_total", 1e6, "seconds_per_second", true},
	"lock":    {"holter_delay_seconds_total", 1e6, "seconds_per_second", true},
	"syscall": {"holter_syscall_seconds_total", 1e6, "seconds_per_second", false},
	"blio":    {"holter_block_io_bytes_total", 1, "bytes_per_second", false},
	"kmem":    {"holter_page_allocs_total", 1, "pages_per_second", false},
	"umem":    {"holter_page_faults_total", 1, "faults_per_second", false},
	"signal":  {"holter_signals_total", 1, "signals_per_second", false},
	"sock":    {"holter_socket_bytes_total", 1, "bytes_per_second", false},
}

var weightHelp = map[string]string{
	"holter_cpu_seconds_total":     "CPU time of the host's tasks (the cpu vital's exact total; its rate is in cores).",
	"holter_delay_seconds_total":   "Time tasks waited: runnable to running (sched), asleep to woken (blck), on contended kernel locks (lock).",
	"holter_syscall_seconds_total": "Time spent in system calls.",
	"holter_block_io_bytes_total":  "Bytes of block I/O requested.",
	"holter_page_allocs_total":     "Pages the kernel allocated.",
	"holter_page_faults_total":     "User page faults.",
	"holter_signals_total":         "Signals generated.",
	"holter_socket_bytes_total":    "Bytes sent and received on sockets.",
}

// secondaries are the vitals' second totals (store.Vital.Secondary).
var secondaries = map[string][2]string{
	"kmem": {"holter_page_frees_total", "Pages the kernel freed."},
	"sock": {"holter_socket_received_bytes_total", "Bytes received on sockets."},
}

// histograms are the sample fields whose distributions are exposed, per vital.
var histograms = map[string]struct{ family, field string }{
	"sched":   {"holter_sampled_delay_seconds", "delay_ns"},
	"blck":    {"holter_sampled_delay_seconds", "delay_ns"},
	"lock":    {"holter_sampled_delay_seconds", "delay_ns"},
	"syscall": {"holter_sampled_latency_seconds", "latency_ns"},
	"blio":    {"holter_sampled_latency_seconds", "latency_ns"},
}

var histogramHelp = map[string]string{
	"holter_sampled_delay_seconds":   "Delays of the sampled sched, blck and lock events (samples, not every event: rare labels weigh more; exact totals in holter_delay_seconds_total).",
	"holter_sampled_latency_seconds": "Latencies of the sampled system calls and block requests (samples, not every event).",
}

// Buckets are the histograms' upper bounds in seconds.
var Buckets = []float64{1e-5, 1e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

type histogram struct {
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	n      uint64
}

type vitalTotals struct {
	events, weight, secondary, samples, lostRingbuf, lostState, noStack uint64
}

// State is a vital's state in the recorder (recorder.VitalStatus).
type State struct {
	Name, State string
	Threshold   uint64
}

// Recorder is what the recorder reports of itself.
type Recorder struct {
	Vitals        []State
	MonitorCPU    float64 // percent of the machine, last epoch
	BudgetPercent float64 // 0: no budget
	LateSamples   uint64
	SkippedEpochs uint64
}

// Vitals keeps a running recorder's totals since it started, from the
// epochs it commits.
type Vitals struct {
	mu         sync.Mutex
	epochs     uint64
	monitorBPF int64
	monitorUsr int64
	last       *store.Epoch // without its samples
	totals     map[string]*vitalTotals
	hists      map[string]*histogram
}

// NewVitals starts the totals at zero.
func NewVitals() *Vitals {
	return &Vitals{totals: map[string]*vitalTotals{}, hists: map[string]*histogram{}}
}

// Add counts a committed epoch.
func (m *Vitals) Add(e *store.Epoch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epochs++
	m.monitorBPF += e.MonitorBPFNs
	m.monitorUsr += e.MonitorUserNs
	last := *e
	last.Samples, last.Stacks, last.Executables = nil, nil, nil
	last.Vitals = append([]store.Vital(nil), e.Vitals...)
	m.last = &last
	for _, v := range e.Vitals {
		t := m.totals[v.Name]
		if t == nil {
			t = &vitalTotals{}
			m.totals[v.Name] = t
		}
		t.events += v.Events
		t.weight += v.WeightSum
		t.secondary += v.Secondary
		t.samples += v.Samples
		t.lostRingbuf += v.LostRingbuf
		t.lostState += v.LostState
		t.noStack += v.NoStack
	}
	for _, s := range e.Samples {
		h, ok := histograms[s.Vital]
		if !ok {
			continue
		}
		ns, ok := s.Fields[h.field].(int64)
		if !ok || ns < 0 {
			continue
		}
		hist := m.hists[s.Vital]
		if hist == nil {
			hist = &histogram{counts: make([]uint64, len(Buckets)+1)}
			m.hists[s.Vital] = hist
		}
		sec := float64(ns) / 1e9
		hist.counts[sort.SearchFloat64s(Buckets, sec)]++
		hist.sum += sec
		hist.n++
	}
}

// Write writes the vitals' metrics and the recorder's own.
func (m *Vitals) Write(out io.Writer, rec Recorder) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := Writer{out}
	names := make([]string, 0, len(m.totals))
	for n := range m.totals {
		names = append(names, n)
	}
	sort.Strings(names)

	counter := func(family, help string, value func(string, *vitalTotals) (float64, bool)) {
		w.Family(family, "counter", help)
		for _, n := range names {
			if v, ok := value(n, m.totals[n]); ok {
				w.Sample(family, v, "vital", n)
			}
		}
	}
	counter("holter_vital_events_total", "Events each vital counted (exact) since the recorder started.",
		func(_ string, t *vitalTotals) (float64, bool) { return float64(t.events), true })
	counter("holter_vital_samples_total", "Events each vital sampled into the store.",
		func(_ string, t *vitalTotals) (float64, bool) { return float64(t.samples), true })
	counter("holter_vital_samples_without_stack_total", "Samples whose stack could not be taken.",
		func(_ string, t *vitalTotals) (float64, bool) { return float64(t.noStack), true })
	w.Family("holter_vital_lost_samples_total", "counter", "Samples lost: ringbuf (the ring buffer was full), state (a per-task state map was full).")
	for _, n := range names {
		w.Sample("holter_vital_lost_samples_total", float64(m.totals[n].lostRingbuf), "vital", n, "reason", "ringbuf")
		w.Sample("holter_vital_lost_samples_total", float64(m.totals[n].lostState), "vital", n, "reason", "state")
	}

	// The weights in base units, one family each, or one with a vital
	// label where vitals share a unit and meaning. Every family is
	// written, with samples for the vitals recorded: dashboards find
	// their metrics whichever vitals a host records.
	families := map[string][]string{}
	for v, wt := range weights {
		families[wt.family] = append(families[wt.family], v)
	}
	order := make([]string, 0, len(families))
	for f := range families {
		order = append(order, f)
	}
	sort.Strings(order)
	for _, f := range order {
		vs := families[f]
		sort.Strings(vs)
		w.Family(f, "counter", weightHelp[f])
		for _, v := range vs {
			t, ok := m.totals[v]
			if !ok {
				continue
			}
			wt := weights[v]
			val := float64(t.weight) / wt.div
			if wt.labelled {
				w.Sample(f, val, "vital", v)
			} else {
				w.Sample(f, val)
			}
		}
	}
	secs := make([]string, 0, len(secondaries))
	for v := range secondaries {
		secs = append(secs, v)
	}
	sort.Strings(secs)
	for _, v := range secs {
		s := secondaries[v]
		w.Family(s[0], "counter", s[1])
		if t, ok := m.totals[v]; ok {
			w.Sample(s[0], float64(t.secondary))
		}
	}

	if e := m.last; e != nil && e.EndNs > e.StartNs {
		secs := float64(e.EndNs-e.StartNs) / 1e9
		w.Family("holter_epoch_seconds", "gauge", "Length of the last committed epoch.")
		w.Sample("holter_epoch_seconds", secs)
		w.Family("holter_last_epoch", "gauge", "Number of the last committed epoch.")
		w.Sample("holter_last_epoch", float64(e.Epoch))
		w.Family("holter_last_epoch_end_timestamp_seconds", "gauge", "End of the last committed epoch, Unix time.")
		w.Sample("holter_last_epoch_end_timestamp_seconds", float64(e.EndNs)/1e9)
		vs := append([]store.Vital(nil), e.Vitals...)
		sort.Slice(vs, func(i, j int) bool { return vs[i].Name < vs[j].Name })
		w.Family("holter_vital_events_per_second", "gauge", "Each vital's events per second over the last committed epoch.")
		for _, v := range vs {
			w.Sample("holter_vital_events_per_second", float64(v.Events)/secs, "vital", v.Name)
		}
		w.Family("holter_vital_weight_per_second", "gauge", "Each vital's weight per second over the last committed epoch, in the unit its label names (cpu: cores).")
		for _, v := range vs {
			if wt, ok := weights[v.Name]; ok {
				w.Sample("holter_vital_weight_per_second", float64(v.WeightSum)/wt.div/secs, "vital", v.Name, "unit", wt.rateUnit)
			}
		}
		for _, v := range vs {
			if v.Name == "cpu" {
				w.Family("holter_cpu_cores", "gauge", "CPUs' worth of the host's tasks running, over the last committed epoch.")
				w.Sample("holter_cpu_cores", float64(v.WeightSum)/1e6/secs)
			}
		}
	}

	hnames := make([]string, 0, len(m.hists))
	for n := range m.hists {
		hnames = append(hnames, n)
	}
	sort.Slice(hnames, func(i, j int) bool {
		fi, fj := histograms[hnames[i]].family, histograms[hnames[j]].family
		return fi < fj || fi == fj && hnames[i] < hnames[j]
	})
	family := ""
	for _, n := range hnames {
		h, f := m.hists[n], histograms[n].family
		if f != family {
			w.Family(f, "histogram", histogramHelp[f])
			family = f
		}
		var cum uint64
		for i, le := range Buckets {
			cum += h.counts[i]
			w.Sample(f+"_bucket", float64(cum), "vital", n, "le", strconv.FormatFloat(le, 'g', -1, 64))
		}
		w.Sample(f+"_bucket", float64(h.n), "vital", n, "le", "+Inf")
		w.Sample(f+"_sum", h.sum, "vital", n)
		w.Sample(f+"_count", float64(h.n), "vital", n)
	}

	w.Family("holter_epochs_total", "counter", "Epochs the recorder committed since it started.")
	w.Sample("holter_epochs_total", float64(m.epochs))
	w.Family("holter_monitor_bpf_seconds_total", "counter", "Run time of the vitals' BPF programs, as the recorder measured it for its budget.")
	w.Sample("holter_monitor_bpf_seconds_total", float64(m.monitorBPF)/1e9)
	w.Family("holter_monitor_user_seconds_total", "counter", "CPU time of the recorder's epoch loop (reading, symbolizing, closing samples).")
	w.Sample("holter_monitor_user_seconds_total", float64(m.monitorUsr)/1e9)
	writeRecorder(w, rec)
}

func writeRecorder(w Writer, rec Recorder) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		w.Family("holter_recorder_cpu_seconds_total", "counter", "CPU time of the recorder process and its database engine processes, user and system.")
		w.Sample("holter_recorder_cpu_seconds_total", float64(ru.Utime.Nano()+ru.Stime.Nano()+int64(engine.CPUTime()))/1e9)
	}
	w.Family("holter_engine_resident_memory_bytes", "gauge", "Resident memory of the recorder's database engine processes (none while the store is idle).")
	w.Sample("holter_engine_resident_memory_bytes", float64(engine.ResidentBytes()))
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			if pages, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				w.Family("holter_recorder_resident_memory_bytes", "gauge", "Resident memory of the recorder process.")
				w.Sample("holter_recorder_resident_memory_bytes", float64(pages*uint64(os.Getpagesize())))
			}
		}
	}
	w.Family("holter_recorder_monitor_cpu_percent", "gauge", "The monitor's cost over the last epoch, percent of the machine (what the budget bounds).")
	w.Sample("holter_recorder_monitor_cpu_percent", rec.MonitorCPU)
	w.Family("holter_recorder_budget_percent", "gauge", "The monitor's CPU budget, percent of the machine (0: none).")
	w.Sample("holter_recorder_budget_percent", rec.BudgetPercent)
	w.Family("holter_recorder_late_samples_total", "counter", "Samples that reached user space after their epoch was closed.")
	w.Sample("holter_recorder_late_samples_total", float64(rec.LateSamples))
	w.Family("holter_recorder_skipped_epochs_total", "counter", "Epochs skipped because the previous one was still being written.")
	w.Sample("holter_recorder_skipped_epochs_total", float64(rec.SkippedEpochs))
	vs := append([]State(nil), rec.Vitals...)
	sort.Slice(vs, func(i, j int) bool { return vs[i].Name < vs[j].Name })
	w.Family("holter_vital_state", "gauge", "1 for each vital's state: recording, shed (over the budget), disabled, unsupported, not implemented.")
	for _, v := range vs {
		w.Sample("holter_vital_state", 1, "vital", v.Name, "state", v.State)
	}
	w.Family("holter_vital_shed", "gauge", "1 while a vital is shed by the CPU budget.")
	for _, v := range vs {
		shed := 0.0
		if v.State == "shed" {
			shed = 1
		}
		w.Sample("holter_vital_shed", shed, "vital", v.Name)
	}
	w.Family("holter_vital_threshold", "gauge", "Each recording vital's sampling threshold t (raised by the budget when throttled).")
	for _, v := range vs {
		if v.Threshold > 0 {
			w.Sample("holter_vital_threshold", float64(v.Threshold), "vital", v.Name)
		}
	}
}
