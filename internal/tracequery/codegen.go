package tracequery

import (
	"fmt"
	"math"
	"runtime"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// Counters the probes keep, one 8-byte slot each in the "counters" map.
const (
	CounterMapFull   = iota // aggregation keys dropped: the map was full
	CounterUnmatched        // ends without a kept begin (begun before attach, or evicted)
	CounterStackLost        // stacks not captured (stack map full or unwinding failed)
	CounterRingLost         // events not streamed: the ring buffer was full
	CounterDivZero          // events skipped: a division or remainder by zero
	numCounters
)

// CounterNames name the counters in output.
var CounterNames = [numCounters]string{"map_full", "unmatched", "stack_lost", "ring_lost", "div_zero"}

// The pairing map's counters, per CPU (they are on every event's path,
// where an atomic add costs): begins put as a new key, and taken out by
// their end. Session.readCounters reports evictions from them.
const (
	pairPut = iota
	pairTaken
	numPairCounters
)

// Program is one generated probe program and where it attaches.
type Program struct {
	Name  string
	Probe Probe
	Spec  *ebpf.ProgramSpec
}

// Role of a program of a paired source.
type role int

const (
	roleSingle role = iota
	roleBegin
	roleEnd
)

var exprRegs = []asm.Register{asm.R1, asm.R2, asm.R3, asm.R4, asm.R5, asm.R8, asm.R9}

// loc is where a value lives while the program runs.
type loc struct {
	stack  bool  // on the stack at off (R10-relative)
	off    int16 // stack offset, or context offset
	size   int
	signed bool
	narrow int // see Field.Narrow
	typ    Type
}

type gen struct {
	p      *Plan
	role   role
	probe  Probe
	insns  asm.Instructions
	label  string // label for the next instruction
	nlabel int
	frame  int // bytes of stack allocated
	locs   map[string]loc
	err    error
}

func (g *gen) emit(ins ...asm.Instruction) {
	for _, in := range ins {
		if g.label != "" {
			in = in.WithSymbol(g.label)
			g.label = ""
		}
		g.insns = append(g.insns, in)
	}
}

func (g *gen) newLabel(s string) string {
	g.nlabel++
	return fmt.Sprintf("%s_%d", s, g.nlabel)
}

// mark makes l the label of the next instruction.
func (g *gen) mark(l string) {
	if g.label != "" {
		g.emit(asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Ja)})
	}
	g.label = l
}

func (g *gen) alloc(n int) int16 {
	n = (n + 7) &^ 7
	g.frame += n
	if g.frame > 512 && g.err == nil {
		g.err = fmt.Errorf("the probe needs %d bytes of BPF stack, more than 512: group by or read fewer strings", g.frame)
	}
	return int16(-g.frame)
}

func (g *gen) zero(off int16, size int) {
	for i := 0; i < size; i += 8 {
		g.emit(storeZero(off + int16(i)))
	}
}

func (g *gen) copyStack(dst, src int16, size int) {
	for i := 0; i < size; i += 8 {
		g.emit(asm.LoadMem(asm.R0, asm.R10, src+int16(i), asm.DWord),
			asm.StoreMem(asm.R10, dst+int16(i), asm.R0, asm.DWord))
	}
}

func (g *gen) count(counter int) {
	g.emit(asm.LoadMapValue(asm.R1, 0, uint32(8*counter)).WithReference("counters"),
		asm.Mov.Imm(asm.R2, 1),
		asm.StoreXAdd(asm.R1, asm.R2, asm.DWord))
}

func (g *gen) exitLabel() string { return "exit" }

// countPair adds one to this CPU's pairing counter (no atomic needed).
func (g *gen) countPair(counter int) {
	key := g.alloc(8)
	none := g.newLabel("no_pairs")
	g.emit(storeZero(key),
		asm.LoadMapPtr(asm.R1, 0).WithReference("pairs"),
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, int32(key)),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, none),
		asm.LoadMem(asm.R1, asm.R0, int16(8*counter), asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, int16(8*counter), asm.R1, asm.DWord))
	g.mark(none)
	g.emit(asm.Mov.Reg(asm.R0, asm.R0))
}

// Programs generates the probe programs of the plan.
func (p *Plan) Programs() ([]*Program, error) {
	var out []*Program
	for _, r := range p.roles() {
		g := &gen{p: p, role: r.role, probe: r.probe, locs: map[string]loc{}}
		g.program()
		if g.err != nil {
			return nil, g.err
		}
		name := map[role]string{roleSingle: "probe", roleBegin: "probe_begin", roleEnd: "probe_end"}[r.role]
		spec := &ebpf.ProgramSpec{Name: name, Type: ebpf.TracePoint, License: "GPL", Instructions: g.insns}
		switch pb := r.probe; pb.Kind {
		case ProbeUprobe, ProbeUretprobe, ProbeKprobe:
			spec.Type = ebpf.Kprobe
		case ProbePerf:
			spec.Type = ebpf.PerfEvent
		case ProbeRawTP:
			spec.Type = ebpf.RawTracepoint
		case ProbeBTF:
			spec.Type, spec.AttachType, spec.AttachTo = ebpf.Tracing, ebpf.AttachTraceRawTp, pb.Event
		case ProbeKfunc:
			spec.Type, spec.AttachType, spec.AttachTo = ebpf.Tracing, ebpf.AttachTraceFEntry, pb.Symbol
			if pb.Return {
				spec.AttachType = ebpf.AttachTraceFExit
			}
		}
		out = append(out, &Program{Name: name, Probe: r.probe, Spec: spec})
	}
	return out, nil
}

type roleProbe struct {
	role  role
	probe Probe
}

// roles decides which probes of the source the query needs: a paired
// source whose query reads only one side's fields attaches only that side;
// a join always needs both.
func (p *Plan) roles() []roleProbe {
	src := p.Source
	if src.Begin == nil {
		return []roleProbe{{roleSingle, src.End}}
	}
	begin, end := src.Join != nil, src.Join != nil
	for _, f := range p.Fields {
		if _, own := ownField(src, f.Name); !own {
			continue
		}
		switch {
		case f.Loc == LocLatency:
			begin, end = true, true
		case f.Side == SideBegin:
			begin = true
		default:
			end = true
		}
	}
	switch {
	case begin && end:
		return []roleProbe{{roleBegin, *src.Begin}, {roleEnd, src.End}}
	case !end:
		// The begin alone: builtins are the same thread's there for calls,
		// and it sees calls that never return (exit, execve).
		return []roleProbe{{roleSingle, *src.Begin}}
	}
	return []roleProbe{{roleSingle, src.End}}
}

func ownField(src *Source, name string) (*Field, bool) {
	for i := range src.Fields {
		if src.Fields[i].Name == name {
			return &src.Fields[i], true
		}
	}
	return nil, false
}

// stashLayout is the value a begin probe keeps for its end: the begin time,
// then the begin-side fields the query reads (a join's left builtins
// among them), in name order.
func (p *Plan) stashLayout() (size int, offs map[string]int, fields []*Field) {
	offs = map[string]int{}
	size = 8
	for _, f := range p.Source.Fields {
		if pf, ok := p.Fields[f.Name]; !ok || pf.Side != SideBegin || pf.Loc == LocLatency {
			continue
		}
		fc := f
		offs[f.Name] = size
		fields = append(fields, &fc)
		switch f.Type {
		case TString, TBytes:
			size += (f.Size + 7) &^ 7
		default:
			size += 8
		}
	}
	return size, offs, fields
}

// pairKeySize is the bytes of the pairing map's key.
func (p *Plan) pairKeySize() int {
	return 8 * max(len(p.Source.End.PairKey)+len(p.Source.End.PairExprs), 1)
}

func (g *gen) program() {
	g.emit(asm.Mov.Reg(asm.R6, asm.R1))
	switch g.role {
	case roleBegin:
		g.begin()
	case roleEnd:
		g.end()
	default:
		g.ctxFields()
		g.filterAndAct()
	}
	g.mark(g.exitLabel())
	g.emit(asm.Mov.Imm(asm.R0, 0), asm.Return())
}

// ctxFields places the fields read from this probe's context.
func (g *gen) ctxFields() {
	for _, f := range g.p.Fields {
		if _, own := ownField(g.p.Source, f.Name); !own || f.Loc != LocCtx && f.Loc != LocDataLoc {
			continue
		}
		if g.p.Source.Begin != nil && (g.role == roleEnd) == (f.Side == SideBegin) && g.role != roleSingle {
			continue
		}
		g.locs[f.Name] = loc{off: int16(f.Offset), size: f.Size, signed: f.Signed, narrow: f.Narrow, typ: f.Type}
	}
}

// pairKey builds the key that joins a begin with its end at off.
func (g *gen) pairKey(pr Probe) int16 {
	n := max(len(pr.PairKey)+len(pr.PairExprs), 1)
	off := g.alloc(8 * n)
	if pr.PairByTid {
		g.emit(asm.FnGetCurrentPidTgid.Call(), asm.StoreMem(asm.R10, off, asm.R0, asm.DWord))
		return off
	}
	for i, k := range pr.PairKey {
		g.loadCtx(asm.R0, loc{off: int16(k[0]), size: k[1]})
		g.emit(asm.StoreMem(asm.R10, off+int16(8*i), asm.R0, asm.DWord))
	}
	for i, e := range pr.PairExprs {
		g.materialize(e)
		r := g.eval(e, 0)
		g.emit(asm.StoreMem(asm.R10, off+int16(8*(len(pr.PairKey)+i)), r, asm.DWord))
	}
	return off
}

func (g *gen) begin() {
	p := g.p
	g.ctxFields()
	// Filter at the begin when it reads only begin-side context fields, so
	// that filtered-out events cost no stash entry.
	filterHere := p.Filter != nil && g.filterOnBeginOnly()
	if filterHere {
		g.materialize(p.Filter)
		g.filter()
	}
	size, offs, fields := p.stashLayout()
	key := g.pairKey(*p.Source.Begin)
	buf := g.alloc(size)
	for _, f := range fields {
		o := buf + int16(offs[f.Name])
		if f.Loc == LocBuiltin {
			g.place(f.Name)
		}
		l := g.locs[f.Name]
		switch {
		case f.Type == TString && l.stack, f.Type == TBytes:
			g.copyStack(o, l.off, (f.Size+7)&^7)
		case f.Type == TString:
			g.readCtxString(o, l)
		default:
			g.loadCtx(asm.R0, l)
			g.emit(asm.StoreMem(asm.R10, o, asm.R0, asm.DWord))
		}
	}
	// Put it as a new key, counted, or over the key's older begin (the
	// newer begin of a thread, or a join's latest left event, wins). The
	// map is an LRU hash: when full, it evicts its least recently used
	// begin (Session.readCounters counts them).
	put := g.newLabel("put")
	g.emit(asm.FnKtimeGetNs.Call(), asm.StoreMem(asm.R10, buf, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, 0).WithReference("stash"),
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, int32(key)),
		asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, int32(buf)),
		asm.Mov.Imm(asm.R4, 1), // BPF_NOEXIST
		asm.FnMapUpdateElem.Call(),
		asm.JNE.Imm(asm.R0, 0, put))
	g.countPair(pairPut)
	g.emit(asm.Ja.Label(g.exitLabel()))
	g.mark(put)
	g.emit(asm.LoadMapPtr(asm.R1, 0).WithReference("stash"),
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, int32(key)),
		asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, int32(buf)),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call())
}

// threadBuiltins are the builtins that do not change between a thread's
// call and its return.
var threadBuiltins = map[string]bool{"pid": true, "tid": true, "uid": true, "comm": true, "cgroup": true}

func (g *gen) filterOnBeginOnly() bool {
	ok := true
	walk(g.p.Filter, func(n Node) bool {
		if id, isID := n.(*Ident); isID {
			f, own := ownField(g.p.Source, id.Name)
			switch {
			case !own && g.p.Source.Begin.PairByTid && threadBuiltins[strings.TrimPrefix(id.Name, "task.")]:
				// Same thread at begin and end: these are the same there.
			case !own || f.Side != SideBegin || f.Loc == LocLatency:
				ok = false
			}
		}
		if c, isCall := n.(*Call); isCall && c.Name == "str" {
			ok = false
		}
		return ok
	})
	return ok
}

func (g *gen) end() {
	p := g.p
	g.ctxFields()
	size, offs, fields := p.stashLayout()
	key := g.pairKey(p.Source.End)
	buf := g.alloc(size)
	noBegin := g.newLabel("no_begin")
	g.emit(asm.LoadMapPtr(asm.R1, 0).WithReference("stash"),
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, int32(key)),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, noBegin))
	for i := 0; i < size; i += 8 {
		g.emit(asm.LoadMem(asm.R1, asm.R0, int16(i), asm.DWord), asm.StoreMem(asm.R10, buf+int16(i), asm.R1, asm.DWord))
	}
	if j := p.Source.Join; j == nil || j.Kind == JoinFollowedBy {
		// The begin is taken: the next end of its key needs a newer one.
		taken := g.newLabel("taken")
		g.emit(asm.LoadMapPtr(asm.R1, 0).WithReference("stash"),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, int32(key)),
			asm.FnMapDeleteElem.Call(),
			asm.JNE.Imm(asm.R0, 0, taken))
		g.countPair(pairTaken)
		g.mark(taken)
	}
	for _, f := range fields {
		g.locs[f.Name] = loc{stack: true, off: buf + int16(offs[f.Name]), size: f.Size, typ: f.Type}
	}
	if _, ok := p.Fields["latency"]; ok {
		lat := g.alloc(8)
		g.emit(asm.FnKtimeGetNs.Call(),
			asm.LoadMem(asm.R1, asm.R10, buf, asm.DWord),
			asm.Sub.Reg(asm.R0, asm.R1),
			asm.StoreMem(asm.R10, lat, asm.R0, asm.DWord))
		g.locs["latency"] = loc{stack: true, off: lat, size: 8, typ: TInt}
	}
	if p.Filter != nil && g.filterOnBeginOnly() {
		g.materializeRest()
		g.act()
	} else {
		g.filterAndAct()
	}
	g.emit(asm.Ja.Label(g.exitLabel()))
	g.mark(noBegin)
	if j := p.Source.Join; (j == nil || j.Kind == JoinFollowedBy) && (p.Filter == nil || !g.filterOnBeginOnly()) {
		// With the filter at the begin, ends of filtered-out events miss
		// by design; otherwise a miss is an end whose begin was not seen.
		// (A JOIN's right event without a left one meets nothing: no loss.)
		g.count(CounterUnmatched)
	}
}

func (g *gen) filterAndAct() {
	if g.p.Filter != nil {
		g.materialize(g.p.Filter)
		g.filter()
	}
	g.materializeRest()
	g.act()
}

func (g *gen) filter() {
	r := g.eval(g.p.Filter, 0)
	g.emit(asm.JEq.Imm(r, 0, g.exitLabel()))
}

func (g *gen) materializeRest() {
	for _, it := range g.p.Keys {
		g.materialize(it.Expr)
	}
	for _, a := range g.p.Aggs {
		g.materialize(a.Arg)
	}
	for _, e := range g.p.Emits {
		g.materialize(e.Expr)
	}
}

// materialize computes into stack slots the builtins, strings and stacks
// that n reads and that are not placed yet.
func (g *gen) materialize(n Node) {
	walk(n, func(x Node) bool {
		switch y := x.(type) {
		case *Ident:
			g.place(y.Name)
		case *Index:
			g.placeIndex(y)
			return false
		case *Call:
			switch y.Name {
			case "str":
				k := exprKey(y)
				if _, ok := g.locs[k]; ok {
					return false
				}
				g.materialize(y.Args[0])
				off := g.alloc(g.p.Opts.StrSize)
				g.zero(off, g.p.Opts.StrSize)
				r := g.eval(y.Args[0], 0)
				g.emit(asm.Mov.Reg(asm.R3, r),
					asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, int32(off)),
					asm.Mov.Imm(asm.R2, int32(g.p.Opts.StrSize)),
					asm.FnProbeReadUserStr.Call())
				g.locs[k] = loc{stack: true, off: off, size: g.p.Opts.StrSize, typ: TString}
				return false
			case "kstack", "ustack":
				if len(y.Args) == 1 {
					g.placeStack(exprKey(y), y.Name == "ustack", int(y.Args[0].(*Number).Int))
					return false
				}
			}
		}
		return true
	})
}

// builtinName is the builtin a field is: itself, or a join's a.pid.
func builtinName(f *Field) string {
	if f.Builtin != "" {
		return f.Builtin
	}
	return f.Name
}

func (g *gen) place(name string) {
	if _, ok := g.locs[name]; ok {
		if l := g.locs[name]; l.typ == TString && !l.stack {
			off := g.alloc(l.size)
			g.readCtxString(off, l)
			g.locs[name] = loc{stack: true, off: off, size: (l.size + 7) &^ 7, typ: TString}
		}
		return
	}
	f, ok := g.p.Source.Field(name)
	if ok && f.Loc == LocUSDT {
		g.placeUSDT(f)
		return
	}
	if ok && f.Loc == LocBTF {
		g.placeBTF(name, f)
		return
	}
	if !ok || f.Loc != LocBuiltin {
		return
	}
	slot := func() int16 {
		off := g.alloc(8)
		g.emit(asm.StoreMem(asm.R10, off, asm.R0, asm.DWord))
		g.locs[name] = loc{stack: true, off: off, size: 8, typ: f.Type}
		return off
	}
	switch builtinName(f) {
	case "pid":
		g.emit(asm.FnGetCurrentPidTgid.Call(), asm.RSh.Imm(asm.R0, 32))
		slot()
	case "tid":
		g.emit(asm.FnGetCurrentPidTgid.Call(), asm.And.Imm32(asm.R0, -1), asm.Mov.Reg32(asm.R0, asm.R0))
		slot()
	case "uid":
		g.emit(asm.FnGetCurrentUidGid.Call(), asm.Mov.Reg32(asm.R0, asm.R0))
		slot()
	case "cpu":
		g.emit(asm.FnGetSmpProcessorId.Call())
		slot()
	case "time":
		// Unix ns: the monotonic clock plus the offset Start measured.
		g.emit(asm.FnKtimeGetNs.Call(), asm.LoadImm(asm.R1, g.p.BootOffset, asm.DWord), asm.Add.Reg(asm.R0, asm.R1))
		slot()
	case "cgroup":
		g.emit(asm.FnGetCurrentCgroupId.Call())
		slot()
	case "comm":
		off := g.alloc(16)
		g.emit(asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, int32(off)),
			asm.Mov.Imm(asm.R2, 16), asm.FnGetCurrentComm.Call())
		g.locs[name] = loc{stack: true, off: off, size: 16, typ: TString}
	case "kstack", "ustack":
		g.placeStack(name, builtinName(f) == "ustack", 0)
	}
}

// stackDepthTag marks the stack id of a stack of a set depth (kstack(n)):
// id + n*stackDepthTag, for the stack map of that depth.
const stackDepthTag = 1 << 32

// stackMapName is the stack map of stacks of depth frames (0: the most).
func stackMapName(depth int) string {
	if depth == 0 {
		return "stacks"
	}
	return fmt.Sprintf("stacks%d", depth)
}

// placeStack takes the current kernel or user stack's id into a slot
// named key; depth, if not 0, keeps that many frames (its own map, so
// that stacks alike in their first frames are one).
func (g *gen) placeStack(key string, user bool, depth int) {
	flags := int32(0)
	if user {
		flags = 1 << 8 // BPF_F_USER_STACK
	}
	ok, lost, done := g.newLabel("stack_ok"), g.newLabel("stack_lost"), g.newLabel("stack_done")
	g.emit(asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, 0).WithReference(stackMapName(depth)),
		asm.Mov.Imm(asm.R3, flags),
		asm.FnGetStackid.Call(),
		asm.JSGE.Imm(asm.R0, 0, ok),
		// -EFAULT: no stack of that kind (a user-mode sample has no
		// kernel stack); not a loss.
		asm.JNE.Imm(asm.R0, -14, lost),
		asm.Mov.Imm(asm.R0, -2),
		asm.Ja.Label(done))
	g.mark(lost)
	g.count(CounterStackLost)
	g.emit(asm.Mov.Imm(asm.R0, -1), asm.Ja.Label(done))
	g.mark(ok)
	if depth > 0 {
		g.emit(asm.LoadImm(asm.R1, int64(depth)*stackDepthTag, asm.DWord), asm.Add.Reg(asm.R0, asm.R1))
	} else {
		g.emit(asm.Mov.Reg(asm.R0, asm.R0))
	}
	g.mark(done)
	off := g.alloc(8)
	g.emit(asm.StoreMem(asm.R10, off, asm.R0, asm.DWord))
	g.locs[key] = loc{stack: true, off: off, size: 8, typ: TStack}
}

// loadCtx loads an integer from the context into r, extended to 64 bits.
func (g *gen) loadCtx(r asm.Register, l loc) {
	if l.stack {
		g.emit(asm.LoadMem(r, asm.R10, l.off, asm.DWord))
		return
	}
	sz := map[int]asm.Size{1: asm.Byte, 2: asm.Half, 4: asm.Word, 8: asm.DWord}[l.size]
	g.emit(asm.LoadMem(r, asm.R6, l.off, sz))
	bytes := l.size
	if l.narrow > 0 && l.narrow < 8 {
		// A slot of 8 bytes holding a narrower argument.
		bytes = l.narrow
		if !l.signed {
			sh := int32(64 - 8*bytes)
			g.emit(asm.LSh.Imm(r, sh), asm.RSh.Imm(r, sh))
		}
	}
	if l.signed && bytes < 8 {
		sh := int32(64 - 8*bytes)
		g.emit(asm.LSh.Imm(r, sh), asm.ArSh.Imm(r, sh))
	}
}

// readCtxString copies a string field of the context to the stack at off.
func (g *gen) readCtxString(off int16, l loc) {
	if l.stack {
		g.copyStack(off, l.off, l.size)
		return
	}
	f := g.fieldAt(l)
	if f != nil && f.Loc == LocDataLoc {
		g.zero(off, l.size)
		g.emit(asm.LoadMem(asm.R3, asm.R6, l.off, asm.Word),
			asm.And.Imm(asm.R3, 0xffff),
			asm.Add.Reg(asm.R3, asm.R6),
			asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, int32(off)),
			asm.Mov.Imm(asm.R2, int32(l.size)),
			asm.FnProbeReadKernelStr.Call())
		return
	}
	// Up to the NUL only: the bytes after it may be anything (task_rename
	// copies prctl's unpadded buffer), and a group key must not differ by
	// them.
	g.zero(off, l.size)
	g.emit(asm.Mov.Reg(asm.R3, asm.R6), asm.Add.Imm(asm.R3, int32(l.off)),
		asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, int32(off)),
		asm.Mov.Imm(asm.R2, int32(l.size)),
		asm.FnProbeReadKernelStr.Call())
}

func (g *gen) fieldAt(l loc) *Field {
	for _, f := range g.p.Source.Fields {
		if f.Offset == int(l.off) && f.Type == TString {
			fc := f
			return &fc
		}
	}
	return nil
}

// stringLoc returns the stack location of a string expression.
func (g *gen) stringLoc(n Node) loc {
	switch x := n.(type) {
	case *Ident:
		g.place(x.Name)
		l := g.locs[x.Name]
		if !l.stack {
			off := g.alloc(l.size)
			g.readCtxString(off, l)
			l = loc{stack: true, off: off, size: (l.size + 7) &^ 7, typ: TString}
			g.locs[x.Name] = l
		}
		return l
	case *Call:
		return g.locs[exprKey(x)]
	}
	return loc{}
}

// eval emits code computing the integer n into exprRegs[d].
func (g *gen) eval(n Node, d int) asm.Register {
	if d >= len(exprRegs)-1 {
		if g.err == nil {
			a, b := n.Span()
			g.err = &Error{Pos: a, End: b, Msg: "expression too deep for the probe's registers"}
		}
		return exprRegs[0]
	}
	r := exprRegs[d]
	switch x := n.(type) {
	case *Number:
		if x.Int >= math.MinInt32 && x.Int <= math.MaxInt32 {
			g.emit(asm.Mov.Imm(r, int32(x.Int)))
		} else {
			g.emit(asm.LoadImm(r, x.Int, asm.DWord))
		}
	case *Ident:
		l, ok := g.locs[x.Name]
		if !ok {
			g.place(x.Name)
			l = g.locs[x.Name]
		}
		g.loadCtx(r, l)
	case *Unary:
		g.eval(x.X, d)
		switch x.Op {
		case "-":
			g.emit(asm.Neg.Imm(r, 0))
		case "~":
			g.emit(asm.Xor.Imm(r, -1))
		case "not":
			g.boolify(r, asm.JEq)
		}
	case *Binary:
		g.binary(x, d)
	default:
		g.evalMore(n, d)
	}
	return r
}

// boolify sets r to 1 if "r op 0" holds, else 0.
func (g *gen) boolify(r asm.Register, op asm.JumpOp) {
	t, done := g.newLabel("true"), g.newLabel("done")
	g.emit(op.Imm(r, 0, t), asm.Mov.Imm(r, 0), asm.Ja.Label(done))
	g.mark(t)
	g.emit(asm.Mov.Imm(r, 1))
	g.mark(done)
}

var cmpOps = map[string]asm.JumpOp{"=": asm.JEq, "!=": asm.JNE, "<": asm.JSLT, "<=": asm.JSLE, ">": asm.JSGT, ">=": asm.JSGE}
var aluOps = map[string]asm.ALUOp{"+": asm.Add, "-": asm.Sub, "*": asm.Mul, "/": asm.SDiv, "%": asm.SMod,
	"&": asm.And, "|": asm.Or, "^": asm.Xor, "<<": asm.LSh, ">>": asm.ArSh}

func (g *gen) binary(x *Binary, d int) {
	r := exprRegs[d]
	switch x.Op {
	case "and", "or":
		short, done := g.newLabel("short"), g.newLabel("done")
		l := g.eval(x.L, d)
		shortOp, shortVal := asm.JEq, int32(0)
		if x.Op == "or" {
			shortOp, shortVal = asm.JNE, 1
		}
		g.emit(shortOp.Imm(l, 0, short))
		g.eval(x.R, d)
		g.boolify(r, asm.JNE)
		g.emit(asm.Ja.Label(done))
		g.mark(short)
		g.emit(asm.Mov.Imm(r, shortVal))
		g.mark(done)
		return
	}
	if g.syscallCompare(x, d) {
		return
	}
	if lt, rt := g.kernelType(x.L), g.kernelType(x.R); lt == TString || rt == TString {
		_, lLit := x.L.(*String)
		_, rLit := x.R.(*String)
		switch {
		case x.Op == "like" || x.Op == "not like":
			g.like(x, d)
		case !lLit && !rLit:
			g.stringsEq(x, d)
		default:
			g.stringEq(x, d)
		}
		return
	}
	g.eval(x.L, d)
	r2 := g.eval(x.R, d+1)
	if op, ok := cmpOps[x.Op]; ok {
		t, done := g.newLabel("true"), g.newLabel("done")
		g.emit(op.Reg(r, r2, t), asm.Mov.Imm(r, 0), asm.Ja.Label(done))
		g.mark(t)
		g.emit(asm.Mov.Imm(r, 1))
		g.mark(done)
		return
	}
	if x.Op == "/" || x.Op == "%" {
		g.divGuard(r2)
	}
	g.emit(aluOps[x.Op].Reg(r, r2))
}

// stringEq compares a string value with a constant, 8 bytes at a time,
// up to and including the constant's terminating NUL.
func (g *gen) stringEq(x *Binary, d int) {
	field, lit := x.L, x.R
	if _, ok := field.(*String); ok {
		field, lit = lit, field
	}
	s := lit.(*String).Val
	l := g.stringLoc(field)
	r, t := exprRegs[d], exprRegs[d+1]
	differ, done := g.newLabel("differ"), g.newLabel("done")
	want := append([]byte(s), 0)
	if len(want) > l.size {
		g.emit(asm.Mov.Imm(r, 0))
	} else {
		for i := 0; i < len(want); i += 8 {
			chunk := want[i:min(i+8, len(want))]
			var v uint64
			for j, c := range chunk {
				v |= uint64(c) << (8 * j)
			}
			g.emit(asm.LoadMem(r, asm.R10, l.off+int16(i), asm.DWord))
			if len(chunk) < 8 {
				g.emit(asm.LoadImm(t, int64(uint64(1)<<(8*len(chunk))-1), asm.DWord), asm.And.Reg(r, t))
			}
			g.emit(asm.LoadImm(t, int64(v), asm.DWord), asm.JNE.Reg(r, t, differ))
		}
		g.verdict(r, differ, done)
	}
	if x.Op == "!=" {
		g.emit(asm.Xor.Imm(r, 1))
	}
}

// verdict ends a test that jumps to fail when it does not hold: r is 1
// when it holds, else 0; done labels what follows.
func (g *gen) verdict(r asm.Register, fail, done string) {
	g.emit(asm.Mov.Imm(r, 1), asm.Ja.Label(done))
	g.mark(fail)
	g.emit(asm.Mov.Imm(r, 0))
	g.mark(done)
}

// msb sets b to the index of v's highest set bit (v > 0), using t; v is
// destroyed.
func (g *gen) msb(v, t, b asm.Register) {
	g.emit(asm.Mov.Imm(b, 0))
	for _, sh := range []int32{32, 16, 8, 4, 2, 1} {
		skip := g.newLabel("msb")
		g.emit(asm.Mov.Reg(t, v), asm.RSh.Imm(t, sh), asm.JEq.Imm(t, 0, skip),
			asm.Add.Imm(b, sh), asm.Mov.Reg(v, t))
		g.mark(skip)
	}
}

// bucket computes the bucket of a's argument into exprRegs[d].
func (g *gen) bucket(a *Agg, d int) asm.Register {
	v := g.eval(a.Arg, d)
	t, b, o := exprRegs[d+1], exprRegs[d+2], exprRegs[d+3]
	done := g.newLabel("bucket_done")
	switch a.Kind {
	case AggHist:
		// 0 for v <= 0, else 1 + msb(v): bucket k holds [2^(k-1), 2^k).
		pos := g.newLabel("pos")
		g.emit(asm.JSGT.Imm(v, 0, pos), asm.Mov.Imm(v, 0), asm.Ja.Label(done))
		g.mark(pos)
		g.msb(v, t, b)
		g.emit(asm.Add.Imm(b, 1), asm.Mov.Reg(v, b))
	case AggQuantile:
		// Log-linear: v < 4 is its own bucket; else 4 buckets per power of 2.
		big, neg := g.newLabel("big"), g.newLabel("neg")
		g.emit(asm.JSLT.Imm(v, 0, neg), asm.JSGE.Imm(v, 4, big), asm.Ja.Label(done))
		g.mark(neg)
		g.emit(asm.Mov.Imm(v, 0), asm.Ja.Label(done))
		g.mark(big)
		g.emit(asm.Mov.Reg(o, v))
		g.msb(v, t, b)
		// sub = (o >> (b-2)) & 3; bucket = 4*(b-1) + sub
		g.emit(asm.Mov.Reg(t, b), asm.Sub.Imm(t, 2), asm.RSh.Reg(o, t), asm.And.Imm(o, 3),
			asm.Sub.Imm(b, 1), asm.LSh.Imm(b, 2), asm.Add.Reg(b, o), asm.Mov.Reg(v, b))
	case AggLHist:
		// 0 below min, 1..Buckets inside, Buckets+1 at or above max.
		in, over := g.newLabel("in"), g.newLabel("over")
		g.emit(asm.LoadImm(t, a.Min, asm.DWord), asm.JSGE.Reg(v, t, in), asm.Mov.Imm(v, 0), asm.Ja.Label(done))
		g.mark(in)
		g.emit(asm.Sub.Reg(v, t), asm.LoadImm(t, a.Step, asm.DWord), asm.Div.Reg(v, t), asm.Add.Imm(v, 1),
			asm.JGT.Imm(v, int32(a.Buckets), over), asm.Ja.Label(done))
		g.mark(over)
		g.emit(asm.Mov.Imm(v, int32(a.Buckets+1)))
	}
	g.mark(done)
	g.emit(asm.Mov.Reg(v, v))
	return v
}

// act emits the aggregation into the current map, or the event record into
// the ring buffer.
func (g *gen) act() {
	p := g.p
	rec := g.alloc(p.KeySize)
	g.zero(rec, p.KeySize)
	if p.Mode == ModeStream {
		for _, e := range p.Emits {
			g.store(rec+int16(e.Off), e.Expr, e.Type, e.Size, nil)
		}
		ok := g.newLabel("sent")
		g.emit(asm.LoadMapPtr(asm.R1, 0).WithReference("events"),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, int32(rec)),
			asm.Mov.Imm(asm.R3, int32(p.KeySize)), asm.Mov.Imm(asm.R4, 0),
			asm.FnRingbufOutput.Call(), asm.JEq.Imm(asm.R0, 0, ok))
		g.count(CounterRingLost)
		g.mark(ok)
		return
	}
	for _, k := range p.Keys {
		g.store(rec+int16(k.Off), k.Expr, k.Type, k.Size, k.Bucket)
	}
	type topBuf struct{ key, weight int16 }
	tops := map[*Agg]topBuf{}
	for _, a := range p.Aggs {
		if a.Kind == AggTopK {
			k, w := g.topPrepare(a)
			tops[a] = topBuf{k, w}
		}
	}
	// Which of the two maps is current: ctl[0], flipped by user space at
	// each interval so it reads a map no probe writes any more. The two
	// maps are referenced directly, each by its own lookups, rather than
	// through a map of maps: filling one costs a kernel RCU grace period
	// (milliseconds) at the start, and each lookup site keeps one map,
	// which the verifier can inline.
	have, full, second := g.newLabel("have"), g.newLabel("full"), g.newLabel("second")
	g.emit(asm.LoadMapValue(asm.R1, 0, 0).WithReference("ctl"),
		asm.LoadMem(asm.R1, asm.R1, 0, asm.DWord),
		asm.And.Imm(asm.R1, 1),
		asm.JNE.Imm(asm.R1, 0, second))
	for i, m := range aggMaps {
		if i == 1 {
			g.mark(second)
		}
		// Look the key up; insert a zero value if it is new, then look
		// it up again (another CPU may have inserted it meanwhile).
		g.emit(asm.LoadMapPtr(asm.R1, 0).WithReference(m),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, int32(rec)),
			asm.FnMapLookupElem.Call(),
			asm.Mov.Reg(asm.R7, asm.R0),
			asm.JNE.Imm(asm.R0, 0, have),
			asm.LoadMapPtr(asm.R1, 0).WithReference(m),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, int32(rec)),
			asm.LoadMapValue(asm.R3, 0, 0).WithReference("zero"),
			asm.Mov.Imm(asm.R4, 1), // BPF_NOEXIST
			asm.FnMapUpdateElem.Call(),
			asm.LoadMapPtr(asm.R1, 0).WithReference(m),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, int32(rec)),
			asm.FnMapLookupElem.Call(),
			asm.Mov.Reg(asm.R7, asm.R0),
			asm.JNE.Imm(asm.R0, 0, have))
		if i == 0 {
			g.emit(asm.Ja.Label(full))
		}
	}
	g.mark(full)
	g.count(CounterMapFull)
	g.emit(asm.Ja.Label(g.exitLabel()))
	g.mark(have)
	r1, r2 := exprRegs[0], exprRegs[1]
	for _, a := range p.Aggs {
		switch a.Kind {
		case AggSum, AggAvg:
			g.eval(a.Arg, 0)
			g.emit(asm.LoadMem(r2, asm.R7, int16(a.ValOff), asm.DWord), asm.Add.Reg(r2, r1),
				asm.StoreMem(asm.R7, int16(a.ValOff), r2, asm.DWord))
		case AggMin, AggMax:
			set, skip := g.newLabel("set"), g.newLabel("keep")
			op := asm.JSLT
			if a.Kind == AggMax {
				op = asm.JSGT
			}
			g.eval(a.Arg, 0)
			g.emit(asm.LoadMem(r2, asm.R7, 0, asm.DWord), asm.JEq.Imm(r2, 0, set),
				asm.LoadMem(r2, asm.R7, int16(a.ValOff), asm.DWord), op.Reg(r1, r2, set), asm.Ja.Label(skip))
			g.mark(set)
			g.emit(asm.StoreMem(asm.R7, int16(a.ValOff), r1, asm.DWord))
			g.mark(skip)
		case AggTopK:
			g.topk(a, tops[a].key, tops[a].weight)
		case AggDistinct:
			r3 := exprRegs[2]
			g.eval(a.Arg, 0)
			g.emit(asm.LoadImm(r2, int64(-7046029254386353131), asm.DWord), // 0x9E3779B97F4A7C15
				asm.Mul.Reg(r1, r2), asm.RSh.Imm(r1, 64-12),
				asm.Mov.Reg(r2, r1), asm.And.Imm(r2, 63), // bit
				asm.RSh.Imm(r1, 6), asm.LSh.Imm(r1, 3), // word offset
				asm.Mov.Imm(r3, 1), asm.LSh.Reg(r3, r2),
				asm.Mov.Reg(r2, asm.R7), asm.Add.Reg(r2, r1),
				asm.LoadMem(r1, r2, int16(a.ValOff), asm.DWord), asm.Or.Reg(r1, r3),
				asm.StoreMem(r2, int16(a.ValOff), r1, asm.DWord))
		}
	}
	// The event count, kept in every value (count, avg and bucket counts).
	g.emit(asm.LoadMem(r1, asm.R7, 0, asm.DWord), asm.Add.Imm(r1, 1), asm.StoreMem(asm.R7, 0, r1, asm.DWord))
	for _, a := range p.Aggs {
		if a.Kind != AggSample {
			continue
		}
		// Logarithmic sampling: keep the value when the count reaches a
		// power of 2, in slot log2(count), for the first sampleSlots.
		skip := g.newLabel("nosample")
		c, t, b := exprRegs[1], exprRegs[2], exprRegs[3]
		g.emit(asm.LoadMem(c, asm.R7, 0, asm.DWord), asm.Mov.Reg(t, c), asm.Sub.Imm(t, 1), asm.And.Reg(t, c),
			asm.JNE.Imm(t, 0, skip))
		g.msb(c, t, b)
		g.emit(asm.JGE.Imm(b, sampleSlots, skip), asm.LSh.Imm(b, 3), asm.Add.Reg(b, asm.R7))
		g.emit(asm.Mov.Reg(asm.R9, b))
		g.eval(a.Arg, 0)
		g.emit(asm.StoreMem(asm.R9, int16(a.ValOff), r1, asm.DWord))
		g.mark(skip)
	}
}

// store writes a key or record part at off.
func (g *gen) store(off int16, n Node, t Type, size int, bucket *Agg) {
	if c, ok := n.(*Call); ok {
		if _, dec := decoders[c.Name]; dec {
			// A decoder's argument is what the probe keeps.
			n, t = c.Args[0], g.kernelType(c.Args[0])
		}
	}
	switch {
	case bucket != nil:
		r := g.bucket(bucket, 0)
		g.emit(asm.StoreMem(asm.R10, off, r, asm.DWord))
	case t == TString:
		l := g.stringLoc(n)
		g.copyStack(off, l.off, min(size, l.size))
	case t == TBytes:
		g.storeBytes(off, n, size)
	default:
		r := g.eval(n, 0)
		g.emit(asm.StoreMem(asm.R10, off, r, asm.DWord))
	}
}

// aggMaps are the two aggregation maps, swapped each interval.
var aggMaps = [2]string{"agg0", "agg1"}

// Maps returns the map specs the programs reference.
func (p *Plan) Maps() map[string]*ebpf.MapSpec {
	m := map[string]*ebpf.MapSpec{
		"counters": {Name: "counters", Type: ebpf.Array, KeySize: 4, ValueSize: 8 * numCounters, MaxEntries: 1},
	}
	if p.Mode == ModeAggregate {
		// Not preallocated: creating a preallocated per-CPU hash map of
		// 10240 keys takes the kernel tens of milliseconds, and a query
		// seldom has that many groups. Entries are allocated as keys
		// first appear (in place updates after that).
		for _, name := range aggMaps {
			m[name] = &ebpf.MapSpec{Name: name, Type: ebpf.PerCPUHash, KeySize: uint32(p.KeySize), ValueSize: uint32(p.ValSize),
				MaxEntries: uint32(p.Opts.MapSize), Flags: unix.BPF_F_NO_PREALLOC}
		}
		m["ctl"] = &ebpf.MapSpec{Name: "ctl", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1}
		m["zero"] = &ebpf.MapSpec{Name: "zero", Type: ebpf.Array, KeySize: 4, ValueSize: uint32(p.ValSize), MaxEntries: 1}
	} else {
		m["events"] = &ebpf.MapSpec{Name: "events", Type: ebpf.RingBuf, MaxEntries: uint32(p.Opts.RingSize)}
	}
	for _, name := range p.stackMaps() {
		depth := maxStackDepth
		fmt.Sscanf(name, "stacks%d", &depth)
		m[name] = &ebpf.MapSpec{Name: name, Type: ebpf.StackTrace, KeySize: 4, ValueSize: uint32(8 * depth), MaxEntries: uint32(p.Opts.StackMapSize)}
	}
	if len(p.roles()) == 2 {
		size, _, _ := p.stashLayout()
		m["stash"] = &ebpf.MapSpec{Name: "stash", Type: ebpf.LRUHash, KeySize: uint32(p.pairKeySize()), ValueSize: uint32(size), MaxEntries: uint32(p.Opts.StashSize)}
		m["pairs"] = &ebpf.MapSpec{Name: "pairs", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8 * numPairCounters, MaxEntries: 1}
	}
	return m
}

// MapBytes is what the plan's maps may hold in the kernel when full:
// every entry's key and value (a per-CPU map's value once per possible
// CPU, rounded up to 8 bytes as the kernel stores it) and ring buffers'
// bytes. The kernel's own bookkeeping per entry comes on top.
func (p *Plan) MapBytes() uint64 {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		cpus = runtime.NumCPU()
	}
	var n uint64
	for _, m := range p.Maps() {
		entries, key, val := uint64(m.MaxEntries), uint64(m.KeySize), uint64(m.ValueSize)
		switch m.Type {
		case ebpf.RingBuf:
			n += entries
		case ebpf.PerCPUHash, ebpf.PerCPUArray:
			n += entries * (key + ((val+7)&^7)*uint64(cpus))
		default:
			n += entries * (key + val)
		}
	}
	return n
}

const maxStackDepth = 127

// stackMaps are the stack maps the plan's probes use: one of whole
// stacks, and one per depth of kstack(n) and ustack(n).
func (p *Plan) stackMaps() []string {
	seen := map[string]bool{}
	var out []string
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	for _, f := range p.Fields {
		if f.Loc == LocBuiltin && (builtinName(f) == "kstack" || builtinName(f) == "ustack") && f.Name != "kstack(n)" {
			add("stacks")
		}
	}
	visit := func(n Node) {
		walk(n, func(x Node) bool {
			switch y := x.(type) {
			case *Call:
				if (y.Name == "kstack" || y.Name == "ustack") && len(y.Args) == 1 {
					if num, ok := y.Args[0].(*Number); ok {
						add(stackMapName(int(num.Int)))
					}
				}
			case *Ident:
				if f, ok := p.field(y.Name); ok && f.Loc == LocBuiltin && (builtinName(f) == "kstack" || builtinName(f) == "ustack") {
					add("stacks")
				}
			}
			return true
		})
	}
	visit(p.Filter)
	for _, k := range p.Keys {
		visit(k.Expr)
	}
	for _, a := range p.Aggs {
		visit(a.Arg)
	}
	for _, e := range p.Emits {
		visit(e.Expr)
	}
	sort.Strings(out)
	return out
}

// placeUSDT reads a marker operand into a stack slot.
func (g *gen) placeUSDT(f *Field) {
	a := f.usdt
	off := g.alloc(8)
	switch a.kind {
	case 2:
		g.emit(asm.LoadImm(asm.R0, a.disp, asm.DWord))
	case 0:
		g.emit(asm.LoadMem(asm.R0, asm.R6, int16(a.reg), asm.DWord))
	case 1:
		g.emit(storeZero(off),
			asm.LoadMem(asm.R3, asm.R6, int16(a.reg), asm.DWord), asm.Add.Imm(asm.R3, int32(a.disp)),
			asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, int32(off)),
			asm.Mov.Imm(asm.R2, int32(a.size)), asm.FnProbeReadUser.Call(),
			asm.LoadMem(asm.R0, asm.R10, off, asm.DWord))
	}
	if a.size < 8 {
		sh := int32(64 - 8*a.size)
		g.emit(asm.LSh.Imm(asm.R0, sh))
		if a.signed {
			g.emit(asm.ArSh.Imm(asm.R0, sh))
		} else {
			g.emit(asm.RSh.Imm(asm.R0, sh))
		}
	}
	g.emit(asm.StoreMem(asm.R10, off, asm.R0, asm.DWord))
	g.locs[f.Name] = loc{stack: true, off: off, size: 8, typ: TInt}
}

// storeZero is *(u64 *)(r10 + off) = 0 (asm.StoreImm refuses DWord).
func storeZero(off int16) asm.Instruction {
	return asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: asm.R10, Offset: off}
}
