package findings

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/sysname"
)

// window builds n one-second intervals with every vital recorded at zero.
func window(n int) *Window {
	w := &Window{Host: "h", Timescale: Epoch, Vitals: map[string]*VitalSeries{}, Unavailable: map[string]string{}, CPUs: 2,
		Stacks: testStacks}
	for i := 0; i < n; i++ {
		w.Intervals = append(w.Intervals, Interval{int64(i) * 1e9, int64(i+1) * 1e9})
	}
	for _, v := range Vitals {
		w.Vitals[v] = &VitalSeries{Events: make([]float64, n), Weight: make([]float64, n), Secondary: make([]float64, n)}
	}
	w.KernelCPU, w.FreeKB, w.KernelFirstKB, w.KernelLastKB = make([]float64, n), nans(n), nans(n), nans(n)
	return w
}

func proc(i int, vital string, pid uint32, weight, events float64) ProcStat {
	return ProcStat{Interval: i, Vital: vital, Pid: pid, Comm: "p" + string(rune('a'+pid%26)), Weight: weight, Events: events, Samples: 3}
}

// The stacks the constructed windows' groups name, by id.
const (
	stackSpin      = 1  // user: spin_in_culprit < main, in /bin/spinner
	stackCompiler  = 2  // user: many functions
	stackDiskWait  = 3  // kernel: io_schedule < ... < vfs_write
	stackPipeWait  = 4  // kernel: anon_pipe_read
	stackFutex     = 5  // kernel: futex wait
	stackGoPark    = 6  // user: runtime.futex < runtime.futexsleep
	stackMutex     = 7  // user: __lll_lock_wait < take_the_lock < main
	stackFault     = 8  // kernel: page fault allocation
	stackSock      = 9  // kernel: skb allocation
	stackRetry     = 10 // user: connect < retry_forever < main
	stackSender    = 11 // user: kill < send_signals < main
	stackKthread   = 12 // kernel: worker_thread < kthread
	stackPeerWait  = 13 // kernel: sk_wait_data < tcp_recvmsg
	stackWriter    = 14 // user: __libc_pwrite < write_blocks < main
	stackCacheFill = 15 // kernel: filemap_add_folio (page cache)
	stackPwrite    = 16 // user: __libc_pwrite alone (a sleep's site)
	stackOpen      = 17 // user: open alone (a wrapper whose caller was lost)
	stackPause     = 18 // user: clock_nanosleep < __nanosleep < probe_until_found < main
)

var testStacks = &Stacks{m: map[uint64]*Stack{
	stackSpin:      {Kind: "user", Frames: []string{"spin_in_culprit", "main"}, Modules: []string{"/bin/spinner", "/bin/spinner"}},
	stackDiskWait:  {Kind: "kernel", Frames: []string{"io_schedule", "folio_wait_bit_common", "filemap_fdatawait", "vfs_write"}},
	stackPipeWait:  {Kind: "kernel", Frames: []string{"anon_pipe_read", "vfs_read", "ksys_read"}},
	stackFutex:     {Kind: "kernel", Frames: []string{"futex_do_wait", "__futex_wait", "futex_wait", "do_futex"}},
	stackGoPark:    {Kind: "user", Frames: []string{"runtime.futex", "runtime.futexsleep", "runtime.notesleep"}, Modules: []string{"/bin/go", "/bin/go", "/bin/go"}},
	stackMutex:     {Kind: "user", Frames: []string{"__lll_lock_wait", "take_the_lock", "main"}, Modules: []string{"/lib/libc.so.6", "/bin/locker", "/bin/locker"}},
	stackFault:     {Kind: "kernel", Frames: []string{"__alloc_frozen_pages_noprof", "alloc_pages_mpol", "vma_alloc_folio_noprof", "do_anonymous_page", "__handle_mm_fault"}},
	stackSock:      {Kind: "kernel", Frames: []string{"__alloc_frozen_pages_noprof", "alloc_pages_mpol", "skb_page_frag_refill", "unix_stream_sendmsg"}},
	stackRetry:     {Kind: "user", Frames: []string{"connect", "retry_forever", "main"}, Modules: []string{"/lib/libc.so.6", "/bin/retrier", "/bin/retrier"}},
	stackSender:    {Kind: "user", Frames: []string{"kill", "send_signals", "main"}, Modules: []string{"/lib/libc.so.6", "/bin/stormer", "/bin/stormer"}},
	stackKthread:   {Kind: "kernel", Frames: []string{"worker_thread", "kthread", "ret_from_fork"}},
	stackPeerWait:  {Kind: "kernel", Frames: []string{"wait_woken", "sk_wait_data", "tcp_recvmsg_locked", "tcp_recvmsg"}},
	stackWriter:    {Kind: "user", Frames: []string{"__libc_pwrite", "write_blocks", "main"}, Modules: []string{"/lib/libc.so.6", "/bin/writer", "/bin/writer"}},
	stackCacheFill: {Kind: "kernel", Frames: []string{"__alloc_frozen_pages_noprof", "filemap_alloc_folio", "__filemap_get_folio", "ext4_write_begin"}},
	stackPwrite:    {Kind: "user", Frames: []string{"__libc_pwrite"}, Modules: []string{"/lib/libc.so.6"}},
	stackOpen:      {Kind: "user", Frames: []string{"open"}, Modules: []string{"/lib/libc.so.6"}},
	stackPause: {Kind: "user", Frames: []string{"clock_nanosleep", "__nanosleep", "probe_until_found", "main"},
		Modules: []string{"/lib/libc.so.6", "/lib/libc.so.6", "/bin/prober", "/bin/prober"}},
}}

func init() {
	// A compiler's time is spread over many functions: stacks 100..119.
	for k := 0; k < 20; k++ {
		testStacks.m[uint64(100+k)] = &Stack{Kind: "user", Frames: []string{fmt.Sprintf("compile_pass_%d", k), "main"}, Modules: []string{"/bin/cc", "/bin/cc"}}
	}
}

// add appends groups to the window, one per interval from first to last,
// and sums them into Procs.
func add(w *Window, first, last int, g Group) {
	for i := first; i <= last; i++ {
		g.Interval = i
		if g.FirstNs == 0 && g.LastNs == 0 {
			g.FirstNs, g.LastNs = w.Intervals[i].StartNs, w.Intervals[i].EndNs-1
		}
		w.Groups = append(w.Groups, g)
		g.FirstNs, g.LastNs = 0, 0
	}
	w.nameByLatest()
	w.sumProcs()
	w.profiles = nil
}

func run(t *testing.T, f Filter, w *Window) []Finding {
	t.Helper()
	got, skipped := Evaluate(w, []Filter{f})
	if len(skipped) > 0 {
		t.Fatalf("%s skipped: %+v", f.Name(), skipped)
	}
	return got
}

func filterNamed(t *testing.T, name string) Filter {
	for _, f := range append(Rules(DefaultLevels), Detectors(DefaultLevels)...) {
		if f.Name() == name {
			return f
		}
	}
	t.Fatalf("no rule %s", name)
	return nil
}

// TestRulesOnConstructedSeries: each rule and detector on a window built to
// show it next to look-alikes that are normal, with the severity on the
// scale doc.go describes and the culprit it names.
func TestRulesOnConstructedSeries(t *testing.T) {
	cases := []struct {
		rule     string
		n        int
		build    func(w *Window)
		want     []string // subject@first-last
		summary  string
		severity float64 // of the first finding, within 0.02
		function string  // the first finding's culprit function
		rest     float64 // the others' severity is under it, when given
	}{
		{"rule1-busy-loop", 8, func(w *Window) {
			w.Vitals["cpu"].Weight[2] = 1.8e6 // 90% of 2 CPUs, no L2 misses
			w.Vitals["cpu"].Weight[3] = 1.8e6
			w.Vitals["l2"].Weight[3] = 1e6 // 555 misses per CPU-ms: memory traffic, not a busy loop
		}, []string{"cpu@2-2"}, "busy loop", 0.9, "", 0},
		{"rule2-leak", 8, func(w *Window) {
			for i := 1; i <= 6; i++ { // 100 pages net per interval from 1 to 6
				w.Vitals["kmem"].Weight[i], w.Vitals["kmem"].Secondary[i] = 150, 50
				w.FreeKB[i] = float64(10000 - 400*i)
			}
			w.Procs = append(w.Procs, proc(3, "kmem", 7, 150, 150))
		}, []string{"kmem@1-6"}, "free memory fell from 9600 to 7600 KiB", 0, "", 0},
		{"rule3-unsatisfied-io", 8, func(w *Window) {
			w.Unsatisfied = []IORequest{{SampleRef: SampleRef{Interval: 4, Pid: 9}, Dev: "8:0", Op: "read", Sector: 64, Requested: 4096, Completed: 512, Error: 10}}
		}, []string{"dev 8:0@4-4"}, "completed 512 bytes", 1, "", 0},
		{"rule4-kernel-bottleneck", 8, func(w *Window) {
			w.Vitals["cpu"].Weight[5], w.KernelCPU[5], w.Vitals["sched"].Weight[5] = 1.9e6, 0.8, 0.5e6
			w.Vitals["cpu"].Weight[6], w.KernelCPU[6], w.Vitals["sched"].Weight[6] = 1.9e6, 0.2, 0.5e6 // user-space busy
		}, []string{"kernel@5-5"}, "kernel bottleneck", 0.76, "", 0},
		{"rule5-blocking", 8, func(w *Window) {
			// Waits for the disk 90% of the time: reported, in the
			// function of its own code above the C library.
			add(w, 2, 3, Group{Vital: "blck", Pid: 11, Comm: "writer", Exe: "/bin/writer", KStack: stackDiskWait, UStack: stackWriter, Weight: 0.9e6, Events: 100, Samples: 5, Threads: 1})
			add(w, 2, 3, Group{Vital: "blio", Pid: 11, Comm: "writer", Exe: "/bin/writer", UStack: stackWriter, Weight: 4 << 20, Events: 100, Samples: 5, Threads: 1})
			// On a pipe: waiting for work, normal.
			add(w, 2, 2, Group{Vital: "blck", Pid: 12, Comm: "sh", Exe: "/bin/sh", KStack: stackPipeWait, Weight: 0.95e6, Events: 50, Samples: 5, Threads: 1})
			// A Go runtime's parked threads: 30 s/s in futex waits.
			add(w, 2, 2, Group{Vital: "blck", Pid: 14, Comm: "go", Exe: "/bin/go", KStack: stackFutex, UStack: stackGoPark, Weight: 30e6, Events: 300, Samples: 9, Threads: 30})
			// Threads waiting for a mutex: 2.5 s/s over 4 threads.
			add(w, 3, 3, Group{Vital: "blck", Pid: 15, Comm: "locker", Exe: "/bin/locker", KStack: stackFutex, UStack: stackMutex, Weight: 2.5e6, Events: 300, Samples: 9, Threads: 4})
			// A kernel thread waiting for the disk on others' behalf.
			add(w, 2, 3, Group{Vital: "blck", Pid: 16, Comm: "jbd2/vda", Exe: "[kernel]", KStack: stackDiskWait, Weight: 0.9e6, Events: 10, Samples: 3, Threads: 1})
			// Barely blocked.
			add(w, 2, 2, Group{Vital: "blck", Pid: 13, Comm: "dd", Exe: "/bin/dd", KStack: stackDiskWait, Weight: 0.05e6, Events: 10, Samples: 3, Threads: 1})
		}, []string{"pid 11 (writer) disk@2-3", "pid 15 (locker) lock@3-3"}, "waits for the disk in write_blocks 90% of the time", 0.9, "write_blocks", 0},
		{"rule5-blocking", 8, func(w *Window) {
			// Its sleeps sampled with their site alone (the stack the
			// recorder kept was taken elsewhere), its system calls with
			// the whole stack: named from those.
			add(w, 2, 3, Group{Vital: "blck", Pid: 11, Comm: "writer", Exe: "/bin/writer", KStack: stackDiskWait, UStack: stackPwrite, Weight: 0.9e6, Events: 100, Samples: 5, Threads: 1})
			add(w, 2, 3, Group{Vital: "syscall", Pid: 11, Comm: "writer", Exe: "/bin/writer", UStack: stackWriter, Syscall: -1, Weight: 0.3e6, Events: 10, Samples: 2, Threads: 1})
		}, []string{"pid 11 (writer) disk@2-3"}, "waits for the disk in write_blocks", 0.9, "write_blocks", 0},
		{"rule6-swapping", 8, func(w *Window) {
			add(w, 1, 1, Group{Vital: "umem", Pid: 20, Comm: "pager", Exe: "/bin/pager", Weight: 5000, Events: 5000, Samples: 9, Threads: 1})
			add(w, 1, 1, Group{Vital: "blck", Pid: 20, Comm: "pager", Exe: "/bin/pager", KStack: stackDiskWait, Weight: 0.7e6, Events: 10, Samples: 9, Threads: 1})
			add(w, 1, 1, Group{Vital: "blio", Pid: 20, Comm: "pager", Exe: "/bin/pager", Weight: 8 << 20, Events: 10, Samples: 9, Threads: 1})
			// Faults without blocking: plenty of memory.
			add(w, 2, 2, Group{Vital: "umem", Pid: 21, Comm: "toucher", Exe: "/bin/toucher", Weight: 5000, Events: 5000, Samples: 9, Threads: 1})
		}, []string{"pid 20 (pager)@1-1"}, "swapping", 0.7, "", 0},
		{"rule7-held", 8, func(w *Window) {
			// Wakes to do a little and waits 0.4 s/s for a CPU behind a
			// spinner: held; the spinner is the culprit.
			add(w, 1, 1, Group{Vital: "sched", Pid: 30, Comm: "ticker", Exe: "/bin/ticker", Weight: 0.4e6, Events: 1000, Samples: 9, Threads: 1})
			add(w, 1, 1, Group{Vital: "cpu", Pid: 30, Comm: "ticker", Exe: "/bin/ticker", Weight: 0.01e6, Events: 1, Samples: 1})
			add(w, 1, 1, Group{Vital: "cpu", Pid: 32, Comm: "spinner", Exe: "/bin/spinner", UStack: stackSpin, Weight: 1.9e6, Events: 190, Samples: 9})
			// Preempted while running, as much: fair sharing, normal.
			add(w, 1, 1, Group{Vital: "sched", Pid: 31, Comm: "cruncher", Exe: "/bin/cruncher", Preempted: true, Weight: 0.4e6, Events: 100, Samples: 9, Threads: 1})
			add(w, 1, 1, Group{Vital: "cpu", Pid: 31, Comm: "cruncher", Exe: "/bin/cruncher", Weight: 0.05e6, Events: 5, Samples: 9})
		}, []string{"pid 30 (ticker)@1-1"}, "waited 0.40 s/s for a CPU after waking, 98% of the time it wanted one while pid 32 (spinner) used 1.90 CPUs in spin_in_culprit", 0.4, "spin_in_culprit", 0},
		{"rule8-syscall-loop", 8, func(w *Window) {
			add(w, 3, 3, Group{Vital: "syscall", Pid: 40, Comm: "looper", Exe: "/bin/looper", Syscall: 0, Weight: 1e5, Events: 50000, Samples: 9})
			add(w, 3, 3, Group{Vital: "cpu", Pid: 40, Comm: "looper", Exe: "/bin/looper", Weight: 1e6, Events: 100, Samples: 9})
			add(w, 3, 3, Group{Vital: "syscall", Pid: 41, Comm: "worker", Exe: "/bin/worker", Syscall: 0, Weight: 1e5, Events: 50000, Samples: 9})
			add(w, 3, 3, Group{Vital: "kmem", Pid: 41, Comm: "worker", Exe: "/bin/worker", KStack: stackSock, Weight: 5000, Events: 5000, Samples: 9}) // allocates: real work
		}, []string{"pid 40 (looper)@3-3"}, "busy loop around a system call", 0.5, "", 0},
		{"rule10-died", 8, func(w *Window) {
			for _, pid := range []uint32{50, 51, 52, 53} {
				add(w, 0, 3, Group{Vital: "cpu", Pid: pid, Comm: "worker", Exe: "/bin/worker", UStack: stackSpin, Weight: 1e3, Events: 1, Samples: 1})
			}
			w.Signals = []SignalEvent{
				{SampleRef: SampleRef{Interval: 4, Pid: 1}, Comm: "killer", Signal: 9, TargetPid: 50},
				{SampleRef: SampleRef{Interval: 3, Pid: 51}, Comm: "worker", Signal: 11, TargetPid: 51}}
			w.Exits = []SampleRef{{Interval: 3, Pid: 52}} // exited: normal; 53 went quiet: idle
		}, []string{"pid 51 (worker)@3-3", "pid 50 (worker)@4-4"}, "SIGSEGV from pid 51 (worker): crashed", 1, "spin_in_culprit", 0},
		{"busy-loop", 8, func(w *Window) {
			add(w, 2, 3, Group{Vital: "cpu", Pid: 60, Comm: "spinner", Exe: "/bin/spinner", UStack: stackSpin, Weight: 0.9e6, Events: 90, Samples: 9})
			add(w, 2, 3, Group{Vital: "sched", Pid: 60, Comm: "spinner", Exe: "/bin/spinner", UStack: stackSpin, Preempted: true, Weight: 0.1e6, Events: 90, Samples: 9, Threads: 1})
			add(w, 2, 3, Group{Vital: "syscall", Pid: 60, Comm: "spinner", Exe: "/bin/spinner", Syscall: 228, Weight: 10, Events: 10, Samples: 2})
			// Its first page faults, before it exec'd, under its parent's
			// name (groups come in no order).
			add(w, 2, 2, Group{Vital: "umem", Pid: 60, Comm: "launcher", Exe: "/bin/launcher", FirstNs: 2e9, LastNs: 2e9 + 1000, Weight: 10, Events: 10, Samples: 1})
			// A compiler as busy, over twenty functions: work, not a loop.
			for k := 0; k < 20; k++ {
				add(w, 2, 3, Group{Vital: "cpu", Pid: 61, Comm: "cc", Exe: "/bin/cc", UStack: uint64(100 + k), Weight: 0.05e6, Events: 5, Samples: 2})
			}
			// Spinning as tightly, but reading a socket: progress.
			add(w, 2, 2, Group{Vital: "cpu", Pid: 62, Comm: "reader", Exe: "/bin/spinner", UStack: stackSpin, Weight: 0.9e6, Events: 90, Samples: 9})
			add(w, 2, 2, Group{Vital: "sock", Pid: 62, Comm: "reader", Exe: "/bin/spinner", Weight: 50 << 20, Events: 9000, Samples: 9})
		}, []string{"pid 60 (spinner)@2-3"}, "spins in spin_in_culprit", 0.5, "spin_in_culprit", 0},
		{"busy-loop", 8, func(w *Window) {
			// On a machine busy with others the loop gets a fifth of the
			// CPU it demands: it waits to run the rest of the time.
			add(w, 2, 3, Group{Vital: "cpu", Pid: 60, Comm: "spinner", Exe: "/bin/spinner", UStack: stackSpin, Weight: 0.2e6, Events: 20, Samples: 9})
			add(w, 2, 3, Group{Vital: "sched", Pid: 60, Comm: "spinner", Exe: "/bin/spinner", UStack: stackSpin, Preempted: true, Weight: 0.6e6, Events: 90, Samples: 9, Threads: 1})
			// Waiting as long to run, but getting almost none: too little
			// of its time seen to judge how it spends it.
			add(w, 2, 3, Group{Vital: "cpu", Pid: 64, Comm: "starved", Exe: "/bin/spinner", UStack: stackSpin, Weight: 0.03e6, Events: 3, Samples: 3})
			add(w, 2, 3, Group{Vital: "sched", Pid: 64, Comm: "starved", Exe: "/bin/spinner", UStack: stackSpin, Preempted: true, Weight: 0.6e6, Events: 90, Samples: 9, Threads: 1})
		}, []string{"pid 60 (spinner)@2-3"}, "spins in spin_in_culprit", 0.4, "spin_in_culprit", 0},
		{"failing-syscall", 40, func(w *Window) {
			// connect refused 5000 times a second for 20 s, between
			// sleeps: half its calls.
			add(w, 5, 24, Group{Vital: "syscall", Pid: 70, Comm: "retrier", Exe: "/bin/retrier", UStack: stackRetry, Syscall: 42, Failed: true, Errno: 111, Weight: 5e4, Events: 5000, Samples: 9})
			add(w, 5, 24, Group{Vital: "syscall", Pid: 70, Comm: "retrier", Exe: "/bin/retrier", Syscall: 35, Weight: 3e5, Events: 5000, Samples: 9})
			add(w, 5, 24, Group{Vital: "cpu", Pid: 70, Comm: "retrier", Exe: "/bin/retrier", InKernel: true, Weight: 0.3e6, Events: 30, Samples: 9})
			// A compiler probing paths: as many failures, for 2 s, with
			// its work in user space.
			add(w, 10, 11, Group{Vital: "syscall", Pid: 71, Comm: "cc", Exe: "/bin/cc", Syscall: 89, Failed: true, Errno: 22, Weight: 1e3, Events: 900, Samples: 9})
			add(w, 10, 11, Group{Vital: "cpu", Pid: 71, Comm: "cc", Exe: "/bin/cc", UStack: 100, Weight: 0.9e6, Events: 90, Samples: 9})
			// Timed waits that time out: not failures.
			add(w, 5, 24, Group{Vital: "syscall", Pid: 72, Comm: "pool", Exe: "/bin/pool", Syscall: 202, Failed: true, Errno: 110, Weight: 1e6, Events: 300, Samples: 9})
			// A server failing a stat at each of its requests, whose
			// other calls, each light, kept no sample under the storage
			// cap: all its calls seen fail, but it hardly retries. Found,
			// far below the loop.
			add(w, 5, 24, Group{Vital: "syscall", Pid: 74, Comm: "server", Exe: "/bin/server", Syscall: 262, Failed: true, Errno: 2, Weight: 110, Events: 110, Samples: 9})
		}, []string{"pid 70 (retrier)@5-24", "pid 74 (server)@5-24"}, "retries connect in retry_forever that fails with ECONNREFUSED: 5000 failed calls/s for 20 s", 0.85, "retry_forever", 0.05},
		{"failing-syscall", 40, func(w *Window) {
			// Its failing calls' stacks lost their caller, and more of
			// its user-space time is in the wrapper than in its own
			// code: named from its own code.
			add(w, 5, 24, Group{Vital: "syscall", Pid: 73, Comm: "prober", Exe: "/bin/prober", UStack: stackOpen, Syscall: 2, Failed: true, Errno: 2, Weight: 5e4, Events: 5000, Samples: 9})
			add(w, 5, 24, Group{Vital: "cpu", Pid: 73, Comm: "prober", Exe: "/bin/prober", UStack: stackOpen, InKernel: true, Weight: 0.4e6, Events: 40, Samples: 9})
			add(w, 5, 24, Group{Vital: "cpu", Pid: 73, Comm: "prober", Exe: "/bin/prober", UStack: stackOpen, Weight: 0.1e6, Events: 10, Samples: 9})
			add(w, 5, 24, Group{Vital: "cpu", Pid: 73, Comm: "prober", Exe: "/bin/prober", UStack: stackPause, Weight: 0.05e6, Events: 5, Samples: 9})
		}, []string{"pid 73 (prober)@5-24"}, "retries open in probe_until_found that fails with ENOENT", 0.85, "probe_until_found", 0},
		{"memory-leak", 100, func(w *Window) {
			for i := 0; i < 100; i++ {
				w.FreeKB[i] = 8 << 20 // 8 GiB free
			}
			// 10 MiB/s of user memory for 40 s while the machine grows.
			for i := 10; i < 50; i++ {
				w.Vitals["kmem"].Weight[i], w.Vitals["kmem"].Secondary[i] = 3000, 400
			}
			add(w, 10, 49, Group{Vital: "kmem", Pid: 80, Comm: "leaker", Exe: "/bin/leaker", KStack: stackFault, UStack: stackSpin, Weight: 2560, Events: 2560, Samples: 9})
			// Allocating and freeing as fast, for as long, later: the
			// machine does not grow.
			add(w, 55, 94, Group{Vital: "kmem", Pid: 81, Comm: "churner", Exe: "/bin/churner", KStack: stackFault, Weight: 2560, Events: 2560, Samples: 9})
			for i := 55; i < 95; i++ {
				w.Vitals["kmem"].Weight[i], w.Vitals["kmem"].Secondary[i] = 2600, 2600
			}
			// Page cache grows as fast alongside the leak: the kernel
			// takes it back when it must.
			add(w, 10, 49, Group{Vital: "kmem", Pid: 82, Comm: "writer", Exe: "/bin/writer", KStack: stackCacheFill, Weight: 2560, Events: 2560, Samples: 9})
			// A compiler growing its heap for 10 s, then gone.
			add(w, 20, 29, Group{Vital: "kmem", Pid: 83, Comm: "cc", Exe: "/bin/cc", KStack: stackFault, Weight: 2560, Events: 2560, Samples: 9})
		}, []string{"pid 80 (leaker)@10-49"}, "keeps allocating user memory in spin_in_culprit: 10.0 MiB/s for 40 s", 1, "spin_in_culprit", 0},
		{"memory-leak", 100, func(w *Window) {
			// Socket buffers leaking at 5 MiB/s for 40 s, freed when the
			// leaker exits at the end: the kernel memory in use, read at
			// each interval's start and end, grows with them, give or take
			// 2 MiB of other work's. That work swings the machine's net
			// allocation by 10 000 pages/s an interval, to a net fall over
			// the leak.
			add(w, 10, 49, Group{Vital: "kmem", Pid: 84, Comm: "hoarder", Exe: "/bin/hoarder", KStack: stackSock, UStack: stackSpin, Weight: 1280, Events: 1280, Samples: 9})
			kernel := func(t int) float64 {
				if t >= 50 {
					return 1 << 20
				}
				return 1<<20 + float64(5120*max(t-10, 0))
			}
			for i := 0; i < 100; i++ {
				w.FreeKB[i] = 64 << 20 // 64 GiB free
				noise := float64(2048 * (i % 2))
				w.KernelFirstKB[i], w.KernelLastKB[i] = kernel(i)+noise, kernel(i+1)+noise
				w.Vitals["kmem"].Weight[i], w.Vitals["kmem"].Secondary[i] = 20000, float64(20500-10000*(1-2*(i%2)))
			}
			// Later, page cache filling at 10 MiB/s (the machine's net
			// allocation grows as much) beside a process moving 5 MiB/s
			// through pipes, freed as fast: the kernel memory in use stays.
			for i := 55; i < 95; i++ {
				w.Vitals["kmem"].Secondary[i] = 20000 - 2560
			}
			add(w, 55, 94, Group{Vital: "kmem", Pid: 85, Comm: "writer", Exe: "/bin/writer", KStack: stackCacheFill, Weight: 2560, Events: 2560, Samples: 9})
			add(w, 55, 94, Group{Vital: "kmem", Pid: 86, Comm: "piper", Exe: "/bin/piper", KStack: stackSock, Weight: 1280, Events: 1280, Samples: 9})
		}, []string{"pid 84 (hoarder)@10-49"}, "keeps allocating kernel memory in spin_in_culprit: 4.9 MiB/s for 40 s while the machine's kernel memory in use grew 195 MiB", 0.27, "spin_in_culprit", 0},
		{"signal-storm", 8, func(w *Window) {
			add(w, 2, 2, Group{Vital: "signal", Pid: 90, Comm: "stormer", Exe: "/bin/stormer", UStack: stackSender, Target: 91, Weight: 50000, Events: 50000, Samples: 9})
			add(w, 2, 2, Group{Vital: "cpu", Pid: 90, Comm: "stormer", Exe: "/bin/stormer", UStack: stackSender, Weight: 0.5e6, Events: 50, Samples: 9})
			add(w, 2, 2, Group{Vital: "cpu", Pid: 91, Comm: "stormer", Exe: "/bin/stormer", Weight: 0.3e6, Events: 30, Samples: 9})
			// A runtime preempting its own threads, as often.
			add(w, 2, 2, Group{Vital: "signal", Pid: 92, Comm: "go", Exe: "/bin/go", Target: 92, Weight: 50000, Events: 50000, Samples: 9})
		}, []string{"pid 90 (stormer)@2-2"}, "sends 50000 signals/s from send_signals to pid 91", 0.4, "send_signals", 0},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			w := window(c.n)
			c.build(w)
			got := run(t, filterNamed(t, c.rule), w)
			var subjects []string
			for _, f := range got {
				subjects = append(subjects, fmt.Sprintf("%s@%d-%d", f.Subject, f.First, f.Last))
			}
			if strings.Join(subjects, ",") != strings.Join(c.want, ",") {
				t.Fatalf("findings %v, want %v: %+v", subjects, c.want, got)
			}
			f := got[0]
			if !strings.Contains(f.Summary, c.summary) {
				t.Errorf("summary %q lacks %q", f.Summary, c.summary)
			}
			if f.StartNs != int64(f.First)*1e9 || f.EndNs != int64(f.Last+1)*1e9 {
				t.Errorf("time range %d-%d for intervals %d-%d", f.StartNs, f.EndNs, f.First, f.Last)
			}
			if math.Abs(f.Severity-c.severity) > 0.02 || f.Resource == "" {
				t.Errorf("severity %.3f (resource %q), want %.2f", f.Severity, f.Resource, c.severity)
			}
			if c := f.Culprit; c != nil && strings.HasPrefix(f.Subject, fmt.Sprintf("pid %d ", c.Pid)) &&
				!strings.HasPrefix(f.Subject, fmt.Sprintf("pid %d (%s)", c.Pid, c.Comm)) {
				t.Errorf("culprit %+v is not the subject %q", f.Culprit, f.Subject)
			}
			if c.function != "" && (f.Culprit == nil || f.Culprit.Function != c.function) {
				t.Errorf("culprit %+v, want function %s", f.Culprit, c.function)
			}
			for _, o := range got[1:] {
				if c.rest > 0 && o.Severity >= c.rest {
					t.Errorf("%s: severity %.3f, want under %.2f", o.Subject, o.Severity, c.rest)
				}
			}
		})
	}
}

// TestKernelLeakAcrossUnsampledIntervals: on a host whose storage budget
// keeps few samples, a leaker's kmem samples miss some intervals; its run
// goes on over gaps of up to LeakGap intervals where the kernel memory in
// use is read, not over longer ones, nor without that reading.
func TestKernelLeakAcrossUnsampledIntervals(t *testing.T) {
	w := window(60)
	for i := range w.Intervals {
		w.FreeKB[i] = 64 << 20
		// 5 MiB/s from 10 to 50, by both measures.
		w.KernelFirstKB[i], w.KernelLastKB[i] = float64(1<<20+5120*min(max(i-10, 0), 40)), float64(1<<20+5120*min(max(i-9, 0), 40))
		if i >= 10 && i < 50 {
			w.Vitals["kmem"].Weight[i], w.Vitals["kmem"].Secondary[i] = 3000, 3000-1280
		}
	}
	for _, span := range [][2]int{{10, 14}, {17, 29}, {32, 49}} { // gaps of 2
		add(w, span[0], span[1], Group{Vital: "kmem", Pid: 84, Comm: "hoarder", Exe: "/bin/hoarder", KStack: stackSock, UStack: stackSpin, Weight: 1280, Events: 1280, Samples: 1})
	}
	for i := 10; i < 50; i += 4 { // gaps of 3
		add(w, i, i, Group{Vital: "kmem", Pid: 85, Comm: "sparse", Exe: "/bin/sparse", KStack: stackSock, Weight: 1280, Events: 1280, Samples: 1})
	}
	got := run(t, filterNamed(t, "memory-leak"), w)
	if len(got) != 1 || got[0].Subject != "pid 84 (hoarder)" || got[0].First != 10 || got[0].Last != 49 {
		t.Fatalf("findings %+v, want pid 84 over intervals 10-49", got)
	}
	// A store without the reading: the runs stop at the gaps.
	w.KernelFirstKB, w.KernelLastKB, w.profiles = nans(60), nans(60), nil
	if got := run(t, filterNamed(t, "memory-leak"), w); len(got) != 0 {
		t.Fatalf("without the kernel memory in use, runs went on over unsampled intervals: %+v", got)
	}
}

// TestMonitorIsNotASubject: holter's own processes are left out of the
// findings unless asked for.
func TestMonitorIsNotASubject(t *testing.T) {
	w := window(4)
	add(w, 1, 2, Group{Vital: "cpu", Pid: 5, Comm: "holter", Exe: "/usr/bin/holter", UStack: stackSpin, Weight: 0.9e6, Events: 90, Samples: 9})
	if got := run(t, filterNamed(t, "busy-loop"), w); len(got) != 0 {
		t.Fatalf("the monitor is a subject: %+v", got)
	}
	w.IncludeSelf, w.profiles = true, nil
	if got := run(t, filterNamed(t, "busy-loop"), w); len(got) != 1 {
		t.Fatalf("asked for, the monitor is not a subject: %+v", got)
	}
}

func TestRule9LoadButNotInitialisation(t *testing.T) {
	w := window(3)
	w.Vitals["cpu"].Weight[0], w.Vitals["cpu"].Weight[1] = 1e6, 1e6
	w.Vitals["l2"].Weight[1] = 1e6 // 1000 misses per CPU-ms
	w.Procs = append(w.Procs, proc(0, "umem", 60, 5000, 5000), proc(1, "umem", 60, 5000, 5000))
	got := run(t, filterNamed(t, "rule9-init-or-load"), w)
	// Initialising (interval 0, few misses) is normal: not a finding.
	if len(got) != 1 || got[0].First != 1 || !strings.Contains(got[0].Summary, "increasing load") || got[0].Severity != 0 {
		t.Fatalf("%+v", got)
	}
}

func TestUnavailableVitalsAreReported(t *testing.T) {
	w := window(4)
	delete(w.Vitals, "l2")
	w.Unavailable["l2"] = "unsupported: no hardware PMU"
	_, skipped := Evaluate(w, DefaultFilters(nil))
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
	got := run(t, Threshold{Label: "signal-rate", Measure: EventRate("signal"), Above: &storm}, w)
	if len(got) != 1 || got[0].First != 7 || got[0].Evidence[0].Value != 500 {
		t.Fatalf("storm %+v", got)
	}
	got = run(t, EWMAFilter{Measure: WeightRate("blio")}, w)
	if len(got) != 1 || got[0].First != 8 || got[0].Processes[0].Pid != 70 || got[0].Subject != "blio" {
		t.Fatalf("ewma %+v", got)
	}
	if math.IsInf(got[0].Score, 0) || !strings.Contains(got[0].Summary, "rose to 5e+07") || got[0].Severity != 0 || got[0].Resource != ResourceDisk {
		t.Fatalf("ewma %+v", got[0])
	}
	// Reported only from ReportFrom on.
	w.ReportFrom = 9
	if got := run(t, EWMAFilter{Measure: WeightRate("blio")}, w); len(got) != 0 {
		t.Fatalf("reported before ReportFrom: %+v", got)
	}
}

// TestEWMAOnAFlatZeroBaseline: a vital at zero since the start (variance
// 0) and a blip on it. Without a floor on σ the blip was infinitely many
// deviations away; with the measure's floor a small blip is noise and a
// large rise a finite number of σ.
func TestEWMAOnAFlatZeroBaseline(t *testing.T) {
	w := window(10)
	w.Vitals["kmem"].Weight[8], w.Vitals["kmem"].Events[8] = 18, 18 // 18 pages/s
	if got := run(t, EWMAFilter{Measure: WeightRate("kmem")}, w); len(got) != 0 {
		t.Fatalf("a blip of 18 pages/s on a flat zero is a finding: %+v", got)
	}
	w.Vitals["kmem"].Weight[8], w.Vitals["kmem"].Events[8] = 1e5, 1e5
	got := run(t, EWMAFilter{Measure: WeightRate("kmem")}, w)
	if len(got) != 1 || math.IsInf(got[0].Score, 0) || got[0].Score > 1e3 || strings.Contains(got[0].Summary, "Inf") {
		t.Fatalf("a rise on a flat zero: %+v", got)
	}
}

// TestWaitsForWork: the recorder's cap asks, from a blck sample's kernel
// stack alone, whether it waited for work: a sleep, a poll, a child or a
// kernel worker's queue do; a socket, the disk, and a futex (a lock or a
// parked worker: only the user stack tells) do not.
func TestWaitsForWork(t *testing.T) {
	for _, c := range []struct {
		frames []string
		want   bool
	}{
		{[]string{"schedule", "do_nanosleep", "hrtimer_nanosleep", "__x64_sys_clock_nanosleep"}, true},
		{[]string{"schedule", "schedule_hrtimeout_range", "do_sys_poll", "__x64_sys_poll"}, true},
		{[]string{"schedule", "do_wait", "kernel_wait4"}, true},
		{[]string{"schedule", "worker_thread", "kthread", "ret_from_fork_asm"}, true},
		{[]string{"wait_woken", "sk_wait_data", "tcp_recvmsg_locked", "tcp_recvmsg"}, false},
		{[]string{"io_schedule", "folio_wait_bit_common", "filemap_read"}, false},
		{[]string{"schedule", "futex_wait_queue", "__futex_wait", "futex_wait"}, false},
		{nil, false},
	} {
		var st *Stack
		if c.frames != nil {
			st = &Stack{Frames: c.frames}
		}
		if got := WaitsForWork(st); got != c.want {
			t.Errorf("WaitsForWork(%v) = %v, want %v", c.frames, got, c.want)
		}
	}
	// By system call: epoll_wait, clock_nanosleep and wait4 wait for work;
	// read, connect, futex and fdatasync do not.
	for nr, want := range map[int]bool{232: true, 230: true, 61: true, 0: false, 42: false, 202: false, 75: false} {
		if got := CallWaitsForWork(nr); got != want {
			t.Errorf("CallWaitsForWork(%s) = %v, want %v", sysname.Syscall(int64(nr)), got, want)
		}
	}
}
