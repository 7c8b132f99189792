package tracequery

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestSyscallNames checks the generated table against x/sys's numbers.
func TestSyscallNames(t *testing.T) {
	for nr, want := range map[int]string{unix.SYS_READ: "read", unix.SYS_GETPPID: "getppid", unix.SYS_OPENAT: "openat",
		unix.SYS_EXECVE: "execve", unix.SYS_CLOCK_NANOSLEEP: "clock_nanosleep", unix.SYS_NEWFSTATAT: "newfstatat"} {
		if got := syscallName(int64(nr)); got != want {
			t.Errorf("syscall %d: %q, want %q", nr, got, want)
		}
		if syscallNumbers[want] != nr {
			t.Errorf("%s: %d, want %d", want, syscallNumbers[want], nr)
		}
	}
	if got := syscallName(100000); got != "syscall_100000" {
		t.Errorf("unknown syscall: %q", got)
	}
}
