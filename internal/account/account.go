package account

import (
	"context"
	"errors"
	"fmt"
	"github.com/holter-dev/holter/internal/clock"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/holter-dev/holter/internal/memlock"
	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/recorder"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/symbol"
)

// ErrPermission is returned when the process may not load BPF programs.
var ErrPermission = errors.New("permission denied")

// MaxTracked is how many processes can be accounted at once (the size of
// the BPF map of tracked processes); more are counted in Stats.Refused.
const MaxTracked = 1024

// Options configures an Accountant; zero fields take defaults.
type Options struct {
	Host string
	// Write commits intervals; *store.Store's WriteThreadActivity.
	Write func(context.Context, []store.ThreadActivity) error
	// FlushEvery is how often intervals are committed (default 1 s); they
	// are read from the kernel at least every DrainEvery.
	FlushEvery time.Duration
	Logf       func(format string, args ...any)
	// Comms and Exes name processes to account from their start: a
	// process is tracked when it execs a program of one of these names
	// (as /proc/PID/comm shows it, at most 15 bytes) or one of these
	// executable files, and so are the processes it forks. Ones already
	// running when New is called are tracked from then.
	Comms, Exes []string
	// FollowExes also tracks, from their exec, new processes of every
	// executable whose processes were tracked through Track (their spans).
	FollowExes bool
	// KStackMin: interruptible sleeps shorter than this are recorded
	// without the kernel stack they slept in (default DefaultKStackMin;
	// negative: every one has it). Uninterruptible ones (disk I/O, page
	// locks) always have one: their own if they last this long, else
	// the one last taken of a sleep of their kind (process, user PC at
	// kernel entry, system call and state), as interruptible ones often
	// do (Stats.SameStacks).
	KStackMin time.Duration
	// HoldUnnamed, when positive, keeps the intervals of a thread that no
	// span has named yet (SpanThreads) in memory for this long: they are
	// written when a span names the thread, else dropped (Stats.Dropped),
	// so the store fills with the threads that serve requests, not with
	// runtime and client threads. Zero writes every interval.
	HoldUnnamed time.Duration
	// Recent, when positive, keeps every thread's exact intervals in
	// memory for this long (Activity), for charging spans without reading
	// them back from the store.
	Recent time.Duration
	// Summarize writes, instead of every on-CPU, runnable and blocked
	// interval, one row per thread and kind (blocked: per kernel stack)
	// for each flush, holding their total time (store.ThreadActivity.Ns);
	// I/O, dirtying and write-back stay exact. It takes Recent, which
	// keeps the exact intervals spans are charged from.
	Summarize bool
	// Kernel resolves blocking sites; nil loads /proc/kallsyms (a
	// recorder's, shared, saves reading the table twice).
	Kernel *symbol.Kernel
}

// DefaultKStackMin is the shortest interruptible sleep whose kernel stack
// is recorded, and the shortest uninterruptible one that has its own
// rather than its kind's: the blck vital's default threshold. Taking the
// stack is most of the cost of a tracked context switch (on the demo
// system, 2.2 µs a switch with a stack for every sleep over 20 µs, 0.5 µs
// without), and the many shorter waits on futexes and polls say little
// about where a request waited; their time is still counted, at site
// "unknown".
const DefaultKStackMin = time.Millisecond

// Stats counts what the accountant recorded since it started.
type Stats struct {
	Tracked   int    `json:"tracked_processes"`
	Refused   uint64 `json:"refused_processes"`
	Records   uint64 `json:"records"`
	Lost      uint64 `json:"lost_records"`
	IOLost    uint64 `json:"lost_io_submissions"`
	Committed uint64 `json:"committed_intervals"`
	Attached  bool   `json:"attached"`
	// FromExec counts the processes tracked by the kernel side, at exec
	// or fork, before any span of theirs arrived.
	FromExec uint64 `json:"tracked_from_exec"`
	// Rules is how many program names and executables are matched at exec.
	Rules int `json:"exec_rules"`
	// Dropped counts intervals of threads no span named (HoldUnnamed).
	Dropped uint64 `json:"dropped_unnamed_intervals"`
	// SameStacks counts sleeps given the kernel stack last taken of their
	// kind rather than having theirs taken (ACCT_F_SAME_STACK): a kind's
	// stack is taken again after 16 sleeps and a second.
	SameStacks uint64 `json:"same_kernel_stacks"`
	// Handoffs counts on-CPU intervals recorded with the off-CPU interval
	// of the tracked thread switched in after them: one record for the
	// context switch, not two.
	Handoffs uint64 `json:"handoff_records"`
	// Unseen counts context switches of tracked threads that the
	// sched_switch tracepoint did not report (ACCT_F_UNSEEN): the run
	// around each is recorded from the thread's CPU clock, its start or
	// end inferred.
	Unseen uint64 `json:"unseen_switches"`
	// Unstored counts intervals the store could not take (a storage
	// fault: its log says so), dropped.
	Unstored uint64 `json:"unstored_intervals"`
}

// Accountant records the exact on-CPU, off-CPU and block I/O intervals of
// the threads of tracked processes (bpf/account.bpf.c) into the store's
// thread_activity table.
type Accountant struct {
	opts Options
	// The programs and their maps are loaded with the first process
	// tracked (load), not before: the ring buffer alone is 16 MiB of
	// kernel memory, mapped into the recorder too, that a recorder which
	// accounts nothing should not hold. loaded is closed then. Nor is
	// the object parsed before: its specification is heap that only
	// loading needs.
	objs    accountObjects
	reader  *ringbuf.Reader
	loaded  chan struct{}
	loadErr error
	kernel  *symbol.Kernel
	// wakeFromQueue: account_switch reads wake-ups from the run queue's
	// statistics, and account_wakeup is not attached.
	wakeFromQueue bool
	// kstackMin is the off-CPU time from which an interval takes its
	// kernel stack (Options.KStackMin, its default filled in).
	kstackMin time.Duration

	mu    sync.Mutex
	links []link.Link
	since map[uint32]int64 // pid → wall ns its accounting began
	// exited: pid → wall ns it exited. It keeps its since, so the spans it
	// exported last (at exit) are still accounted.
	exited map[uint32]int64
	exes   map[accountFileKey]bool // executables matched at exec
	rules  int
	// named: threads spans named; held: intervals of the others, while
	// HoldUnnamed lasts.
	named map[[2]uint32]bool
	held  map[[2]uint32][]heldRow
	// watermark: every interval that ended before it is committed.
	watermark int64
	stats     Stats
	pend      pending
	reported  Stats // losses already logged (reportLosses)
	// recent: the exact intervals of the last opts.Recent, per thread;
	// recentN in all.
	recent  map[[2]uint32]*recentThread
	recentN int
	// reading: the threads the flush in progress read intervals of.
	reading []*recentThread
	// stackIDs interns kernel stacks (raw addresses) as stackNames
	// indices; stackNames[0] is none.
	stackIDs   map[string]uint32
	stackNames [][]string
	// lastStack, per kind of sleep, the kernel stack last taken of one,
	// which a sleep of that kind flagged flagSameStack repeats.
	lastStack map[accountSleepKind]rawStack
}

// rawStack is a kernel stack as the BPF side records it.
type rawStack struct {
	n      int32
	frames [12]uint64
}

// New loads the accounting programs; nothing is attached until a process
// is tracked.
func New(opts Options) (*Accountant, error) {
	if opts.Host == "" {
		opts.Host, _ = os.Hostname()
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Write == nil {
		return nil, errors.New("account: no store to write to")
	}
	if opts.Summarize && opts.Recent <= 0 {
		return nil, errors.New("account: summarizing intervals needs Recent, the time their exact intervals are kept in memory")
	}
	if err := memlock.Raise(); err != nil {
		return nil, err
	}
	a := &Accountant{opts: opts, loaded: make(chan struct{}), since: map[uint32]int64{}, exited: map[uint32]int64{}, exes: map[accountFileKey]bool{},
		named: map[[2]uint32]bool{}, held: map[[2]uint32][]heldRow{},
		recent: map[[2]uint32]*recentThread{}, stackIDs: map[string]uint32{}, stackNames: [][]string{nil}, lastStack: map[accountSleepKind]rawStack{}}
	var comms []string
	for _, c := range opts.Comms {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		if len(c) > 15 {
			return nil, fmt.Errorf("account: program name %q is longer than the 15 bytes the kernel keeps of it (see /proc/PID/comm)", c)
		}
		comms = append(comms, c)
	}
	var exes []accountFileKey
	for _, path := range opts.Exes {
		if path = strings.TrimSpace(path); path == "" {
			continue
		}
		k, err := fileKey(path)
		if err != nil {
			return nil, fmt.Errorf("account: executable %w", err)
		}
		exes = append(exes, k)
	}
	if len(comms)+len(exes) > maxRules {
		return nil, fmt.Errorf("account: %d program names and executables to match, at most %d", len(comms)+len(exes), maxRules)
	}
	a.kstackMin = opts.KStackMin
	if a.kstackMin == 0 {
		a.kstackMin = DefaultKStackMin
	}
	a.wakeFromQueue = probeWakeFromQueue()
	var err error
	if a.kernel = opts.Kernel; a.kernel == nil {
		if a.kernel, err = symbol.LoadKernel("/proc/kallsyms"); err != nil {
			opts.Logf("kernel symbols unavailable, blocking sites keep their addresses: %v", err)
		}
	}
	a.watermark = time.Now().UnixNano()
	if len(comms)+len(exes) > 0 {
		if err := a.load(); err != nil {
			return nil, err
		}
	}
	for _, c := range comms {
		var key [16]byte
		copy(key[:], c)
		if err := a.objs.MatchComm.Put(key, uint32(1)); err != nil {
			a.Close()
			return nil, fmt.Errorf("account: match program name %q: %w", c, err)
		}
		a.rules++
	}
	for _, k := range exes {
		if err := a.addExe(k); err != nil {
			a.Close()
			return nil, err
		}
	}
	if a.rules > 0 {
		// Attached from now on: a matching exec can come at any time.
		if err := a.attach(); err != nil {
			a.Close()
			return nil, err
		}
		if err := a.Track(running(comms, exes)...); err != nil {
			a.Close()
			return nil, err
		}
	}
	return a, nil
}

// load loads the programs and opens their ring buffer, once; a.mu is held
// or a is not shared yet. A failure is kept and returned again: the
// programs are not verified once per span batch.
func (a *Accountant) load() error {
	if a.reader != nil || a.loadErr != nil {
		return a.loadErr
	}
	if err := a.loadObjects(); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			a.loadErr = fmt.Errorf("load accounting programs: %w (needs root, or CAP_BPF and CAP_PERFMON): %v", ErrPermission, err)
		} else {
			a.loadErr = fmt.Errorf("load accounting programs: %w", err)
		}
		return a.loadErr
	}
	rd, err := ringbuf.NewReader(a.objs.AcctEvents)
	if err != nil {
		a.objs.Close()
		a.loadErr = fmt.Errorf("open accounting ring buffer: %w", err)
		return a.loadErr
	}
	a.reader = rd
	// Every interval before now is committed: there was none.
	a.watermark = max(a.watermark, time.Now().UnixNano())
	close(a.loaded)
	return nil
}

// loadObjects parses the accounting object, sets its constants and loads
// it into a.objs.
func (a *Accountant) loadObjects() error {
	spec, err := loadAccount()
	if err != nil {
		return err
	}
	if err := spec.Variables["kstack_min_ns"].Set(uint64(max(a.kstackMin, 0))); err != nil {
		return err
	}
	if err := spec.Variables["wake_from_queue"].Set(a.wakeFromQueue); err != nil {
		return err
	}
	return spec.LoadAndAssign(&a.objs, nil)
}

// maxRules is the size of the BPF maps of program names and executables.
const maxRules = 64

// fileKey names a file as the kernel does: its super block's device
// (MKDEV encoding) and inode number.
func fileKey(path string) (accountFileKey, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return accountFileKey{}, fmt.Errorf("%s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return accountFileKey{}, fmt.Errorf("%s: not a regular file", path)
	}
	return accountFileKey{Ino: st.Ino, Dev: unix.Major(st.Dev)<<20 | unix.Minor(st.Dev)}, nil
}

// addExe matches executable k at exec; a.mu is held or a is not shared.
func (a *Accountant) addExe(k accountFileKey) error {
	if a.exes[k] {
		return nil
	}
	if a.rules >= maxRules {
		return fmt.Errorf("account: already %d program names and executables to match", maxRules)
	}
	if err := a.objs.MatchExe.Put(k, uint32(1)); err != nil {
		return fmt.Errorf("account: match executable (inode %d): %w", k.Ino, err)
	}
	a.exes[k] = true
	a.rules++
	return nil
}

// running lists the processes already running one of the programs.
func running(comms []string, exes []accountFileKey) []uint32 {
	if len(comms)+len(exes) == 0 {
		return nil
	}
	dirs, _ := os.ReadDir("/proc")
	var pids []uint32
	self := os.Getpid()
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == self {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		match := slices.Contains(comms, strings.TrimSuffix(string(comm), "\n"))
		if !match && len(exes) > 0 {
			if k, err := fileKey(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
				match = slices.Contains(exes, k)
			}
		}
		if match {
			pids = append(pids, uint32(pid))
		}
	}
	return pids
}

// Track starts accounting the threads of pids (already tracked ones are
// left as they are). The programs are attached with the first process.
func (a *Accountant) Track(pids ...uint32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.loadErr != nil {
		return nil // said once, when the programs failed to load
	}
	for _, pid := range pids {
		if _, ok := a.since[pid]; ok {
			if _, gone := a.exited[pid]; !gone || !alive(pid) {
				// Tracked, or exited and sending its last spans.
				continue
			}
			delete(a.exited, pid) // the pid was reused
		}
		if len(a.since)-len(a.exited) >= MaxTracked {
			a.stats.Refused++
			continue
		}
		if err := a.load(); err != nil {
			return err
		}
		if err := a.objs.Tracked.Put(pid, uint32(1)); err != nil {
			return fmt.Errorf("track process %d: %w", pid, err)
		}
		a.since[pid] = time.Now().UnixNano()
		a.opts.Logf("accounting the threads of process %d", pid)
		if a.opts.FollowExes {
			if k, err := fileKey(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && !a.exes[k] {
				if err := a.addExe(k); err != nil {
					a.opts.Logf("%v", err)
				} else {
					exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
					a.opts.Logf("accounting new processes of %s from their exec", exe)
				}
			}
		}
	}
	if len(a.since) > 0 && a.links == nil {
		return a.attach()
	}
	return nil
}

func (a *Accountant) attach() error {
	progs := []*ebpf.Program{a.objs.AccountSwitch, a.objs.AccountIoInsert, a.objs.AccountIoIssue,
		a.objs.AccountIoComplete, a.objs.AccountIoRqMerge, a.objs.AccountIoBackmerge, a.objs.AccountIoFrontmerge,
		a.objs.AccountExec, a.objs.AccountFork, a.objs.AccountExit, a.objs.AccountDirty}
	if !a.wakeFromQueue {
		progs = append(progs, a.objs.AccountWakeup)
	}
	for _, p := range progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			a.detach()
			return fmt.Errorf("attach accounting program: %w", err)
		}
		a.links = append(a.links, l)
	}
	a.stats.Attached = true
	return nil
}

func (a *Accountant) detach() {
	for _, l := range a.links {
		l.Close()
	}
	a.links = nil
	a.stats.Attached = false
}

// probeWakeFromQueue is wakeFromQueue; tests replace it to run the other
// way too.
var probeWakeFromQueue = wakeFromQueue

// wakeFromQueue says whether the kernel's BTF has what account_switch reads
// a woken thread's wake-up from (see wake_from_queue in
// bpf/account.bpf.c): else account_wakeup notes each wake-up.
func wakeFromQueue() bool {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false
	}
	has := func(name, member string) bool {
		var s *btf.Struct
		if spec.TypeByName(name, &s) != nil {
			return false
		}
		return slices.ContainsFunc(s.Members, func(m btf.Member) bool { return m.Name == member })
	}
	return has("sched_info", "last_queued") && has("cfs_rq", "rq") && has("rq", "clock")
}

func alive(pid uint32) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return !errors.Is(err, os.ErrNotExist)
}

// Since is when the accounting of process pid of host began (wall ns),
// if it did: only this host's (Options.Host) processes are accounted.
func (a *Accountant) Since(host string, pid uint32) (int64, bool) {
	if host != a.opts.Host {
		return 0, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.since[pid]
	return t, ok
}

// Watermark is the time before which every interval of a tracked thread
// that has ended is in the store. A thread still running (or still
// asleep) has an interval open that is written when it ends.
func (a *Accountant) Watermark() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reader == nil {
		// Nothing tracked yet: nothing is left to write.
		return max(a.watermark, time.Now().UnixNano())
	}
	return a.watermark
}

// Loaded reports whether the programs are loaded: whether any process
// was ever tracked, or a rule set.
func (a *Accountant) Loaded() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reader != nil
}

// Stats reports the accountant's counters.
func (a *Accountant) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Tracked = len(a.since) - len(a.exited)
	s.Rules = a.rules
	var per []accountAcctStats
	if a.reader == nil {
		return s
	}
	if err := a.objs.AcctCounters.Lookup(uint32(0), &per); err == nil {
		for _, c := range per {
			s.Records += c.Events
			s.Lost += c.Lost
			s.IOLost += c.IoLost
			s.Refused += c.Refused
		}
	}
	return s
}

// Run reads and commits intervals until ctx ends, then commits what is
// left. Processes that exited stop being tracked.
func (a *Accountant) Run(ctx context.Context) error {
	// Nothing to read before the programs are loaded: a recorder that
	// accounts nothing does not wake for it.
	select {
	case <-ctx.Done():
		return nil
	case <-a.loaded:
	}
	tick := time.NewTicker(min(a.opts.FlushEvery, DrainEvery))
	defer tick.Stop()
	flushed := time.Now()
	for {
		stopping := false
		select {
		case <-ctx.Done():
			stopping = true
		case <-tick.C:
		}
		if !stopping && time.Since(flushed) < a.opts.FlushEvery-DrainEvery/2 {
			a.mu.Lock()
			a.drain()
			a.mu.Unlock()
			continue
		}
		flushed = time.Now()
		if err := a.flush(); err != nil {
			a.opts.Logf("accounting: %v", err)
		}
		a.reportLosses()
		a.forgetExited()
		if stopping {
			return nil
		}
	}
}

// reportLosses logs what the kernel side could not record since it last
// did, as bpftrace reports lost events: spans of those threads are
// charged less than they used.
func (a *Accountant) reportLosses() {
	s := a.Stats()
	if d := s.Lost - a.reported.Lost; d > 0 {
		a.opts.Logf("accounting: %d records lost (ring buffer full, %d in all): spans of their threads are charged less than they used", d, s.Lost)
	}
	if d := s.IOLost - a.reported.IOLost; d > 0 {
		a.opts.Logf("accounting: %d block requests not followed (%d in flight at most, %d in all): their I/O is not charged", d, a.objs.IoInflight.MaxEntries(), s.IOLost)
	}
	if d := s.Refused - a.reported.Refused; d > 0 {
		a.opts.Logf("accounting: %d processes not tracked (%d tracked at most, %d in all)", d, MaxTracked, s.Refused)
	}
	a.reported = s
}

// heldRow is a row of a thread no span has named yet.
type heldRow struct {
	row  store.ThreadActivity
	n    uint64 // intervals it holds
	read int64  // wall ns it was read
}

// DrainEvery is how often the ring buffer is read, between commits: its
// 16 MiB hold some 175,000 records, 0.6 s of a tracked thread pool
// switching 300,000 times a second (two threads handing a byte back and
// forth over pipes), which lost 43% of its records read every second.
const DrainEvery = 100 * time.Millisecond

// pending is what the drains since the last commit read; a.mu guards it.
type pending struct {
	rows []store.ThreadActivity
	sum  summary
	at   int64 // wall ns the last drain began: what ended before, it read
}

// drain reads the ring buffer until it is empty; a.mu is held.
func (a *Accountant) drain() {
	a.pend.at = time.Now().UnixNano()
	offset := clock.TAIToWall() // the programs read the TAI clock
	rows, sum := &a.pend.rows, &a.pend.sum
	var rec ringbuf.Record
	var e accountAcctEvent
	a.reader.SetDeadline(time.Now())
	for {
		if err := a.reader.ReadInto(&rec); err != nil {
			break // deadline: the ring is empty
		}
		if len(rec.RawSample) < recordHeader {
			continue
		}
		// Only an off-CPU record with a kernel stack has one: the rest
		// end where Kstack begins.
		e = accountAcctEvent{}
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&e)), unsafe.Sizeof(e)), rec.RawSample)
		if e.Flags&flagUnseen != 0 {
			a.stats.Unseen++
		}
		switch e.Kind {
		case kindTrack:
			a.trackedFromKernel(e.Pid, int64(e.Start)+offset)
		case kindUntrack:
			if _, ok := a.since[e.Pid]; ok {
				a.exited[e.Pid] = int64(e.Start) + offset
			}
		case kindOffCPU:
			if e.RanTid != 0 {
				// The run of the thread switched out for this one.
				ran := accountAcctEvent{Kind: kindCPU, Pid: e.RanPid, Tid: e.RanTid, Start: e.RanStart, End: e.End, Exec: e.Exec}
				a.interval(&ran, offset, rows, sum)
				a.stats.Handoffs++
			}
			a.sameStack(&e)
			a.interval(&e, offset, rows, sum)
		default:
			a.interval(&e, offset, rows, sum)
		}
	}
	a.readDone(time.Now().UnixNano())
}

// flush drains the ring buffer and commits what the drains since the
// last read.
func (a *Accountant) flush() error {
	a.mu.Lock()
	a.drain()
	now, rows, sum := a.pend.at, a.pend.rows, a.pend.sum
	a.pend = pending{}
	var out []store.ThreadActivity
	var committed uint64
	for i := range rows {
		a.commitOrHold(&rows[i], 1, now, &out, &committed)
	}
	for i := range sum.rows {
		a.commitOrHold(&sum.rows[i], sum.n[i], now, &out, &committed)
	}
	if a.opts.Recent > 0 {
		a.forgetOldRecent(now)
	}
	// Held too long: no span named the thread in time.
	for t, hs := range a.held {
		n := 0
		for n < len(hs) && now-hs[n].read > int64(a.opts.HoldUnnamed) {
			a.stats.Dropped += hs[n].n
			n++
		}
		if n == len(hs) {
			delete(a.held, t)
		} else if n > 0 {
			a.held[t] = hs[n:] // appends move it to a new array in time
		}
	}
	a.mu.Unlock()
	if err := a.opts.Write(context.Background(), out); err != nil {
		return a.unstored(committed, err)
	}
	a.mu.Lock()
	a.watermark = now
	a.stats.Committed += committed
	a.mu.Unlock()
	return nil
}

// interval takes e, an interval of a thread, into memory (Options.Recent)
// and into the rows or summaries to commit; a.mu is held.
func (a *Accountant) interval(e *accountAcctEvent, offset int64, rows *[]store.ThreadActivity, sum *summary) {
	if a.opts.Recent > 0 {
		a.remember([2]uint32{e.Pid, e.Tid}, e, offset)
	}
	if a.opts.Summarize && (e.Kind == kindCPU || e.Kind == kindOffCPU) {
		a.summarize(sum, e, offset)
		return
	}
	*rows = append(*rows, a.activity(e, offset))
}

// commitOrHold adds r, n intervals of a thread, to out, or to the held
// rows if no span named its thread yet (HoldUnnamed); a.mu is held.
func (a *Accountant) commitOrHold(r *store.ThreadActivity, n uint64, now int64, out *[]store.ThreadActivity, committed *uint64) {
	if t := [2]uint32{r.Pid, r.Tid}; a.opts.HoldUnnamed > 0 && !a.named[t] {
		a.held[t] = append(a.held[t], heldRow{*r, n, now})
		return
	}
	*out = append(*out, *r)
	*committed += n
}

// SpanThreads is told the threads (pid, tid) spans name, before those
// spans are stored: with HoldUnnamed, their held intervals are written
// now, so a span's thread activity is in the store when the span is.
func (a *Accountant) SpanThreads(threads [][2]uint32) {
	var out []store.ThreadActivity
	var n uint64
	a.mu.Lock()
	for _, t := range threads {
		if a.named[t] {
			continue
		}
		a.named[t] = true
		for _, h := range a.held[t] {
			out = append(out, h.row)
			n += h.n
		}
		delete(a.held, t)
	}
	a.mu.Unlock()
	if len(out) == 0 {
		return
	}
	if err := a.opts.Write(context.Background(), out); err != nil {
		if err = a.unstored(n, err); err != nil {
			a.opts.Logf("accounting: %v", err)
		}
		return
	}
	a.mu.Lock()
	a.stats.Committed += n
	a.mu.Unlock()
}

// unstored counts n intervals the store refused; a storage fault is the
// store's to report, and is not returned.
func (a *Accountant) unstored(n uint64, err error) error {
	if !errors.Is(err, store.ErrUnavailable) {
		return err
	}
	a.mu.Lock()
	a.stats.Unstored += n
	a.mu.Unlock()
	return nil
}

// recordHeader is the size of a record without a kernel stack
// (ACCT_HEADER_BYTES).
const recordHeader = int(unsafe.Offsetof(accountAcctEvent{}.Kstack))

// flagSameStack: an off-CPU record whose kernel stack was not taken, a
// sleep of a kind whose stack was (ACCT_F_SAME_STACK).
const flagSameStack = 1

// flagUnseen: a record whose bounds were inferred from the thread's CPU
// clock, a context switch of it unreported (ACCT_F_UNSEEN).
const flagUnseen = 2

// sameStack gives e, an off-CPU record, the stack last taken of a sleep
// of its kind if the BPF side said so (flagSameStack) rather than take
// e's, and remembers e's if it has one; a.mu is held.
func (a *Accountant) sameStack(e *accountAcctEvent) {
	if e.State == 0 {
		return
	}
	k := accountSleepKind{Site: e.Site, Tgid: e.Pid, Nr: uint32(e.Bytes), State: e.State}
	if e.Flags&flagSameStack != 0 {
		last := a.lastStack[k]
		e.KstackBytes, e.Kstack = last.n*8, last.frames
		a.stats.SameStacks++
		return
	}
	if e.KstackBytes > 0 {
		a.lastStack[k] = rawStack{e.KstackBytes / 8, e.Kstack}
	}
}

// Record kinds (enum acct_kind in bpf/account.bpf.c).
const (
	kindCPU       = 1
	kindOffCPU    = 2
	kindIO        = 3
	kindWriteback = 4
	kindDirty     = 5
	kindTrack     = 6
	kindUntrack   = 7
)

// trackedFromKernel notes that the BPF side began tracking pid at exec or
// fork, at wall time ts; a.mu is held.
func (a *Accountant) trackedFromKernel(pid uint32, ts int64) {
	if t, ok := a.since[pid]; ok {
		if _, gone := a.exited[pid]; !gone {
			a.since[pid] = min(t, ts)
			return
		}
		delete(a.exited, pid)
	}
	a.since[pid] = ts
	a.stats.FromExec++
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	a.opts.Logf("accounting the threads of process %d (%s) from its start", pid, strings.TrimSpace(string(comm)))
}

// schedulerFrames are the frames every sleeping task's kernel stack starts
// with; the blocking site is the first frame below them.
var schedulerFrames = []string{"__schedule", "schedule", "preempt_schedule", "__traceiter", "bpf_"}

func (a *Accountant) activity(e *accountAcctEvent, offset int64) store.ThreadActivity {
	t := store.ThreadActivity{Host: a.opts.Host, Pid: e.Pid, Tid: e.Tid,
		StartNs: int64(e.Start) + offset, EndNs: int64(e.End) + offset}
	switch e.Kind {
	case kindCPU:
		t.Kind = "cpu"
		t.Ns = e.execNs()
	case kindOffCPU:
		t.Kind = "runnable"
		if e.State != 0 {
			t.Kind = "blocked"
			t.SleepState = e.State
			if e.Wake != 0 {
				t.WakeNs = int64(e.Wake) + offset
			}
		}
		t.Site = e.Site
		t.KStack, _ = a.kstack(e)
	case kindIO, kindWriteback:
		t.Kind = "io"
		t.Bytes = e.Bytes
		t.Op = recorder.BlockOp(uint64(e.State))
		t.Dev = kernelDev(e.Site)
		if e.Kind == kindWriteback {
			t.Kind = "writeback"
			t.Ino = e.Ino
			t.DirtiedNs = int64(e.Wake) + offset
		}
	case kindDirty:
		t.Kind = "dirty"
		t.Bytes = e.Bytes
		t.Ino = e.Ino
		t.Dev = kernelDev(e.Site)
	}
	return t
}

// execNs is the time e, an on-CPU interval, executed by the scheduler's
// clock, or 0 for all of it: unknown, or (the two clocks' readings
// differing) no less than the interval's length.
func (e *accountAcctEvent) execNs() int64 {
	if e.Exec >= e.End-e.Start {
		return 0
	}
	return int64(e.Exec)
}

// kernelDev prints a kernel dev_t (MKDEV: major << 20 | minor).
func kernelDev(d uint64) string {
	return fmt.Sprintf("%d:%d", d>>20, d&(1<<20-1))
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// exitedKept is how long an exited process's since is kept: as long as
// the accounting pass looks back for spans to charge.
const exitedKept = 10 * time.Minute

func (a *Accountant) forgetExited() {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now().UnixNano()
	for pid := range a.since {
		at, gone := a.exited[pid]
		if !gone && !alive(pid) {
			a.objs.Tracked.Delete(pid)
			a.exited[pid] = now
			continue
		}
		if gone && now-at > int64(exitedKept) {
			delete(a.since, pid)
			delete(a.exited, pid)
			for t := range a.named {
				if t[0] == pid {
					delete(a.named, t)
				}
			}
			for k := range a.lastStack {
				if k.Tgid == pid {
					delete(a.lastStack, k)
				}
			}
		}
	}
	if len(a.since) == len(a.exited) && a.rules == 0 && a.links != nil {
		a.detach()
	}
}

// Close detaches and releases the programs.
func (a *Accountant) Close() error {
	a.mu.Lock()
	a.detach()
	loaded := a.reader != nil
	a.mu.Unlock()
	if !loaded {
		return nil
	}
	a.reader.Close()
	return a.objs.Close()
}
