package symbol

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"unsafe"
)

// ErrNoBuildID is returned by BuildID for ELF files without a GNU build id note.
var ErrNoBuildID = errors.New("no gnu build id")

const ntGNUBuildID = 3 // NT_GNU_BUILD_ID

// maxNoteSize bounds how much of a note section or segment is read when looking for the build id.
const maxNoteSize = 1 << 20

// BuildID returns the GNU build id of the ELF file at path as a lowercase hex string.
func BuildID(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open elf: %w", err)
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return "", fmt.Errorf("parse elf %s: %w", path, err)
	}
	id := gnuBuildID(ef)
	if id == "" {
		return "", fmt.Errorf("build id of %s: %w", path, ErrNoBuildID)
	}
	return id, nil
}

// gnuBuildID finds the NT_GNU_BUILD_ID note in the note sections or, for files without section headers,
// in the PT_NOTE segments. It returns "" when there is none.
func gnuBuildID(ef *elf.File) string {
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_NOTE || s.Size > maxNoteSize {
			continue
		}
		data, err := s.Data()
		if err != nil {
			continue
		}
		if id := findBuildIDNote(data, ef.ByteOrder, s.Addralign); id != "" {
			return id
		}
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > maxNoteSize {
			continue
		}
		data, err := io.ReadAll(p.Open())
		if err != nil {
			continue
		}
		if id := findBuildIDNote(data, ef.ByteOrder, p.Align); id != "" {
			return id
		}
	}
	return ""
}

// findBuildIDNote walks a sequence of ELF notes (header: namesz, descsz, type; then name and desc,
// each padded to the note alignment) and returns the GNU build id in hex.
func findBuildIDNote(data []byte, bo binary.ByteOrder, align uint64) string {
	if align != 8 {
		align = 4
	}
	alignUp := func(v uint64) uint64 { return (v + align - 1) &^ (align - 1) }
	for len(data) >= 12 {
		namesz := uint64(bo.Uint32(data[0:]))
		descsz := uint64(bo.Uint32(data[4:]))
		typ := bo.Uint32(data[8:])
		descOff := alignUp(12 + namesz)
		if descOff > uint64(len(data)) || descsz > uint64(len(data))-descOff {
			return ""
		}
		name := data[12 : 12+namesz]
		desc := data[descOff : descOff+descsz]
		if typ == ntGNUBuildID && string(name) == "GNU\x00" && len(desc) > 0 {
			return hex.EncodeToString(desc)
		}
		next := alignUp(descOff + descsz)
		if next >= uint64(len(data)) {
			return ""
		}
		data = data[next:]
	}
	return ""
}

// elfObject is the parsed, immutable symbol information of one ELF file.
type elfObject struct {
	buildID string
	segs    []loadSeg
	syms    symTable
}

type loadSeg struct {
	off, vaddr, filesz, memsz uint64
	exec                      bool
}

type elfSym struct {
	start, end uint64 // [start, end) in ELF virtual addresses
	name       string
}

// vaddr converts a file offset into the ELF virtual address, using the PT_LOAD segment whose file image
// contains the offset. When segments overlap in the file (the page shared by text and data in older
// layouts), the one whose executability matches the mapping wins.
func (o *elfObject) vaddr(fileOff uint64, exec bool) (uint64, bool) {
	found := false
	var va uint64
	for _, s := range o.segs {
		if fileOff < s.off || fileOff-s.off >= s.filesz {
			continue
		}
		v := fileOff - s.off + s.vaddr
		if s.exec == exec {
			return v, true
		}
		if !found {
			va, found = v, true
		}
	}
	return va, found
}

// lookup returns the function symbol containing the virtual address va.
func (o *elfObject) lookup(va uint64) (elfSym, bool) {
	t := &o.syms
	i := sort.Search(len(t.starts), func(i int) bool { return t.starts[i] > va }) - 1
	if i < 0 || va >= t.end(i) {
		return elfSym{}, false
	}
	return t.sym(i), true
}

// symTable is an object's function symbols, sorted by start, one per
// address, held in columns: a start, a size and a name a symbol. The names
// are front-coded: each says how many bytes it shares with the one before
// and stores the rest, from a full name every symRestart symbols. Names
// in address order share long prefixes (a Go package's path, a C++
// namespace and class), so a table takes a third or less of its names'
// bytes; a look-up decodes at most symRestart of them. An object with a
// large string table (namesInFileAbove) keeps only where each name is in
// it, and reads the name from its file at a look-up.
type symTable struct {
	starts []uint64
	sizes  []uint32 // 0: up to the next symbol, or the segment's end
	// names holds each name as uvarint(shared), uvarint(len(rest)), rest;
	// restarts[i] is where the name of symbol i*symRestart begins.
	names    []byte
	restarts []uint32
	// file is the string table the names are read from, at nameOffs,
	// when they are not held.
	file     *strTab
	nameOffs []uint32
	segEnd   []uint64 // of the last symbol, when its size is 0
}

const symRestart = 16

func (t *symTable) len() int { return len(t.starts) }

// end is where symbol i ends.
func (t *symTable) end(i int) uint64 {
	switch {
	case t.sizes[i] > 0:
		return t.starts[i] + uint64(t.sizes[i])
	case i+1 < len(t.starts):
		return t.starts[i+1]
	case len(t.segEnd) > 0:
		return t.segEnd[0]
	}
	return t.starts[i] + 1
}

// sym is symbol i.
func (t *symTable) sym(i int) elfSym {
	return elfSym{start: t.starts[i], end: t.end(i), name: t.name(i)}
}

// name decodes symbol i's name from its restart point, or reads it from
// the file (as people read it: see demangle).
func (t *symTable) name(i int) string {
	if t.file != nil {
		return demangle(t.file.at(t.nameOffs[i]))
	}
	var buf []byte
	off := int(t.restarts[i/symRestart])
	for range i%symRestart + 1 {
		shared, n := binary.Uvarint(t.names[off:])
		off += n
		rest, n := binary.Uvarint(t.names[off:])
		off += n
		buf = append(buf[:shared], t.names[off:off+int(rest)]...)
		off += int(rest)
	}
	return string(buf)
}

// add appends a symbol whose start is at or after the last one's.
func (t *symTable) add(start, size uint64, name, prev string) {
	i := len(t.starts)
	t.starts = append(t.starts, start)
	t.sizes = append(t.sizes, uint32(min(size, 1<<32-1)))
	shared := 0
	if i%symRestart == 0 {
		t.restarts = append(t.restarts, uint32(len(t.names)))
	} else {
		for shared < len(name) && shared < len(prev) && name[shared] == prev[shared] {
			shared++
		}
	}
	t.names = binary.AppendUvarint(t.names, uint64(shared))
	t.names = binary.AppendUvarint(t.names, uint64(len(name)-shared))
	t.names = append(t.names, name[shared:]...)
}

// addInFile appends a symbol whose name stays in t.file, at off.
func (t *symTable) addInFile(start, size uint64, off uint32) {
	t.starts = append(t.starts, start)
	t.sizes = append(t.sizes, uint32(min(size, 1<<32-1)))
	t.nameOffs = append(t.nameOffs, off)
}

// trim gives the columns their final sizes: they are kept for as long as
// the object is cached.
func (t *symTable) trim() {
	t.starts, t.sizes = slices.Clip(t.starts), slices.Clip(t.sizes)
	t.names, t.restarts = slices.Clip(t.names), slices.Clip(t.restarts)
	t.nameOffs = slices.Clip(t.nameOffs)
}

// inFile reports whether t reads its names from its file, which must
// then stay open for as long as t is used.
func (t *symTable) inFile() bool { return t.file != nil }

// size estimates the bytes t holds.
func (t *symTable) size() int {
	return 12*len(t.starts) + len(t.names) + 4*len(t.restarts) + 4*len(t.nameOffs)
}

// candSym is a function symbol before de-duplication.
type candSym struct {
	start, size uint64
	name        uint32 // in the string table
	rank        int
}

// newELFObject extracts load segments from ef and function symbols from symSrc (ef itself, or a separate
// debug file with the same build id).
func newELFObject(ef *elf.File, buildID string, symSrc *elf.File) (*elfObject, error) {
	o := &elfObject{buildID: buildID}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		o.segs = append(o.segs, loadSeg{
			off: p.Off, vaddr: p.Vaddr, filesz: p.Filesz, memsz: p.Memsz,
			exec: p.Flags&elf.PF_X != 0,
		})
	}
	if len(o.segs) == 0 {
		return nil, errors.New("no loadable segments")
	}

	cands, str, err := funcSymbols(symSrc)
	if err != nil {
		return nil, fmt.Errorf("read symbols: %w", err)
	}
	names := map[uint32]string{}
	nameOf := func(off uint32) string {
		n, ok := names[off]
		if !ok {
			n = str.at(off)
			names[off] = n
		}
		return n
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.start != b.start {
			return a.start < b.start
		}
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		// Prefer the plain name over internal aliases such as __libc_read.
		an, bn := nameOf(a.name), nameOf(b.name)
		au, bu := leadingUnderscores(an), leadingUnderscores(bn)
		if au != bu {
			return au < bu
		}
		return an < bn
	})
	if str.r != nil {
		o.syms.file = str
		o.syms.starts = make([]uint64, 0, len(cands))
		o.syms.sizes = make([]uint32, 0, len(cands))
		o.syms.nameOffs = make([]uint32, 0, len(cands))
	}
	prev := ""
	for i := 0; i < len(cands); {
		// The symbols at one address: the first named, the largest size.
		c, size := cands[i], cands[i].size
		for i++; i < len(cands) && cands[i].start == c.start; i++ {
			size = max(size, cands[i].size)
		}
		if o.syms.inFile() {
			o.syms.addInFile(c.start, size, c.name)
			continue
		}
		// C++ and Rust names are stored as people read them (see demangle).
		name := demangle(str.at(c.name))
		o.syms.add(c.start, size, name, prev)
		prev = name
	}
	if n := o.syms.len(); n > 0 && o.syms.sizes[n-1] == 0 {
		o.syms.segEnd = []uint64{o.segEnd(o.syms.starts[n-1])}
	}
	o.syms.trim()
	return o, nil
}

// size estimates the bytes o holds.
func (o *elfObject) size() int {
	return len(o.buildID) + len(o.segs)*int(unsafe.Sizeof(loadSeg{})) + o.syms.size()
}

// segEnd returns the end of the memory image of the segment containing va, or va+1 if none does.
func (o *elfObject) segEnd(va uint64) uint64 {
	for _, s := range o.segs {
		if va >= s.vaddr && va-s.vaddr < s.memsz {
			return s.vaddr + s.memsz
		}
	}
	return va + 1
}

func isFunc(info uint8, section elf.SectionIndex, value uint64) bool {
	t := elf.ST_TYPE(info)
	// STT_GNU_IFUNC shares its value with STT_LOOS.
	return (t == elf.STT_FUNC || t == elf.STT_LOOS) && section != elf.SHN_UNDEF && value != 0
}

func leadingUnderscores(s string) int {
	return len(s) - len(strings.TrimLeft(s, "_"))
}

// hasSymtab reports whether ef carries a full (non-dynamic) symbol table.
func hasSymtab(ef *elf.File) bool {
	for _, s := range ef.Sections {
		if s.Type == elf.SHT_SYMTAB {
			return true
		}
	}
	return false
}
