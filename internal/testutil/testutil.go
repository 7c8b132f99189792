// Package testutil holds what holter's tests share: the privilege gate for
// tests that need the real kernel, and builders for workload programs.
package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// InCI reports whether the tests run in CI, where nothing may be skipped.
func InCI() bool { return os.Getenv("CI") == "true" }

// RequireRoot skips a test that needs root (BPF, perf events) outside CI,
// and fails it in CI, where privileged tests must run.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if InCI() {
		t.Fatal("this test needs root (BPF and perf events), and CI=true forbids skipping it")
	}
	t.Skip("needs root (BPF and perf events); run the suite as root")
}

// RequireTool skips (fails in CI) when a command the test drives is missing.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if InCI() {
			t.Fatalf("%s is not installed, and CI=true forbids skipping (the test command installs it)", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// BlockDir is a new directory on a file system backed by a block device,
// removed when the test ends: the test's temporary directory unless it is
// in memory (tmpfs serves O_DIRECT from the page cache since Linux 6.6, so
// nothing waits for a disk there), else one under the repository.
func BlockDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err == nil && fs.Type != unix.TMPFS_MAGIC && fs.Type != unix.RAMFS_MAGIC {
		return dir
	}
	dir, err := os.MkdirTemp(RepoRoot(), ".blio-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// BuildWorkload compiles testdata/workloads/NAME.c with frame pointers, so
// user stacks unwind through it, and returns the binary's path.
func BuildWorkload(t testing.TB, name string) string {
	t.Helper()
	cc := RequireTool(t, "gcc")
	src := filepath.Join(RepoRoot(), "testdata", "workloads", name+".c")
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command(cc, "-O1", "-g", "-fno-omit-frame-pointer", "-fno-inline",
		"-pthread", "-o", bin, src).CombinedOutput()
	if err != nil {
		t.Fatalf("build workload %s: %v\n%s", name, err, out)
	}
	return bin
}

// built is each Go command BuildGo built, by package path, in a directory
// the first build makes and Main removes when the tests end. (Made on
// demand: a test binary run as a helper process, and killed, builds
// nothing and leaves nothing.)
var built struct {
	sync.Mutex
	main bool // the package's TestMain calls Main
	dir  string
	bins map[string]*goBuild
}

type goBuild struct {
	once sync.Once
	bin  string
	err  error
}

// Main runs a package's tests, from its TestMain, and removes the commands
// BuildGo built for them afterwards.
func Main(m *testing.M) {
	built.Lock()
	built.main = true
	built.Unlock()
	code := m.Run()
	built.Lock()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	built.Unlock()
	os.Exit(code)
}

// BuildGo builds the Go command in pkg (a path from the repository's top,
// "./cmd/holter") once for all of the package's tests, and returns the
// binary's path. Linking holter with DuckDB takes seconds even with a warm
// build cache, and a loaded machine makes that many times more, once per
// test. Tests share the binary: one that changes it must copy it first.
func BuildGo(t testing.TB, pkg string) string {
	t.Helper()
	b, err := goBuildOf(pkg)
	if err != nil {
		t.Fatal(err)
	}
	b.once.Do(func() {
		out, err := os.MkdirTemp(built.dir, filepath.Base(pkg)+"-")
		if err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(out, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", b.bin, pkg)
		cmd.Dir = RepoRoot()
		if log, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("%w\n%s", err, log)
		}
	})
	if b.err != nil {
		t.Fatalf("build %s: %v", pkg, b.err)
	}
	return b.bin
}

// goBuildOf is pkg's build, made the first time it is asked for, with the
// directory of all builds.
func goBuildOf(pkg string) (*goBuild, error) {
	built.Lock()
	defer built.Unlock()
	if !built.main {
		return nil, errors.New("BuildGo needs the package's TestMain to call testutil.Main")
	}
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "holter-test-build-")
		if err != nil {
			return nil, err
		}
		built.dir = dir
	}
	if built.bins == nil {
		built.bins = map[string]*goBuild{}
	}
	b := built.bins[pkg]
	if b == nil {
		b = &goBuild{}
		built.bins[pkg] = b
	}
	return b, nil
}

// BuildHolter is the holter command, built once for the package's tests.
func BuildHolter(t testing.TB) string {
	t.Helper()
	return BuildGo(t, "./cmd/holter")
}
