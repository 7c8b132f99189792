package recorder

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/symbol"
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
	// fdatasync of one block waits for the disk, but on a fast one for
	// less than the default millisecond that makes a blocking event: this
	// test counts every wait that is long enough to be the disk's.
	st := recordWhileWith(t, Config{Epoch: time.Second, Budget: -1, BlckMin: 20 * time.Microsecond}, func(*Recorder) {
		runWorkloads(t, []*workload{runs["single"], runs["threads"]}, bins)
	})
	for _, mode := range []string{"single", "threads"} {
		for _, fn := range []string{"holter_waits_in_recv", "holter_syncs_writes", "holter_opens_missing"} {
			for _, vital := range []string{"blck", "syscall"} {
				if fn == "holter_opens_missing" && vital == "blck" {
					continue // a missing file's open does not block
				}
				t.Run(fmt.Sprintf("%s/%s/%s", mode, fn, vital), func(t *testing.T) {
					// Samples in the function's system calls: frame 1
					// one of its wrappers, and the function anywhere or
					// nowhere.
					row := queryRow(t, st, fmt.Sprintf(`SELECT count(*) FILTER (WHERE u.frames[2] = '%[1]s'),
						count(*), any_value(u.frames) FILTER (WHERE u.frames[2] = '%[1]s'),
						any_value(u.frames) FILTER (WHERE u.frames[2] IS DISTINCT FROM '%[1]s'),
						count(*) FILTER (WHERE u.frames[2] = '%[1]s' AND u.frames[3] = '%[5]s')
						FROM samples s JOIN stacks u ON u.stack_id = s.ustack_id
						WHERE s.pid = %[2]d AND s.vital = '%[3]s' AND u.modules[1] LIKE '%%/libc.so%%'
						AND u.frames[1] IN (%[4]s)`, fn, runs[mode].pid, vital, wrappersOf(fn), callerOf(fn)))
					above, n, walked := row[0].(int64), row[1].(int64), row[4].(int64)
					t.Logf("%d of %d samples in %s's calls have it above the wrapper: %v; another: %v", above, n, fn, row[2], row[3])
					// A blocking sample has only its site, one frame,
					// when the stack was last taken elsewhere moments
					// before (bpf/sched.bpf.h): a few.
					if n == 0 || above*2 < n {
						t.Errorf("%d of %d %s samples of wrapper_callers %s have %s directly above the C library's wrapper, want at least half",
							above, n, vital, mode, fn)
					}
					// The walk goes on past the function, the wrapper's
					// use of the frame pointer's register mended.
					if c := callerOf(fn); c != "" && walked*2 < n {
						t.Errorf("%d of %d %s samples of wrapper_callers %s have %s above %s, want at least half", walked, n, vital, mode, c, fn)
					}
				})
			}
		}
	}
}

// callerOf is the function that calls fn in every run of the workload,
// not inlined; "" when there is none (fn runs at a thread's start).
func callerOf(fn string) string {
	if fn == "holter_opens_missing" {
		return "holter_retries_open"
	}
	return ""
}

// wrappersOf are the C library's functions fn calls, as they are
// symbolized.
func wrappersOf(fn string) string {
	switch fn {
	case "holter_syncs_writes":
		return `'__libc_pwrite', 'pwrite', 'pwrite64', 'fdatasync'`
	case "holter_opens_missing":
		return `'open', 'open64', '__libc_open64', '__open64'`
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

// TestCallerAmong: of the return addresses at the stack pointer, the
// caller of frame 0 is the first whose call surely led there — to a stub
// of the procedure linkage table, to frame 0's function —, else the first
// through a pointer; not one an earlier call to another function left
// behind, and none when the frame-pointer walk has it already.
func TestCallerAmong(t *testing.T) {
	recv := symbol.Frame{Addr: 0x7f0000010a972, Func: "recv", Offset: 0x62}
	plt := symbol.Frame{Addr: 0x401030, Module: "/bin/prog", Offset: 0x1030}
	pltAfterInit := symbol.Frame{Addr: 0x401050, Func: "_init", Module: "/bin/prog", Offset: 0x50}
	self := symbol.Frame{Addr: 0x7f0000010a910, Func: "recv"}
	other := symbol.Frame{Addr: 0x401200, Func: "parse_header", Module: "/bin/prog"}
	indirect := symbol.Frame{}
	for _, c := range []struct {
		name    string
		rets    []uint64
		targets []symbol.Frame
		next    uint64
		want    uint64
	}{
		{"through the PLT", []uint64{0x401180}, []symbol.Frame{plt}, 0x401400, 0x401180},
		{"a direct call", []uint64{0x7f00000100010}, []symbol.Frame{self}, 0x401400, 0x7f00000100010},
		{"through a pointer", []uint64{0x401180}, []symbol.Frame{indirect}, 0, 0x401180},
		{"a stale return first", []uint64{0x401250, 0x401180}, []symbol.Frame{other, plt}, 0x401400, 0x401180},
		{"the walk has it", []uint64{0x401400}, []symbol.Frame{plt}, 0x401400, 0},
		{"only stale returns", []uint64{0x401250}, []symbol.Frame{other}, 0x401400, 0},
		{"a stale pointer's return first", []uint64{0x7f0000020a100, 0x401180}, []symbol.Frame{indirect, plt}, 0x401400, 0x401180},
		{"a stale pointer's return before a PLT after _init", []uint64{0x7f0000020a100, 0x401180}, []symbol.Frame{indirect, pltAfterInit}, 0x401400, 0x401180},
		{"the walk has it after a pointer's", []uint64{0x7f0000020a100, 0x401400}, []symbol.Frame{indirect, plt}, 0x401400, 0},
	} {
		got, ok := callerAmong(c.rets, recv, c.targets, c.next)
		if got != c.want || ok != (c.want != 0) {
			t.Errorf("%s: caller %#x %v, want %#x", c.name, got, ok, c.want)
		}
	}
	// call rel32 of -0x100 from the return address 0x401185
	if got := callTarget(0x401185, []byte{0x90, 0x90, 0xe8, 0x00, 0xff, 0xff, 0xff}); got != 0x401085 {
		t.Errorf("callTarget = %#x, want 0x401085", got)
	}
	if got := callTarget(0x401185, []byte{0x90, 0xff, 0xd0}); got != 0 {
		t.Errorf("callTarget of an indirect call = %#x, want 0", got)
	}
}

// TestWithCaller: where the wrapper's call frame information puts its
// return address among the words at the stack pointer, that word is frame
// 1, whatever return addresses earlier calls left below it in the
// wrapper's locals; a walk that has it already is kept, one mended from a
// word below it is cut after it, and a word that follows no call is not
// taken.
func TestWithCaller(t *testing.T) {
	call := []byte{0xe8, 0, 0, 0, 0}
	none := []byte{0x90, 0x90}
	const ip, stale, ret, up = 0x7f0000010a972, 0x40122f, 0x401407, 0x401460
	words := []uint64{0, stale, 0x7ffd0000, 0, ret, up}
	code := [][]byte{none, call, none, none, call, call}
	for _, c := range []struct {
		name  string
		addrs []uint64
		code  [][]byte
		at    int
		want  []uint64
	}{
		{"the walk lost it", []uint64{ip, up}, code, 4, []uint64{ip, ret, up}},
		{"the walk stopped", []uint64{ip}, code, 4, []uint64{ip, ret}},
		{"the walk has it", []uint64{ip, ret, up}, code, 4, []uint64{ip, ret, up}},
		{"mended from the locals", []uint64{ip, stale, 0x401999}, code, 4, []uint64{ip, ret}},
		{"past the words", []uint64{ip, up}, code, 6, []uint64{ip, up}},
		{"no call before it", []uint64{ip, up}, [][]byte{none, call, none, none, none, call}, 4, []uint64{ip, up}},
	} {
		if got := withCaller(c.addrs, words, c.code, c.at); !slices.Equal(got, c.want) {
			t.Errorf("%s: %#x, want %#x", c.name, got, c.want)
		}
	}
}
