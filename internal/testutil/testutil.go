// Package testutil holds what holter's tests share: the privilege gate for
// tests that need the real kernel, and builders for workload programs.
package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// BuildHolter builds the holter command into a temporary directory.
func BuildHolter(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "holter")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/holter")
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build holter: %v\n%s", err, out)
	}
	return bin
}
