package recorder

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestStacksKeepTheWrappersCaller: a process that waits in recv and in
// pwrite and fdatasync, called straight from functions of its own, is
// recorded with those functions directly above the C library's wrapper in
// the user stacks of its blocking and system-call samples, whether the
// wrappers take their single-threaded path (which pushes nothing) or their
// multi-threaded one (which saves registers, the frame pointer among
// them, on the stack).
func TestStacksKeepTheWrappersCaller(t *testing.T) {
	testutil.RequireRoot(t)
	bins := map[string]string{"wrapper_callers": testutil.BuildWorkload(t, "wrapper_callers")}
	dir := testutil.BlockDir(t)
	runs := map[string]*workload{}
	for _, mode := range []string{"single", "threads"} {
		runs[mode] = &workload{name: "wrapper_callers", args: []string{"4", filepath.Join(dir, mode), mode}}
	}
	st := recordWhile(t, func(*Recorder) {
		runWorkloads(t, []*workload{runs["single"], runs["threads"]}, bins)
	})
	for _, mode := range []string{"single", "threads"} {
		for _, fn := range []string{"holter_waits_in_recv", "holter_syncs_writes"} {
			for _, vital := range []string{"blck", "syscall"} {
				t.Run(fmt.Sprintf("%s/%s/%s", mode, fn, vital), func(t *testing.T) {
					// Samples in the function's system calls: frame 1
					// one of its wrappers, and the function anywhere or
					// nowhere.
					row := queryRow(t, st, fmt.Sprintf(`SELECT count(*) FILTER (WHERE u.frames[2] = '%[1]s'),
						count(*), any_value(u.frames) FILTER (WHERE u.frames[2] = '%[1]s'),
						any_value(u.frames) FILTER (WHERE u.frames[2] IS DISTINCT FROM '%[1]s')
						FROM samples s JOIN stacks u ON u.stack_id = s.ustack_id
						WHERE s.pid = %[2]d AND s.vital = '%[3]s' AND u.modules[1] LIKE '%%/libc.so%%'
						AND u.frames[1] IN (%[4]s)`, fn, runs[mode].pid, vital, wrappersOf(fn)))
					above, n := row[0].(int64), row[1].(int64)
					t.Logf("%d of %d samples in %s's calls have it above the wrapper: %v; another: %v", above, n, fn, row[2], row[3])
					if above == 0 {
						t.Errorf("no %s sample of wrapper_callers %s has %s directly above the C library's wrapper", vital, mode, fn)
					}
				})
			}
		}
	}
}

// wrappersOf are the C library's functions fn calls, as they are
// symbolized.
func wrappersOf(fn string) string {
	if fn == "holter_syncs_writes" {
		return `'__libc_pwrite', 'pwrite', 'pwrite64', 'fdatasync'`
	}
	return `'recv', '__libc_recv'`
}

// TestCallDecoding: the code before a return address is told to end with
// a call in each form compilers emit, and code that ends otherwise is
// not; the code before a system call's return ends with syscall.
func TestCallDecoding(t *testing.T) {
	for _, c := range []struct {
		name string
		code []byte
		call bool
	}{
		{"call rel32", []byte{0x90, 0x90, 0xe8, 0x10, 0x20, 0x30, 0x40}, true},
		{"call *%rax", []byte{0x90, 0xff, 0xd0}, true},
		{"call *%r11", []byte{0x41, 0xff, 0xd3}, true},
		{"call *(%rax)", []byte{0xff, 0x10}, true},
		{"call *0x18(%rbx)", []byte{0xff, 0x53, 0x18}, true},
		{"call *0x118(%rbx)", []byte{0xff, 0x93, 0x18, 0x01, 0x00, 0x00}, true},
		{"call *(%rax,%rcx,8)", []byte{0xff, 0x14, 0xc8}, true},
		{"call *0x8(%rax,%rcx,8)", []byte{0xff, 0x54, 0xc8, 0x08}, true},
		{"call *0x100(,%rcx,8)", []byte{0xff, 0x14, 0xcd, 0x00, 0x01, 0x00, 0x00}, true},
		{"call *got(%rip)", []byte{0x90, 0xff, 0x15, 0x10, 0x20, 0x30, 0x00}, true},
		{"jmp *%rax", []byte{0x90, 0xff, 0xe0}, false},
		{"push 0x18(%rbx)", []byte{0xff, 0x73, 0x18}, false},
		{"mov %rsp,%rbp", []byte{0x90, 0x48, 0x89, 0xe5}, false},
		{"ret", []byte{0xc3}, false},
		{"nothing", nil, false},
	} {
		if got := afterCall(c.code); got != c.call {
			t.Errorf("%s (% x): afterCall = %v, want %v", c.name, c.code, got, c.call)
		}
	}
	if !afterSyscall([]byte{0xb8, 0x2d, 0x00, 0x00, 0x00, 0x0f, 0x05}) || afterSyscall([]byte{0x0f, 0x05, 0xc3}) || afterSyscall(nil) {
		t.Error("afterSyscall does not tell the code before a system call's return")
	}
}
