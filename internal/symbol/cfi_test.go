package symbol

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestFrameSizeAgreesWithReadelf: the CFA that cfaAt reads from the C
// library's call frame information, at the start of each row of its
// unwind tables and at the last byte the row covers, is the one binutils'
// readelf interprets there: the stack pointer plus the same offset, or
// none where readelf has another register or an expression.
func TestFrameSizeAgreesWithReadelf(t *testing.T) {
	lib := systemLibc(t)
	// readelf exits 1 after dumping the frames of some C libraries (2.36's
	// among them), saying nothing: its output is what counts.
	out, err := exec.Command("readelf", "--debug-dump=frames-interp", lib).Output()
	if len(out) == 0 {
		t.Fatalf("readelf --debug-dump=frames-interp %s: %v", lib, err)
	}
	ef, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	f, err := os.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	type row struct {
		pc  uint64
		cfa string
	}
	var rows []row
	fdeLine := regexp.MustCompile(`^[0-9a-f]+ [0-9a-f]+ [0-9a-f]+ FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.([0-9a-f]+)`)
	rowLine := regexp.MustCompile(`^([0-9a-f]{16}) (\S+)`)
	var fdeRows []row
	var end uint64
	flush := func() {
		if len(fdeRows) == 0 {
			return
		}
		// Each row at its start and at the last byte before the next.
		for i, r := range fdeRows {
			rows = append(rows, r)
			last := end - 1
			if i+1 < len(fdeRows) {
				last = fdeRows[i+1].pc - 1
			}
			if last > r.pc {
				rows = append(rows, row{last, r.cfa})
			}
		}
		fdeRows = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	inFDE := false
	for sc.Scan() {
		line := sc.Text()
		if m := fdeLine.FindStringSubmatch(line); m != nil {
			flush()
			begin, _ := strconv.ParseUint(m[1], 16, 64)
			end, _ = strconv.ParseUint(m[2], 16, 64)
			// An FDE readelf prints no rows for has its CIE's: rsp+8
			// in every CIE of the C library.
			fdeRows = []row{{begin, "rsp+8"}}
			inFDE = true
			continue
		}
		if m := rowLine.FindStringSubmatch(line); m != nil && inFDE {
			pc, _ := strconv.ParseUint(m[1], 16, 64)
			if len(fdeRows) == 1 && fdeRows[0].pc == pc {
				fdeRows = fdeRows[:0]
			}
			fdeRows = append(fdeRows, row{pc, m[2]})
			continue
		}
		if line == "" {
			continue
		}
		if !rowLine.MatchString(line) && line[0] != ' ' {
			flush()
			inFDE = false
		}
	}
	flush()
	if len(rows) < 1000 {
		t.Fatalf("readelf gave %d rows of %s's unwind tables, want thousands", len(rows), lib)
	}
	step := max(1, len(rows)/4000)
	var checked, sized int
	for i := 0; i < len(rows); i += step {
		r := rows[i]
		off, ok := fileOffsetOf(ef, r.pc)
		if !ok {
			continue
		}
		got, err := cfaAt(f, off)
		checked++
		// A CFA at the stack pointer itself (vfork's, once it popped its
		// return address) has no return address below it: none.
		if n, isRSP := cutPrefixNumber(r.cfa, "rsp+"); isRSP && n >= 8 {
			sized++
			if err != nil || got != n {
				t.Errorf("%s at 0x%x: CFA %d (%v), readelf says %s", filepath.Base(lib), r.pc, got, err, r.cfa)
			}
		} else if !errors.Is(err, errNoCFI) {
			t.Errorf("%s at 0x%x: CFA %d (%v), readelf says %s: want none", filepath.Base(lib), r.pc, got, err, r.cfa)
		}
		if t.Failed() && checked > 20 {
			t.FailNow()
		}
	}
	t.Logf("%d places of %s checked, %d of them with the CFA at the stack pointer plus a constant", checked, lib, sized)
	// Past every function: none.
	if _, err := cfaAt(f, 0); !errors.Is(err, errNoCFI) {
		t.Errorf("CFA at offset 0 (the ELF header): %v, want errNoCFI", err)
	}
	if _, err := cfaAt(bytes.NewReader([]byte("not an ELF file")), 0); !errors.Is(err, errNoCFI) {
		t.Errorf("CFA in a file that is not ELF: %v, want errNoCFI", err)
	}
}

// systemLibc is the path of the machine's C library.
func systemLibc(t *testing.T) string {
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib64/libc.so.6"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("no C library at its usual paths")
	return ""
}

// fileOffsetOf is the file offset that virtual address a of ef is loaded
// from.
func fileOffsetOf(ef *elf.File, a uint64) (uint64, bool) {
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && a >= p.Vaddr && a < p.Vaddr+p.Filesz {
			return a - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}

func cutPrefixNumber(s, prefix string) (uint64, bool) {
	if len(s) <= len(prefix) || s[:len(prefix)] != prefix {
		return 0, false
	}
	n, err := strconv.ParseUint(s[len(prefix):], 10, 64)
	return n, err == nil
}
