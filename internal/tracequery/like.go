package tracequery

import (
	"strings"

	"github.com/cilium/ebpf/asm"
)

// String matching in the probe: LIKE against a constant pattern and
// equality of two string fields. Strings are NUL-terminated in bounded
// stack buffers; the code walks them with bounded loops whose counter the
// verifier knows on every path, so every load is at a constant offset.
//
// A pattern is cut at each % into segments. The first segment is matched
// at the start, the last one so that it ends where the string does, and
// each one between at its leftmost place after the one before (which is
// what LIKE means for such patterns). _ matches any one byte but the end
// (DuckDB's matches a UTF-8 character: the two differ on non-ASCII text).

func (g *gen) strRegs(x Node, d, n int) bool {
	if d+n > len(exprRegs) {
		if g.err == nil {
			a, b := x.Span()
			g.err = &Error{Pos: a, End: b, Msg: "expression too deep for the probe's registers"}
		}
		return false
	}
	return true
}

// like sets exprRegs[d] to whether the string x.L matches the constant
// pattern x.R (or does not, for NOT LIKE).
func (g *gen) like(x *Binary, d int) {
	if !g.strRegs(x, d, 3) {
		return
	}
	l := g.stringLoc(x.L)
	pat := x.R.(*String).Val
	r, i, ptr := exprRegs[d], exprRegs[d+1], exprRegs[d+2]
	size := int32(l.size)
	fail, done := g.newLabel("like_fail"), g.newLabel("like_done")
	segs := strings.Split(pat, "%")
	// at points ptr at the string's byte i.
	at := func() {
		g.emit(asm.Mov.Reg(ptr, asm.R10), asm.Add.Imm(ptr, int32(l.off)), asm.Add.Reg(ptr, i))
	}
	// match jumps to miss unless seg is at ptr; with end, unless the
	// string ends right after it.
	match := func(seg string, end bool, miss string) {
		for j := 0; j < len(seg); j++ {
			g.emit(asm.LoadMem(asm.R0, ptr, int16(j), asm.Byte))
			if seg[j] == '_' {
				g.emit(asm.JEq.Imm(asm.R0, 0, miss))
			} else {
				g.emit(asm.JNE.Imm(asm.R0, int32(seg[j]), miss))
			}
		}
		if end {
			ok := g.newLabel("like_end")
			// A string that fills its buffer ends there.
			g.emit(asm.JEq.Imm(i, size-int32(len(seg)), ok),
				asm.LoadMem(asm.R0, ptr, int16(len(seg)), asm.Byte),
				asm.JNE.Imm(asm.R0, 0, miss))
			g.mark(ok)
		}
	}
	g.emit(asm.Mov.Imm(i, 0))
	for k, seg := range segs {
		first, last := k == 0, k == len(segs)-1
		if len(seg) > l.size {
			g.emit(asm.Ja.Label(fail))
			break
		}
		switch {
		case first:
			// Anchored at the start (the whole string, without %).
			if seg == "" && !last {
				continue
			}
			at()
			match(seg, last, fail)
			g.emit(asm.Add.Imm(i, int32(len(seg))))
		case seg == "" && last:
			// A trailing %: whatever follows matches.
		case seg == "":
			// %%: nothing between.
		default:
			top, next, found := g.newLabel("like_scan"), g.newLabel("like_next"), g.newLabel("like_found")
			g.mark(top)
			g.emit(asm.JGT.Imm(i, size-int32(len(seg)), fail))
			at()
			g.emit(asm.LoadMem(asm.R0, ptr, 0, asm.Byte), asm.JEq.Imm(asm.R0, 0, fail))
			match(seg, last, next)
			g.emit(asm.Add.Imm(i, int32(len(seg))), asm.Ja.Label(found))
			g.mark(next)
			g.emit(asm.Add.Imm(i, 1), asm.Ja.Label(top))
			g.mark(found)
		}
	}
	if g.references(fail) {
		g.verdict(r, fail, done)
	} else {
		// Only %: the verifier refuses unreachable code.
		g.emit(asm.Mov.Imm(r, 1))
	}
	if x.Op == "not like" {
		g.emit(asm.Xor.Imm(r, 1))
	}
}

// stringsEq sets exprRegs[d] to whether two string fields are equal (or
// differ, for !=), comparing bytes up to the first NUL or the shorter
// buffer's end.
func (g *gen) stringsEq(x *Binary, d int) {
	if !g.strRegs(x, d, 3) {
		return
	}
	a, b := g.stringLoc(x.L), g.stringLoc(x.R)
	r, i, ptr := exprRegs[d], exprRegs[d+1], exprRegs[d+2]
	n := min(a.size, b.size)
	top, same, full, differ, done := g.newLabel("streq"), g.newLabel("same"), g.newLabel("full"), g.newLabel("differ"), g.newLabel("done")
	g.emit(asm.Mov.Imm(i, 0))
	g.mark(top)
	g.emit(asm.JGE.Imm(i, int32(n), full),
		asm.Mov.Reg(ptr, asm.R10), asm.Add.Imm(ptr, int32(a.off)), asm.Add.Reg(ptr, i),
		asm.LoadMem(r, ptr, 0, asm.Byte),
		asm.Mov.Reg(ptr, asm.R10), asm.Add.Imm(ptr, int32(b.off)), asm.Add.Reg(ptr, i),
		asm.LoadMem(asm.R0, ptr, 0, asm.Byte),
		asm.JNE.Reg(r, asm.R0, differ),
		asm.JEq.Imm(r, 0, same),
		asm.Add.Imm(i, 1),
		asm.Ja.Label(top))
	g.mark(full)
	if a.size != b.size {
		// Equal over all of the shorter buffer: the longer string must
		// end there too.
		long := a
		if b.size > a.size {
			long = b
		}
		g.emit(asm.LoadMem(asm.R0, asm.R10, long.off+int16(n), asm.Byte), asm.JNE.Imm(asm.R0, 0, differ))
	}
	g.mark(same)
	g.verdict(r, differ, done)
	if x.Op == "!=" {
		g.emit(asm.Xor.Imm(r, 1))
	}
}

// references says whether an instruction emitted so far jumps to label.
func (g *gen) references(label string) bool {
	for _, in := range g.insns {
		if in.Reference() == label {
			return true
		}
	}
	return false
}
