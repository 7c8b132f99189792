package sysname

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSyscallNames checks the generated table against x/sys's numbers.
func TestSyscallNames(t *testing.T) {
	for nr, want := range map[int]string{unix.SYS_READ: "read", unix.SYS_GETPPID: "getppid", unix.SYS_OPENAT: "openat",
		unix.SYS_EXECVE: "execve", unix.SYS_CLOCK_NANOSLEEP: "clock_nanosleep", unix.SYS_NEWFSTATAT: "newfstatat"} {
		if got := Syscall(int64(nr)); got != want {
			t.Errorf("syscall %d: %q, want %q", nr, got, want)
		}
		if got, ok := SyscallNumber(want); !ok || got != nr {
			t.Errorf("%s: %d, want %d", want, got, nr)
		}
	}
	if got := Syscall(100000); got != "syscall_100000" {
		t.Errorf("unknown syscall: %q", got)
	}
}

// TestSyscallTableGenerated regenerates the table from the x/sys in
// go.mod: the committed one must be what it gives (go generate).
func TestSyscallTableGenerated(t *testing.T) {
	out := filepath.Join(t.TempDir(), "table.go")
	if b, err := exec.Command("go", "run", "./internal/gensyscalls", out).CombinedOutput(); err != nil {
		t.Fatalf("go run ./internal/gensyscalls: %v\n%s", err, b)
	}
	want, _ := os.ReadFile(out)
	got, _ := os.ReadFile("table.go")
	if !bytes.Equal(got, want) {
		t.Error("table.go is stale: run go generate ./internal/sysname/ and commit it")
	}
}
