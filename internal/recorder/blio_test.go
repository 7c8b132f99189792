package recorder

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestBlockRequestCompletingAfterItsEpochIsKept: a block request's sample
// belongs to the epoch it was submitted in and is sent when it completes;
// one that completes after that epoch closed, within lateGrace, is still
// stored in it. The request is a direct write to a loop device whose
// backing file is on a frozen file system: it completes when the test
// thaws it, after the epoch's end. Before lateGrace such samples were
// dropped as late (a busy disk lost one rare write in 200 that way).
func TestBlockRequestCompletingAfterItsEpochIsKept(t *testing.T) {
	testutil.RequireRoot(t)
	lp := frozenLoop(t)
	dev, devName, mnt := lp.dev, lp.name, lp.mnt
	run := runTool(t)

	const epoch = 4 * time.Second // lateGrace 2 s
	var mu sync.Mutex
	var epochs []*store.Epoch
	closed := make(chan int64, 16)
	_, stop := startRecorder(t, Config{Epoch: epoch, Budget: -1, Vitals: []Vital{Blio}}, func(e *store.Epoch) error {
		mu.Lock()
		epochs = append(epochs, e)
		mu.Unlock()
		closed <- e.EndNs
		return nil
	})
	// Each write is submitted 0.8 s before an epoch ends and completes
	// 0.7 s after (the file system frozen for 1.5 s): late by less than
	// lateGrace. An epoch reaches the sink lateGrace after it ended, so
	// the next ends epoch-lateGrace later.
	type write struct {
		pid       int
		submitted time.Time
	}
	var writes []write
	for len(writes) < 2 {
		var end int64
		select {
		case end = <-closed:
		case <-time.After(4 * epoch):
			t.Fatal("no epoch committed in 16 s")
		}
		at := time.Unix(0, end).Add(epoch - 800*time.Millisecond)
		if time.Until(at) < 200*time.Millisecond {
			continue // a loaded machine: wait for the next
		}
		time.Sleep(time.Until(at))
		run("fsfreeze", "-f", mnt)
		dd := exec.Command("dd", "if=/dev/zero", "of="+dev, "bs=4096", "count=1", "oflag=direct", "status=none")
		submitted := time.Now()
		if err := dd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		run("fsfreeze", "-u", mnt)
		if err := dd.Wait(); err != nil {
			t.Fatalf("dd to %s: %v", dev, err)
		}
		writes = append(writes, write{dd.Process.Pid, submitted})
	}
	time.Sleep(epoch) // the last write's epoch through its grace
	stop()

	mu.Lock()
	defer mu.Unlock()
	late := 0
	for _, w := range writes {
		var in *store.Epoch
		for _, e := range epochs {
			if w.submitted.UnixNano() >= e.StartNs && w.submitted.UnixNano() < e.EndNs {
				in = e
			}
		}
		if in == nil {
			t.Fatalf("write of process %d at %v: in no epoch recorded", w.pid, w.submitted)
		}
		var found *store.Sample
		for _, e := range epochs {
			for i, s := range e.Samples {
				if s.Vital == "blio" && s.Pid == uint32(w.pid) && s.Fields["dev"] == devName {
					if e != in {
						t.Errorf("write of process %d submitted in epoch %d stored in epoch %d", w.pid, in.Epoch, e.Epoch)
					}
					found = &e.Samples[i]
				}
			}
		}
		if found == nil {
			t.Errorf("write of process %d, submitted %v before its epoch %d ended: no sample", w.pid,
				time.Duration(in.EndNs-w.submitted.UnixNano()), in.Epoch)
			continue
		}
		lat := time.Duration(found.Fields["latency_ns"].(int64))
		t.Logf("write of process %d: submitted %v before epoch %d ended, completed %v after", w.pid,
			time.Duration(in.EndNs-w.submitted.UnixNano()), in.Epoch, w.submitted.Add(lat).Sub(time.Unix(0, in.EndNs)))
		if w.submitted.Add(lat).UnixNano() > in.EndNs {
			late++
		}
	}
	if late == 0 {
		t.Errorf("no write completed after its epoch ended: the test did not test it")
	}
}

// TestMergedBioIsChargedToItsSubmitter: a bio merged into a request
// already queued, another process's, makes no request of its own; it is
// still an event of its submitter's, sampled (a rare writer's write that
// joined a busy writer's adjacent request had no sample before). The loop
// device's file system is frozen, so that its requests stay queued: the
// test process fills the driver's queue (its own I/O, which the recorder
// leaves out) with writes to every other block, and ten copies of dd,
// each a label of its own, write into the gaps.
func TestMergedBioIsChargedToItsSubmitter(t *testing.T) {
	testutil.RequireRoot(t)
	lp := frozenLoop(t)
	run := runTool(t)
	sched := filepath.Join("/sys/block", filepath.Base(lp.dev), "queue/scheduler")
	if err := os.WriteFile(sched, []byte("mq-deadline"), 0); err != nil {
		t.Fatalf("mq-deadline on %s: %v", lp.dev, err)
	}
	dir := t.TempDir()
	dd, err := exec.LookPath("dd")
	if err != nil {
		t.Fatal(err)
	}
	const copies = 10
	var mu sync.Mutex
	var samples []store.Sample
	startRecorder(t, Config{Epoch: 2 * time.Second, Budget: -1, Vitals: []Vital{Blio}}, func(e *store.Epoch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range e.Samples {
			if s.Vital == "blio" && s.Fields["dev"] == lp.name {
				samples = append(samples, s)
			}
		}
		return nil
	})
	f, err := os.OpenFile(lp.dev, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	for k := range copies {
		run("cp", dd, filepath.Join(dir, fmt.Sprintf("dd-%d", k))) // an inode of its own: a label of its own
	}
	// sampleOf is the last blio sample of process pid, nil while none.
	sampleOf := func(pid int) *store.Sample {
		mu.Lock()
		defer mu.Unlock()
		var found *store.Sample
		for i := range samples {
			if samples[i].Pid == uint32(pid) {
				found = &samples[i]
			}
		}
		return found
	}
	// On a loaded machine the queue may not form in time (every write
	// then has a request of its own): the freeze and fill is tried again
	// until some write merged.
	const attempts = 4
	for attempt := 1; attempt <= attempts; attempt++ {
		dds := mergeWrites(t, lp, f, buf, dir, copies, int64(attempt-1)*4096)
		waitFor(t, func() bool {
			for _, c := range dds {
				if sampleOf(c.Process.Pid) == nil {
					return false
				}
			}
			return true
		}, "a blio sample of every dd process")
		merged := 0
		for _, c := range dds {
			s := sampleOf(c.Process.Pid)
			if s.Fields["latency_ns"] == nil {
				merged++
			}
			t.Logf("attempt %d: %s (process %d): %v", attempt, filepath.Base(c.Path), c.Process.Pid, s.Fields)
		}
		if merged > 0 {
			t.Logf("%d of %d writes merged into queued requests, each with its sample", merged, copies)
			return
		}
	}
	t.Fatalf("in %d attempts no write of the %d merged into a queued request: the merge path was not exercised", attempts, copies)
}

// mergeWrites freezes the file system behind lp, queues more writes to lp
// than the loop device's queue holds (through f, from offset base on), and
// has each of copies dd processes (named dd-K in dir) write a block into a
// gap between two queued writes, where it merges; once every dd waits for
// its write it thaws the file system and returns the dd processes, ended.
func mergeWrites(t *testing.T, lp loop, f *os.File, buf []byte, dir string, copies int, base int64) []*exec.Cmd {
	t.Helper()
	run := runTool(t)
	run("fsfreeze", "-f", lp.mnt)
	thawed := false
	thaw := func() {
		if !thawed {
			run("fsfreeze", "-u", lp.mnt)
			thawed = true
		}
	}
	defer thaw()
	// More writes than the loop device's queue depth (128) holds: the
	// rest wait in mq-deadline, where bios merge.
	const fillers = 300
	var fill sync.WaitGroup
	defer fill.Wait()
	for i := range fillers {
		fill.Add(1)
		go func() {
			defer fill.Done()
			f.WriteAt(buf, base+int64(2*i)*4096)
		}()
	}
	// The fillers' writes queued: their threads wait for them.
	deadline := time.Now().Add(5 * time.Second)
	for threadsWaitingForIO() < fillers*9/10 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var dds []*exec.Cmd
	for k := range copies {
		bin := filepath.Join(dir, fmt.Sprintf("dd-%d", k))
		// Into the gap after a late filler, between two of them.
		gap := base/4096 + 2*int64(fillers-2*copies+2*k) + 1
		c := exec.Command(bin, "if=/dev/zero", "of="+lp.dev, "bs=4096", "count=1", fmt.Sprintf("seek=%d", gap), "oflag=direct", "conv=notrunc", "status=none")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		dds = append(dds, c)
	}
	// Every dd's write submitted (merged, or queued) before the thaw.
	waitFor(t, func() bool {
		for _, c := range dds {
			if !waitingForIO(c.Process.Pid) {
				return false
			}
		}
		return true
	}, "the dd processes waiting for their writes")
	thaw()
	for _, c := range dds {
		if err := c.Wait(); err != nil {
			t.Fatalf("%s: %v", c.Path, err)
		}
	}
	return dds
}

// threadsWaitingForIO counts this process's threads in uninterruptible
// sleep.
func threadsWaitingForIO() int {
	tasks, _ := os.ReadDir("/proc/self/task")
	n := 0
	for _, task := range tasks {
		if b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "stat")); err == nil {
			if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'D' {
				n++
			}
		}
	}
	return n
}

// loop is a loop device whose backing file is on an ext4 file system of its
// own (itself on a loop device), which the test can freeze: a request to
// the device then completes only when the file system is thawed.
type loop struct {
	dev  string // /dev/loopN
	name string // its device number, as blio samples give it: "major:minor"
	mnt  string // where the file system that can be frozen is mounted
}

func frozenLoop(t *testing.T) loop {
	t.Helper()
	for _, tool := range []string{"losetup", "mkfs.ext4", "fsfreeze", "dd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s (util-linux, e2fsprogs, coreutils) is needed: %v", tool, err)
		}
	}
	dir := t.TempDir()
	run := runTool(t)
	outer, mnt := filepath.Join(dir, "outer.img"), filepath.Join(dir, "mnt")
	if err := os.Truncate(createFile(t, outer), 32<<20); err != nil {
		t.Fatal(err)
	}
	run("mkfs.ext4", "-q", "-F", outer)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run("mount", "-o", "loop", outer, mnt)
	t.Cleanup(func() { exec.Command("fsfreeze", "-u", mnt).Run(); exec.Command("umount", mnt).Run() })
	inner := filepath.Join(mnt, "inner.img")
	if err := os.Truncate(createFile(t, inner), 8<<20); err != nil {
		t.Fatal(err)
	}
	dev := run("losetup", "--find", "--show", inner)
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	return loop{dev: dev, name: fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)), mnt: mnt}
}

// waitingForIO reports whether process pid sleeps uninterruptibly (state
// D), as a process waiting for its direct write does.
func waitingForIO(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'D'
}

// waitFor polls cond for up to 20 s, failing t with what if it never holds.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20 s for %s", what)
		}
	}
}

// runTool runs a command for t, failing it if the command fails, and
// returns its output.
func runTool(t *testing.T) func(name string, args ...string) string {
	return func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
}

// createFile creates an empty file at path and returns path.
func createFile(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}
