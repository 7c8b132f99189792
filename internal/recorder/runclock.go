package recorder

import (
	"io"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
)

// The budget needs the run time of the recorder's BPF programs, which the
// kernel measures only while its run-time statistics are on. On, they
// cost every BPF program run on the machine two clock reads: on the 2-CPU
// test machine, 78 ns of the 200 ns the syscall vital added to a getpid
// (the programs' own work was 83 ns, the tracepoints' 41 ns). So the
// statistics are sampled: a runClock keeps them on for statsWindow of
// every statsPeriod and scales the run time measured in each window up to
// the time since the last one. A cost that lasts a period is measured; a
// burst between two windows is missed or counted ten times over, which
// the budget, deciding once an epoch, averages out.
const (
	statsPeriod = time.Second
	statsWindow = 100 * time.Millisecond
)

// runClock estimates the run time of BPF programs from sampled statistics.
// Each program's run time is scaled over the time since it was last
// folded, or attached, by the share of that time the statistics were on:
// a program attached in the middle of a period is not charged for the
// part before. Its methods take the time (now) and are not safe for
// concurrent use: the recorder calls them with ctlMu held.
type runClock struct {
	enable func() (io.Closer, error) // turns the kernel's statistics on until closed
	always func() bool               // they are on whatever the clock does (kernel.bpf_stats_enabled)
	stats  io.Closer                 // non-nil while the clock keeps them on
	held   int                       // holds that keep them on (hold)
	// onTime is how long the statistics were on before onSince; since
	// then they are on if stats is, or always was at the last tick.
	onSince  time.Time
	onTime   time.Duration
	alwaysOn bool
	opened   time.Time // when the last window opened
	progs    map[*ebpf.Program]*progClock
	err      error // why the statistics could not be turned on
}

// progClock is one program's run time: estimated, and as of its last fold.
type progClock struct {
	est      time.Duration
	raw      time.Duration // the kernel's count at the last fold
	wall     time.Time     // the last fold
	on       time.Duration // the clock's on time at the last fold
	attached bool
}

func newRunClock(now time.Time, enable func() (io.Closer, error)) *runClock {
	return &runClock{enable: enable, always: statsSysctlOn, onSince: now, progs: map[*ebpf.Program]*progClock{}}
}

// statsSysctlOn reports whether kernel.bpf_stats_enabled keeps the
// statistics on.
func statsSysctlOn() bool {
	b, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// onAt is how long the statistics were on until now.
func (c *runClock) onAt(now time.Time) time.Duration {
	if c.stats != nil || c.alwaysOn {
		return c.onTime + now.Sub(c.onSince)
	}
	return c.onTime
}

// mark restarts the current stretch of on or off at now.
func (c *runClock) mark(now time.Time) {
	c.onTime, c.onSince = c.onAt(now), now
}

func (c *runClock) on(now time.Time) {
	c.opened = now
	if c.stats != nil || c.err != nil {
		return
	}
	c.mark(now)
	c.stats, c.err = c.enable()
}

func (c *runClock) off(now time.Time) {
	if c.stats == nil {
		return
	}
	c.mark(now)
	c.stats.Close()
	c.stats = nil
}

// tick runs the schedule: a window opens statsPeriod after the last
// opened, and closes statsWindow later, folding what it measured. It
// wants calling at least every statsWindow.
func (c *runClock) tick(now time.Time) {
	if a := c.always(); a != c.alwaysOn {
		c.mark(now)
		c.alwaysOn = a
	}
	switch {
	case c.stats == nil && now.Sub(c.opened) >= statsPeriod:
		c.on(now)
	case c.stats != nil && c.held == 0 && now.Sub(c.opened) >= statsWindow:
		c.off(now)
		c.fold(now)
	}
}

// fold adds to each attached program's estimate the run time measured
// since its last fold, scaled by the share of that time the statistics
// were on. A program they were never on for since is left to the next.
func (c *runClock) fold(now time.Time) {
	on := c.onAt(now)
	for p, pc := range c.progs {
		if pc.attached {
			c.foldOne(p, pc, now, on)
		}
	}
}

func (c *runClock) foldOne(p *ebpf.Program, pc *progClock, now time.Time, on time.Duration) {
	measured := on - pc.on
	if measured <= 0 {
		return
	}
	raw := rawRunTime(p)
	if d := raw - pc.raw; d > 0 {
		pc.est += time.Duration(float64(d) * float64(now.Sub(pc.wall)) / float64(measured))
	}
	pc.raw, pc.wall, pc.on = raw, now, on
}

// attach starts estimating progs from now; detach stops, folding what was
// measured since their last fold (what ran unmeasured since then is
// lost: at most a period's).
func (c *runClock) attach(now time.Time, progs []*ebpf.Program) {
	on := c.onAt(now)
	for _, p := range progs {
		pc := c.progs[p]
		if pc == nil {
			pc = &progClock{}
			c.progs[p] = pc
		}
		*pc = progClock{est: pc.est, raw: rawRunTime(p), wall: now, on: on, attached: true}
	}
}

func (c *runClock) detach(now time.Time, progs []*ebpf.Program) {
	on := c.onAt(now)
	for _, p := range progs {
		if pc := c.progs[p]; pc != nil && pc.attached {
			c.foldOne(p, pc, now, on)
			pc.attached = false
		}
	}
}

// runTime is p's estimated run time since it was loaded.
func (c *runClock) runTime(p *ebpf.Program) time.Duration {
	if pc := c.progs[p]; pc != nil {
		return pc.est
	}
	return 0
}

// total is the estimated run time of every program so far.
func (c *runClock) total() time.Duration {
	var t time.Duration
	for _, pc := range c.progs {
		t += pc.est
	}
	return t
}

// hold keeps the statistics on until release, so that exact run times
// (rawRunTime) can be taken over a short span.
func (c *runClock) hold(now time.Time) {
	c.held++
	c.on(now)
}

func (c *runClock) release(now time.Time) {
	if c.held--; c.held == 0 && c.stats != nil && now.Sub(c.opened) >= statsWindow {
		c.off(now)
		c.fold(now)
	}
}

// rawRunTime is the kernel's count of p's run time, which grows only
// while the statistics are on.
func rawRunTime(p *ebpf.Program) time.Duration {
	st, err := p.Stats()
	if err != nil {
		return 0
	}
	return st.Runtime
}

func (c *runClock) Close() error {
	if c.stats != nil {
		return c.stats.Close()
	}
	return nil
}

// tickClock runs the statistics' schedule; the epoch loop calls it every
// poll.
func (r *Recorder) tickClock() {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	r.clock.tick(time.Now())
}
