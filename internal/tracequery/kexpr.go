package tracequery

import (
	"github.com/cilium/ebpf/asm"
)

// The probe's code for CASE, IN, BETWEEN, IS NULL, CAST, coalesce(),
// pointer arrays (argv[i]), division by zero, byte arrays, and the
// heavy-hitter slots of topk().

// kernelType is n's type in the probe (the plan checked it).
func (g *gen) kernelType(n Node) Type {
	t, _ := g.p.checkKernel(n)
	return t
}

// evalMore emits the nodes eval does not itself.
func (g *gen) evalMore(n Node, d int) {
	r := exprRegs[d]
	switch x := n.(type) {
	case *Case:
		g.caseExpr(x, d)
	case *In:
		var or Node
		for _, e := range x.List {
			eq := &Binary{x.span, "=", x.X, e}
			if or == nil {
				or = eq
			} else {
				or = &Binary{x.span, "or", or, eq}
			}
		}
		g.eval(or, d)
		if x.Not {
			g.emit(asm.Xor.Imm(r, 1))
		}
	case *Between:
		g.eval(&Binary{x.span, "and", &Binary{x.span, ">=", x.X, x.Lo}, &Binary{x.span, "<=", x.X, x.Hi}}, d)
		if x.Not {
			g.emit(asm.Xor.Imm(r, 1))
		}
	case *IsNull:
		// The probe's values are never NULL.
		v := int32(0)
		if x.Not {
			v = 1
		}
		g.emit(asm.Mov.Imm(r, v))
	case *Cast:
		g.eval(x.X, d)
	case *Call:
		if l, ok := g.locs[exprKey(x)]; ok {
			// Computed before: kstack(n), ustack(n).
			g.loadCtx(r, l)
			return
		}
		// coalesce (never NULL here: its first argument), and the
		// decoders of integers (ksym, usym, ntop of a 32-bit address).
		g.eval(x.Args[0], d)
	case *Index:
		g.loadCtx(r, g.locs[exprKey(x)])
	default:
		if g.err == nil {
			g.err = errAt(n, "the probe cannot compute this")
		}
	}
}

// caseExpr evaluates a CASE: an integer CASE gives its result; a CASE of
// string constants gives the number of the branch taken (its ELSE after
// the WHENs), which user space turns back into the string.
func (g *gen) caseExpr(x *Case, d int) {
	r := exprRegs[d]
	labels := g.kernelType(x) == TLabel
	done := g.newLabel("case_done")
	for i, w := range x.Whens {
		next := g.newLabel("case_next")
		cond := w.Cond
		if x.Operand != nil {
			cond = &Binary{x.span, "=", x.Operand, w.Cond}
		}
		g.eval(cond, d)
		g.emit(asm.JEq.Imm(r, 0, next))
		if labels {
			g.emit(asm.Mov.Imm(r, int32(i)))
		} else {
			g.eval(w.Then, d)
		}
		g.emit(asm.Ja.Label(done))
		g.mark(next)
	}
	if labels || x.Else == nil {
		g.emit(asm.Mov.Imm(r, int32(len(x.Whens))))
	} else {
		g.eval(x.Else, d)
	}
	g.mark(done)
	g.emit(asm.Mov.Reg(r, r))
}

// placeIndex reads argv[i]: the i-th pointer of a pointer array in user
// memory, into a slot (helpers clobber the expression registers, so this
// runs before the expression is evaluated).
func (g *gen) placeIndex(x *Index) {
	k := exprKey(x)
	if _, ok := g.locs[k]; ok {
		return
	}
	id := x.X.(*Ident)
	g.place(id.Name)
	off := g.alloc(8)
	g.emit(storeZero(off))
	g.loadCtx(asm.R3, g.locs[id.Name])
	g.emit(asm.Add.Imm(asm.R3, int32(8*x.I.(*Number).Int)),
		asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, int32(off)),
		asm.Mov.Imm(asm.R2, 8), asm.FnProbeReadUser.Call())
	g.locs[k] = loc{stack: true, off: off, size: 8, typ: TPtr}
}

// divGuard skips the event, counted, when the divisor in r2 is 0: the
// probe's x / 0 would be 0, which no query means.
func (g *gen) divGuard(r2 asm.Register) {
	ok := g.newLabel("divisor_ok")
	g.emit(asm.JNE.Imm(r2, 0, ok))
	g.count(CounterDivZero)
	g.emit(asm.Ja.Label(g.exitLabel()))
	g.mark(ok)
}

// syscallCompare compares a syscall number with a system call's name,
// as the number; false if x is not that.
func (g *gen) syscallCompare(x *Binary, d int) bool {
	l, r := x.L, x.R
	s, isLit := r.(*String)
	if !isLit {
		s, isLit = l.(*String)
		l = r
	}
	if !isLit || g.kernelType(l) != TSyscall {
		return false
	}
	nr, err := g.p.syscallNumber(s)
	if err != nil {
		if g.err == nil {
			g.err = err
		}
		return true
	}
	g.binary(&Binary{x.span, x.Op, l, &Number{span: s.span, Text: s.Val, Int: nr, IsInt: true}}, d)
	return true
}

// storeBytes copies a byte array (a context field, or one kept by a
// begin) to the stack at off.
func (g *gen) storeBytes(off int16, n Node, size int) {
	if c, ok := n.(*Call); ok {
		n = c.Args[0]
	}
	id, ok := n.(*Ident)
	if !ok {
		return
	}
	g.place(id.Name)
	l := g.locs[id.Name]
	if l.stack {
		g.copyStack(off, l.off, size)
		return
	}
	g.copyCtxBytes(off, l.off, min(size, l.size))
}

// copyCtxBytes copies n bytes of the context at src to the stack at dst,
// in the widest aligned loads the context allows.
func (g *gen) copyCtxBytes(dst, src int16, n int) {
	for i := 0; i < n; {
		w := 1
		for _, c := range []int{8, 4, 2} {
			if n-i >= c && (int(src)+i)%c == 0 && (int(dst)+i)%c == 0 {
				w = c
				break
			}
		}
		sz := map[int]asm.Size{1: asm.Byte, 2: asm.Half, 4: asm.Word, 8: asm.DWord}[w]
		g.emit(asm.LoadMem(asm.R0, asm.R6, src+int16(i), sz), asm.StoreMem(asm.R10, dst+int16(i), asm.R0, sz))
		i += w
	}
}

// topk runs one event through topk's slots in the map value at R7 (see
// topk.go): the key's slot gains the weight; else the least slot is taken.
// The k slots are scanned without a loop: the key, the least count and its
// slot live in registers R1-R5 and R8-R9 between them.
func (g *gen) topk(a *Agg, key, weight int16) {
	size := topSlotSize(a)
	words := max(a.KeySize, 8) / 8
	found, take, done := g.newLabel("top_found"), g.newLabel("top_take"), g.newLabel("top_done")
	minC, minAt, t, w := asm.R8, asm.R9, asm.R1, asm.R2
	g.emit(asm.LoadImm(minC, -1, asm.DWord), asm.Mov.Imm(minAt, 0))
	for j := 0; j < a.K; j++ {
		base := int16(a.ValOff + j*size)
		miss, notLess := g.newLabel("top_miss"), g.newLabel("top_more")
		g.emit(asm.LoadMem(t, asm.R7, base, asm.DWord), asm.JEq.Imm(t, 0, miss))
		for i := 0; i < words; i++ {
			g.emit(asm.LoadMem(t, asm.R7, base+16+int16(8*i), asm.DWord),
				asm.LoadMem(w, asm.R10, key+int16(8*i), asm.DWord),
				asm.JNE.Reg(t, w, miss))
		}
		g.emit(asm.Mov.Imm(minAt, int32(j)), asm.Ja.Label(found))
		g.mark(miss)
		// Track the least count (an empty slot's 0 is least).
		g.emit(asm.LoadMem(t, asm.R7, base, asm.DWord), asm.JGE.Reg(t, minC, notLess),
			asm.Mov.Reg(minC, t), asm.Mov.Imm(minAt, int32(j)))
		g.mark(notLess)
	}
	g.emit(asm.Ja.Label(take))
	// The key has a slot: add the weight.
	g.mark(found)
	g.emit(asm.LoadMem(w, asm.R10, weight, asm.DWord))
	g.slotAddr(minAt, a, size)
	g.emit(asm.LoadMem(t, minAt, 0, asm.DWord), asm.Add.Reg(t, w), asm.StoreMem(minAt, 0, t, asm.DWord),
		asm.Ja.Label(done))
	// Take the least slot: count least+weight, error least, the key.
	g.mark(take)
	g.emit(asm.LoadMem(w, asm.R10, weight, asm.DWord))
	g.slotAddr(minAt, a, size)
	g.emit(asm.StoreMem(minAt, 8, minC, asm.DWord), asm.Add.Reg(minC, w), asm.StoreMem(minAt, 0, minC, asm.DWord))
	for i := 0; i < words; i++ {
		g.emit(asm.LoadMem(t, asm.R10, key+int16(8*i), asm.DWord), asm.StoreMem(minAt, 16+int16(8*i), t, asm.DWord))
	}
	g.mark(done)
	g.emit(asm.Mov.Reg(asm.R0, asm.R0))
}

// topPrepare writes, before the map lookup, topk's key of the event and
// its weight (1 without one; a negative weight counts 0) to the stack.
func (g *gen) topPrepare(a *Agg) (key, weight int16) {
	key = g.alloc(max(a.KeySize, 8))
	g.zero(key, max(a.KeySize, 8))
	g.store(key, a.Arg, a.ArgType, max(a.KeySize, 8), nil)
	weight = g.alloc(8)
	if a.Weight == nil {
		g.emit(asm.Mov.Imm(asm.R0, 1))
	} else {
		v := g.eval(a.Weight, 0)
		pos := g.newLabel("weight_ok")
		g.emit(asm.JSGE.Imm(v, 0, pos), asm.Mov.Imm(v, 0))
		g.mark(pos)
		g.emit(asm.Mov.Reg(asm.R0, v))
	}
	g.emit(asm.StoreMem(asm.R10, weight, asm.R0, asm.DWord))
	return key, weight
}

// slotAddr turns a slot number in r into the slot's address in the map
// value at R7; the clamp lets the verifier see it stays inside.
func (g *gen) slotAddr(r asm.Register, a *Agg, size int) {
	ok := g.newLabel("slot_ok")
	g.emit(asm.JLE.Imm(r, int32(a.K-1), ok), asm.Mov.Imm(r, int32(a.K-1)))
	g.mark(ok)
	g.emit(asm.Mul.Imm(r, int32(size)), asm.Add.Imm(r, int32(a.ValOff)), asm.Add.Reg(r, asm.R7))
}
