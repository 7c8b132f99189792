package sysname

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

//go:generate go run ./internal/gensyscalls

// numbers are the system calls by name.
var numbers = func() map[string]int {
	m := make(map[string]int, len(syscalls))
	for nr, name := range syscalls {
		m[name] = nr
	}
	return m
}()

// Syscall names x86-64 system call nr ("syscall_N" when unknown).
func Syscall(nr int64) string {
	if n, ok := syscalls[int(nr)]; ok {
		return n
	}
	return fmt.Sprintf("syscall_%d", nr)
}

// SyscallNumber is the number of the x86-64 system call name.
func SyscallNumber(name string) (int, bool) {
	nr, ok := numbers[name]
	return nr, ok
}

// Errno is an error number's name (ENOENT), or "error N".
func Errno(errno int64) string {
	if n := unix.ErrnoName(syscall.Errno(errno)); n != "" {
		return n
	}
	return fmt.Sprintf("error %d", errno)
}

// Signal is a signal's name (SIGKILL), or "signal N".
func Signal(sig int64) string {
	if n := unix.SignalName(syscall.Signal(sig)); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", sig)
}
