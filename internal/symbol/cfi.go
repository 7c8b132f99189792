package symbol

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"sort"
)

// The call frame information of an ELF file's .eh_frame, as far as
// FrameSize needs it: where the frame of the function at one address ends,
// the canonical frame address (CFA), when it is the stack pointer plus a
// constant. It is read for one address at a time, through the sorted
// table of .eh_frame_hdr, so nothing of a file is kept but the answer.

// dwarfRSP is the stack pointer's number in the x86-64 DWARF register
// numbering.
const dwarfRSP = 7

// Pointer encodings (DW_EH_PE_*): the format in the low four bits, what the
// value is relative to in the next three (the top bit says it is the
// address of the pointer, which is never followed here).
const (
	peOmit     = 0xff
	peFormat   = 0x0f
	peRelative = 0x70
	pePCRel    = 0x10
	peDataRel  = 0x30
)

var errNoCFI = errors.New("no call frame information")

// cfaAt reads ELF file f's call frame information for file offset off in
// its code: the CFA there as an offset from the stack pointer, the value
// the stack pointer had before the call into the function that off is
// in, so that its return address is the word at the stack pointer plus
// the offset minus 8. errNoCFI when f has no .eh_frame_hdr table covering
// off, or the CFA there is another register's value (a function that
// keeps a frame pointer), or an expression (a procedure linkage table's
// entries).
func cfaAt(f io.ReaderAt, off uint64) (uint64, error) {
	ef, err := elf.NewFile(f)
	if err != nil {
		return 0, errNoCFI // not an ELF file, or a broken one
	}
	if ef.Machine != elf.EM_X86_64 {
		return 0, errNoCFI
	}
	pc, ok := vaddrOf(ef, off)
	hdr, eh := ef.Section(".eh_frame_hdr"), ef.Section(".eh_frame")
	if !ok || hdr == nil || eh == nil || hdr.Type == elf.SHT_NOBITS || eh.Type == elf.SHT_NOBITS {
		return 0, errNoCFI
	}
	table, err := hdr.Data()
	if err != nil {
		return 0, err
	}
	fde, err := fdeFor(table, hdr.Addr, pc)
	if err != nil {
		return 0, err
	}
	entry := func(at uint64) (cfiReader, error) { return readEntry(eh, at) }
	return cfaIn(entry, fde, pc)
}

// vaddrOf is the virtual address that file offset off of ef is loaded at.
func vaddrOf(ef *elf.File, off uint64) (uint64, bool) {
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// fdeFor is the address of the frame description entry whose code starts
// last at or before pc, from the sorted table of .eh_frame_hdr (its bytes
// b, loaded at addr).
func fdeFor(b []byte, addr, pc uint64) (uint64, error) {
	r := cfiReader{b: b, addr: addr, dataRel: addr}
	if r.u8() != 1 {
		return 0, errNoCFI
	}
	ptrEnc, countEnc, tableEnc := r.u8(), r.u8(), r.u8()
	r.ptr(ptrEnc)
	n := r.ptr(countEnc)
	if r.bad || countEnc == peOmit || tableEnc != peDataRel|0x0b { // datarel sdata4, as linkers write it
		return 0, errNoCFI
	}
	rows := r.b[r.i:]
	if n > uint64(len(rows)/8) {
		return 0, errNoCFI
	}
	at := func(i int) (loc, fde uint64) {
		e := rows[8*i:]
		return addr + uint64(int64(int32(binary.LittleEndian.Uint32(e)))),
			addr + uint64(int64(int32(binary.LittleEndian.Uint32(e[4:]))))
	}
	i := sort.Search(int(n), func(i int) bool { loc, _ := at(i); return loc > pc }) - 1
	if i < 0 {
		return 0, errNoCFI
	}
	_, fde := at(i)
	return fde, nil
}

// readEntry reads the entry (a CIE or an FDE) of section eh at address at:
// a reader over its bytes after its length.
func readEntry(eh *elf.Section, at uint64) (cfiReader, error) {
	if at < eh.Addr || at-eh.Addr+4 > eh.Size {
		return cfiReader{}, errNoCFI
	}
	var l [12]byte
	if _, err := eh.ReadAt(l[:4], int64(at-eh.Addr)); err != nil {
		return cfiReader{}, err
	}
	n, head := uint64(binary.LittleEndian.Uint32(l[:])), uint64(4)
	if n == 0xffffffff {
		if _, err := eh.ReadAt(l[4:], int64(at-eh.Addr+4)); err != nil {
			return cfiReader{}, err
		}
		n, head = binary.LittleEndian.Uint64(l[4:]), 12
	}
	if n == 0 || at-eh.Addr+head+n > eh.Size || n > 1<<20 {
		return cfiReader{}, errNoCFI
	}
	b := make([]byte, n)
	if _, err := eh.ReadAt(b, int64(at-eh.Addr+head)); err != nil {
		return cfiReader{}, err
	}
	return cfiReader{b: b, addr: at + head, long: head == 12}, nil
}

// cie is what a common information entry says of the FDEs that name it.
type cie struct {
	codeAlign uint64
	dataAlign int64
	fdeEnc    byte
	aug       bool // augmentation data follows an FDE's address range
	initial   []byte
}

// cfaIn is cfaAt's answer from the FDE at fde (entry reads an entry at an
// address of .eh_frame).
func cfaIn(entry func(uint64) (cfiReader, error), fde, pc uint64) (uint64, error) {
	r, err := entry(fde)
	if err != nil {
		return 0, err
	}
	idAt := r.addr
	id := r.id()
	if id == 0 || r.bad {
		return 0, errNoCFI // a CIE where an FDE should be
	}
	cr, err := entry(idAt - id)
	if err != nil {
		return 0, err
	}
	c, err := parseCIE(&cr)
	if err != nil {
		return 0, err
	}
	begin := r.ptr(c.fdeEnc)
	size := r.ptr(c.fdeEnc & peFormat)
	if c.aug {
		r.i += int(r.uleb())
	}
	if r.bad || r.i > len(r.b) {
		return 0, errNoCFI
	}
	if pc < begin || pc-begin >= size {
		return 0, errNoCFI
	}
	m := cfaMachine{cie: c, loc: begin, pc: pc}
	if m.run(c.initial) {
		m.run(r.b[r.i:])
	}
	if m.bad || !m.cfa.known || m.cfa.reg != dwarfRSP || m.cfa.off < 8 {
		return 0, errNoCFI
	}
	return uint64(m.cfa.off), nil
}

// parseCIE reads the CIE in r (after its length).
func parseCIE(r *cfiReader) (*cie, error) {
	if r.id() != 0 {
		return nil, errNoCFI
	}
	version := r.u8()
	augStart := r.i
	for r.i < len(r.b) && r.b[r.i] != 0 {
		r.i++
	}
	aug := string(r.b[augStart:min(r.i, len(r.b))])
	r.i++
	c := &cie{fdeEnc: 0}
	if len(aug) > 1 && aug[:2] == "eh" {
		r.i += 8
		aug = aug[2:]
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		r.u8()
	} else {
		r.uleb()
	}
	if len(aug) > 0 && aug[0] == 'z' {
		c.aug = true
		n := r.uleb()
		end := r.i + int(n)
	augs:
		for _, a := range aug[1:] {
			switch a {
			case 'R':
				c.fdeEnc = r.u8()
			case 'L':
				r.u8()
			case 'P':
				r.ptr(r.u8())
			case 'S', 'B':
			default:
				break augs // an augmentation not known: the rest of the data skipped
			}
		}
		r.i = end
	} else if aug != "" {
		return nil, errNoCFI // an augmentation without its size: the rest cannot be read
	}
	if r.bad || r.i > len(r.b) {
		return nil, errNoCFI
	}
	c.initial = r.b[r.i:]
	return c, nil
}

// cfaRule is a row's rule for the CFA: register reg plus off.
type cfaRule struct {
	reg   uint64
	off   int64
	known bool // not an expression
}

// cfaMachine runs call frame instructions up to pc, keeping the CFA's
// rule only.
type cfaMachine struct {
	cie     *cie
	loc, pc uint64
	cfa     cfaRule
	saved   []cfaRule
	bad     bool
}

// run runs prog; false when it reached a row past pc, whose rules do not
// hold there.
func (m *cfaMachine) run(prog []byte) bool {
	r := cfiReader{b: prog}
	for r.i < len(r.b) && !r.bad && !m.bad {
		op := r.u8()
		switch op >> 6 {
		case 1: // advance_loc
			if !m.advance(uint64(op&0x3f) * m.cie.codeAlign) {
				return false
			}
			continue
		case 2: // offset
			r.uleb()
			continue
		case 3: // restore
			continue
		}
		switch op {
		case 0x00: // nop
		case 0x01: // set_loc
			loc := r.ptr(m.cie.fdeEnc)
			if loc > m.pc {
				return false
			}
			m.loc = loc
		case 0x02:
			if !m.advance(uint64(r.u8()) * m.cie.codeAlign) {
				return false
			}
		case 0x03:
			if !m.advance(uint64(r.u16()) * m.cie.codeAlign) {
				return false
			}
		case 0x04:
			if !m.advance(uint64(r.u32()) * m.cie.codeAlign) {
				return false
			}
		case 0x05, 0x09, 0x14, 0x2f: // offset_extended, register, val_offset, GNU_negative_offset_extended
			r.uleb()
			r.uleb()
		case 0x06, 0x07, 0x08, 0x2e: // restore_extended, undefined, same_value, GNU_args_size
			r.uleb()
		case 0x0a: // remember_state
			m.saved = append(m.saved, m.cfa)
		case 0x0b: // restore_state
			if len(m.saved) == 0 {
				m.bad = true
				break
			}
			m.cfa = m.saved[len(m.saved)-1]
			m.saved = m.saved[:len(m.saved)-1]
		case 0x0c: // def_cfa
			m.cfa = cfaRule{reg: r.uleb(), known: true}
			m.cfa.off = int64(r.uleb())
		case 0x0d: // def_cfa_register
			m.cfa.reg = r.uleb()
		case 0x0e: // def_cfa_offset
			m.cfa.off = int64(r.uleb())
		case 0x0f: // def_cfa_expression
			r.i += int(r.uleb())
			m.cfa = cfaRule{}
		case 0x10, 0x16: // expression, val_expression
			r.uleb()
			r.i += int(r.uleb())
		case 0x11, 0x15: // offset_extended_sf, val_offset_sf
			r.uleb()
			r.sleb()
		case 0x12: // def_cfa_sf
			m.cfa = cfaRule{reg: r.uleb(), known: true}
			m.cfa.off = r.sleb() * m.cie.dataAlign
		case 0x13: // def_cfa_offset_sf
			m.cfa.off = r.sleb() * m.cie.dataAlign
		default:
			m.bad = true // an instruction not known: its operands' size neither
		}
	}
	if r.bad || r.i > len(r.b) {
		m.bad = true
	}
	return true
}

// advance moves the row's location on by d; false when that passes pc.
func (m *cfaMachine) advance(d uint64) bool {
	if m.loc+d > m.pc {
		return false
	}
	m.loc += d
	return true
}

// cfiReader reads the little-endian fields of call frame information from
// b, whose first byte is at address addr; bad once a read ran past b.
type cfiReader struct {
	b       []byte
	i       int
	addr    uint64
	dataRel uint64 // what data-relative pointers are relative to
	long    bool   // a 64-bit entry: its CIE pointer is 8 bytes
	bad     bool
}

func (r *cfiReader) take(n int) []byte {
	if r.bad || r.i+n > len(r.b) || n < 0 {
		r.bad = true
		return make([]byte, 8)
	}
	b := r.b[r.i : r.i+n]
	r.i += n
	return b
}

func (r *cfiReader) u8() byte    { return r.take(1)[0] }
func (r *cfiReader) u16() uint16 { return binary.LittleEndian.Uint16(r.take(2)) }
func (r *cfiReader) u32() uint32 { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *cfiReader) u64() uint64 { return binary.LittleEndian.Uint64(r.take(8)) }

// id is an entry's CIE id or pointer: 0 in a CIE, in an FDE the distance
// back from where it is to its CIE.
func (r *cfiReader) id() uint64 {
	if r.long {
		return r.u64()
	}
	return uint64(r.u32())
}

func (r *cfiReader) uleb() uint64 {
	var v uint64
	for s := uint(0); ; s += 7 {
		b := r.u8()
		if s < 64 {
			v |= uint64(b&0x7f) << s
		}
		if b&0x80 == 0 || r.bad {
			return v
		}
	}
}

func (r *cfiReader) sleb() int64 {
	var v int64
	var s uint
	for {
		b := r.u8()
		if s < 64 {
			v |= int64(b&0x7f) << s
		}
		s += 7
		if b&0x80 == 0 || r.bad {
			if s < 64 && b&0x40 != 0 {
				v |= -1 << s
			}
			return v
		}
	}
}

// ptr reads a pointer in encoding enc (DW_EH_PE_*); 0 for an omitted one.
func (r *cfiReader) ptr(enc byte) uint64 {
	if enc == peOmit {
		return 0
	}
	at := r.addr + uint64(r.i)
	var v uint64
	switch enc & peFormat {
	case 0x00, 0x04, 0x0c:
		v = r.u64()
	case 0x01:
		v = r.uleb()
	case 0x02:
		v = uint64(r.u16())
	case 0x03:
		v = uint64(r.u32())
	case 0x09:
		v = uint64(r.sleb())
	case 0x0a:
		v = uint64(int64(int16(r.u16())))
	case 0x0b:
		v = uint64(int64(int32(r.u32())))
	default:
		r.bad = true
	}
	switch enc & peRelative {
	case 0:
	case pePCRel:
		v += at
	case peDataRel:
		v += r.dataRel
	default:
		r.bad = true // text- and function-relative: not in x86-64 files
	}
	return v // an indirect one's (a personality routine's) is where it is: not read

}
