package tracequery

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// attachedProbes counts the perf events process pid holds with a BPF
// program attached (what bpftool perf lists): BPF_TASK_FD_QUERY succeeds
// on a tracepoint, kprobe or uprobe perf event only once a program is on it.
func attachedProbes(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	n := 0
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd)); l != "anon_inode:[perf_event]" {
			continue
		}
		// union bpf_attr's task_fd_query: pid, fd, flags, buf_len, buf,
		// prog_id, fd_type, probe_offset, probe_addr.
		var attr [48]byte
		binary.LittleEndian.PutUint32(attr[0:], uint32(pid))
		binary.LittleEndian.PutUint32(attr[4:], uint32(fd))
		if _, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_TASK_FD_QUERY, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr))); errno == 0 {
			n++
		}
	}
	return n
}

// waitAttached waits until process pid has want probes attached: a tool
// that says it is attaching (bpftrace prints "Attaching N probes" first)
// may not be yet, and a signal it gets meanwhile can be lost.
func waitAttached(t *testing.T, pid, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for attachedProbes(pid) < want {
		if time.Now().After(deadline) {
			t.Fatalf("process %d has %d of %d probes attached after 30 s", pid, attachedProbes(pid), want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
