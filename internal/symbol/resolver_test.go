package symbol

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const cProgram = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) void holter_symbol_test_spin(void) {
	char buf[1];
	while (read(0, buf, 1) > 0) {
	}
}

int main(void) {
	/* RTLD_NEXT skips the executable, so this is libc's read and not a PLT stub of a -no-pie binary. */
	void *rd = dlsym(RTLD_NEXT, "read");
	printf("%p %p\n", (void *)&holter_symbol_test_spin, rd);
	fflush(stdout);
	holter_symbol_test_spin();
	return 0;
}
`

const goProgram = `package main

import (
	"fmt"
	"os"
)

//go:noinline
func someFunc() {
	var b [1]byte
	for {
		if _, err := os.Stdin.Read(b[:]); err != nil {
			return
		}
	}
}

func main() {
	fmt.Printf("%p\n", someFunc)
	someFunc()
}
`

// buildDir holds the test binaries, shared by all tests of the package.
var (
	buildDir   string
	buildMu    sync.Mutex
	buildCache = map[string]string{}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "holter-symbol-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// /proc/PID/maps shows canonical paths.
	if buildDir, err = filepath.EvalSymlinks(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildC compiles cProgram with the given extra gcc flags, once per variant.
func buildC(t *testing.T, variant string, flags ...string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := "c-" + variant
	if bin, ok := buildCache[key]; ok {
		return bin
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	src := filepath.Join(buildDir, "prog.c")
	if err := os.WriteFile(src, []byte(cProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(buildDir, key)
	args := append([]string{"-O1", "-o", bin, src}, flags...)
	args = append(args, "-ldl")
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	buildCache[key] = bin
	return bin
}

// buildGo builds goProgram with the given extra go build flags, once per variant.
func buildGo(t *testing.T, variant string, flags ...string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := "go-" + variant
	if bin, ok := buildCache[key]; ok {
		return bin
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	dir := filepath.Join(buildDir, key+"-src")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module holtersymboltest\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(goProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(buildDir, key)
	args := append([]string{"build", "-o", bin}, flags...)
	args = append(args, ".")
	cmd := exec.Command(goTool, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=", "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	buildCache[key] = bin
	return bin
}

// testProc is a started test program blocked reading its stdin.
type testProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pid   uint32
	addrs []uint64 // the addresses the program printed
}

// start runs bin, reads the addresses it prints and registers its termination with t.Cleanup.
func start(t *testing.T, bin string) *testProc {
	t.Helper()
	cmd := exec.Command(bin)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &testProc{cmd: cmd, stdin: stdin, pid: uint32(cmd.Process.Pid)}
	t.Cleanup(p.stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("read from %s: %v", bin, err)
	}
	for _, s := range strings.Fields(line) {
		a, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
		if err != nil {
			t.Fatalf("parse address %q from %s: %v", s, bin, err)
		}
		p.addrs = append(p.addrs, a)
	}
	return p
}

// stop makes the program return from its read loop and reaps it. It may be called more than once.
func (p *testProc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.stdin.Close()
	done := make(chan struct{})
	go func() {
		p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

func elfType(t *testing.T, bin string) elf.Type {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return f.Type
}

func TestResolveC(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		typ   elf.Type
	}{
		{"nopie", []string{"-fno-pie", "-no-pie"}, elf.ET_EXEC},
		{"pie", []string{"-fPIE", "-pie"}, elf.ET_DYN},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := buildC(t, tc.name, tc.flags...)
			if got := elfType(t, bin); got != tc.typ {
				t.Fatalf("%s is %v, want %v", bin, got, tc.typ)
			}
			p := start(t, bin)
			if len(p.addrs) != 2 {
				t.Fatalf("program printed %d addresses, want 2", len(p.addrs))
			}
			fn, rd := p.addrs[0], p.addrs[1]
			r := NewResolver("/proc")

			frames := r.Resolve(p.pid, []uint64{fn + 3, rd, rd + 1, 0})
			if len(frames) != 4 {
				t.Fatalf("got %d frames, want 4", len(frames))
			}
			if f := frames[0]; f.Addr != fn+3 || f.Func != "holter_symbol_test_spin" || f.Offset != 3 || f.Module != bin {
				t.Errorf("spin frame = %+v, want holter_symbol_test_spin+0x3 [%s]", f, bin)
			}
			for _, f := range frames[1:3] {
				if !strings.Contains(f.Func, "read") || !strings.Contains(filepath.Base(f.Module), "libc") {
					t.Errorf("libc read frame = %+v, want a read symbol in libc", f)
				}
			}
			if frames[1].Offset != 0 || frames[2].Offset != 1 {
				t.Errorf("libc read offsets = %#x, %#x, want 0, 1", frames[1].Offset, frames[2].Offset)
			}
			if f := frames[3]; f != (Frame{}) {
				t.Errorf("null frame = %+v, want unresolved", f)
			}
			if got, want := frames[0].String(), "holter_symbol_test_spin+0x3 ["+bin+"]"; got != want {
				t.Errorf("String() = %q, want %q", got, want)
			}
			if got := r.Exe(p.pid); got != bin {
				t.Errorf("Exe = %q, want %q", got, bin)
			}
			for _, f := range frames {
				t.Log(f)
			}

			// The vdso is a special mapping: module known, no symbol.
			if vdso := findMapsEntry(t, p.pid, "[vdso]"); vdso != 0 {
				f := r.Resolve(p.pid, []uint64{vdso + 0x10})[0]
				if f.Func != "" || f.Module != "[vdso]" {
					t.Errorf("vdso frame = %+v, want module [vdso] without function", f)
				}
				if got, want := f.String(), fmt.Sprintf("%#x [vdso]", vdso+0x10); got != want {
					t.Errorf("String() = %q, want %q", got, want)
				}
			}
		})
	}
}

// findMapsEntry returns the start of the first mapping of pid named name, or 0.
func findMapsEntry(t *testing.T, pid uint32, name string) uint64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasSuffix(line, " "+name) {
			lo, _, _ := strings.Cut(line, "-")
			a, err := strconv.ParseUint(lo, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
	}
	return 0
}

func TestResolveGo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"default", nil},
		{"pie", []string{"-buildmode=pie"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := buildGo(t, tc.name, tc.flags...)
			p := start(t, bin)
			if len(p.addrs) != 1 {
				t.Fatalf("program printed %d addresses, want 1", len(p.addrs))
			}
			r := NewResolver("/proc")
			f := r.Resolve(p.pid, []uint64{p.addrs[0] + 5})[0]
			if f.Func != "main.someFunc" || f.Offset != 5 || f.Module != bin {
				t.Fatalf("frame = %+v, want main.someFunc+0x5 [%s]", f, bin)
			}
			t.Log(f)
		})
	}
}

func TestResolveExited(t *testing.T) {
	bin := buildC(t, "pie", "-fPIE", "-pie")
	p := start(t, bin)
	r := NewResolver("/proc")
	addrs := []uint64{p.addrs[0], p.addrs[1]}
	if f := r.Resolve(p.pid, addrs)[0]; f.Func != "holter_symbol_test_spin" {
		t.Fatalf("live frame = %+v, want holter_symbol_test_spin", f)
	}
	if got := r.Exe(p.pid); got != bin {
		t.Fatalf("Exe = %q, want %q", got, bin)
	}
	p.stop()
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.pid)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("process %d still exists after exit: %v", p.pid, err)
	}
	// Within the revalidation window the cached process still answers: a
	// sample that reaches user space just after its process exited keeps
	// its symbols.
	if f := r.Resolve(p.pid, addrs)[0]; f.Func != "holter_symbol_test_spin" {
		t.Errorf("frame of a just-exited process = %+v, want it resolved from the cache", f)
	}
	r.revalidate = 0
	frames := r.Resolve(p.pid, addrs)
	for i, f := range frames {
		if f != (Frame{Addr: addrs[i]}) {
			t.Errorf("frame %d of exited process = %+v, want unresolved", i, f)
		}
	}
	if got := r.Exe(p.pid); got != "" {
		t.Errorf("Exe of exited process = %q, want empty", got)
	}
	if got := r.Resolve(p.pid, nil); len(got) != 0 {
		t.Errorf("Resolve(nil) = %v, want empty", got)
	}
}

// A pid found not to exist is not looked up again within the revalidation
// window: the samples of a process that exited before they were read cost
// one read of /proc each window, not two a sample. A process that then
// takes the pid is resolved once the window has passed.
func TestResolveRemembersExitedPids(t *testing.T) {
	bin := buildC(t, "nopie", "-fno-pie", "-no-pie")
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	const sym = "holter_symbol_test_spin"
	fp := fakeProc{t: t, root: t.TempDir(), pid: 4343}
	text, addr := fixtureMapping(t, bin, sym, 0x10000000, fi.Sys().(*syscall.Stat_t).Ino, "")
	r := NewResolver(fp.root)
	r.revalidate = 200 * time.Millisecond
	if f := r.Resolve(fp.pid, []uint64{addr})[0]; f != (Frame{Addr: addr}) {
		t.Fatalf("frame of a pid with no process = %+v, want unresolved", f)
	}
	fp.write(1000, text, bin)
	if f := r.Resolve(fp.pid, []uint64{addr})[0]; f.Func != "" {
		t.Errorf("within the window, a pid found gone was looked up again: %+v", f)
	}
	if got := r.Exe(fp.pid); got != "" {
		t.Errorf("within the window, Exe looked the gone pid up again: %q", got)
	}
	time.Sleep(r.revalidate)
	if f := r.Resolve(fp.pid, []uint64{addr})[0]; f.Func != sym {
		t.Errorf("after the window, frame = %+v, want %s", f, sym)
	}
}

func TestBuildIDCache(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"buildid", []string{"-fPIE", "-pie"}},
		// Without a build id the cache falls back to path, inode and mtime.
		{"nobuildid", []string{"-fPIE", "-pie", "-Wl,--build-id=none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := buildC(t, tc.name, tc.flags...)
			p1, p2 := start(t, bin), start(t, bin)
			r := NewResolver("/proc")
			f := r.Resolve(p1.pid, []uint64{p1.addrs[0] + 1})[0]
			if f.Func != "holter_symbol_test_spin" {
				t.Fatalf("first process frame = %+v", f)
			}
			parsed := r.parses.Load()
			if parsed != 1 {
				t.Errorf("parsed %d ELF files for one frame, want 1", parsed)
			}
			f = r.Resolve(p2.pid, []uint64{p2.addrs[0] + 1})[0]
			if f.Func != "holter_symbol_test_spin" {
				t.Fatalf("second process frame = %+v", f)
			}
			if got := r.parses.Load(); got != parsed {
				t.Errorf("second process of the same binary parsed ELF again: %d parses, want %d", got, parsed)
			}
			// libc, shared by both processes, is parsed once as well.
			r.Resolve(p1.pid, []uint64{p1.addrs[1]})
			r.Resolve(p2.pid, []uint64{p2.addrs[1]})
			if got := r.parses.Load(); got != parsed+1 {
				t.Errorf("parses after libc in two processes = %d, want %d", got, parsed+1)
			}
		})
	}
}

func TestBuildID(t *testing.T) {
	bin := buildC(t, "fixedid", "-fPIE", "-pie", "-Wl,--build-id=0x0123456789abcdef00")
	id, err := BuildID(bin)
	if err != nil {
		t.Fatal(err)
	}
	if id != "0123456789abcdef00" {
		t.Errorf("BuildID = %q, want 0123456789abcdef00", id)
	}
	bin = buildC(t, "nobuildid", "-fPIE", "-pie", "-Wl,--build-id=none")
	if _, err := BuildID(bin); !errors.Is(err, ErrNoBuildID) {
		t.Errorf("BuildID without note: error %v, want ErrNoBuildID", err)
	}
	if _, err := BuildID(filepath.Join("testdata", "kallsyms")); err == nil {
		t.Error("BuildID of a non-ELF file succeeded")
	}
	if _, err := BuildID(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("BuildID of a missing file: error %v, want os.ErrNotExist", err)
	}
	// The Go linker emits a GNU build id (derived from the Go build id) as well.
	if id, err := BuildID(buildGo(t, "default")); err != nil || len(id) < 16 {
		t.Errorf("BuildID(go binary) = %q, %v", id, err)
	}
}

func TestResolveDeletedBinary(t *testing.T) {
	src := buildC(t, "pie", "-fPIE", "-pie")
	bin := filepath.Join(buildDir, "c-deleted")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	p := start(t, bin)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	// Only /proc/PID/map_files still reaches the file.
	r := NewResolver("/proc")
	f := r.Resolve(p.pid, []uint64{p.addrs[0] + 7})[0]
	if f != (Frame{Addr: p.addrs[0] + 7, Func: "holter_symbol_test_spin", Offset: 7, Module: bin}) {
		t.Errorf("frame of deleted binary = %+v, want holter_symbol_test_spin+0x7 [%s]", f, bin)
	}
	if got := r.Exe(p.pid); got != bin {
		t.Errorf("Exe = %q, want %q", got, bin)
	}
}

func TestResolveConcurrent(t *testing.T) {
	bin := buildC(t, "pie", "-fPIE", "-pie")
	procs := []*testProc{start(t, bin), start(t, bin)}
	r := NewResolver("/proc")
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				p := procs[(g+i)%len(procs)]
				frames := r.Resolve(p.pid, []uint64{p.addrs[0] + 2, p.addrs[1]})
				if frames[0].Func != "holter_symbol_test_spin" || !strings.Contains(frames[1].Func, "read") {
					select {
					case errs <- fmt.Sprintf("%v", frames):
					default:
					}
					return
				}
				_ = r.Exe(p.pid)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error("bad concurrent resolution:", e)
	}
}

// fakeProc writes a /proc-like fixture for one process below root.
type fakeProc struct {
	t    *testing.T
	root string
	pid  uint32
}

func (fp fakeProc) dir() string {
	return filepath.Join(fp.root, strconv.FormatUint(uint64(fp.pid), 10))
}

func (fp fakeProc) write(startTime uint64, maps, exe string) {
	fp.t.Helper()
	if err := os.MkdirAll(fp.dir(), 0o755); err != nil {
		fp.t.Fatal(err)
	}
	fields := make([]string, 50) // fields 3..52
	for i := range fields {
		fields[i] = "0"
	}
	fields[0] = "S"
	fields[22-3] = strconv.FormatUint(startTime, 10)
	stat := fmt.Sprintf("%d (fake) (proc)) %s\n", fp.pid, strings.Join(fields, " "))
	if err := os.WriteFile(filepath.Join(fp.dir(), "stat"), []byte(stat), 0o644); err != nil {
		fp.t.Fatal(err)
	}
	fp.writeMaps(maps)
	os.Remove(filepath.Join(fp.dir(), "exe"))
	if err := os.Symlink(exe, filepath.Join(fp.dir(), "exe")); err != nil {
		fp.t.Fatal(err)
	}
}

func (fp fakeProc) writeMaps(maps string) {
	fp.t.Helper()
	if err := os.WriteFile(filepath.Join(fp.dir(), "maps"), []byte(maps), 0o644); err != nil {
		fp.t.Fatal(err)
	}
}

// fixtureMapping describes how to map the text of bin at base so that sym resolves: it returns the maps
// line and the address of sym.
func fixtureMapping(t *testing.T, bin, sym string, base uint64, inode uint64, suffix string) (string, uint64) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var value uint64
	for _, s := range syms {
		if s.Name == sym {
			value = s.Value
		}
	}
	if value == 0 {
		t.Fatalf("%s not in %s", sym, bin)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 || value < p.Vaddr || value >= p.Vaddr+p.Filesz {
			continue
		}
		fileOff := value - p.Vaddr + p.Off
		mapOff := p.Off &^ 0xfff
		size := (p.Off + p.Filesz - mapOff + 0xfff) &^ 0xfff
		line := fmt.Sprintf("%x-%x r-xp %08x 08:01 %d                      %s%s\n", base, base+size, mapOff, inode, bin, suffix)
		return line, base + fileOff - mapOff
	}
	t.Fatalf("no executable segment holds %s in %s", sym, bin)
	return "", 0
}

// fileOffset is addr's offset in the file of a maps line.
func fileOffset(t *testing.T, line string, addr uint64) uint64 {
	t.Helper()
	var start, end, off uint64
	if _, err := fmt.Sscanf(line, "%x-%x r-xp %x", &start, &end, &off); err != nil {
		t.Fatalf("maps line %q: %v", line, err)
	}
	return addr - start + off
}

func TestResolveFixture(t *testing.T) {
	bin := buildC(t, "nopie", "-fno-pie", "-no-pie")
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	const sym = "holter_symbol_test_spin"

	fp := fakeProc{t: t, root: t.TempDir(), pid: 4242}
	text1, addr1 := fixtureMapping(t, bin, sym, 0x10000000, ino, "")
	text2, addr2 := fixtureMapping(t, bin, sym, 0x50000000, ino, "")
	wrongIno, addrWrongIno := fixtureMapping(t, bin, sym, 0x70000000, ino+1, "")
	deleted, addrDeleted := fixtureMapping(t, bin, sym, 0x78000000, ino, " (deleted)")
	specials := "" +
		"20000000-20001000 rw-p 00000000 00:00 0 \n" +
		"7ffd0000-7ffd2000 r-xp 00000000 00:00 0                          [vdso]\n" +
		"7ffe0000-7fff0000 rw-p 00000000 00:00 0                          [stack]\n"
	// A file that exists only inside the process's root (another mount namespace).
	const inRoot = "/holter-symbol-test-container/app"
	rootCopy := filepath.Join(fp.dir(), "root", inRoot)
	if err := os.MkdirAll(filepath.Dir(rootCopy), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rootCopy, data, 0o755); err != nil {
		t.Fatal(err)
	}
	container, addrContainer := fixtureMapping(t, rootCopy, sym, 0x74000000, ino, "")
	container = strings.Replace(container, rootCopy, inRoot, 1)
	fp.write(1000, text1+wrongIno+container+deleted+specials, bin)

	r := NewResolver(fp.root)
	r.revalidate = 0 // this test replaces processes under the same pid at once
	r.rereadInterval = 0
	const unmapped = 0x30000000
	addrs := []uint64{addr1 + 3, addr2, 0x20000008, 0x7ffd0010, 0x7ffe0008, unmapped, addrWrongIno, addrDeleted, addrContainer + 2}
	want := []Frame{
		{Addr: addr1 + 3, Func: sym, Offset: 3, Module: bin},
		{Addr: addr2},
		{Addr: 0x20000008},
		{Addr: 0x7ffd0010, Module: "[vdso]"},
		{Addr: 0x7ffe0008, Module: "[stack]"},
		{Addr: unmapped},
		// Without a symbol, a file's frame has its offset in the file.
		{Addr: addrWrongIno, Module: bin, Offset: fileOffset(t, wrongIno, addrWrongIno)}, // the file at the path is not the mapped one
		{Addr: addrDeleted, Module: bin, Offset: fileOffset(t, deleted, addrDeleted)},    // deleted and no map_files to reach it
		{Addr: addrContainer + 2, Func: sym, Offset: 2, Module: inRoot},
	}
	checkFrames(t, "initial", r.Resolve(fp.pid, addrs), want)
	if got := r.Exe(fp.pid); got != bin {
		t.Errorf("Exe = %q, want %q", got, bin)
	}

	// The process maps another copy of the binary: the miss triggers a re-read of the maps.
	fp.writeMaps(text1 + text2 + specials)
	f := r.Resolve(fp.pid, []uint64{addr2 + 1})[0]
	if f != (Frame{Addr: addr2 + 1, Func: sym, Offset: 1, Module: bin}) {
		t.Errorf("after mmap: frame = %+v, want %s+0x1", f, sym)
	}
	if got := r.parses.Load(); got != 1 {
		t.Errorf("parsed %d ELF files, want 1", got)
	}

	// The pid is reused by a new process (different start time) with a different layout and executable.
	// The old cached maps must not answer, even though re-reads are now suppressed.
	r.rereadInterval = time.Hour
	text3, addr3 := fixtureMapping(t, bin, sym, 0x60000000, ino, "")
	fp.write(2000, text3, "/usr/bin/other-program")
	frames := r.Resolve(fp.pid, []uint64{addr1 + 3, addr3 + 3})
	checkFrames(t, "after pid reuse", frames, []Frame{
		{Addr: addr1 + 3},
		{Addr: addr3 + 3, Func: sym, Offset: 3, Module: bin},
	})
	if got := r.Exe(fp.pid); got != "/usr/bin/other-program" {
		t.Errorf("Exe after pid reuse = %q, want /usr/bin/other-program", got)
	}

	// The process is gone.
	if err := os.RemoveAll(fp.dir()); err != nil {
		t.Fatal(err)
	}
	checkFrames(t, "after exit", r.Resolve(fp.pid, []uint64{addr3}), []Frame{{Addr: addr3}})
	if got := r.Exe(fp.pid); got != "" {
		t.Errorf("Exe after exit = %q, want empty", got)
	}
}

func checkFrames(t *testing.T, what string, got, want []Frame) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d frames, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: frame %d = %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

func TestParseHelpers(t *testing.T) {
	start, err := parseStartTime([]byte("1 (a) b) (c) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 98765 100 200\n"))
	if err != nil || start != 98765 {
		t.Errorf("parseStartTime = %d, %v, want 98765", start, err)
	}
	if _, err := parseStartTime([]byte("1 (a) S 0")); err == nil {
		t.Error("parseStartTime accepted a short stat line")
	}
	m, err := parseMapsLine("7f0000001000-7f0000002000 r-xp 00001000 fd:01 1234    /opt/my lib/libx.so (deleted)")
	if err != nil {
		t.Fatal(err)
	}
	if m.start != 0x7f0000001000 || m.end != 0x7f0000002000 || m.off != 0x1000 || m.inode != 1234 ||
		!m.exec || m.name != "/opt/my lib/libx.so" || !m.deleted {
		t.Errorf("parseMapsLine = %+v", m)
	}
	if _, err := parseMapsLine("garbage"); err == nil {
		t.Error("parseMapsLine accepted garbage")
	}
}

func TestLRU(t *testing.T) {
	c := newLRU[int, string](2)
	c.add(1, "a")
	c.add(2, "b")
	c.get(1) // 2 is now least recently used
	c.add(3, "c")
	if _, ok := c.get(2); ok {
		t.Error("least recently used entry was not evicted")
	}
	if v, ok := c.get(1); !ok || v != "a" {
		t.Errorf("get(1) = %q, %v", v, ok)
	}
	if c.len() != 2 {
		t.Errorf("len = %d, want 2", c.len())
	}
	c.remove(1)
	if _, ok := c.get(1); ok || c.len() != 1 {
		t.Error("remove did not remove")
	}
}

// imageOf is the Image of a test process: its executable's inode, its
// start_code (/proc/PID/stat field 26) and, standing in for mmap_base,
// which /proc does not show, the start of its libc mapping: ResolveImage
// uses differences only, and libc sits at the same distance below
// mmap_base in every run of a program.
func imageOf(t *testing.T, bin string, p *testProc) Image {
	t.Helper()
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		t.Fatal(err)
	}
	start, err := StatField(stat, 26)
	if err != nil {
		t.Fatal(err)
	}
	maps, err := readMaps("/proc", p.pid)
	if err != nil {
		t.Fatal(err)
	}
	libc := findMapping(maps, p.addrs[1])
	if libc == nil {
		t.Fatalf("no mapping holds libc's read at %#x", p.addrs[1])
	}
	return Image{Dev: st.Dev, Ino: st.Ino, StartCode: start, MmapBase: libc.start - libc.off}
}

// TestResolveImageAfterExit: the frames of a process that is gone are
// symbolized by the layout of an earlier process of the same executable,
// and a second process of a program seen before is symbolized without
// opening its files again.
func TestResolveImageAfterExit(t *testing.T) {
	bin := buildC(t, "pie", "-fPIE", "-pie")
	r := NewResolver("/proc")
	p1 := start(t, bin)
	f1 := r.ResolveImage(p1.pid, imageOf(t, bin, p1), p1.addrs)
	if f1[0].Func != "holter_symbol_test_spin" || f1[1].Func == "" {
		t.Fatalf("frames of a live process: %+v", f1)
	}
	opens := r.opens.Load()
	p2 := start(t, bin)
	if f := r.ResolveImage(p2.pid, imageOf(t, bin, p2), p2.addrs); f[0].Func != "holter_symbol_test_spin" || f[1].Func != f1[1].Func {
		t.Fatalf("frames of a second live process: %+v", f)
	}
	if got := r.opens.Load(); got != opens {
		t.Errorf("a second process of the same program opened %d mapped files again", got-opens)
	}

	p3 := start(t, bin)
	img := imageOf(t, bin, p3)
	if img.StartCode == imageOf(t, bin, p1).StartCode {
		t.Log("the two processes' executables were loaded at the same place (no randomisation?)")
	}
	p3.stop()
	r.revalidate = 0
	f3 := r.ResolveImage(p3.pid, img, p3.addrs)
	if f3[0].Func != "holter_symbol_test_spin" || f3[0].Addr != p3.addrs[0] {
		t.Errorf("executable frame of a process gone = %+v, want holter_symbol_test_spin at %#x", f3[0], p3.addrs[0])
	}
	if f3[1].Func != f1[1].Func || f3[1].Module != f1[1].Module {
		t.Errorf("libc frame of a process gone = %+v, want %s in %s", f3[1], f1[1].Func, f1[1].Module)
	}
	if got := r.ExeImage(p3.pid, img); got != bin {
		t.Errorf("ExeImage of a process gone = %q, want %q", got, bin)
	}
	other := img
	other.Ino++
	for i, f := range r.ResolveImage(p3.pid, other, p3.addrs) {
		if f.Func != "" {
			t.Errorf("frame %d of a gone process of an executable never seen = %+v, want unresolved", i, f)
		}
	}
}

// TestResolveBinaryRewrittenInPlace: a program rebuilt or copied over at
// its path keeps its device and inode, which is all /proc/PID/maps names
// it by; the next process running it is resolved by its own symbols, not
// the cached ones of the program that was there before.
func TestResolveBinaryRewrittenInPlace(t *testing.T) {
	first := buildC(t, "pie", "-fPIE", "-pie")
	src := filepath.Join(buildDir, "renamed.c")
	if err := os.WriteFile(src, []byte(strings.ReplaceAll(cProgram, "holter_symbol_test_spin", "holter_symbol_test_other")), 0o644); err != nil {
		t.Fatal(err)
	}
	second := filepath.Join(buildDir, "c-renamed")
	if out, err := exec.Command("gcc", "-O1", "-fPIE", "-pie", "-o", second, src, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	bin := filepath.Join(buildDir, "c-rewritten")
	r := NewResolver("/proc")
	for _, c := range []struct{ from, want string }{{first, "holter_symbol_test_spin"}, {second, "holter_symbol_test_other"}} {
		data, err := os.ReadFile(c.from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil { // the same inode, truncated and written
			t.Fatal(err)
		}
		p := start(t, bin)
		if f := r.Resolve(p.pid, []uint64{p.addrs[0] + 7})[0]; f.Func != c.want {
			t.Errorf("%s copied over %s: frame %+v, want %s", filepath.Base(c.from), bin, f, c.want)
		}
		p.stop()
	}
}
