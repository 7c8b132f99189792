package findings

import (
	"math"
	"strings"
	"testing"
)

// window builds n one-second intervals with every vital recorded at zero.
func window(n int) *Window {
	w := &Window{Host: "h", Timescale: Epoch, Vitals: map[string]*VitalSeries{}, Unavailable: map[string]string{}, CPUs: 2}
	for i := 0; i < n; i++ {
		w.Intervals = append(w.Intervals, Interval{int64(i) * 1e9, int64(i+1) * 1e9})
	}
	for _, v := range Vitals {
		w.Vitals[v] = &VitalSeries{Events: make([]float64, n), Weight: make([]float64, n), Secondary: make([]float64, n)}
	}
	w.KernelCPU, w.FreeKB = make([]float64, n), nans(n)
	return w
}

func proc(i int, vital string, pid uint32, weight, events float64) ProcStat {
	return ProcStat{Interval: i, Vital: vital, Pid: pid, Comm: "p" + string(rune('a'+pid%26)), Weight: weight, Events: events, Samples: 3}
}

func run(t *testing.T, f Filter, w *Window) []Finding {
	t.Helper()
	got, skipped := Evaluate(w, []Filter{f})
	if len(skipped) > 0 {
		t.Fatalf("%s skipped: %+v", f.Name(), skipped)
	}
	return got
}

func ruleNamed(t *testing.T, name string) Filter {
	for _, f := range Rules(DefaultLevels) {
		if f.Name() == name {
			return f
		}
	}
	t.Fatalf("no rule %s", name)
	return nil
}

func TestRulesOnConstructedSeries(t *testing.T) {
	cases := []struct {
		rule    string
		build   func(w *Window)
		want    []string // subject@first-last
		summary string
	}{
		{"rule1-busy-loop", func(w *Window) {
			w.Vitals["cpu"].Weight[2] = 1.8e6 // 90% of 2 CPUs, no L2 misses
			w.Vitals["cpu"].Weight[3] = 1.8e6
			w.Vitals["l2"].Weight[3] = 1e6 // 555 misses per CPU-ms: memory traffic, not a busy loop
		}, []string{"cpu@2-2"}, "busy loop"},
		{"rule2-leak", func(w *Window) {
			for i := 1; i <= 6; i++ { // 100 pages net per interval from 1 to 6
				w.Vitals["kmem"].Weight[i], w.Vitals["kmem"].Secondary[i] = 150, 50
				w.FreeKB[i] = float64(10000 - 400*i)
			}
			w.Procs = append(w.Procs, proc(3, "kmem", 7, 150, 150))
		}, []string{"kmem@1-6"}, "free memory fell from 9600 to 7600 KiB"},
		{"rule3-unsatisfied-io", func(w *Window) {
			w.Unsatisfied = []IORequest{{SampleRef: SampleRef{Interval: 4, Pid: 9}, Dev: "8:0", Op: "read", Sector: 64, Requested: 4096, Completed: 512}}
		}, []string{"dev 8:0@4-4"}, "completed 512 bytes"},
		{"rule4-kernel-bottleneck", func(w *Window) {
			w.Vitals["cpu"].Weight[5], w.KernelCPU[5], w.Vitals["sched"].Weight[5] = 1.9e6, 0.8, 0.5e6
			w.Vitals["cpu"].Weight[6], w.KernelCPU[6], w.Vitals["sched"].Weight[6] = 1.9e6, 0.2, 0.5e6 // user-space busy
		}, []string{"kernel@5-5"}, "kernel bottleneck"},
		{"rule5-blocking", func(w *Window) {
			w.Procs = append(w.Procs,
				proc(2, "blck", 11, 0.9e6, 100), proc(2, "blio", 11, 4<<20, 100), // blocked, mirrored by blio
				proc(3, "blck", 11, 0.9e6, 100), proc(3, "blio", 11, 4<<20, 100),
				proc(2, "blck", 12, 0.95e6, 50),                            // blocked on a pipe: not mirrored, normal
				proc(2, "blck", 13, 0.1e6, 10), proc(2, "lock", 13, 10, 1), // barely blocked
				proc(2, "blck", 14, 1.5e6, 300), proc(2, "lock", 14, 500, 2), // idle threads parked, a moment of lock contention
				proc(3, "blck", 15, 2.5e6, 300), proc(3, "lock", 15, 2e6, 200)) // blocked on a lock
		}, []string{"pid 11 (pl)@2-3", "pid 15 (pp)@3-3"}, "mirrored by"},
		{"rule6-swapping", func(w *Window) {
			w.Procs = append(w.Procs, proc(1, "umem", 20, 5000, 5000), proc(1, "blck", 20, 0.7e6, 10), proc(1, "blio", 20, 8<<20, 10),
				proc(2, "umem", 21, 5000, 5000), proc(2, "blck", 21, 0.1e6, 10)) // faults without blocking: plenty of memory
		}, []string{"pid 20 (pu)@1-1"}, "swapping"},
		{"rule7-held", func(w *Window) {
			w.Vitals["cpu"].Weight[1] = 0.2e6 // machine idle
			w.Procs = append(w.Procs, proc(1, "sched", 30, 0.4e6, 10), proc(1, "cpu", 30, 0.01e6, 10),
				proc(1, "sched", 31, 0.4e6, 10), proc(1, "cpu", 31, 0.5e6, 10)) // runs a lot: not held
		}, []string{"pid 30 (pe)@1-1"}, "abnormally"},
		{"rule8-syscall-loop", func(w *Window) {
			w.Procs = append(w.Procs, proc(3, "syscall", 40, 1e5, 50000),
				proc(3, "syscall", 41, 1e5, 50000), proc(3, "kmem", 41, 5000, 5000)) // allocates: real work
		}, []string{"pid 40 (po)@3-3"}, "busy loop around a system call"},
		{"rule10-disappeared", func(w *Window) {
			for i := 0; i < 4; i++ {
				w.Procs = append(w.Procs, proc(i, "cpu", 50, 1e3, 1), proc(i, "cpu", 51, 1e3, 1))
			}
			w.Procs = append(w.Procs, proc(4, "cpu", 51, 1e3, 1))
			w.Signals = []SignalEvent{{SampleRef: SampleRef{Interval: 4, Pid: 1}, Comm: "killer", Signal: 9, TargetPid: 50}}
		}, []string{"pid 50 (py)@4-4", "pid 51 (pz)@5-5"}, "SIGKILL from pid 1 (killer)"},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			w := window(8)
			c.build(w)
			got := run(t, ruleNamed(t, c.rule), w)
			var subjects []string
			for _, f := range got {
				subjects = append(subjects, f.Subject+"@"+itoa(f.First)+"-"+itoa(f.Last))
			}
			if strings.Join(subjects, ",") != strings.Join(c.want, ",") {
				t.Fatalf("findings %v, want %v: %+v", subjects, c.want, got)
			}
			if !strings.Contains(got[0].Summary, c.summary) {
				t.Errorf("summary %q lacks %q", got[0].Summary, c.summary)
			}
			if got[0].StartNs != int64(got[0].First)*1e9 || got[0].EndNs != int64(got[0].Last+1)*1e9 {
				t.Errorf("time range %d-%d for intervals %d-%d", got[0].StartNs, got[0].EndNs, got[0].First, got[0].Last)
			}
		})
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

func TestRule9InitialisationAndLoad(t *testing.T) {
	w := window(3)
	w.Vitals["cpu"].Weight[0], w.Vitals["cpu"].Weight[1] = 1e6, 1e6
	w.Vitals["l2"].Weight[1] = 1e6 // 1000 misses per CPU-ms
	w.Procs = append(w.Procs, proc(0, "umem", 60, 5000, 5000), proc(1, "umem", 60, 5000, 5000))
	got := run(t, ruleNamed(t, "rule9-init-or-load"), w)
	if len(got) != 2 || !strings.Contains(got[0].Summary, "initialising") || !strings.Contains(got[1].Summary, "increasing load") {
		t.Fatalf("%+v", got)
	}
}

func TestUnavailableVitalsAreReported(t *testing.T) {
	w := window(4)
	delete(w.Vitals, "l2")
	w.Unavailable["l2"] = "unsupported: no hardware PMU"
	found, skipped := Evaluate(w, DefaultFilters(nil))
	_ = found
	want := map[string]bool{"ewma:l2 weight/s": true, "rule1-busy-loop": true, "rule9-init-or-load": true}
	if len(skipped) != len(want) {
		t.Fatalf("skipped %+v", skipped)
	}
	for _, s := range skipped {
		if !want[s.Rule] || !strings.Contains(s.Reason, "no hardware PMU") {
			t.Errorf("skipped %+v", s)
		}
	}
}

func TestThresholdAndEWMAFilters(t *testing.T) {
	w := window(10)
	for i := range w.Intervals {
		w.Vitals["signal"].Events[i] = 5
		w.Vitals["blio"].Weight[i], w.Vitals["blio"].Events[i] = 1e6, 100
	}
	w.Vitals["signal"].Events[7] = 500
	w.Vitals["blio"].Weight[8] = 50e6
	w.Procs = append(w.Procs, proc(8, "blio", 70, 45e6, 90), proc(8, "blio", 71, 5e6, 10))
	storm := 100.0
	got := run(t, Threshold{Label: "signal-storm", Measure: EventRate("signal"), Above: &storm}, w)
	if len(got) != 1 || got[0].First != 7 || got[0].Evidence[0].Value != 500 {
		t.Fatalf("storm %+v", got)
	}
	got = run(t, EWMAFilter{Measure: WeightRate("blio")}, w)
	if len(got) != 1 || got[0].First != 8 || got[0].Processes[0].Pid != 70 || got[0].Subject != "blio" {
		t.Fatalf("ewma %+v", got)
	}
	if math.IsInf(got[0].Score, 0) || !strings.Contains(got[0].Summary, "rose to 5e+07") {
		t.Fatalf("ewma %+v", got[0])
	}
	// Reported only from ReportFrom on.
	w.ReportFrom = 9
	if got := run(t, EWMAFilter{Measure: WeightRate("blio")}, w); len(got) != 0 {
		t.Fatalf("reported before ReportFrom: %+v", got)
	}
}
