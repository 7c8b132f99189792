package testutil

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
)

// Loop is a loop device whose backing file is on an ext4 file system of
// its own (itself on a loop device), which a test can freeze: a request
// to the device then completes only when the file system is thawed.
type Loop struct {
	Dev  string // /dev/loopN
	Name string // its device number as the kernel gives it: "major:minor"
	Mnt  string // where the file system that can be frozen is mounted
}

// FrozenLoop makes a Loop (8 MiB), removed when t ends.
func FrozenLoop(t testing.TB) Loop {
	t.Helper()
	RequireRoot(t)
	for _, tool := range []string{"losetup", "mkfs.ext4", "fsfreeze", "dd"} {
		RequireTool(t, tool)
	}
	dir := t.TempDir()
	run := RunTool(t)
	outer, mnt := filepath.Join(dir, "outer.img"), filepath.Join(dir, "mnt")
	if err := os.Truncate(CreateFile(t, outer), 32<<20); err != nil {
		t.Fatal(err)
	}
	run("mkfs.ext4", "-q", "-F", outer)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run("mount", "-o", "loop", outer, mnt)
	t.Cleanup(func() { exec.Command("fsfreeze", "-u", mnt).Run(); exec.Command("umount", mnt).Run() })
	inner := filepath.Join(mnt, "inner.img")
	if err := os.Truncate(CreateFile(t, inner), 8<<20); err != nil {
		t.Fatal(err)
	}
	dev := run("losetup", "--find", "--show", inner)
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	return Loop{Dev: dev, Name: fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)), Mnt: mnt}
}

// MergeWrites has copies processes, each a copy of dd of its own (dd-K in
// dir: an executable, and so a label, of its own), write one block each
// into the device where it merges into a request already queued: it
// freezes the file system behind lp, fills the loop device's driver queue
// with direct writes of its own (from byte base on), queues one more write
// for each dd behind them in mq-deadline, and has each dd write the block
// right after one of those; once every dd waits for its write it thaws
// the file system. It returns the dd processes, ended. Whether a
// write merged is the kernel's call: on a loaded machine the queue may not
// form in time, and a test tries again.
func MergeWrites(t testing.TB, lp Loop, dir string, copies int, base int64) []*exec.Cmd {
	t.Helper()
	run := RunTool(t)
	sched := filepath.Join("/sys/block", filepath.Base(lp.Dev), "queue/scheduler")
	if err := os.WriteFile(sched, []byte("mq-deadline"), 0); err != nil {
		t.Fatalf("mq-deadline on %s: %v", lp.Dev, err)
	}
	dd := RequireTool(t, "dd")
	for k := range copies {
		if bin := filepath.Join(dir, fmt.Sprintf("dd-%d", k)); !exists(bin) {
			run("cp", dd, bin)
		}
	}
	f, err := os.OpenFile(lp.Dev, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)

	run("fsfreeze", "-f", lp.Mnt)
	thawed := false
	thaw := func() {
		if !thawed {
			run("fsfreeze", "-u", lp.Mnt)
			thawed = true
		}
	}
	defer thaw()
	// First more writes than the loop device's driver queue holds (128):
	// with the file system frozen they stay in it, and the next writes
	// wait in mq-deadline, where bios merge into them.
	var fill sync.WaitGroup
	defer fill.Wait()
	write := func(block int64) {
		fill.Add(1)
		go func() {
			defer fill.Done()
			f.WriteAt(buf, base+block*4096)
		}()
	}
	waitBlocked := func(n int) {
		deadline := time.Now().Add(5 * time.Second)
		for threadsWaitingForIO() < n && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	const blockers = 160
	for i := range int64(blockers) {
		write(2 * i)
	}
	waitBlocked(blockers * 9 / 10)
	// Then a neighbour for each dd, queued behind them: dd k writes the
	// block right after neighbour k's.
	const neighbours = 1024
	for k := range int64(copies) {
		write(neighbours + 4*k)
	}
	waitBlocked(blockers*9/10 + copies)
	var dds []*exec.Cmd
	for k := range copies {
		bin := filepath.Join(dir, fmt.Sprintf("dd-%d", k))
		gap := base/4096 + neighbours + 4*int64(k) + 1
		c := exec.Command(bin, "if=/dev/zero", "of="+lp.Dev, "bs=4096", "count=1", fmt.Sprintf("seek=%d", gap), "oflag=direct", "conv=notrunc", "status=none")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		dds = append(dds, c)
	}
	// Every dd's write submitted (merged, or queued) before the thaw.
	WaitFor(t, 20*time.Second, func() bool {
		for _, c := range dds {
			if !WaitingForIO(c.Process.Pid) {
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

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// WaitingForIO reports whether process pid sleeps uninterruptibly (state
// D), as a process waiting for its direct write does.
func WaitingForIO(pid int) bool {
	return inD(fmt.Sprintf("/proc/%d/stat", pid))
}

// threadsWaitingForIO counts this process's threads in uninterruptible
// sleep.
func threadsWaitingForIO() int {
	tasks, _ := os.ReadDir("/proc/self/task")
	n := 0
	for _, task := range tasks {
		if inD(filepath.Join("/proc/self/task", task.Name(), "stat")) {
			n++
		}
	}
	return n
}

// inD says whether the task whose stat file is stat is in state D.
func inD(stat string) bool {
	b, err := os.ReadFile(stat)
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'D'
}

// WaitFor polls cond for up to limit, failing t with what if it never
// holds.
func WaitFor(t testing.TB, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
	}
}

// RunTool runs a command for t, failing it if the command fails, and
// returns its output.
func RunTool(t testing.TB) func(name string, args ...string) string {
	return func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
}

// CreateFile creates an empty file at path and returns path.
func CreateFile(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

// UntilMerged runs MergeWrites until some of the dd processes' writes
// merged, at most four times (on a loaded machine a queue may not form in
// time: every write then has a request of its own). Each time it waits,
// up to 20 s, until seen says the process pid has its event, for every dd
// process, and counts those whose write merged says merged (which may
// also check the event, failing t). It fails t when no write ever merged:
// the merge path was not exercised.
func UntilMerged(t testing.TB, lp Loop, dir string, copies int, seen func(pid int) bool, merged func(c *exec.Cmd) bool) {
	t.Helper()
	const attempts = 4
	for attempt := 1; attempt <= attempts; attempt++ {
		dds := MergeWrites(t, lp, dir, copies, int64(attempt-1)*4096)
		WaitFor(t, 20*time.Second, func() bool {
			for _, c := range dds {
				if !seen(c.Process.Pid) {
					return false
				}
			}
			return true
		}, "an event of every dd process")
		n := 0
		for _, c := range dds {
			if merged(c) {
				n++
			}
		}
		if n > 0 {
			t.Logf("attempt %d: %d of %d writes merged into queued requests", attempt, n, copies)
			return
		}
		t.Logf("attempt %d: no write merged", attempt)
	}
	t.Fatalf("in %d attempts no write of the %d merged into a queued request: the merge path was not exercised", attempts, copies)
}
