package recorder

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// The CPU budget (Chopstix §4.1.3). The operator sets how much of the
// machine the monitor may use. At each epoch boundary the recorder charges
// its measured cost — the run time of each vital's BPF programs, and the
// CPU time of its epoch loop (reading, symbolising and closing samples)
// shared out by samples — to the vitals, and adapts. The process's other
// work, which no threshold reduces (committing epochs, attaching programs,
// receiving and accounting spans, analyses, the API), is left out of these
// decisions, though the stored monitor cost includes it; so is the first
// epoch, which pays for warming the symbol caches.
//
//   - at or over the high watermark (the budget), every vital costing at
//     least its share of the budget has its threshold t doubled, which
//     thins its samples (each label then gets one sample per factor 2t);
//   - below the low watermark (half the budget), thresholds raised earlier
//     are halved again, one step an epoch;
//   - a vital that still costs over its share after its threshold was
//     raised, and whose cost the raise did not cut by a quarter (or that
//     samples under 1/64 of its events, or is at the ceiling), is shed: its
//     programs are detached, since what it costs then is triggering, not
//     sampling — a system call storm costs the syscall vital two programs
//     on every call, and a context-switch storm the sched and blck vitals
//     one on every switch, whatever t is. It is tried
//     again, at the base threshold, after 2, 4, 8, … epochs once the
//     monitor is under the low watermark, and reported meanwhile.
type budgetState struct {
	shift     [numVitals]uint
	shedUntil [numVitals]int64 // epoch at which a shed vital is retried; 0 when not shed
	backoff   [numVitals]int64
	lastRun   [numVitals]time.Duration
	// costAtRaise is what the vital cost in the epoch that raised its t.
	costAtRaise [numVitals]float64
	// probation is when a shed vital was retried; until the first probe
	// after probeAfter it is shed again at once if it costs too much. The
	// run-time statistics are held on meanwhile, and probeRun is the
	// kernel's count of the vital's run time at the retry.
	probation [numVitals]time.Time
	probeRun  [numVitals]time.Duration
}

// probeAfter is how long a retried vital runs before its cost is probed: a
// retry in the middle of a storm then costs a fraction of an epoch (at a
// system call storm's 40-60% of the machine, 20 ms of a 2 s epoch is
// 0.2-0.3% of it). Shorter, a quiet machine's retry was shed again by the
// burst of the recorder's own calls as it closed the epoch (0.6% over 10 ms).
const probeAfter = 20 * time.Millisecond

const (
	// maxShift caps t at 2^maxShift.
	maxShift = 20
	// DefaultBudget is the share of the machine the monitor may use.
	DefaultBudget = 0.01
)

// vitalRunTime is the estimated run time so far of each vital's programs
// (runClock); sched and blck share theirs and are charged half each.
// r.ctlMu held.
func (r *Recorder) vitalRunTime() [numVitals]time.Duration {
	return r.vitalTimes(r.clock.runTime)
}

// vitalTimes sums a time of each program over each vital's programs, as
// vitalRunTime does.
func (r *Recorder) vitalTimes(of func(*ebpf.Program) time.Duration) [numVitals]time.Duration {
	var out [numVitals]time.Duration
	for v, a := range r.attached {
		var t time.Duration
		for _, p := range a.progs {
			t += of(p)
		}
		if v == Sched || v == Blck {
			if _, both := r.attached[Sched+Blck-v]; both {
				out[Sched] += t / 2
				out[Blck] += t / 2
				continue
			}
		}
		out[v] += t
	}
	return out
}

// adapt applies the budget after an epoch; r.ctlMu held. It returns what
// changed, for the log.
func (r *Recorder) adapt(number int64, wall time.Duration, userNs int64, samples, events map[Vital]uint64) []string {
	if r.cfg.Budget <= 0 || wall <= 0 || number == r.cfg.FirstEpoch {
		return nil
	}
	b := &r.budget
	capacity := float64(wall) * float64(r.ncpu)
	run := r.vitalRunTime()
	var totalSamples uint64
	for _, n := range samples {
		totalSamples += n
	}
	cost := map[Vital]float64{}
	var total float64
	for v := range r.attached {
		d := max(run[v]-b.lastRun[v], 0)
		b.lastRun[v] = run[v]
		c := float64(d)
		if totalSamples > 0 {
			c += float64(userNs) * float64(samples[v]) / float64(totalSamples)
		}
		cost[v] = c / capacity
		total += cost[v]
	}
	var changes []string
	high, low := r.cfg.Budget, r.cfg.Budget/2
	switch {
	case total >= high:
		share := high / float64(len(r.attached))
		for v, c := range cost {
			if c < share {
				continue
			}
			raised := b.shift[v] > r.cfg.Shift
			samplingBound := samples[v]*64 > events[v] && (!raised || c < 0.75*b.costAtRaise[v])
			if b.shift[v] < maxShift && (!raised || samplingBound) {
				b.shift[v]++
				b.costAtRaise[v] = c
				changes = append(changes, fmt.Sprintf("%s t=%d (%.2f%% of the machine)", v, 1<<b.shift[v], 100*c))
				continue
			}
			changes = append(changes, v.String()+" "+r.shedLocked(v, number, c))
		}
	case total < low:
		for v := range r.attached {
			if b.shift[v] > r.cfg.Shift {
				b.shift[v]--
				changes = append(changes, fmt.Sprintf("%s t=%d", v, 1<<b.shift[v]))
			}
		}
	}
	for _, v := range AllVitals() {
		if b.shedUntil[v] != 0 && number+1 >= b.shedUntil[v] && total < low {
			b.shedUntil[v] = 0
			b.shift[v] = r.cfg.Shift // a retried vital starts afresh
			before := threadCPUTime()
			err := r.attachLocked(v)
			r.attachNs += threadCPUTime() - before // on the epoch loop's thread
			if err == nil {
				now := time.Now()
				b.probation[v] = now
				r.clock.hold(now)
				b.probeRun[v] = r.vitalTimes(rawRunTime)[v]
				b.lastRun[v] = r.vitalRunTime()[v] // its programs were loaded before
				changes = append(changes, v.String()+" retried after being shed")
			}
		}
	}
	for v := range r.attached {
		r.setVitalStatus(v, func(s *VitalStatus) { s.Threshold = 1 << b.shift[v] })
	}
	if len(changes) > 0 {
		r.writeControl()
	}
	return changes
}

// shedLocked detaches v for costing the share c of the machine and says
// when it will be retried; r.ctlMu held.
func (r *Recorder) shedLocked(v Vital, number int64, c float64) string {
	b := &r.budget
	if b.backoff[v] == 0 {
		b.backoff[v] = 2
	}
	b.shedUntil[v] = number + b.backoff[v]
	b.backoff[v] *= 2
	r.endProbation(v)
	reason := fmt.Sprintf("shed: over the CPU budget (%.2f%% of the machine at t=2^%d); retried at epoch %d",
		100*c, b.shift[v], b.shedUntil[v])
	r.detachLocked(v)
	r.setVitalStatus(v, func(s *VitalStatus) { s.State, s.Reason = "shed", reason })
	return reason
}

// probeDue is when the next retried vital is due to be probed; zero when
// none is on probation.
func (r *Recorder) probeDue() time.Time {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	var due time.Time
	for _, since := range r.budget.probation {
		if !since.IsZero() && (due.IsZero() || since.Before(due)) {
			due = since
		}
	}
	if due.IsZero() {
		return due
	}
	return due.Add(probeAfter)
}

// probe sheds again, within the epoch, a retried vital whose programs
// alone cost more than the low watermark since it was attached: the storm
// that had it shed goes on. A smaller excess is left to the epoch's adapt.
func (r *Recorder) probe(number int64) {
	if r.cfg.Budget <= 0 {
		return
	}
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	b := &r.budget
	var run [numVitals]time.Duration
	measured := false
	for v := range b.probation {
		since := b.probation[v]
		if since.IsZero() || time.Since(since) < probeAfter {
			continue
		}
		if !measured {
			run, measured = r.vitalTimes(rawRunTime), true
		}
		r.endProbation(Vital(v))
		c := float64(run[v]-b.probeRun[v]) / (float64(time.Since(since)) * float64(r.ncpu))
		if c > r.cfg.Budget/2 { // alone over the low watermark: still storming
			r.cfg.Logf("budget: %s %s (probed after its retry)", Vital(v), r.shedLocked(Vital(v), number, c))
		}
	}
}

// endProbation ends v's probation, if on, and its hold on the statistics.
// r.ctlMu held.
func (r *Recorder) endProbation(v Vital) {
	if r.budget.probation[v].IsZero() {
		return
	}
	r.budget.probation[v] = time.Time{}
	r.clock.release(time.Now())
}
