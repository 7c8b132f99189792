package symbol

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestSymTableFrontCoding: names that share prefixes with the one before,
// none, all of it, or are a prefix of it, across restart points, come
// back as they went in, with their ends.
func TestSymTableFrontCoding(t *testing.T) {
	var tab symTable
	var names []string
	prev := ""
	for i := range 3*symRestart + 5 {
		var name string
		switch i % 5 {
		case 0:
			name = fmt.Sprintf("github.com/x/y/pkg%d.(*T).Method%d", i/10, i)
		case 1:
			name = prev // an alias at another address
		case 2:
			name = prev[:len(prev)/2] // a prefix of the one before
		case 3:
			name = fmt.Sprintf("duckdb::Class%d::~Class%d", i, i)
		case 4:
			name = "" // unnamed
		}
		size := uint64(0)
		if i%3 == 0 {
			size = 8
		}
		tab.add(uint64(0x1000+16*i), size, name, prev)
		names, prev = append(names, name), name
	}
	tab.segEnd = []uint64{0x9000}
	tab.trim()
	for i, want := range names {
		s := tab.sym(i)
		wantEnd := uint64(0x1000 + 16*(i+1))
		switch {
		case i%3 == 0:
			wantEnd = s.start + 8
		case i == len(names)-1:
			wantEnd = 0x9000
		}
		if s.name != want || s.start != uint64(0x1000+16*i) || s.end != wantEnd {
			t.Errorf("symbol %d: %q [%#x, %#x), want %q [%#x, %#x)", i, s.name, s.start, s.end, want, 0x1000+16*i, wantEnd)
		}
	}
}

// An object whose names stay in its file looks up what one that holds
// them does, symbol for symbol, and both have every function symbol of
// the file's table, by debug/elf's reading of it: Go's compiler, whose
// string table is large enough that its names stay in the file by
// default, and the C library.
func TestSymbolNamesInFileAgreeWithNamesHeld(t *testing.T) {
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatal(err)
	}
	compiler := filepath.Join(strings.TrimSpace(string(goroot)), "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH, "compile")
	if o, err := newELFObjectAt(compiler); err != nil || !o.syms.inFile() {
		t.Fatalf("%s: names in the file by default: %v (%v)", compiler, err == nil && o.syms.inFile(), err)
	}
	for _, path := range []string{compiler, systemLibc(t)} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ef, err := elf.NewFile(f)
		if err != nil {
			t.Fatal(err)
		}
		parse := func(above uint64) *elfObject {
			defer func(old uint64) { namesInFileAbove = old }(namesInFileAbove)
			namesInFileAbove = above
			o, err := newELFObject(ef, gnuBuildID(ef), ef)
			if err != nil {
				t.Fatal(err)
			}
			return o
		}
		held, inFile := parse(1<<62), parse(0)
		if held.syms.inFile() || !inFile.syms.inFile() {
			t.Fatalf("%s: names in the file %v and %v, want false and true", path, held.syms.inFile(), inFile.syms.inFile())
		}
		syms, err := ef.Symbols()
		if errors.Is(err, elf.ErrNoSymbols) {
			syms, err = ef.DynamicSymbols()
		}
		if err != nil {
			t.Fatal(err)
		}
		starts := map[uint64]bool{}
		for _, s := range syms {
			if isFunc(s.Info, s.Section, s.Value) {
				starts[s.Value] = true
			}
		}
		if held.syms.len() != len(starts) || inFile.syms.len() != len(starts) {
			t.Fatalf("%s: %d and %d symbols, want %d", path, held.syms.len(), inFile.syms.len(), len(starts))
		}
		for i := range held.syms.len() {
			if a, b := held.syms.sym(i), inFile.syms.sym(i); a != b || a.name == "" && i > 0 && held.syms.sizes[i] > 0 {
				t.Fatalf("%s: symbol %d held %+v, in the file %+v", path, i, a, b)
			}
		}
		t.Logf("%s: %d symbols, %d bytes held, %d with names in the file", path, held.syms.len(), held.size(), inFile.size())
	}
}

// newELFObjectAt parses the object at path, which stays open while the
// object is used.
func newELFObjectAt(path string) (*elfObject, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, err
	}
	return newELFObject(ef, gnuBuildID(ef), ef)
}
