package tracequery

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// Sources typed by the kernel's BTF: a BTF tracepoint (tp_btf.NAME, or
// rawtracepoint.NAME, the same arguments through a raw tracepoint), and
// kernel functions (kfunc.NAME and kretfunc.NAME by fentry/fexit,
// kprobe.NAME and kretprobe.NAME), where the kernel allows them. Their
// arguments are the tracepoint's or function's, by name, with their C
// types; a struct's fields are read by path, through pointers:
//
//	SELECT args.prev.comm, args.next.comm, count() FROM tp_btf.sched_switch GROUP BY 1, 2
//	SELECT args.rq.q.disk.disk_name AS disk, count() FROM tp_btf.block_rq_issue GROUP BY disk
//
// Each pointer on the way is read with bpf_probe_read_kernel (a NULL one
// reads as zeros); the offsets are the running kernel's, from its BTF.

// btfPath says how a field is read through kernel types: the value in
// the context at ctxOff, then for each hop the pointer at value+hop, and
// the field at value+off.
type btfPath struct {
	ctxOff int
	hops   []int
	off    int
	size   int // bytes of the final read
	kernel bool
}

// LocBTF is a field read through kernel types (btfPath).
const LocBTF Loc = 100

// kernelSpec is the catalog's kernel BTF.
func (c *Catalog) kernelSpec() (*btf.Spec, error) {
	if c != nil && c.BTF != nil {
		return c.BTF()
	}
	return btf.LoadKernelSpec()
}

// btfParams finds a tracepoint's arguments by name: the iterator the
// kernel calls (__traceiter_NAME) names them; the BTF type of its BPF
// hook (btf_trace_NAME) only types them.
func btfParams(spec *btf.Spec, event string) ([]btf.FuncParam, error) {
	for _, name := range []string{"__traceiter_" + event, "__probestub_" + event} {
		var fn *btf.Func
		if err := spec.TypeByName(name, &fn); err == nil {
			if fp, ok := btf.As[*btf.FuncProto](fn.Type); ok && len(fp.Params) > 0 {
				return fp.Params[1:], nil // the first is the hook's __data
			}
		}
	}
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+event, &td); err != nil {
		return nil, err
	}
	ptr, ok := btf.As[*btf.Pointer](td.Type)
	if !ok {
		return nil, fmt.Errorf("btf_trace_%s is not a function pointer", event)
	}
	fp, ok := btf.As[*btf.FuncProto](ptr.Target)
	if !ok || len(fp.Params) == 0 {
		return nil, fmt.Errorf("btf_trace_%s is not a function pointer", event)
	}
	params := append([]btf.FuncParam(nil), fp.Params[1:]...)
	for i := range params {
		params[i].Name = fmt.Sprintf("arg%d", i)
	}
	return params, nil
}

// btfSource makes a source whose context holds the arguments typed by
// params: at 8*i (tracepoints, fentry), or in pt_regs (kprobes).
func btfSource(name, desc string, probe Probe, params []btf.FuncParam, ctxOff func(i int) int) (*Source, error) {
	src := &Source{Name: name, Desc: desc, End: probe}
	for i, prm := range params {
		if prm.Name == "" {
			prm.Name = fmt.Sprintf("arg%d", i)
		}
		f, err := btfField(prm.Name, prm.Type, btfPath{ctxOff: ctxOff(i)}, true)
		if err != nil {
			continue // a struct passed by value: not offered
		}
		f.Desc = cType(prm.Type)
		src.Fields = append(src.Fields, *f)
	}
	src.resolve = func(path string) (*Field, error) { return resolvePath(src.Name, params, ctxOff, path) }
	return src, nil
}

// btfField makes the field of a value of type t read as path says; direct
// says the value is the context's own slot (no read through memory).
func btfField(name string, t btf.Type, path btfPath, direct bool) (*Field, error) {
	f := &Field{Name: name, Loc: LocBTF, CType: cType(t)}
	u := btf.UnderlyingType(t)
	switch v := u.(type) {
	case *btf.Int:
		f.Type, f.Size, f.Signed = TInt, int(v.Size), v.Encoding&btf.Signed != 0
		if v.Encoding&btf.Bool != 0 {
			f.Signed = false
		}
	case *btf.Enum:
		f.Type, f.Size, f.Signed = TInt, int(v.Size), v.Signed
	case *btf.Pointer:
		f.Type, f.Size = TPtr, 8
	case *btf.Array:
		elem, ok := btf.UnderlyingType(v.Type).(*btf.Int)
		sz := 0
		if ok {
			sz = int(elem.Size) * int(v.Nelems)
		}
		switch {
		case direct:
			return nil, fmt.Errorf("%s is an array passed by value", name)
		case ok && elem.Size == 1 && (elem.Encoding&btf.Char != 0 || strings.Contains(elem.Name, "char")):
			f.Type, f.Size = TString, min(int(v.Nelems), 256)
		case ok && sz > 0 && sz <= 64:
			f.Type, f.Size = TBytes, sz
		default:
			return nil, fmt.Errorf("%s is an array of %s: not readable here", name, cType(v.Type))
		}
	case *btf.Struct, *btf.Union:
		return nil, fmt.Errorf("%s is a %s: name one of its members (%s)", name, cType(t), memberList(u))
	default:
		return nil, fmt.Errorf("%s is a %s: not readable here", name, cType(t))
	}
	path.size = f.Size
	if direct {
		f.Loc, f.Offset = LocCtx, path.ctxOff
		f.Narrow = f.Size
		f.Size = 8
		if f.Type == TPtr {
			f.Narrow = 0
		}
		return f, nil
	}
	p := path
	f.btf = &p
	return f, nil
}

// resolvePath finds a field by its path from an argument: args.prev.comm.
func resolvePath(source string, params []btf.FuncParam, ctxOff func(int) int, path string) (*Field, error) {
	parts := strings.Split(strings.TrimPrefix(path, "args."), ".")
	arg := -1
	var names []string
	for i, prm := range params {
		n := prm.Name
		if n == "" {
			n = fmt.Sprintf("arg%d", i)
		}
		names = append(names, n)
		if n == parts[0] {
			arg = i
		}
	}
	if arg < 0 {
		return nil, fmt.Errorf("%s has no argument %s (its arguments: %s)", source, parts[0], strings.Join(names, ", "))
	}
	t := params[arg].Type
	p := btfPath{ctxOff: ctxOff(arg), kernel: true}
	inMemory := false
	where := parts[0]
	for _, m := range parts[1:] {
		if ptr, ok := btf.As[*btf.Pointer](t); ok {
			if inMemory {
				p.hops = append(p.hops, p.off)
				p.off = 0
			}
			inMemory, t = true, ptr.Target
		} else if !inMemory {
			return nil, fmt.Errorf("%s is a %s, not a struct or a pointer to one", where, cType(t))
		}
		u := btf.UnderlyingType(t)
		mem, off, err := member(u, m)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", where, cType(t), err)
		}
		if mem.BitfieldSize != 0 {
			return nil, fmt.Errorf("%s.%s is a bit field: not readable here", where, m)
		}
		p.off += off
		t = mem.Type
		where += "." + m
	}
	if !inMemory {
		return nil, fmt.Errorf("%s is an argument: write it without a path", where)
	}
	f, err := btfField(path, t, p, false)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// member finds a struct's member by name, inside anonymous members too,
// and its byte offset.
func member(t btf.Type, name string) (btf.Member, int, error) {
	ms, ok := members(t)
	if !ok {
		return btf.Member{}, 0, fmt.Errorf("not a struct: no member %s", name)
	}
	for _, m := range ms {
		if m.Name == name {
			return m, int(m.Offset / 8), nil
		}
	}
	for _, m := range ms {
		if m.Name == "" {
			if in, off, err := member(btf.UnderlyingType(m.Type), name); err == nil {
				return in, int(m.Offset/8) + off, nil
			}
		}
	}
	return btf.Member{}, 0, fmt.Errorf("no member %s (its members: %s)", name, memberList(t))
}

// members are a struct's or union's members.
func members(t btf.Type) ([]btf.Member, bool) {
	switch v := t.(type) {
	case *btf.Struct:
		return v.Members, true
	case *btf.Union:
		return v.Members, true
	}
	return nil, false
}

// memberList names a struct's members, the first twenty.
func memberList(t btf.Type) string {
	var names []string
	var add func(btf.Type)
	add = func(t btf.Type) {
		ms, _ := members(t)
		for _, m := range ms {
			if m.Name == "" {
				add(btf.UnderlyingType(m.Type))
				continue
			}
			names = append(names, m.Name)
		}
	}
	add(t)
	if len(names) > 20 {
		names = append(names[:20], "…")
	}
	return strings.Join(names, ", ")
}

// cType writes a BTF type as C.
func cType(t btf.Type) string {
	switch v := t.(type) {
	case *btf.Pointer:
		return cType(v.Target) + " *"
	case *btf.Const:
		return "const " + cType(v.Type)
	case *btf.Volatile:
		return cType(v.Type)
	case *btf.Restrict:
		return cType(v.Type)
	case *btf.Typedef:
		return v.Name
	case *btf.Struct:
		return "struct " + v.Name
	case *btf.Union:
		return "union " + v.Name
	case *btf.Enum:
		return "enum " + v.Name
	case *btf.Int:
		return v.Name
	case *btf.Array:
		return fmt.Sprintf("%s[%d]", cType(v.Type), v.Nelems)
	case *btf.Void:
		return "void"
	case *btf.FuncProto:
		return "function"
	}
	if t == nil {
		return "void"
	}
	return t.TypeName()
}

// btfTracepoint is tp_btf.NAME or rawtracepoint.NAME.
func (c *Catalog) btfTracepoint(kind, event string, bad func(string, ...any) error) (*Source, error) {
	spec, err := c.kernelSpec()
	if err != nil {
		return nil, bad("%s.%s needs the kernel's BTF: %v", kind, event, err)
	}
	params, err := btfParams(spec, event)
	if err != nil {
		return nil, bad("unknown source %s.%s: the kernel's BTF has no tracepoint %s (holter trace --list 'tracepoint.*%s*' lists tracepoints)", kind, event, event, event)
	}
	pk := ProbeBTF
	desc := "BTF tracepoint " + event
	if kind != "tp_btf" {
		pk, desc = ProbeRawTP, "raw tracepoint "+event
	}
	return btfSource(kind+"."+event, desc, Probe{Kind: pk, Event: event}, params, func(i int) int { return 8 * i })
}

// kernelFunction is kfunc/kretfunc/kprobe/kretprobe.NAME, once the kernel
// said it allows them.
func (c *Catalog) kernelFunction(kind, fn string, bad func(string, ...any) error) (*Source, error) {
	spec, err := c.kernelSpec()
	if err != nil {
		return nil, bad("%s.%s needs the kernel's BTF: %v", kind, fn, err)
	}
	var f *btf.Func
	if err := spec.TypeByName(fn, &f); err != nil {
		return nil, bad("unknown source %s.%s: the kernel's BTF has no function %s", kind, fn, fn)
	}
	fp, ok := btf.As[*btf.FuncProto](f.Type)
	if !ok {
		return nil, bad("%s is not a function", fn)
	}
	params := fp.Params
	switch kind {
	case "kfunc", "fentry", "kretfunc", "fexit":
		exit := kind == "kretfunc" || kind == "fexit"
		pr := Probe{Kind: ProbeKfunc, Symbol: fn, Return: exit}
		src, err := btfSource(kind+"."+fn, "kernel function "+fn, pr, params, func(i int) int { return 8 * i })
		if err != nil {
			return nil, err
		}
		if exit {
			// fexit's context has the arguments, then the return value.
			rf, err := btfField("retval", fp.Return, btfPath{ctxOff: 8 * len(params)}, true)
			if err == nil {
				rf.Desc = "return value"
				src.Fields = append(src.Fields, *rf)
			}
		}
		return src, nil
	}
	if len(params) > len(ptRegsArgs) {
		params = params[:len(ptRegsArgs)]
	}
	exit := kind == "kretprobe"
	src, err := btfSource(kind+"."+fn, "kernel function "+fn+" (kprobe)", Probe{Kind: ProbeKprobe, Symbol: fn, Return: exit}, params,
		func(i int) int { return ptRegsArgs[i] })
	if err != nil {
		return nil, err
	}
	if exit {
		src.Fields = append(src.Fields, Field{Name: "retval", Type: TInt, Offset: ptRegsAX, Size: 8, Signed: true, Desc: "return value"})
	}
	return src, nil
}

// placeBTF reads a field through kernel types into a stack slot.
func (g *gen) placeBTF(name string, f *Field) {
	p := f.btf
	base := g.alloc(8)
	g.emit(asm.LoadMem(asm.R0, asm.R6, int16(p.ctxOff), asm.DWord), asm.StoreMem(asm.R10, base, asm.R0, asm.DWord))
	read := func(dst int16, size int, off int, fn asm.BuiltinFunc) {
		g.emit(asm.LoadMem(asm.R3, asm.R10, base, asm.DWord), asm.Add.Imm(asm.R3, int32(off)),
			asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, int32(dst)),
			asm.Mov.Imm(asm.R2, int32(size)), fn.Call())
	}
	for _, hop := range p.hops {
		read(base, 8, hop, asm.FnProbeReadKernel)
	}
	switch f.Type {
	case TString, TBytes:
		size := (f.Size + 7) &^ 7
		buf := g.alloc(size)
		g.zero(buf, size)
		fn := asm.FnProbeReadKernel
		if f.Type == TString {
			fn = asm.FnProbeReadKernelStr
		}
		read(buf, f.Size, p.off, fn)
		g.locs[name] = loc{stack: true, off: buf, size: size, typ: f.Type}
	default:
		val := g.alloc(8)
		g.emit(storeZero(val))
		read(val, p.size, p.off, asm.FnProbeReadKernel)
		if p.size < 8 && f.Signed {
			sh := int32(64 - 8*p.size)
			g.emit(asm.LoadMem(asm.R0, asm.R10, val, asm.DWord), asm.LSh.Imm(asm.R0, sh), asm.ArSh.Imm(asm.R0, sh),
				asm.StoreMem(asm.R10, val, asm.R0, asm.DWord))
		}
		g.locs[name] = loc{stack: true, off: val, size: 8, typ: f.Type}
	}
}
