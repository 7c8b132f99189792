package tracequery

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// USDTNote is one static marker (SystemTap SDT note) of an ELF file.
type USDTNote struct {
	Provider, Name string
	Args           string // the assembler operands, e.g. "-4@%edi 8@-16(%rbp)"
	Offset         uint64 // file offset of the probe instruction
	Semaphore      uint64 // file offset of its semaphore; 0: none
}

// ReadUSDT lists the SDT notes of an ELF file.
func ReadUSDT(path string) ([]USDTNote, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("usdt: %w", err)
	}
	defer f.Close()
	sec := f.Section(".note.stapsdt")
	if sec == nil {
		return nil, nil
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("usdt: read notes of %s: %w", path, err)
	}
	var base uint64
	baseSec := f.Section(".stapsdt.base")
	if baseSec != nil {
		base = baseSec.Addr
	}
	var notes []USDTNote
	bo := f.ByteOrder
	for len(data) >= 12 {
		nsz, dsz, typ := bo.Uint32(data), bo.Uint32(data[4:]), bo.Uint32(data[8:])
		nameEnd := 12 + int((nsz+3)&^3)
		descEnd := nameEnd + int((dsz+3)&^3)
		if descEnd > len(data) {
			break
		}
		name := strings.TrimRight(string(data[12:12+nsz]), "\x00")
		desc := data[nameEnd : nameEnd+int(dsz)]
		data = data[descEnd:]
		if name != "stapsdt" || typ != 3 || len(desc) < 24 {
			continue
		}
		pc, noteBase, sem := binary.LittleEndian.Uint64(desc), binary.LittleEndian.Uint64(desc[8:]), binary.LittleEndian.Uint64(desc[16:])
		strs := strings.SplitN(string(desc[24:]), "\x00", 4)
		if len(strs) < 3 {
			continue
		}
		if baseSec != nil {
			pc += base - noteBase
			if sem != 0 {
				sem += base - noteBase
			}
		}
		n := USDTNote{Provider: strs[0], Name: strs[1], Args: strs[2], Offset: vaddrToOffset(f, pc)}
		if sem != 0 {
			n.Semaphore = vaddrToOffset(f, sem)
		}
		notes = append(notes, n)
	}
	return notes, nil
}

func vaddrToOffset(f *elf.File, va uint64) uint64 {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && va >= p.Vaddr && va < p.Vaddr+p.Memsz {
			return va - p.Vaddr + p.Off
		}
	}
	return va
}

// usdtArg is one parsed operand: a register, a register-relative memory
// operand, or a constant.
type usdtArg struct {
	size   int
	signed bool
	kind   int // 0 reg, 1 mem, 2 const
	reg    int // pt_regs offset
	disp   int64
}

var x86Regs = map[string]int{
	"rax": 80, "eax": 80, "ax": 80, "al": 80, "rbx": 40, "ebx": 40, "bx": 40, "bl": 40,
	"rcx": 88, "ecx": 88, "cx": 88, "cl": 88, "rdx": 96, "edx": 96, "dx": 96, "dl": 96,
	"rsi": 104, "esi": 104, "si": 104, "sil": 104, "rdi": 112, "edi": 112, "di": 112, "dil": 112,
	"rbp": 32, "ebp": 32, "bp": 32, "bpl": 32, "rsp": 152, "esp": 152, "sp": 152, "spl": 152, "rip": 128,
}

func regOffset(name string) (int, bool) {
	if o, ok := x86Regs[name]; ok {
		return o, true
	}
	// r8..r15 with d/w/b suffixes
	if strings.HasPrefix(name, "r") {
		n := strings.TrimRight(name[1:], "dwb")
		if i, err := strconv.Atoi(n); err == nil && i >= 8 && i <= 15 {
			return []int{72, 64, 56, 48, 24, 16, 8, 0}[i-8], true
		}
	}
	return 0, false
}

func parseUSDTArg(s string) (usdtArg, error) {
	sz, op, ok := strings.Cut(s, "@")
	if !ok {
		return usdtArg{}, fmt.Errorf("operand %q: no size", s)
	}
	n, err := strconv.Atoi(sz)
	if err != nil {
		return usdtArg{}, fmt.Errorf("operand %q: size: %w", s, err)
	}
	a := usdtArg{size: n, signed: n < 0}
	if n < 0 {
		a.size = -n
	}
	switch {
	case strings.HasPrefix(op, "$"):
		a.kind = 2
		a.disp, err = strconv.ParseInt(op[1:], 0, 64)
		return a, err
	case strings.HasPrefix(op, "%"):
		r, ok := regOffset(op[1:])
		if !ok {
			return a, fmt.Errorf("operand %q: unknown register", s)
		}
		a.reg = r
		return a, nil
	case strings.HasSuffix(op, ")"):
		i := strings.IndexByte(op, '(')
		if i < 0 || strings.Contains(op[i:], ",") {
			return a, fmt.Errorf("operand %q: indexed addressing is not supported", s)
		}
		if i > 0 {
			if a.disp, err = strconv.ParseInt(op[:i], 0, 64); err != nil && strings.HasSuffix(op, "(%rip)") {
				return a, fmt.Errorf("operand %q: a global variable (%%rip-relative) is not supported; pass it through a local", s)
			} else if err != nil {
				return a, fmt.Errorf("operand %q: displacement: %w", s, err)
			}
		}
		r, ok := regOffset(strings.TrimPrefix(op[i+1:len(op)-1], "%"))
		if !ok {
			return a, fmt.Errorf("operand %q: unknown register", s)
		}
		a.kind, a.reg = 1, r
		return a, nil
	}
	return a, fmt.Errorf("operand %q: not understood", s)
}

func usdtSource(path, provider, name string, bad func(string, ...any) error) (*Source, error) {
	notes, err := ReadUSDT(path)
	if err != nil {
		return nil, bad("%v", err)
	}
	for _, n := range notes {
		if n.Provider != provider || n.Name != name {
			continue
		}
		src := &Source{Name: fmt.Sprintf("usdt.%q.%s.%s", path, provider, name), Desc: "static marker " + provider + ":" + name,
			End: Probe{Kind: ProbeUprobe, Path: path, Address: n.Offset, RefCtr: n.Semaphore}}
		for i, op := range strings.Fields(n.Args) {
			a, err := parseUSDTArg(op)
			if err != nil {
				return nil, bad("usdt %s:%s argument %d: %v", provider, name, i, err)
			}
			f := Field{Name: fmt.Sprintf("arg%d", i), Type: TInt, Loc: LocUSDT, Size: a.size, Signed: a.signed, Desc: op, usdt: &a}
			src.Fields = append(src.Fields, f)
		}
		return src, nil
	}
	return nil, bad("unknown source: no marker %s:%s in %s (holter trace --list 'usdt.\"%s\"' lists them)", provider, name, path, path)
}
