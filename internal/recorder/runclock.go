package recorder

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// What the recorder's BPF programs cost is their runs, which they count
// themselves (hl_stats.runs, always), at a price per run that the kernel's
// run-time statistics give. On, the statistics cost every BPF program run
// on the machine two clock reads, and count them in its run time: on the
// 2-CPU test machine 55-65 ns a run, more than most of the programs' own
// work. So a runClock keeps them on for statsWindow of every statsPeriod,
// and prices each program by its run time over its runs the kernel
// counted in the last windows, less the clock reads (statsOverhead,
// measured at start on an empty program). Counts and time are the
// kernel's alike, so the price holds whoever else turns the statistics on
// meanwhile (another agent, bpftool), where scaling a run time up by the
// share of the time the recorder had them on would count that time ten
// times over. The clock reads of the recorder's own windows are its cost
// too: a tenth of the runs pay them (windowCost).
//
// While the programs cost little (the budget's looks find them under a
// quarter of it: an idle host), windows open quietStatsPeriod apart
// instead: the prices change little there, and each window costs the
// recorder some system calls a program. The budget acts on the runs the
// programs count themselves at every look, at the last price; when they
// cost more, the next window opens within statsPeriod of the last.
const (
	statsPeriod      = time.Second
	quietStatsPeriod = 10 * time.Second
	statsWindow      = 100 * time.Millisecond
)

// runClock prices BPF programs by sampled statistics. Its methods take
// the time (now) and are not safe for concurrent use: the recorder calls
// them with ctlMu held.
type runClock struct {
	enable func() (io.Closer, error) // turns the kernel's statistics on until closed
	always func() bool               // they are on whatever the clock does (kernel.bpf_stats_enabled)
	stats  io.Closer                 // non-nil while the clock keeps them on
	// alwaysOn is always() at the last tick: the statistics' clock reads
	// are then not the recorder's doing.
	alwaysOn bool
	opened   time.Time // when the last window opened
	next     time.Time // when the next opens
	progs    map[*ebpf.Program]*progClock
	err      error // why the statistics could not be turned on
	// overhead is what the statistics add to each run they count (their
	// clock reads), not the program's own cost.
	overhead time.Duration
	// quiet: the programs cost little, windows open quietStatsPeriod apart.
	quiet bool
}

// progClock is one program's price: the kernel's counts at the last fold,
// and its run time (less the statistics' own) and runs over the folds that
// counted any, each fold weighing half the next: a window of few runs
// (a quiet second) moves the price little, a storm's at once.
type progClock struct {
	raw      time.Duration
	runs     uint64
	body     time.Duration
	bodyRuns uint64
}

func newRunClock(enable func() (io.Closer, error)) *runClock {
	return &runClock{enable: enable, always: statsSysctlOn, progs: map[*ebpf.Program]*progClock{}}
}

// statsSysctlOn reports whether kernel.bpf_stats_enabled keeps the
// statistics on.
func statsSysctlOn() bool {
	b, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

func (c *runClock) on(now time.Time) {
	// Windows open statsPeriod apart on average, at random: at fixed
	// intervals they would keep one phase of the epoch loop (the first
	// events of an epoch, new to its sketches, cost more) and price every
	// run by it.
	period := c.period()
	c.opened, c.next = now, now.Add(period/2+rand.N(period))
	if c.stats != nil || c.err != nil {
		return
	}
	c.stats, c.err = c.enable()
}

// period is the time between windows on average.
func (c *runClock) period() time.Duration {
	if c.quiet {
		return quietStatsPeriod
	}
	return statsPeriod
}

// pace sets whether the programs cost little (see quietStatsPeriod); a
// clock that was quiet opens its next window within statsPeriod of the
// last.
func (c *runClock) pace(quiet bool) {
	if quiet == c.quiet {
		return
	}
	c.quiet = quiet
	if !quiet && !c.opened.IsZero() {
		c.next = minTime(c.next, c.opened.Add(statsPeriod/2+rand.N(statsPeriod)))
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (c *runClock) off() {
	if c.stats == nil {
		return
	}
	c.stats.Close()
	c.stats = nil
}

// tick runs the schedule: a window opens about statsPeriod after the last
// opened, and closes statsWindow later, folding what it measured. It
// wants calling at least every statsWindow. Whether the statistics are
// always on is read as a window opens, not at every tick (a file read ten
// times a second, for a setting that changes when an operator says so).
func (c *runClock) tick(now time.Time) {
	switch {
	case c.stats == nil && !now.Before(c.next):
		c.alwaysOn = c.always()
		c.on(now)
	case c.stats != nil && now.Sub(c.opened) >= statsWindow:
		c.off()
		c.fold()
	}
}

// fold prices every program by what the kernel counted since its last
// fold; a program the statistics saw no run of keeps its price.
func (c *runClock) fold() {
	for p, pc := range c.progs {
		raw, runs := rawStats(p)
		if d, n := raw-pc.raw, runs-pc.runs; d > 0 && n > 0 {
			pc.body = pc.body/2 + max(d-time.Duration(n)*c.overhead, 0)
			pc.bodyRuns = pc.bodyRuns/2 + n
		}
		pc.raw, pc.runs = raw, runs
	}
}

// attach starts pricing progs from now.
func (c *runClock) attach(progs []*ebpf.Program) {
	for _, p := range progs {
		pc := c.progs[p]
		if pc == nil {
			pc = &progClock{}
			c.progs[p] = pc
		}
		pc.raw, pc.runs = rawStats(p)
	}
}

// body is what p's runs cost in the last windows that saw any, the
// statistics' clock reads left out, and how many runs that was (each
// window weighing half the next).
func (c *runClock) body(p *ebpf.Program) (time.Duration, uint64) {
	pc := c.progs[p]
	if pc == nil {
		return 0, 0
	}
	return pc.body, pc.bodyRuns
}

// windowCost is what the recorder's windows of statistics add to a run on
// average: the clock reads of the share of runs they count.
func (c *runClock) windowCost() time.Duration {
	if c.alwaysOn || c.err != nil {
		return 0
	}
	return c.overhead * statsWindow / c.period()
}

// rawStats is the kernel's count of p's run time and runs, which grow only
// while the statistics are on.
func rawStats(p *ebpf.Program) (time.Duration, uint64) {
	st, err := p.Stats()
	if err != nil {
		return 0, 0
	}
	return st.Runtime, st.RunCount
}

// statsOverhead measures what the statistics add to a program's counted
// run time: an empty program run repeatedly with them on (they must be).
// The programs' own cost is their run time less this a run. It is the
// least of several batches: a batch preempted on a busy CPU counts the
// time it waited, and an overhead measured too high prices the recorder's
// programs at nothing (their run time less it is clamped at zero), so the
// budget would never act.
func statsOverhead() (time.Duration, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "holter_clock", Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return 0, fmt.Errorf("load an empty program: %w", err)
	}
	defer prog.Close()
	const runs, batches = 5000, 8
	least := time.Duration(-1)
	for range batches {
		raw0, n0 := rawStats(prog)
		if _, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 64), Repeat: runs}); err != nil {
			return 0, fmt.Errorf("run an empty program: %w", err)
		}
		raw, n := rawStats(prog)
		if n <= n0 {
			return 0, errors.New("the statistics counted no run of an empty program")
		}
		if per := (raw - raw0) / time.Duration(n-n0); least < 0 || per < least {
			least = per
		}
	}
	return least, nil
}

func (c *runClock) Close() error {
	if c.stats != nil {
		return c.stats.Close()
	}
	return nil
}

// tickClock runs the statistics' schedule; the epoch loop calls it every
// poll. It reports whether the clock is quiet (the programs cost little)
// with no window open: then it needs no tick for a while.
func (r *Recorder) tickClock() (quiet bool) {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	r.clock.tick(time.Now())
	return r.clock.quiet && r.clock.stats == nil
}
