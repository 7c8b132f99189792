package recorder

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/cilium/ebpf"

	"github.com/holter-dev/holter/internal/symbol"
)

// BoostPerSecond is how many block requests of boosted processes may be
// sampled per second of epoch, over all CPUs, beyond the usual samples (see
// Boost): some 1600 per poll of the ring buffer, which holds 3800, so that
// a boosted tree does not crowd out the other samples; more requests than
// that a second are sampled as usual.
const BoostPerSecond = 16000

// MaxBoosted is how many processes may be boosted at once (MAX_BOOSTED in
// bpf/sketch.h).
const MaxBoosted = 64

// clockTicks is USER_HZ, the unit of a process's start time in
// /proc/PID/stat: 100 on every Linux architecture holter builds for.
const clockTicks = 100

// Boost samples the block requests of process pid and of its descendants
// (to eight generations, wherever they are when a request is made) each
// rather than logarithmically per label, up to BoostPerSecond a second of
// epoch beyond the usual samples, until Unboost. It is what
// `holter run` asks for the command it records: a run of a second leaves
// a label a few dozen samples otherwise, too few for the distribution of
// its request sizes and latencies. Only the sampling decision changes: each
// sample stands for its label's events since the previous one, as ever, so
// metrics weigh boosted and ordinary samples alike.
//
// The boost is tied to the process that has pid now (its start time), so an
// id reused after the process ends is not boosted.
func (r *Recorder) Boost(pid uint32) error {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("boost process %d: no such process", pid)
		}
		return fmt.Errorf("boost process %d: %w", pid, err)
	}
	ticks, err := symbol.StatField(b, 22)
	if err != nil {
		return fmt.Errorf("boost process %d: /proc/%d/stat: %w", pid, pid, err)
	}
	const tick = 1e9 / clockTicks
	v := vitalsBoost{StartMin: ticks * tick, StartMax: (ticks + 1) * tick}
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	if _, ok := r.boosted[pid]; !ok && len(r.boosted) >= MaxBoosted {
		return fmt.Errorf("boost process %d: %d processes are boosted already, the most at once", pid, MaxBoosted)
	}
	if err := r.objs.maps.Boosted.Update(pid, &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("boost process %d: %w", pid, err)
	}
	r.boosted[pid] = true
	return r.writeControl()
}

// Unboost ends Boost of pid; a pid not boosted is no error.
func (r *Recorder) Unboost(pid uint32) error {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	if !r.boosted[pid] {
		return nil
	}
	if err := r.objs.maps.Boosted.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unboost process %d: %w", pid, err)
	}
	delete(r.boosted, pid)
	return r.writeControl()
}

// boostMax is the control block's boost_max: 0 while no process is
// boosted, else the samples boosts may take per epoch.
func (r *Recorder) boostMax() uint32 {
	if len(r.boosted) == 0 {
		return 0
	}
	return uint32(min(BoostPerSecond*r.cfg.Epoch.Seconds(), 1<<31))
}
