package recorder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/export"
	"github.com/holter-dev/holter/internal/sketch"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/symbol"
)

// Config says what to record; the zero value of a field means its default.
type Config struct {
	Host string
	// Epoch is the collection and durability unit (minimum 1 s).
	Epoch time.Duration
	// Vitals to record; nil means every implemented vital.
	Vitals []Vital
	// Shift sets the sampling threshold t = 2^Shift every vital starts
	// from; the budget raises it and never takes it below.
	Shift uint
	// Budget is the share of the machine (all CPUs) the monitor may use;
	// 0 means DefaultBudget and a negative value turns the budget off.
	Budget float64
	// StorageBudget is the bytes a day the samples and their stacks may
	// take in the store (dayBudget, sampleCap); over it, epochs keep
	// their labels' first samples first and sample the rest more
	// coarsely. 0 or a negative value stores every sample (`holter
	// record` defaults to DefaultStorageBudget).
	StorageBudget int64
	// StorageBank, when not nil, is what the budget had left when a
	// recorder of this store last closed an epoch, and when: a recorder
	// started again goes on from it (refilled for the time between)
	// rather than from a full bank, so restarts do not buy storage.
	StorageBank *Bank
	// CPUHz is the cpu vital's sampling frequency per CPU.
	CPUHz int
	// SchedMin and BlckMin are the delays that qualify as an event.
	SchedMin time.Duration
	BlckMin  time.Duration
	// FirstEpoch numbers the first epoch (a restarted recorder continues).
	FirstEpoch int64
	// HoldEpochs and HoldSamples bound the epochs held in memory while
	// the store cannot take them (commit.go).
	HoldEpochs, HoldSamples int
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)
}

// Defaults. One minute epochs are what the paper's visualizer resolved and
// keep the store within its 16 MB/day bar.
const (
	DefaultEpoch    = time.Minute
	MinEpoch        = time.Second
	DefaultCPUHz    = 99
	DefaultSchedMin = time.Millisecond
	DefaultBlckMin  = time.Millisecond
)

func (c *Config) setDefaults() error {
	if c.Host == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("host name: %w", err)
		}
		c.Host = h
	}
	if c.Epoch == 0 {
		c.Epoch = DefaultEpoch
	}
	if c.Epoch < MinEpoch {
		return fmt.Errorf("epoch %v is shorter than the minimum %v", c.Epoch, MinEpoch)
	}
	if c.Vitals == nil {
		c.Vitals, _ = ParseVitals("all")
	}
	if c.Shift == 0 {
		c.Shift = sketch.DefaultShift
	}
	if c.Shift > 16 {
		return fmt.Errorf("threshold 2^%d is too large (at most 2^16)", c.Shift)
	}
	if c.CPUHz == 0 {
		c.CPUHz = DefaultCPUHz
	}
	if c.Budget == 0 {
		c.Budget = DefaultBudget
	}
	if c.CPUHz < 1 || c.CPUHz > 10000 {
		return fmt.Errorf("cpu sampling frequency %d Hz out of range 1..10000", c.CPUHz)
	}
	if c.SchedMin == 0 {
		c.SchedMin = DefaultSchedMin
	}
	if c.BlckMin == 0 {
		c.BlckMin = DefaultBlckMin
	}
	if c.FirstEpoch == 0 {
		c.FirstEpoch = 1
	}
	if c.HoldEpochs <= 0 {
		c.HoldEpochs = DefaultHoldEpochs
	}
	if c.HoldSamples <= 0 {
		c.HoldSamples = DefaultHoldSamples
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

// VitalStatus is what the recorder says about one vital.
type VitalStatus struct {
	Name      string `json:"name"`
	State     string `json:"state"` // recording, disabled, unsupported, not implemented
	Reason    string `json:"reason,omitempty"`
	Trigger   string `json:"trigger,omitempty"`
	Unit      string `json:"unit"`
	Threshold uint64 `json:"threshold,omitempty"`
	// Thin is 1 in how many of its sketch's events that would not be
	// sampled enter it, when the budget thins the vital (1: all).
	Thin uint64 `json:"thin,omitempty"`
	// Totals since the recorder started.
	Events  uint64 `json:"events"`
	Samples uint64 `json:"samples"`
	Lost    uint64 `json:"lost"`
	NoStack uint64 `json:"no_stack"`
	// Unstored are the events and samples of the epochs dropped because
	// the store could not take them.
	UnstoredEvents  uint64 `json:"unstored_events"`
	UnstoredSamples uint64 `json:"unstored_samples"`
	// Capped is the samples the kernel took that the storage budget did
	// not store (see Config.StorageBudget).
	Capped uint64 `json:"capped"`
}

// Status is a snapshot of the recorder.
type Status struct {
	Host          string    `json:"host"`
	Started       time.Time `json:"started"`
	Epoch         string    `json:"epoch_length"`
	CurrentEpoch  int64     `json:"current_epoch"`
	LastCommitted int64     `json:"last_committed_epoch"`
	LateSamples   uint64    `json:"late_samples"`
	// SkippedEpochs are epochs not committed and dropped; HeldEpochs those
	// held in memory while the store cannot take them (commit.go).
	SkippedEpochs uint64  `json:"skipped_epochs"`
	HeldEpochs    int     `json:"held_epochs"`
	MonitorCPU    float64 `json:"monitor_cpu_percent_last_epoch"`
	BudgetPercent float64 `json:"budget_percent"`
	// StorageBudget is the store's budget of bytes a day for samples and
	// stacks (0: none), StorageBank what may be spent now, StorageSpent
	// what was spent since the start (estimated as DuckDB stores them).
	StorageBudget int64         `json:"storage_budget_bytes_per_day,omitempty"`
	StorageBank   int64         `json:"storage_bank_bytes,omitempty"`
	StorageSpent  int64         `json:"storage_spent_bytes,omitempty"`
	Vitals        []VitalStatus `json:"vitals"`
	KernelMemory  []MapMemory   `json:"kernel_memory"`
	// Export is the shipping to ClickHouse, when the recorder exports.
	Export *export.Status `json:"export,omitempty"`
}

// pollInterval is how often the sample ring buffer is read. The BPF side
// submits without wake-ups, so this bounds how long a sample waits and how
// often the recorder wakes. The 2 MiB ring holds ~1650 samples of the
// largest size (both stacks full), several times that of the usual ones:
// under stress-ng --fork 2 --exec 1 (5 000-10 000 samples taken an epoch) it lost
// none, as the 4 MiB one before it. It is mapped twice into the
// recorder, so its size counts double in the recorder's RSS.
const pollInterval = 100 * time.Millisecond

// quietPollInterval is how often it is read while the last read found
// fewer than quietPollRecords samples, no window of the kernel's
// statistics is open and the programs cost little (runClock.quiet): an
// idle host's recorder wakes four times a second, not ten. The budget's
// looks (governPeriod) come as often.
const (
	quietPollInterval = governPeriod
	quietPollRecords  = 256
)

// loopNice is the nice value of the epoch loop's thread (root only; it
// stays at the process's otherwise): -10 weighs nine times a thread at 0.
const loopNice = -10

// Recorder owns the BPF objects of the vital signs.
type Recorder struct {
	cfg Config
	// spec is the vitals object's specification while New attaches the
	// configured vitals, nil after: it holds 3.6 MB of heap that only
	// loading a program needs, and a vital enabled later whose programs
	// were never loaded parses the object again (vitalsSpec).
	spec *ebpf.CollectionSpec
	// attachTo is each program's tracepoint, by program name.
	attachTo map[string]string
	objs     *objects
	attached map[Vital]*attachment
	// recursion is each program's count of runs the kernel skipped, as
	// last read (recursionMisses); r.ctlMu guards it.
	recursion map[*ebpf.Program]uint64
	reader    *ringbuf.Reader
	kernel    *symbol.Kernel
	procs     *symbol.Resolver
	ncpu      int
	meminfo   meminfo

	// ctlMu guards what the control block is made of: the attached vitals,
	// the generation, the seeds and the boosts. Run and SetEnabled both change it.
	ctlMu sync.Mutex
	gen   uint64
	seeds [2]uint64
	// onCPUAttaches counts the attachments of the context-switch and
	// sys_exit programs: the control block's on_cpu_gen while both are
	// attached (struct on_cpu in bpf/sketch.h), so that no record filled
	// before a gap in their runs serves.
	onCPUAttaches uint64
	// engines are the recorder's engine processes, left out of what is
	// recorded as the recorder is (SetOwnProcesses).
	engines []uint32
	// statsBatch reads the budget's totals (activeCounts); nil: a vital at
	// a time. r.ctlMu held.
	statsBatch *statsBatch
	// self is the recorder's process id and comm (ownChild).
	self     uint32
	selfComm string
	// budget is the adaptive threshold state (budget.go), and clock
	// measures the programs' run time it needs (runclock.go).
	budget budgetState
	// day is the storage budget; epochs are sized by it (epoch loop only).
	day   *dayBudget
	clock *runClock
	// boosted are the processes whose block requests are all sampled
	// (boost.go).
	boosted map[uint32]bool

	mu     sync.Mutex
	status Status
}

// New loads the BPF programs of cfg's vitals and attaches them; recording
// into the sketches starts with Run.
func New(cfg Config) (*Recorder, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := CheckPrivileges(); err != nil {
		return nil, err
	}
	spec, err := loadVitals()
	if err != nil {
		return nil, fmt.Errorf("load vitals object: %w", err)
	}
	objs, err := loadMaps(spec)
	if err != nil {
		return nil, err
	}
	r := &Recorder{cfg: cfg, spec: spec, attachTo: map[string]string{}, objs: objs, attached: map[Vital]*attachment{}, recursion: map[*ebpf.Program]uint64{}, boosted: map[uint32]bool{},
		ncpu: ebpf.MustPossibleCPU(), procs: symbol.NewResolver("/proc"), self: uint32(os.Getpid()), selfComm: procComm("/proc", os.Getpid())}
	for name, p := range spec.Programs {
		r.attachTo[name] = p.AttachTo
	}
	if b, err := newStatsBatch(objs.maps.Stats, r.ncpu); err == nil {
		r.statsBatch = b
	} else {
		cfg.Logf("budget: %v; reading the totals a vital at a time", err)
	}
	r.status = Status{Host: cfg.Host, Started: time.Now().UTC(), Epoch: cfg.Epoch.String(), BudgetPercent: 100 * max(cfg.Budget, 0),
		StorageBudget: max(cfg.StorageBudget, 0)}
	r.day = newDayBudget(cfg.StorageBudget)
	if b := cfg.StorageBank; b != nil {
		r.day.resume(b.Bytes, time.Since(b.At))
	}
	if cfg.StorageBudget > 0 {
		r.status.StorageBank = int64(r.day.tokens)
	}
	for v := range r.budget.shift {
		r.budget.shift[v] = cfg.Shift
	}
	for _, v := range AllVitals() {
		r.status.Vitals = append(r.status.Vitals, VitalStatus{Name: v.String(), State: "disabled", Unit: v.Unit()})
	}
	if r.kernel, err = symbol.LoadKernel("/proc/kallsyms"); err != nil {
		cfg.Logf("kernel symbols unavailable, kernel frames keep their addresses: %v", err)
	}
	// Per-program run time is how the recorder measures its in-kernel
	// cost; the first window of the statistics opens now.
	r.clock = newRunClock(func() (io.Closer, error) { return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)) })
	if r.clock.on(time.Now()); r.clock.err != nil {
		cfg.Logf("BPF run-time statistics unavailable, monitor cost excludes BPF time: %v", r.clock.err)
	} else if r.clock.overhead, err = statsOverhead(); err != nil {
		cfg.Logf("the BPF statistics' own cost could not be measured, the programs' is overstated: %v", err)
	}
	if err := r.advance(0); err != nil {
		r.Close()
		return nil, err
	}
	if r.reader, err = ringbuf.NewReader(objs.maps.Samples); err != nil {
		r.Close()
		return nil, fmt.Errorf("open sample ring buffer: %w", err)
	}
	for _, v := range cfg.Vitals {
		if err := r.enable(v); err != nil {
			if errors.Is(err, ErrPermission) {
				r.Close()
				return nil, err
			}
			cfg.Logf("%s: %v", v, err)
		}
	}
	r.spec = nil
	if len(r.attached) == 0 {
		r.Close()
		return nil, errors.New("no vital could be recorded on this host (see the messages above)")
	}
	r.describeUnsupported()
	return r, nil
}

func (r *Recorder) setVitalStatus(v Vital, f func(*VitalStatus)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.status.Vitals[v])
}

// describeUnsupported fills in why the vitals that are not recorded are not.
func (r *Recorder) describeUnsupported() {
	for _, v := range AllVitals() {
		if _, ok := r.attached[v]; ok {
			continue
		}
		switch {
		case v == L2:
			reason := probeHardware(unix.PERF_TYPE_HW_CACHE,
				unix.PERF_COUNT_HW_CACHE_LL|unix.PERF_COUNT_HW_CACHE_OP_READ<<8|unix.PERF_COUNT_HW_CACHE_RESULT_MISS<<16)
			if reason != "" {
				r.setVitalStatus(v, func(s *VitalStatus) { s.State, s.Reason = "unsupported", reason })
				continue
			}
			fallthrough
		case !vitalInfos[v].implemented:
			r.setVitalStatus(v, func(s *VitalStatus) {
				s.State, s.Reason = "not implemented", "no trigger for it in this version"
			})
		}
	}
}

// enable loads and attaches one vital.
func (r *Recorder) enable(v Vital) error {
	if !vitalInfos[v].implemented {
		r.setVitalStatus(v, func(s *VitalStatus) {
			s.State, s.Reason = "not implemented", "this version records cpu, sched, blck and blio"
		})
		return fmt.Errorf("%w: not implemented in this version", ErrNotSupported)
	}
	spec, err := r.vitalsSpec(v)
	if err != nil {
		return err
	}
	var a *attachment
	switch v {
	case CPU:
		a, err = r.objs.attachCPU(spec, r.cfg.CPUHz)
	case Sched, Blck:
		if other, ok := r.attached[Sched+Blck-v]; ok { // they share the context-switch programs
			a = &attachment{trigger: other.trigger}
		} else {
			a, err = r.objs.attachTracing(spec, tracingPrograms[v]...)
			if a != nil {
				a.trigger = "tp_btf " + strings.Join(r.tracepointNames(tracingPrograms[v]), ", ")
				r.onCPUAttaches++
			}
		}
	default:
		progs := tracingPrograms[v]
		a, err = r.objs.attachTracing(spec, progs...)
		if a != nil {
			a.trigger = "tp_btf " + strings.Join(r.tracepointNames(progs), ", ")
			if v == Syscall {
				r.onCPUAttaches++
			}
		}
	}
	if err != nil {
		r.setVitalStatus(v, func(s *VitalStatus) { s.State, s.Reason = "unsupported", err.Error() })
		return err
	}
	r.attached[v] = a
	r.clock.attach(a.progs)
	r.setVitalStatus(v, func(s *VitalStatus) {
		s.State, s.Reason, s.Trigger, s.Threshold, s.Thin = "recording", r.throttleReason(v), a.trigger, 1<<r.budget.shift[v], 1<<r.budget.thin[v]
	})
	return nil
}

// tracingPrograms are the BTF-tracepoint programs of each vital; sched and
// blck share theirs.
var tracingPrograms = map[Vital][]string{
	Sched:   {vitalsProgVitalSchedSwitch},
	Blck:    {vitalsProgVitalSchedSwitch},
	Blio:    {vitalsProgVitalBlioInsert, vitalsProgVitalBlioIssue, vitalsProgVitalBlioComplete, vitalsProgVitalBlioBackmerge, vitalsProgVitalBlioFrontmerge, vitalsProgVitalBlioRqMerge},
	Kmem:    {vitalsProgVitalKmemAlloc, vitalsProgVitalKmemFree},
	Umem:    {vitalsProgVitalUmemFault},
	Syscall: {vitalsProgVitalSysExit, vitalsProgVitalSysLast},
	Signal:  {vitalsProgVitalSignalGenerate},
	Sock:    {vitalsProgVitalSockSend, vitalsProgVitalSockRecv},
	Lock:    {vitalsProgVitalLockBegin, vitalsProgVitalLockEnd},
}

// tracepointNames are the tracepoints the programs attach to.
func (r *Recorder) tracepointNames(progs []string) []string {
	var out []string
	for _, p := range progs {
		out = append(out, r.attachTo[p])
	}
	return out
}

// vitalsSpec is the vitals object's specification if v has a program not
// loaded yet, else nil: New's, or the object parsed again for a vital
// enabled later.
func (r *Recorder) vitalsSpec(v Vital) (*ebpf.CollectionSpec, error) {
	progs := tracingPrograms[v]
	if v == CPU {
		progs = []string{vitalsProgVitalCpu}
	}
	if r.objs.loaded(progs) {
		return nil, nil
	}
	if r.spec != nil {
		return r.spec, nil
	}
	spec, err := loadVitals()
	if err != nil {
		return nil, fmt.Errorf("load vitals object: %w", err)
	}
	return spec, nil
}

// SetOwnProcesses names the processes, besides the recorder's own, whose
// activity is the recorder's: its database engines (internal/engine),
// whose commits would otherwise be half of what an idle host records.
// The programs leave out at most the first four.
func (r *Recorder) SetOwnProcesses(pids []int) {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	r.engines = r.engines[:0]
	for _, p := range pids {
		r.engines = append(r.engines, uint32(p))
	}
	if err := r.writeControl(); err != nil {
		r.cfg.Logf("leave out the engine processes %v: %v", pids, err)
	}
}

// ownChild reports whether a sample of process pid, whose comm was comm,
// is the recorder's own work the programs could not leave out: a child
// of the recorder's (an engine, internal/engine) before SetOwnProcesses
// names it, running the recorder's code under the recorder's comm until
// its exec and then under "exe", the name of the /proc/self/exe it was
// started as. Left in, those few samples a start were the only ones of
// the recorder's executable an idle host took, and symbolising them held
// its 100 000 symbols (6 MB) in the recorder's heap. Only samples under
// those two comms pay a look at the process's parent.
func (r *Recorder) ownChild(pid uint32, comm string) bool {
	if comm != r.selfComm && comm != "exe" || pid == r.self {
		return false
	}
	ppid, ok := parentPid("/proc", pid)
	return ok && ppid == r.self
}

// procComm is process pid's comm, "" if it cannot be read.
func procComm(root string, pid int) string {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// parentPid is process pid's parent, from /proc/PID/stat.
func parentPid(root string, pid uint32) (uint32, bool) {
	b, err := os.ReadFile(filepath.Join(root, strconv.FormatUint(uint64(pid), 10), "stat"))
	if err != nil {
		return 0, false
	}
	ppid, err := symbol.StatField(b, 4)
	return uint32(ppid), err == nil
}

// advance publishes the epoch generation gen with the configuration.
// The seed of the copy becoming active is renewed, so no two labels
// collide epoch after epoch; the other copy's seed is left alone.
func (r *Recorder) advance(gen uint64) error {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	r.gen = gen
	r.seeds[gen&1] = rand.Uint64()
	return r.writeControl()
}

// writeControl publishes the configuration; r.ctlMu must be held.
func (r *Recorder) writeControl() error {
	var ctl vitalsHlControl
	ctl.Gen = r.gen
	ctl.Seed = r.seeds
	for i := range ctl.Shift {
		ctl.Shift[i] = uint32(r.budget.shift[i])
		ctl.Thin[i] = uint32(r.budget.thin[i])
	}
	for v := range r.attached {
		ctl.Enabled |= 1 << v
	}
	ctl.SelfTgid = uint32(os.Getpid())
	for i := range ctl.EngineTgid {
		ctl.EngineTgid[i] = ctl.SelfTgid // an unused slot: never the idle task's 0
		if i < len(r.engines) {
			ctl.EngineTgid[i] = r.engines[i]
		}
	}
	ctl.SchedMinNs = uint64(r.cfg.SchedMin)
	ctl.BlckMinNs = uint64(r.cfg.BlckMin)
	ctl.BoostMax = r.boostMax()
	if (r.attached[Sched] != nil || r.attached[Blck] != nil) && r.attached[Syscall] != nil {
		ctl.OnCpuGen = r.onCPUAttaches
	}
	if err := r.objs.control.Set(&ctl); err != nil {
		return fmt.Errorf("write recorder control: %w", err)
	}
	return nil
}

// SetEnabled starts or stops recording one vital while the recorder runs.
// A vital stopped during an epoch is absent from that epoch; one started
// begins with empty sketches.
func (r *Recorder) SetEnabled(v Vital, on bool) error {
	if v >= numVitals {
		return fmt.Errorf("unknown vital %d", v)
	}
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	_, attached := r.attached[v]
	if on == attached {
		return nil
	}
	if on {
		return r.attachLocked(v)
	}
	err := r.detachLocked(v)
	r.setVitalStatus(v, func(s *VitalStatus) { s.State, s.Reason = "disabled", "" })
	return err
}

// attachLocked starts recording v with empty sketches; r.ctlMu held.
func (r *Recorder) attachLocked(v Vital) error {
	for copyIdx := uint32(0); copyIdx < 2; copyIdx++ {
		if _, _, err := r.readAndClear(copyIdx, v); err != nil {
			return err
		}
	}
	if err := r.enable(v); err != nil {
		return err
	}
	return r.writeControl()
}

// detachLocked stops recording v; r.ctlMu held.
func (r *Recorder) detachLocked(v Vital) error {
	a := r.attached[v]
	delete(r.attached, v)
	if v == Sched || v == Blck {
		// sched and blck share the context-switch programs: the one still
		// recording keeps them.
		other := Sched + Blck - v
		if o, ok := r.attached[other]; ok {
			if len(o.progs) == 0 {
				r.attached[other] = a
			}
			a = nil
		}
	}
	err := r.writeControl()
	if a != nil {
		a.Close()
	}
	return err
}

// Kernel is the kernel symbol table the recorder resolves stacks with, nil
// when /proc/kallsyms could not be read; it is immutable.
func (r *Recorder) Kernel() *symbol.Kernel { return r.kernel }

// Status returns a snapshot of what is being recorded.
func (r *Recorder) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.status
	s.Vitals = append([]VitalStatus(nil), r.status.Vitals...)
	s.KernelMemory = r.kernelMemory()
	return s
}

// Close detaches every program and frees the maps.
func (r *Recorder) Close() error {
	for _, a := range r.attached {
		a.Close()
	}
	r.attached = map[Vital]*attachment{}
	if r.reader != nil {
		r.reader.Close()
	}
	if r.clock != nil {
		r.clock.Close()
	}
	return r.objs.Close()
}

// Run records epochs until ctx ends, handing each finished epoch to sink.
// The epoch in progress when ctx ends is finished and handed over too. An
// error from sink does not stop the recorder: the epoch is held and given
// again while the store is unavailable, else dropped (commit.go).
func (r *Recorder) Run(ctx context.Context, sink func(*store.Epoch) error) error {
	// The epoch loop stays on one thread so that its CPU time, the
	// vitals' user-space cost, can be measured (threadCPUTime) apart from
	// the rest of the process, and attaching programs apart from it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The loop drains a ring that a late reader lets overflow, and a
	// sample read after its process exited is symbolized only if another
	// process of its program was seen: on a host whose CPUs are all busy it
	// must not wait its turn behind every runnable thread (at load 20 on 2
	// CPUs, epochs of 1 s stretched to 3-7 s and 3 s processes' samples were
	// read after they exited). What it may spend is bounded by the budget,
	// not by its priority. The thread goes back to the runtime at the
	// process's priority (lowering one's own is always allowed).
	if was, err := unix.Getpriority(unix.PRIO_PROCESS, 0); err == nil {
		if unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), loopNice) == nil {
			// Getpriority returns 20 - nice.
			defer unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 20-was)
		}
	}
	if err := r.advance(0); err != nil { // now with the attached vitals enabled
		return err
	}
	// Epochs are committed by a goroutine of their own, so the ring buffer
	// is drained while the store writes: a slow commit delays the store,
	// not the reading, and loses nothing. The queue is short; when the
	// store falls that far behind, reading waits for it.
	c := r.startCommitter(sink)
	ep := r.newEpoch(0, r.cfg.FirstEpoch, time.Now())
	// prev is the epoch closed last, while it takes its late samples
	// (lateGrace); then it is committed.
	var prev *epochState
	var rec ringbuf.Record
	timer := time.NewTimer(0)
	defer timer.Stop()
	empty := true
	interval := pollInterval
	for {
		boundary := ep.start.Add(r.cfg.Epoch)
		deadline := time.Now().Add(interval)
		if boundary.Before(deadline) {
			deadline = boundary
		}
		// The samples come without wake-ups, so the ring is read when the
		// deadline comes. The wait is a Go timer's, not the reader's: a
		// goroutine blocked in epoll_wait holds its P in a system call,
		// and the runtime's monitor thread, retaking it every poll, kept
		// waking every 20 µs; idle, the recorder made 150 nanosleep calls
		// a second instead of 70, and used a tenth more CPU (perf stat).
		// A ring left full is read on at once.
		if empty {
			timer.Reset(time.Until(deadline))
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
		}
		r.reader.SetDeadline(time.Now()) // read what is there, without waiting
		empty = false
		read := 0
		for n := 1; ; n++ {
			err := r.reader.ReadInto(&rec)
			if err == nil {
				read++
				r.consume(epochOf(ep, prev, rec.RawSample), rec.RawSample)
				// A storm can fill the ring as fast as it is read: stop at
				// the deadline all the same, so the budget looks and the
				// epoch is closed on time.
				if n%256 == 0 && time.Now().After(deadline) {
					break
				}
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				empty = true
				break
			}
			return errors.Join(fmt.Errorf("read samples: %w", err), c.stop())
		}
		interval = pollInterval
		if quiet := r.tickClock(); quiet && read < quietPollRecords {
			interval = quietPollInterval
		}
		r.govern(time.Now())
		stopping := ctx.Err() != nil
		if prev != nil && (stopping || !time.Now().Before(prev.end.Add(r.lateGrace()))) {
			c.queue <- r.finish(prev, ep)
			prev = nil
		}
		if !stopping && time.Now().Before(boundary) {
			continue
		}
		next, err := r.closeEpoch(ep, prev)
		if err != nil {
			return errors.Join(err, c.stop())
		}
		r.mu.Lock()
		r.status.CurrentEpoch = next.number
		r.mu.Unlock()
		if prev != nil { // closed less than lateGrace after it: a slow loop
			c.queue <- r.finish(prev, next)
		}
		prev = ep
		if stopping {
			c.queue <- r.finish(prev, nil)
			return c.stop()
		}
		ep = next
	}
}
