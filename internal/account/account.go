package account

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/holter-dev/holter/internal/clock"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
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
	// FlushEvery is how often intervals are read from the kernel and
	// committed (default 500 ms).
	FlushEvery time.Duration
	Logf       func(format string, args ...any)
}

// Stats counts what the accountant recorded since it started.
type Stats struct {
	Tracked   int    `json:"tracked_processes"`
	Refused   uint64 `json:"refused_processes"`
	Records   uint64 `json:"records"`
	Lost      uint64 `json:"lost_records"`
	IOLost    uint64 `json:"lost_io_submissions"`
	Committed uint64 `json:"committed_intervals"`
	Attached  bool   `json:"attached"`
}

// Accountant records the exact on-CPU, off-CPU and block I/O intervals of
// the threads of tracked processes (bpf/account.bpf.c) into the store's
// thread_activity table.
type Accountant struct {
	opts   Options
	objs   accountObjects
	reader *ringbuf.Reader
	kernel *symbol.Kernel

	mu    sync.Mutex
	links []link.Link
	since map[uint32]int64 // pid → wall ns its accounting began
	// watermark: every interval that ended before it is committed.
	watermark int64
	stats     Stats
}

// New loads the accounting programs; nothing is attached until a process
// is tracked.
func New(opts Options) (*Accountant, error) {
	if opts.Host == "" {
		opts.Host, _ = os.Hostname()
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = 500 * time.Millisecond
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Write == nil {
		return nil, errors.New("account: no store to write to")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock limit: %w", err)
	}
	a := &Accountant{opts: opts, since: map[uint32]int64{}}
	if err := loadAccountObjects(&a.objs, nil); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("load accounting programs: %w (needs root, or CAP_BPF and CAP_PERFMON): %v", ErrPermission, err)
		}
		return nil, fmt.Errorf("load accounting programs: %w", err)
	}
	rd, err := ringbuf.NewReader(a.objs.AcctEvents)
	if err != nil {
		a.objs.Close()
		return nil, fmt.Errorf("open accounting ring buffer: %w", err)
	}
	a.reader = rd
	if a.kernel, err = symbol.LoadKernel("/proc/kallsyms"); err != nil {
		opts.Logf("kernel symbols unavailable, blocking sites keep their addresses: %v", err)
	}
	a.watermark = time.Now().UnixNano()
	return a, nil
}

// Track starts accounting the threads of pids (already tracked ones are
// left as they are). The programs are attached with the first process.
func (a *Accountant) Track(pids ...uint32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, pid := range pids {
		if _, ok := a.since[pid]; ok {
			continue
		}
		if len(a.since) >= MaxTracked {
			a.stats.Refused++
			continue
		}
		if err := a.objs.Tracked.Put(pid, uint32(1)); err != nil {
			return fmt.Errorf("track process %d: %w", pid, err)
		}
		a.since[pid] = time.Now().UnixNano()
		a.opts.Logf("accounting the threads of process %d", pid)
	}
	if len(a.since) > 0 && a.links == nil {
		return a.attach()
	}
	return nil
}

func (a *Accountant) attach() error {
	progs := []*ebpf.Program{a.objs.AccountWakeup, a.objs.AccountSwitch, a.objs.AccountIoInsert, a.objs.AccountIoIssue, a.objs.AccountIoComplete}
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

// Since is when the accounting of pid began (wall ns), if it did.
func (a *Accountant) Since(pid uint32) (int64, bool) {
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
	return a.watermark
}

// Stats reports the accountant's counters.
func (a *Accountant) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Tracked = len(a.since)
	var per []accountAcctStats
	if err := a.objs.AcctCounters.Lookup(uint32(0), &per); err == nil {
		for _, c := range per {
			s.Records += c.Events
			s.Lost += c.Lost
			s.IOLost += c.IoLost
		}
	}
	return s
}

// Run reads and commits intervals until ctx ends, then commits what is
// left. Processes that exited stop being tracked.
func (a *Accountant) Run(ctx context.Context) error {
	tick := time.NewTicker(a.opts.FlushEvery)
	defer tick.Stop()
	for {
		stopping := false
		select {
		case <-ctx.Done():
			stopping = true
		case <-tick.C:
		}
		if err := a.flush(); err != nil {
			a.opts.Logf("accounting: %v", err)
		}
		a.forgetExited()
		if stopping {
			return nil
		}
	}
}

// flush drains the ring buffer and commits its intervals.
func (a *Accountant) flush() error {
	now := time.Now().UnixNano()
	offset := clock.MonoToWall()
	var out []store.ThreadActivity
	var rec ringbuf.Record
	a.reader.SetDeadline(time.Now())
	for {
		if err := a.reader.ReadInto(&rec); err != nil {
			break // deadline: the ring is empty
		}
		var e accountAcctEvent
		if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &e); err != nil {
			continue
		}
		out = append(out, a.activity(&e, offset))
	}
	if err := a.opts.Write(context.Background(), out); err != nil {
		return err
	}
	a.mu.Lock()
	a.watermark = now
	a.stats.Committed += uint64(len(out))
	a.mu.Unlock()
	return nil
}

// schedulerFrames are the frames every sleeping task's kernel stack starts
// with; the blocking site is the first frame below them.
var schedulerFrames = []string{"__schedule", "schedule", "preempt_schedule", "__traceiter", "bpf_"}

func (a *Accountant) activity(e *accountAcctEvent, offset int64) store.ThreadActivity {
	t := store.ThreadActivity{Host: a.opts.Host, Pid: e.Pid, Tid: e.Tid,
		StartNs: int64(e.Start) + offset, EndNs: int64(e.End) + offset}
	switch e.Kind {
	case 1:
		t.Kind = "cpu"
	case 2:
		t.Kind = "runnable"
		if e.State != 0 {
			t.Kind = "blocked"
			t.SleepState = e.State
			if e.Wake != 0 {
				t.WakeNs = int64(e.Wake) + offset
			}
		}
		t.Site = e.Site
		n := int(e.KstackBytes / 8)
		for i := 0; i < n && i < len(e.Kstack); i++ {
			name := fmt.Sprintf("0x%x", e.Kstack[i])
			if f := a.kernel.Resolve(e.Kstack[i]); f.Func != "" {
				name = f.Func
			}
			if len(t.KStack) == 0 && hasAnyPrefix(name, schedulerFrames) {
				continue
			}
			t.KStack = append(t.KStack, name)
		}
	case 3:
		t.Kind = "io"
		t.Bytes = e.Bytes
		t.Op = recorder.BlockOp(uint64(e.State))
		t.Dev = fmt.Sprintf("%d:%d", e.Site>>20, e.Site&(1<<20-1))
	}
	return t
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func (a *Accountant) forgetExited() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for pid := range a.since {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			a.objs.Tracked.Delete(pid)
			delete(a.since, pid)
		}
	}
	if len(a.since) == 0 && a.links != nil {
		a.detach()
	}
}

// Close detaches and releases the programs.
func (a *Accountant) Close() error {
	a.mu.Lock()
	a.detach()
	a.mu.Unlock()
	a.reader.Close()
	return a.objs.Close()
}
