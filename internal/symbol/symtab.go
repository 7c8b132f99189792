package symbol

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
)

// namesInFileAbove is the size of a string table past which an object's
// names stay in its file, read when a look-up needs one (symTable.file),
// rather than held: a Go binary with DuckDB linked in (holter itself,
// which an idle host's samples reach as soon as anyone runs its CLI) has
// 9 MB of them, 5 MB front-coded, and reading them all made a transient
// of some 30 MB in a recorder whose whole heap is half that.
var namesInFileAbove uint64 = 1 << 20

// maxSymbolName bounds a name read from a string table.
const maxSymbolName = 64 << 10

// strTab is an ELF string table, in memory (data) or read from its file
// at each name (r, of size bytes).
type strTab struct {
	data []byte
	r    io.ReaderAt
	size uint64
}

// at is the NUL-terminated name at off, "" where there is none.
func (s *strTab) at(off uint32) string {
	if uint64(off) >= s.size {
		return ""
	}
	if s.r == nil {
		b := s.data[off:]
		if i := bytes.IndexByte(b, 0); i >= 0 {
			b = b[:i]
		}
		return string(b)
	}
	var name []byte
	buf := make([]byte, 256)
	for pos := uint64(off); pos < s.size && len(name) < maxSymbolName; {
		n, err := s.r.ReadAt(buf[:min(uint64(len(buf)), s.size-pos)], int64(pos))
		if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
			return string(append(name, buf[:i]...))
		}
		name = append(name, buf[:n]...)
		pos += uint64(n)
		if err != nil || n == 0 {
			break
		}
	}
	return string(name)
}

// funcSymbols reads ef's function symbols, unsorted, with their names'
// string table: those of its symbol table, or of its dynamic one where
// the first is missing or has none. The table is read from the file, one
// entry at a time into the candidates: a name is the offset of its
// string, which stays in the file when the table is large (strTab).
func funcSymbols(ef *elf.File) ([]candSym, *strTab, error) {
	cands, str, err := symbolsOfType(ef, elf.SHT_SYMTAB)
	if errors.Is(err, elf.ErrNoSymbols) || (err == nil && len(cands) == 0) {
		cands, str, err = symbolsOfType(ef, elf.SHT_DYNSYM)
	}
	if errors.Is(err, elf.ErrNoSymbols) {
		return nil, &strTab{}, nil
	}
	return cands, str, err
}

func symbolsOfType(ef *elf.File, typ elf.SectionType) ([]candSym, *strTab, error) {
	sec := ef.SectionByType(typ)
	if sec == nil {
		return nil, nil, elf.ErrNoSymbols
	}
	if sec.Link == 0 || int(sec.Link) >= len(ef.Sections) {
		return nil, nil, fmt.Errorf("symbol table %s: no string table", sec.Name)
	}
	strSec := ef.Sections[sec.Link]
	str := &strTab{size: strSec.Size}
	if strSec.Type == elf.SHT_NOBITS {
		str.size = 0
	} else if strSec.Size > namesInFileAbove && strSec.Flags&elf.SHF_COMPRESSED == 0 {
		str.r = strSec
	} else {
		data, err := strSec.Data()
		if err != nil {
			return nil, nil, fmt.Errorf("string table %s: %w", strSec.Name, err)
		}
		str.data, str.size = data, uint64(len(data))
	}
	entSize := 24
	if ef.Class == elf.ELFCLASS32 {
		entSize = 16
	}
	if sec.Type == elf.SHT_NOBITS {
		return nil, str, nil
	}
	rd := sec.Open()
	buf := make([]byte, entSize*1024)
	// As many candidates as entries, at most; a malformed size is not
	// trusted past the file's.
	cands := make([]candSym, 0, min(sec.Size/uint64(entSize), 1<<20))
	first := true
	for {
		n, err := io.ReadFull(rd, buf)
		for b := buf[:n-n%entSize]; len(b) >= entSize; b = b[entSize:] {
			if first { // the null symbol
				first = false
				continue
			}
			var c candSym
			var info uint8
			var shndx uint16
			c.name = ef.ByteOrder.Uint32(b)
			if entSize == 24 {
				info, shndx = b[4], ef.ByteOrder.Uint16(b[6:])
				c.start, c.size = ef.ByteOrder.Uint64(b[8:]), ef.ByteOrder.Uint64(b[16:])
			} else {
				c.start, c.size = uint64(ef.ByteOrder.Uint32(b[4:])), uint64(ef.ByteOrder.Uint32(b[8:]))
				info, shndx = b[12], ef.ByteOrder.Uint16(b[14:])
			}
			if !isFunc(info, elf.SectionIndex(shndx), c.start) {
				continue
			}
			switch elf.ST_BIND(info) {
			case elf.STB_GLOBAL:
				c.rank = 0
			case elf.STB_WEAK:
				c.rank = 1
			default:
				c.rank = 2
			}
			cands = append(cands, c)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return cands, str, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("symbol table %s: %w", sec.Name, err)
		}
	}
}
