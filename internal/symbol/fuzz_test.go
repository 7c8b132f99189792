package symbol

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"strings"
	"testing"
)

// FuzzELF reads what it is given as an ELF file, as the resolver reads a
// mapped file: its build id, load segments and function symbols. Nothing
// may panic, and a symbol found for an address must contain it. Seeded
// with a real binary, truncated and with its section headers removed (the
// build id is then read from the PT_NOTE segments).
func FuzzELF(f *testing.F) {
	for _, path := range []string{"/usr/bin/true", "/bin/true"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		f.Add(b)
		for _, n := range []int{16, 64, 1 << 10, 4 << 10, len(b) / 2} {
			if n < len(b) {
				f.Add(b[:n])
			}
		}
		if len(b) > 0x40 && b[elf.EI_CLASS] == byte(elf.ELFCLASS64) {
			noSections := bytes.Clone(b)
			binary.LittleEndian.PutUint64(noSections[0x28:], 0) // e_shoff
			binary.LittleEndian.PutUint16(noSections[0x3c:], 0) // e_shnum
			f.Add(noSections)
		}
		break
	}
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		id := gnuBuildID(ef)
		o, err := newELFObject(ef, id, ef)
		if err != nil {
			return
		}
		for _, s := range o.segs {
			if va, ok := o.vaddr(s.off, s.exec); ok {
				checkLookup(t, o, va)
			}
		}
		for i := range min(o.syms.len(), 64) {
			s := o.syms.sym(i)
			checkLookup(t, o, s.start)
			if s.end > s.start {
				checkLookup(t, o, s.end-1)
			}
		}
	})
}

func checkLookup(t *testing.T, o *elfObject, va uint64) {
	if s, ok := o.lookup(va); ok && (va < s.start || va >= s.end) {
		t.Fatalf("lookup(%#x) = %s [%#x, %#x), which does not contain it", va, s.name, s.start, s.end)
	}
}

// FuzzProcMaps parses what it is given as /proc/PID/maps and as
// /proc/PID/stat: no panic, and a mapping found for an address contains it.
func FuzzProcMaps(f *testing.F) {
	f.Add("55d0c0a00000-55d0c0a02000 r--p 00000000 fd:01 1234   /usr/bin/cat\n"+
		"55d0c0a02000-55d0c0a07000 r-xp 00002000 fd:01 1234   /usr/bin/cat\n"+
		"7f12a000-7f12b000 r-xp 00001000 fd:01 99 /usr/lib/libc.so.6 (deleted)\n"+
		"7ffd1000-7ffd3000 r-xp 00000000 00:00 0   [vdso]\n"+
		"7ffd4000-7ffd5000 rw-p 00000000 00:00 0\n", uint64(0x55d0c0a03000))
	if b, err := os.ReadFile("/proc/self/maps"); err == nil {
		f.Add(string(b), uint64(0x400000))
	}
	f.Add("4242 (a) b) c) S 1 4242 4242 0 -1 4194560 105 0 0 0 0 0 0 0 20 0 1 0 123456 1000 100", uint64(4))
	f.Add("", uint64(0))
	f.Fuzz(func(t *testing.T, text string, addr uint64) {
		if maps, err := parseMaps(strings.NewReader(text)); err == nil {
			if m := findMapping(maps, addr); m != nil && (addr < m.start || addr >= m.end) {
				t.Fatalf("findMapping(%#x) = [%#x, %#x), which does not contain it", addr, m.start, m.end)
			}
		}
		StatField([]byte(text), int(addr%64))
	})
}

// FuzzKallsyms parses what it is given as /proc/kallsyms: no panic, and a
// symbol found for an address contains it.
func FuzzKallsyms(f *testing.F) {
	b, err := os.ReadFile("testdata/kallsyms")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b), uint64(0xffffffff81000190))
	f.Add("ffffffffffffffff T top\n0 T zero\n", uint64(0xffffffffffffffff))
	f.Fuzz(func(t *testing.T, text string, addr uint64) {
		k, err := parseKallsyms(strings.NewReader(text))
		if err != nil {
			return
		}
		if fr := k.Resolve(addr); fr.Func != "" && fr.Offset > addr {
			t.Fatalf("Resolve(%#x) = %s+%#x, past the address", addr, fr.Func, fr.Offset)
		}
	})
}
