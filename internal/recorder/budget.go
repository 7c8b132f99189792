package recorder

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// The CPU budget (Chopstix §4.1.3): the operator sets how much of the
// machine the monitor may use, and every governPeriod the recorder prices
// what each vital cost since the last look — its programs' runs (counted
// by the programs themselves, hl_stats.runs) at what a run cost in the
// last window of the kernel's statistics (runPrice), and the
// epoch loop's CPU time (reading and symbolising samples) shared out by
// samples among the vitals other than cpu and sched (paysLoop) — and
// adapts within the second a storm begins, not an epoch later. The process's other work, which no threshold reduces (committing
// epochs, receiving and accounting spans, analyses, the API), is left out
// of these decisions, though the stored monitor cost includes it.
//
// At or over the budget, each vital costing its share of it or more is
// throttled a step, by what cuts its cost: a vital that samples much has
// its threshold t doubled (up to maxRaise times), which thins its samples
// (a label gets one sample per factor t); one whose events go into its
// sketch by the ten thousand a second (past their hot slots: many labels,
// not one storming), if it is one whose events can be that many (not cpu,
// sched, blck or blio), has those that would not be sampled enter the
// sketch 1 in 2, 4, … up to 1 in 2^maxThin (sketch_thinned in
// bpf/sketch.h); one with too few of either to cut has its threshold
// raised all the same, so that a storm is throttled whatever its shape.
// Neither blinds the recorder: the first event of a label, and each that
// crosses a power of t, is still sampled. Nothing is shed.
// Below half the budget for a second, each throttled vital comes back a
// step.
//
// What no step reduces is what a storm of one label costs a run of its
// program (the hot slots of bpf/sketch.h bring that to a few loads and
// compares), and what triggering the hook costs the kernel (bench/percost.sh
// measures both): a vital throttled as far as it goes stays so, and the
// monitor costs what its hooks do.
type budgetState struct {
	shift [numVitals]uint // t = 1 << shift
	thin  [numVitals]uint // 1 in 1 << thin of the sketch's non-crossing events; 0: all
	// The runs, samples and sketched events of the epochs finished so far
	// (added when their copy is read), and the totals at the last look.
	done, seen [numVitals]counts
	loopNs     int64 // the epoch loop thread's CPU time at the last look
	last       time.Time
	calm       int // looks in a row under half the budget
}

// counts are what the budget reads of a vital's exact totals.
type counts struct{ runs, samples, sketched uint64 }

func (c counts) add(o counts) counts {
	return counts{c.runs + o.runs, c.samples + o.samples, c.sketched + o.sketched}
}

// since is c less an earlier reading o; a count that went back (a vital
// attached again starts afresh) is 0.
func (c counts) since(o counts) counts {
	d := func(a, b uint64) uint64 { return a - min(a, b) }
	return counts{d(c.runs, o.runs), d(c.samples, o.samples), d(c.sketched, o.sketched)}
}

const (
	// governPeriod is how often the budget looks: a storm is throttled
	// within a few looks, well within a second.
	governPeriod = 250 * time.Millisecond
	// calmLooks is how many looks in a row under half the budget bring
	// each throttled vital back a step.
	calmLooks = 4
	// maxRaise and maxThin bound the throttling: t up to 2^maxRaise times
	// the configured one, 1 in 2^maxThin events into the sketch. Higher
	// thresholds would cost coverage: a label whose counters other labels
	// share is sampled only when its estimate reaches the next power.
	maxRaise = 3
	maxThin  = 4
	// A vital is throttled by its threshold when it samples minSampleRate
	// a second or more, and thinned when minSketchRate of its events a
	// second go into its sketch.
	minSampleRate = 20
	minSketchRate = 10000
	// DefaultBudget is the share of the machine the monitor may use.
	DefaultBudget = 0.01
	// unpricedRun is what a run is taken to cost before any window of
	// the statistics priced it.
	unpricedRun = 100 * time.Nanosecond
)

// thinnable are the vitals whose events the budget may thin: those with
// events by the million (the others' cost is per switch, per request or
// per CPU tick, which thinning the sketch does not cut).
func thinnable(v Vital) bool {
	switch v {
	case CPU, Sched, Blck, Blio:
		return false
	}
	return true
}

// paysLoop reports whether v is charged its share of the epoch loop's
// CPU time. cpu and sched are not: they are what the recorder sees the
// machine by, and the loop's time follows the machine's processes (a
// host's first samples, or a burst of new programs, have their files read
// and symbolised) more than their thresholds; only their programs' runs
// may throttle them.
func paysLoop(v Vital) bool {
	return v != CPU && v != Sched
}

// runPrice is what a run of v's programs cost in the last window that
// priced them, over all its programs' runs. r.ctlMu held.
func (r *Recorder) runPrice(v Vital) time.Duration {
	a := r.attached[v]
	if a == nil {
		return 0
	}
	var sum time.Duration
	var runs uint64
	for _, p := range a.progs {
		d, n := r.clock.body(p)
		sum += d
		runs += n
	}
	if runs == 0 {
		return unpricedRun
	}
	return sum / time.Duration(runs)
}

// govern applies the budget if governPeriod has passed since the last
// look; the epoch loop calls it every poll, on its own thread.
func (r *Recorder) govern(now time.Time) {
	if r.cfg.Budget <= 0 {
		return
	}
	b := &r.budget
	if !b.last.IsZero() && now.Sub(b.last) < governPeriod {
		return
	}
	loop := threadCPUTime()
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	active, err := r.activeCounts()
	if err != nil {
		r.cfg.Logf("budget: %v", err)
		return
	}
	wall := now.Sub(b.last)
	first := b.last.IsZero()
	var d [numVitals]counts
	for v := range active {
		active[v] = active[v].add(b.done[v])
		d[v] = active[v].since(b.seen[v])
	}
	dLoop := max(loop-b.loopNs, 0)
	b.seen, b.loopNs, b.last = active, loop, now
	if first || wall <= 0 {
		return
	}
	capacity := float64(wall) * float64(r.ncpu)
	var totalSamples uint64
	for v, c := range d {
		if paysLoop(Vital(v)) {
			totalSamples += c.samples
		}
	}
	cost := map[Vital]float64{}
	for v := range r.attached {
		c := float64(d[v].runs) * float64(r.runPrice(v)+r.clock.windowCost())
		if paysLoop(v) && totalSamples > 0 {
			c += float64(dLoop) * float64(d[v].samples) / float64(totalSamples)
		}
		cost[v] = c / capacity
	}
	var total float64
	for _, c := range cost {
		total += c
	}
	r.clock.pace(total < r.cfg.Budget/4)
	perSec := func(n uint64) float64 { return float64(n) / wall.Seconds() }
	var samplesPerSec, sketchedPerSec [numVitals]float64
	for v := range r.attached {
		samplesPerSec[v], sketchedPerSec[v] = perSec(d[v].samples), perSec(d[v].sketched)
	}
	var changes []string
	for _, v := range b.step(r.cfg.Budget, r.cfg.Shift, cost, samplesPerSec, sketchedPerSec) {
		changes = append(changes, fmt.Sprintf("%s %s (%.2f%% of the machine, %v a run)", v, r.throttleText(v), 100*cost[v], r.runPrice(v)))
	}
	if len(changes) == 0 {
		return
	}
	for _, c := range changes {
		r.cfg.Logf("budget: %s", c)
	}
	for v := range r.attached {
		r.setVitalStatus(v, func(s *VitalStatus) {
			s.Threshold, s.Thin, s.Reason = 1<<b.shift[v], 1<<b.thin[v], r.throttleReason(v)
		})
	}
	r.writeControl()
}

// step is one look of the budget: given what each attached vital cost
// (a share of the machine) and the samples and sketched events it made a
// second, it throttles or relaxes the vitals and returns those it changed.
func (b *budgetState) step(budget float64, base uint, cost map[Vital]float64, samples, sketched [numVitals]float64) []Vital {
	var total float64
	for _, c := range cost {
		total += c
	}
	var changed []Vital
	switch {
	case total >= budget:
		b.calm = 0
		share := budget / float64(len(cost))
		var over []Vital
		for v, c := range cost {
			if c >= share {
				over = append(over, v)
			}
		}
		sort.Slice(over, func(i, j int) bool { return cost[over[i]] > cost[over[j]] })
		for _, v := range over {
			if b.throttle(v, base, samples[v], sketched[v]) {
				changed = append(changed, v)
			}
		}
	case total < budget/2:
		if b.calm++; b.calm < calmLooks {
			break
		}
		b.calm = 0
		for v := range cost {
			if b.relax(v, base) {
				changed = append(changed, v)
			}
		}
		sort.Slice(changed, func(i, j int) bool { return changed[i] < changed[j] })
	default:
		b.calm = 0
	}
	return changed
}

// throttle takes v a step further by what cuts its cost, given the
// samples and sketched events it made a second; false when nothing would.
func (b *budgetState) throttle(v Vital, base uint, samples, sketched float64) bool {
	switch {
	case samples >= minSampleRate && b.shift[v] < base+maxRaise:
		b.shift[v]++
	case thinnable(v) && sketched >= minSketchRate && b.thin[v] < maxThin:
		b.thin[v]++
	case b.shift[v] < base+maxRaise:
		// Neither cuts much: the cost is the programs' fixed path (a
		// storm of one label gathers in its hot slot, past which little
		// goes). Sampled more coarsely all the same, so that a storm is
		// throttled whatever its shape at the look that sees it; a
		// label's first event is sampled at any threshold.
		b.shift[v]++
	default:
		return false
	}
	return true
}

// relax brings v back a step; false when it is not throttled.
func (b *budgetState) relax(v Vital, base uint) bool {
	switch {
	case b.thin[v] > 0:
		b.thin[v]--
	case b.shift[v] > base:
		b.shift[v]--
	default:
		return false
	}
	return true
}

func (r *Recorder) throttleText(v Vital) string {
	b := &r.budget
	s := fmt.Sprintf("t=%d", 1<<b.shift[v])
	if b.thin[v] > 0 {
		s += fmt.Sprintf(", 1 in %d of its sketch's events", 1<<b.thin[v])
	}
	return s
}

// throttleReason is what the status says of v's throttling, "" when none.
func (r *Recorder) throttleReason(v Vital) string {
	b := &r.budget
	var why []string
	if b.thin[v] != 0 || b.shift[v] > r.cfg.Shift {
		why = append(why, "throttled by the CPU budget: "+r.throttleText(v))
	}
	return strings.Join(why, "; ")
}

// activeCounts sums each attached vital's counts in the active copy over
// the CPUs. r.ctlMu held.
func (r *Recorder) activeCounts() ([numVitals]counts, error) {
	var out [numVitals]counts
	copyIdx := uint32(r.gen & 1)
	if b := r.statsBatch; b != nil {
		err := b.read(copyIdx)
		if err == nil {
			for v := range r.attached {
				for _, s := range b.of(v) {
					out[v] = out[v].add(counts{s.Runs, s.Samples, s.Sketched})
				}
			}
			return out, nil
		}
		r.cfg.Logf("budget: %v; reading the totals a vital at a time", err)
		r.statsBatch = nil
	}
	per := make([]vitalsHlStats, r.ncpu)
	for v := range r.attached {
		if err := r.objs.maps.Stats.Lookup(copyIdx*uint32(numVitals)+uint32(v), &per); err != nil {
			return out, fmt.Errorf("read %s totals: %w", v, err)
		}
		for _, s := range per {
			out[v] = out[v].add(counts{s.Runs, s.Samples, s.Sketched})
		}
	}
	return out, nil
}
