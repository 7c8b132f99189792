package symbol

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
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
	syms    []elfSym // sorted by start, one per address
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
	i := sort.Search(len(o.syms), func(i int) bool { return o.syms[i].start > va }) - 1
	if i < 0 || va >= o.syms[i].end {
		return elfSym{}, false
	}
	return o.syms[i], true
}

// candSym is a function symbol before de-duplication.
type candSym struct {
	start, size uint64
	name        string
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

	syms, err := symSrc.Symbols()
	if errors.Is(err, elf.ErrNoSymbols) || (err == nil && countFuncs(syms) == 0) {
		syms, err = symSrc.DynamicSymbols()
	}
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("read symbols: %w", err)
	}
	var cands []candSym
	for _, s := range syms {
		if !isFunc(s) {
			continue
		}
		rank := 2
		switch elf.ST_BIND(s.Info) {
		case elf.STB_GLOBAL:
			rank = 0
		case elf.STB_WEAK:
			rank = 1
		}
		cands = append(cands, candSym{start: s.Value, size: s.Size, name: s.Name, rank: rank})
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
		au, bu := leadingUnderscores(a.name), leadingUnderscores(b.name)
		if au != bu {
			return au < bu
		}
		return a.name < b.name
	})
	o.syms = make([]elfSym, 0, len(cands))
	sizes := make([]uint64, 0, len(cands))
	for _, c := range cands {
		if n := len(o.syms); n > 0 && o.syms[n-1].start == c.start {
			sizes[n-1] = max(sizes[n-1], c.size)
			continue
		}
		// C++ and Rust names are stored as people read them (see demangle).
		o.syms = append(o.syms, elfSym{start: c.start, name: demangle(c.name)})
		sizes = append(sizes, c.size)
	}
	packNames(len(o.syms), func(i int) *string { return &o.syms[i].name })
	for i := range o.syms {
		s := &o.syms[i]
		switch {
		case sizes[i] > 0:
			s.end = s.start + sizes[i]
		case i+1 < len(o.syms):
			s.end = o.syms[i+1].start
		default:
			s.end = o.segEnd(s.start)
		}
	}
	return o, nil
}

// size estimates the bytes o holds.
func (o *elfObject) size() int {
	n := len(o.buildID) + len(o.segs)*int(unsafe.Sizeof(loadSeg{})) + len(o.syms)*int(unsafe.Sizeof(elfSym{}))
	for _, s := range o.syms {
		n += len(s.name)
	}
	return n
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

// packNames copies the n strings name(i) points at into one allocation
// and points them into it: a symbol table's names cost their bytes, not an
// allocation each, nor whatever larger string they were cut from.
func packNames(n int, name func(i int) *string) {
	size := 0
	for i := range n {
		size += len(*name(i))
	}
	var b strings.Builder
	b.Grow(size)
	for i := range n {
		b.WriteString(*name(i))
	}
	all, off := b.String(), 0
	for i := range n {
		p := name(i)
		l := len(*p)
		*p = all[off : off+l]
		off += l
	}
}

func isFunc(s elf.Symbol) bool {
	t := elf.ST_TYPE(s.Info)
	// STT_GNU_IFUNC shares its value with STT_LOOS.
	return (t == elf.STT_FUNC || t == elf.STT_LOOS) && s.Section != elf.SHN_UNDEF && s.Value != 0
}

func countFuncs(syms []elf.Symbol) int {
	n := 0
	for _, s := range syms {
		if isFunc(s) {
			n++
		}
	}
	return n
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
