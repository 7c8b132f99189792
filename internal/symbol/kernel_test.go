package symbol

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestKernelFixture(t *testing.T) {
	k, err := LoadKernel(filepath.Join("testdata", "kallsyms"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr   uint64
		fn     string
		off    uint64
		module string
	}{
		// Outside: below the first symbol, user addresses.
		{0x1000, "", 0, ""},
		{0xffffffff80ffffff, "", 0, ""},
		// Inside symbols; the global name wins over a local alias at the same address.
		{0xffffffff81000000, "_stext", 0, "vmlinux"},
		{0xffffffff810000ff, "_stext", 0xff, "vmlinux"},
		{0xffffffff81000100, "helper_local", 0, "vmlinux"},
		{0xffffffff81000184, "do_work", 4, "vmlinux"},
		{0xffffffff81000250, "weak_func", 0x50, "vmlinux"},
		// Between text symbols: covered by a data symbol.
		{0xffffffff81000300, "", 0, ""},
		{0xffffffff81000350, "", 0, ""},
		{0xffffffff81000410, "late_func", 0x10, "vmlinux"},
		{0xffffffff81000fff, "late_func", 0xbff, "vmlinux"},
		{0xffffffff81001010, "", 0, ""},
		// Modules.
		{0xffffffffc0001004, "mod_init_fn", 4, "mymod"},
		{0xffffffffc0001090, "mod_func", 0x10, "mymod"},
		{0xffffffffc0002010, "", 0, ""},
		{0xffffffffc0003010, "other_mod_func", 0x10, "other"},
		// Far beyond the last symbol of the table.
		{0xffffffffc0003000 + 1<<20, "", 0, ""},
	}
	for _, tt := range tests {
		f := k.Resolve(tt.addr)
		if f.Addr != tt.addr || f.Func != tt.fn || f.Offset != tt.off || f.Module != tt.module {
			t.Errorf("Resolve(%#x) = %+v, want func %q off %#x module %q", tt.addr, f, tt.fn, tt.off, tt.module)
		}
	}
	if got, want := k.Resolve(0xffffffffc0001090).String(), "mod_func+0x10 [mymod]"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := k.Resolve(0x1000).String(), "0x1000 [unknown]"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestKernelHiddenAddresses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kallsyms")
	data := "0000000000000000 T _stext\n0000000000000000 T schedule\n0000000000000000 t foo\t[mod]\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadKernel(path)
	if !errors.Is(err, ErrAddressesHidden) {
		t.Fatalf("LoadKernel error = %v, want ErrAddressesHidden", err)
	}
}

func TestKernelMalformed(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		"empty":   "",
		"badaddr": "zzzz T foo\n",
		"notype":  "ffffffff81000000\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKernel(path); err == nil {
			t.Errorf("%s: LoadKernel succeeded, want error", name)
		}
	}
	if _, err := LoadKernel(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: error %v, want os.ErrNotExist", err)
	}
}

func TestKernelProcKallsyms(t *testing.T) {
	const path = "/proc/kallsyms"
	addr := findKallsyms(t, path, "schedule")
	if addr == 0 {
		t.Skip("kallsyms addresses hidden; run as root")
	}
	k, err := LoadKernel(path)
	if err != nil {
		t.Fatal(err)
	}
	f := k.Resolve(addr + 4)
	if f.Func != "schedule" || f.Offset != 4 || f.Module != "vmlinux" {
		t.Fatalf("Resolve(schedule+4) = %v, want schedule+0x4 [vmlinux]", f)
	}
	t.Logf("%v", f)
}

// findKallsyms returns the address of the core-kernel text symbol name in a kallsyms file.
func findKallsyms(t *testing.T, path, name string) uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Skipf("no kallsyms: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[2] == name && strings.ContainsAny(fields[1], "tT") {
			addr, err := strconv.ParseUint(fields[0], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return addr
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("%s not found in %s", name, path)
	return 0
}

// TestKernelNamesAsInKallsyms resolves the address of every function in
// this machine's kallsyms and wants its name back as the file gives it:
// the names are held coded as words (nameWords), and every one must
// decode whole. It reports what the names take coded and as text.
func TestKernelNamesAsInKallsyms(t *testing.T) {
	const path = "/proc/kallsyms"
	if findKallsyms(t, path, "schedule") == 0 {
		t.Skip("kallsyms addresses hidden; run as root")
	}
	k, err := LoadKernel(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The names kallsyms gives each address, for the addresses that
	// carry only text symbols of one name (aliases leave a choice).
	names := map[uint64]string{}
	ambiguous := map[uint64]bool{}
	text, raw := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		addr, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.ContainsAny(fields[1], "tTwW") {
			ambiguous[addr] = true
			continue
		}
		text++
		raw += len(fields[2])
		if n, ok := names[addr]; ok && n != fields[2] {
			ambiguous[addr] = true
		}
		names[addr] = fields[2]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for addr, name := range names {
		if ambiguous[addr] {
			continue
		}
		if got := k.Resolve(addr).Func; got != name {
			t.Fatalf("Resolve(%#x) = %q, want %q", addr, got, name)
		}
		checked++
	}
	if checked < text/2 {
		t.Fatalf("only %d of %d functions checked", checked, text)
	}
	coded := len(k.names) + len(k.words.text) + 4*len(k.words.end)
	t.Logf("%d functions checked of %d; names %d bytes as text, %d coded (%d distinct words)", checked, text, raw, coded, len(k.words.end))
	if coded >= raw {
		t.Errorf("coded names take %d bytes, as text %d", coded, raw)
	}
}
