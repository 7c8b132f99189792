// Package memlock lifts the locked-memory limit that kernels before 5.11
// charge BPF maps and programs against.
//
// cilium/ebpf's rlimit package does the same, but it finds out whether the
// kernel needs it by creating a BPF map in its package initialiser: every
// run of every holter command paid for that (2–3 ms of a `holter trace`
// start of about 20). Here nothing runs until Raise is called, and Raise
// creates nothing: it sets the limit when it may, and leaves it when it
// may not, since kernels from 5.11 on charge BPF memory to the memory
// cgroup and ignore it (an older kernel then refuses the first map with
// EPERM, which cilium/ebpf reports with a hint at this limit).
package memlock

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Raise sets RLIMIT_MEMLOCK to unlimited for this process.
func Raise() error {
	inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &inf, nil)
	if err == nil || errors.Is(err, unix.EPERM) {
		return nil
	}
	return fmt.Errorf("raise the locked-memory limit: %w", err)
}
