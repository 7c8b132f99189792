package tracequery

import (
	"bufio"

	"errors"
	"fmt"
	"github.com/cilium/ebpf/btf"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Type is the type of a field or expression.
type Type int

const (
	TInt     Type = iota // 64-bit integer
	TString              // NUL-terminated, bounded bytes
	TStack               // a stack id, resolved to frames in user space
	TPtr                 // an address: compared, grouped and printed, never summed; str() reads a char *
	TBytes               // a fixed array of bytes (addresses: ntop())
	TSyscall             // a system call number, named in output (read, openat, …)
	TLabel               // a CASE of string constants: its branch in the probe, the string in output
	// User space only.
	TFloat
	TBool
	TNull
	TBuckets // hist() and lhist(): a list of {lo, hi, count}
	TList    // sample(): a list of values
	TRecord  // topk() and kmeans(): a list or struct of results
	TAny     // a DuckDB function's, known only when DuckDB runs it
)

func (t Type) String() string {
	switch t {
	case TString:
		return "string"
	case TStack:
		return "stack"
	case TPtr:
		return "pointer"
	case TBytes:
		return "byte array"
	case TSyscall:
		return "syscall"
	case TLabel:
		return "string"
	case TFloat:
		return "double"
	case TBool:
		return "boolean"
	case TNull:
		return "NULL"
	case TBuckets:
		return "histogram"
	case TList:
		return "list"
	case TRecord:
		return "record"
	case TAny:
		return "value"
	}
	return "int"
}

// a is the type's name with its article, for messages: "an int".
func (t Type) a() string {
	n := t.String()
	if strings.ContainsRune("aeiou", rune(n[0])) {
		return "an " + n
	}
	return "a " + n
}

// intLike says whether the probe holds t as a 64-bit integer it can
// compare.
func intLike(t Type) bool { return t == TInt || t == TSyscall || t == TPtr }

// Side says which probe of a paired source produces a field.
type Side int

const (
	SideEnd   Side = iota // the probe that completes the event (the only one if unpaired)
	SideBegin             // the probe that starts it; the value is kept until the end probe
)

// Loc says how a field's value is obtained.
type Loc int

const (
	LocCtx     Loc = iota // a load from the probe's context at Offset
	LocDataLoc            // a tracepoint __data_loc string: u32 at Offset locates it
	LocBuiltin            // a helper call (pid, comm, stacks…)
	LocLatency            // end time minus begin time, of a paired source
	LocUSDT               // a USDT operand: register, memory or constant
)

// Field is one column a source offers.
type Field struct {
	Name   string
	Type   Type
	Loc    Loc
	Side   Side
	Offset int  // in the probe's context
	Size   int  // bytes: of the load for ints, of the buffer for strings
	Signed bool // sign-extend a load narrower than 8 bytes
	// Narrow, for a context slot of 8 bytes holding a narrower value (an
	// argument of a BTF tracepoint or kernel function), is the value's
	// bytes: the load keeps those, extended by Signed.
	Narrow int
	// UserString marks a pointer the kernel declares as a user string
	// (char * syscall arguments): str() may read it without --unsafe-read.
	UserString bool
	// CType is the C type of a pointer or array field ("const char *").
	CType string
	// Builtin, for a builtin renamed in a join (a.pid), is its name.
	Builtin string
	Desc    string
	usdt    *usdtArg
	btf     *btfPath
}

// stringPointer says whether the field points to chars (str() reads it).
func (f *Field) stringPointer() bool {
	return f.Type == TPtr && strings.Count(f.CType, "*") == 1 && strings.Contains(f.CType, "char")
}

// Builtin fields exist on every source (a source's own field of the same
// name shadows them).
var Builtins = []Field{
	{Name: "time", Type: TInt, Loc: LocBuiltin, Desc: "event time, ns since the Unix epoch"},
	{Name: "cpu", Type: TInt, Loc: LocBuiltin, Desc: "CPU number"},
	{Name: "pid", Type: TInt, Loc: LocBuiltin, Desc: "process id (thread group id)"},
	{Name: "tid", Type: TInt, Loc: LocBuiltin, Desc: "thread id"},
	{Name: "uid", Type: TInt, Loc: LocBuiltin, Desc: "user id"},
	{Name: "comm", Type: TString, Size: 16, Loc: LocBuiltin, Desc: "thread name"},
	{Name: "cgroup", Type: TInt, Loc: LocBuiltin, Desc: "cgroup v2 id"},
	{Name: "kstack", Type: TStack, Loc: LocBuiltin, Desc: "kernel stack"},
	{Name: "ustack", Type: TStack, Loc: LocBuiltin, Desc: "user stack (grouping by it also groups by pid)"},
}

// ProbeKind is how a probe attaches.
type ProbeKind int

const (
	ProbeTracepoint ProbeKind = iota
	ProbeUprobe
	ProbeUretprobe
	ProbePerf
	ProbeBTF    // a BTF tracepoint (tp_btf): Event
	ProbeRawTP  // a raw tracepoint: Event
	ProbeKfunc  // fentry, or fexit with Return: Symbol
	ProbeKprobe // kprobe, or kretprobe with Return: Symbol
)

// Probe is one attachment point of a source.
type Probe struct {
	Kind ProbeKind
	// Tracepoint
	Group, Event string
	// Uprobe/Uretprobe
	Path, Symbol string
	RefCtr       uint64 // USDT semaphore file offset
	Address      uint64 // USDT probe file offset (instead of Symbol)
	// Perf: a cpu-clock event at Freq Hz on every CPU, or every Period on CPU 0
	Freq   uint64
	Period time.Duration
	// Return: a kernel function's return (fexit, kretprobe).
	Return bool
	// Pairing key parts: when PairByTid the thread id, else these context
	// loads (offset, size) identify the event across the two probes.
	PairByTid bool
	PairKey   [][2]int
	// PairExprs, for a join, are the key's expressions at this probe.
	PairExprs []Node
}

func (p Probe) String() string {
	switch p.Kind {
	case ProbeTracepoint:
		return "tracepoint " + p.Group + ":" + p.Event
	case ProbeUprobe, ProbeUretprobe:
		k := "uprobe"
		if p.Kind == ProbeUretprobe {
			k = "uretprobe"
		}
		if p.Symbol == "" {
			return fmt.Sprintf("%s %s:%#x", k, p.Path, p.Address)
		}
		return k + " " + p.Path + ":" + p.Symbol
	case ProbePerf:
		if p.Freq > 0 {
			return fmt.Sprintf("perf cpu-clock %d Hz on every CPU", p.Freq)
		}
		return fmt.Sprintf("perf cpu-clock every %v on CPU 0", p.Period)
	case ProbeBTF:
		return "BTF tracepoint " + p.Event
	case ProbeRawTP:
		return "raw tracepoint " + p.Event
	case ProbeKfunc:
		if p.Return {
			return "fexit " + p.Symbol
		}
		return "fentry " + p.Symbol
	case ProbeKprobe:
		if p.Return {
			return "kretprobe " + p.Symbol
		}
		return "kprobe " + p.Symbol
	}
	return "?"
}

// Source is what a query reads FROM: one probe, or two paired probes whose
// events are joined in the kernel (a begin, kept in a bounded map, and an
// end), which gives the begin's fields, the end's and the latency between.
type Source struct {
	Name   string
	Desc   string
	End    Probe
	Begin  *Probe // nil: not paired
	Fields []Field
	// Join, for a temporal join of two streams, says how they meet.
	Join *JoinSpec
	// resolve finds fields by path in kernel types (args.prev.comm of a
	// BTF tracepoint); nil: the source has none.
	resolve  func(path string) (*Field, error)
	resolved map[string]*Field
	// joinRest are the conditions of a join's ON beyond its key.
	joinRest []Node
}

// Field returns the source's field of that name: its own, a builtin (a
// source's own field of the same name shadows it), task.NAME (the
// builtin, always), args.NAME (the own field, as bpftrace writes it), or
// a path in kernel types.
func (s *Source) Field(name string) (*Field, bool) {
	for i := range s.Fields {
		if s.Fields[i].Name == name {
			return &s.Fields[i], true
		}
	}
	if b, ok := strings.CutPrefix(name, "task."); ok {
		if f := builtin(b); f != nil {
			return f, true
		}
		return nil, false
	}
	if f := builtin(name); f != nil {
		return f, true
	}
	if own, ok := strings.CutPrefix(name, "args."); ok && !strings.Contains(own, ".") {
		return s.Field(own)
	}
	if s.resolve != nil && strings.Contains(name, ".") {
		if f, ok := s.resolved[name]; ok {
			return f, true
		}
		f, err := s.resolve(name)
		if err != nil {
			return nil, false
		}
		if s.resolved == nil {
			s.resolved = map[string]*Field{}
		}
		s.resolved[name] = f
		return f, true
	}
	return nil, false
}

// pathError is the error for a name that looks like a path in kernel
// types but is not one, or nil.
func (s *Source) pathError(x *Ident) error {
	if s.resolve == nil || !strings.Contains(x.Name, ".") {
		return nil
	}
	if _, err := s.resolve(x.Name); err != nil {
		return errAt(x, "%v", err)
	}
	return nil
}

// ErrKernelFuncUnavailable says kernel function probes cannot run here.
var ErrKernelFuncUnavailable = errors.New("kernel function probes unavailable")

// Catalog finds sources. Its roots are parameters so that the compiler can
// be tested against fixture trees.
type Catalog struct {
	TraceFS string // default /sys/kernel/tracing
	// KernelFuncProbe says why a kind of kernel function probe ("kprobe"
	// or "kfunc") cannot run here, or nil if it can; nil means
	// ProbeKernelFuncs, which asks the kernel.
	KernelFuncProbe func(kind string) error
	// BTF is the kernel's BTF; nil means the running kernel's.
	BTF func() (*btf.Spec, error)
	// PID, if set, is the process traced: uprobe.LIB.SYMBOL looks for LIB
	// among its mappings first.
	PID int
}

func (c *Catalog) tracefs() string {
	if c == nil || c.TraceFS == "" {
		return "/sys/kernel/tracing"
	}
	return c.TraceFS
}

// EnsureTraceFS mounts tracefs at /sys/kernel/tracing when it is missing
// (tracepoint formats and attachment need it) and says whether it did.
func EnsureTraceFS() (mounted bool, err error) {
	if _, err := os.Stat("/sys/kernel/tracing/events"); err == nil {
		return false, nil
	}
	if err := mountTraceFS(); err != nil {
		return false, fmt.Errorf("mount tracefs on /sys/kernel/tracing: %w", err)
	}
	return true, nil
}

// tracepointFormat reads events/GROUP/EVENT/format into fields (the common_
// fields are left out: pid and friends are builtins).
func (c *Catalog) tracepointFormat(group, event string) ([]Field, error) {
	p := filepath.Join(c.tracefs(), "events", group, event, "format")
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var fields []Field
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "field:") {
			continue
		}
		fd, ok := parseFormatField(line)
		if ok && !strings.HasPrefix(fd.Name, "common_") {
			fields = append(fields, fd)
		}
	}
	return fields, sc.Err()
}

// parseFormatField parses "field:char comm[16];	offset:8;	size:16;	signed:0;".
func parseFormatField(line string) (Field, bool) {
	var decl string
	var off, size, signed int
	for _, part := range strings.Split(line, ";") {
		part = strings.TrimSpace(part)
		k, v, ok := strings.Cut(part, ":")
		if !ok {
			continue
		}
		switch k {
		case "field":
			decl = v
		case "offset":
			off, _ = strconv.Atoi(v)
		case "size":
			size, _ = strconv.Atoi(v)
		case "signed":
			signed, _ = strconv.Atoi(v)
		}
	}
	decl = strings.TrimSpace(decl)
	if decl == "" {
		return Field{}, false
	}
	name := decl[strings.LastIndexAny(decl, " *")+1:]
	ctype := strings.TrimSpace(strings.TrimSuffix(decl, name))
	arr := ""
	if i := strings.IndexByte(name, '['); i >= 0 {
		name, arr = name[:i], name[i:]
	}
	f := Field{Name: name, Offset: off, Size: size, Signed: signed == 1, Desc: strings.TrimSpace(ctype + " " + arr)}
	switch {
	case strings.HasPrefix(ctype, "__data_loc") && strings.Contains(ctype, "char"):
		f.Type, f.Loc, f.Size = TString, LocDataLoc, 64
	case strings.Contains(ctype, "char") && arr != "" && !strings.Contains(ctype, "*"):
		f.Type = TString
	case arr != "" && !strings.Contains(ctype, "*") && size > 0 && size <= 64:
		// Addresses (saddr, daddr) and other small arrays: bytes, which
		// ntop() writes as an IP address.
		f.Type, f.CType = TBytes, strings.TrimSpace(ctype+" "+arr)
	case arr != "" || strings.HasPrefix(ctype, "__data_loc"):
		return Field{}, false // other arrays: not offered
	case size != 1 && size != 2 && size != 4 && size != 8:
		return Field{}, false
	case strings.Contains(ctype, "*"):
		f.Type, f.Signed, f.CType = TPtr, false, ctype
		// Syscall tracepoints declare the user pointers they get.
		f.UserString = strings.Contains(ctype, "char")
	default:
		f.Type = TInt
	}
	return f, true
}

// Lookup resolves a FROM clause.
func (c *Catalog) Lookup(ref SourceRef) (*Source, error) {
	p := ref.Parts
	bad := func(format string, args ...any) error {
		return &Error{Pos: ref.pos, End: ref.end, Msg: fmt.Sprintf(format, args...)}
	}
	if len(p) == 0 {
		return nil, bad("missing source")
	}
	switch strings.ToLower(p[0]) {
	case "tracepoint", "tp":
		if len(p) != 3 {
			return nil, bad("a tracepoint source is tracepoint.GROUP.EVENT, e.g. tracepoint.sched.sched_switch")
		}
		fields, err := c.tracepointFormat(p[1], p[2])
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, bad("unknown source %s: no tracepoint %s:%s in %s (holter trace --list 'tracepoint.%s.*' lists them)", ref, p[1], p[2], c.tracefs(), p[1])
			}
			return nil, bad("tracepoint %s:%s: %v", p[1], p[2], err)
		}
		return &Source{Name: "tracepoint." + p[1] + "." + p[2], Desc: "kernel tracepoint " + p[1] + ":" + p[2],
			End: Probe{Kind: ProbeTracepoint, Group: p[1], Event: p[2]}, Fields: fields}, nil
	case "syscall":
		if len(p) != 2 {
			return nil, bad("a syscall source is syscall.NAME (e.g. syscall.read) or syscall.any")
		}
		return c.syscall(p[1], bad)
	case "uprobe", "uretprobe":
		if len(p) != 3 {
			return nil, bad(`a user function source is %s.BINARY.SYMBOL, BINARY a library or program name or a quoted path: uprobe.libc.malloc, uprobe."/usr/bin/bash".readline`, p[0])
		}
		return c.uprobeSource(strings.ToLower(p[0]), p[1], p[2], bad)
	case "usdt":
		if len(p) != 4 {
			return nil, bad(`a static marker source is usdt."PATH".PROVIDER.NAME`)
		}
		return usdtSource(p[1], p[2], p[3], bad)
	case "profile":
		if len(p) != 2 || !strings.HasPrefix(p[1], "hz_") {
			return nil, bad("a profiling clock is profile.hz_N, e.g. profile.hz_99")
		}
		hz, err := strconv.ParseUint(p[1][3:], 10, 32)
		if err != nil || hz == 0 || hz > 10000 {
			return nil, bad("profile frequency %q: want 1 to 10000 Hz", p[1][3:])
		}
		return &Source{Name: "profile." + p[1], Desc: "cpu-clock sampling on every CPU",
			End: Probe{Kind: ProbePerf, Freq: hz}}, nil
	case "interval":
		if len(p) != 2 {
			return nil, bad("an interval timer is interval.DURATION, e.g. interval.1s")
		}
		d, err := time.ParseDuration(p[1])
		if err != nil || d < time.Millisecond {
			return nil, bad("interval %q: want a duration of at least 1ms, e.g. 1s or 100ms", p[1])
		}
		return &Source{Name: "interval." + p[1], Desc: "a timer on CPU 0",
			End: Probe{Kind: ProbePerf, Period: d}}, nil
	case "kprobe", "kretprobe", "kfunc", "kretfunc", "fentry", "fexit":
		if len(p) != 2 {
			return nil, bad("a kernel function source is %s.FUNCTION, e.g. %s.vfs_read", p[0], p[0])
		}
		kind := strings.ToLower(p[0])
		family := "kfunc"
		if strings.HasPrefix(kind, "kprobe") || strings.HasPrefix(kind, "kretprobe") {
			family = "kprobe"
		}
		probe := ProbeKernelFuncs
		if c != nil && c.KernelFuncProbe != nil {
			probe = c.KernelFuncProbe
		}
		if reason := probe(family); reason != nil {
			return nil, bad("%v: %s sources cannot run here: %v; tracepoints (tracepoint.GROUP.EVENT, tp_btf.EVENT) can", ErrKernelFuncUnavailable, kind, reason)
		}
		return c.kernelFunction(kind, p[1], bad)
	case "tp_btf", "rawtracepoint", "raw_tracepoint", "raw_tp":
		if len(p) < 2 || len(p) > 3 {
			return nil, bad("a BTF tracepoint source is %s.EVENT, e.g. %s.sched_switch", p[0], p[0])
		}
		kind := strings.ToLower(p[0])
		if kind != "tp_btf" {
			kind = "rawtracepoint"
		}
		return c.btfTracepoint(kind, p[len(p)-1], bad)
	}
	for _, d := range derived {
		if strings.EqualFold(ref.String(), d.name) {
			return c.derivedSource(d, bad)
		}
	}
	return nil, bad("unknown source %s (sources: tracepoint.GROUP.EVENT, syscall.NAME, uprobe.\"PATH\".SYMBOL, usdt.\"PATH\".PROVIDER.NAME, profile.hz_N, interval.DURATION, %s; holter trace --list shows them)", ref, derivedNames())
}

func (c *Catalog) syscall(name string, bad func(string, ...any) error) (*Source, error) {
	tid := Probe{PairByTid: true}
	if name == "any" {
		enter, err := c.tracepointFormat("raw_syscalls", "sys_enter")
		if err != nil {
			return nil, bad("raw_syscalls tracepoints: %v", err)
		}
		exit, err := c.tracepointFormat("raw_syscalls", "sys_exit")
		if err != nil {
			return nil, bad("raw_syscalls tracepoints: %v", err)
		}
		var fields []Field
		for _, f := range enter {
			switch f.Name {
			case "id":
				f.Name, f.Desc, f.Side, f.Type = "nr", "system call (its number in the probe, its name in output)", SideBegin, TSyscall
				fields = append(fields, f)
			}
		}
		// raw_syscalls:sys_enter has args[6]; expose them as arg0..arg5.
		for i := 0; i < 6; i++ {
			fields = append(fields, Field{Name: fmt.Sprintf("arg%d", i), Type: TInt, Side: SideBegin, Offset: 16 + 8*i, Size: 8, Desc: "argument"})
		}
		for _, f := range exit {
			if f.Name == "ret" {
				f.Desc = "return value"
				fields = append(fields, f)
			}
		}
		fields = append(fields, Field{Name: "latency", Type: TInt, Loc: LocLatency, Desc: "ns from entry to return"})
		b := tid
		b.Kind, b.Group, b.Event = ProbeTracepoint, "raw_syscalls", "sys_enter"
		e := tid
		e.Kind, e.Group, e.Event = ProbeTracepoint, "raw_syscalls", "sys_exit"
		return &Source{Name: "syscall.any", Desc: "every system call", Begin: &b, End: e, Fields: fields}, nil
	}
	enter, err := c.tracepointFormat("syscalls", "sys_enter_"+name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, bad("unknown source syscall.%s: no tracepoint syscalls:sys_enter_%s (holter trace --list 'syscall.*' lists them)", name, name)
		}
		return nil, bad("syscall %s: %v", name, err)
	}
	exit, err := c.tracepointFormat("syscalls", "sys_exit_"+name)
	if err != nil {
		return nil, bad("syscall %s: %v", name, err)
	}
	var fields []Field
	for _, f := range enter {
		if f.Name == "__syscall_nr" {
			continue
		}
		f.Side = SideBegin
		fields = append(fields, f)
	}
	for _, f := range exit {
		if f.Name == "ret" {
			f.Desc = "return value"
			fields = append(fields, f)
		}
	}
	fields = append(fields, Field{Name: "latency", Type: TInt, Loc: LocLatency, Desc: "ns from entry to return"})
	b := tid
	b.Kind, b.Group, b.Event = ProbeTracepoint, "syscalls", "sys_enter_"+name
	e := tid
	e.Kind, e.Group, e.Event = ProbeTracepoint, "syscalls", "sys_exit_"+name
	return &Source{Name: "syscall." + name, Desc: "system call " + name, Begin: &b, End: e, Fields: fields}, nil
}

// x86-64 struct pt_regs offsets of the argument and return registers.
var ptRegsArgs = []int{112, 104, 96, 88, 72, 64} // di, si, dx, cx, r8, r9

const (
	ptRegsAX = 80
	ptRegsIP = 128
)

func (c *Catalog) uprobeSource(kind, name, sym string, bad func(string, ...any) error) (*Source, error) {
	pid := 0
	if c != nil {
		pid = c.PID
	}
	path, err := resolveBinary(name, pid)
	if err != nil {
		return nil, bad("uprobe binary %s: %v", name, err)
	}
	if fns, err := functions(path, sym); err != nil {
		return nil, bad("uprobe binary %s: %v", path, err)
	} else if len(fns) == 0 {
		return nil, bad("no function %s in %s (holter trace --list '%s.%s.%s*' lists its functions)", sym, path, kind, name, sym[:min(len(sym), 3)])
	}
	var fields []Field
	for i, off := range ptRegsArgs {
		fields = append(fields, Field{Name: fmt.Sprintf("arg%d", i), Type: TInt, Side: SideBegin, Offset: off, Size: 8, Signed: true,
			Desc: "integer argument (System V x86-64 register)"})
	}
	fields = append(fields,
		Field{Name: "ip", Type: TInt, Side: SideBegin, Offset: ptRegsIP, Size: 8, Desc: "the function's address (usym(ip) names it)"},
		Field{Name: "ret", Type: TInt, Offset: ptRegsAX, Size: 8, Signed: true, Desc: "return value"},
		Field{Name: "latency", Type: TInt, Loc: LocLatency, Desc: "ns from entry to return"})
	b := Probe{Kind: ProbeUprobe, Path: path, Symbol: sym, PairByTid: true}
	e := Probe{Kind: ProbeUretprobe, Path: path, Symbol: sym, PairByTid: true}
	return &Source{Name: fmt.Sprintf("uprobe.%q.%s", path, sym), Desc: "user function " + sym + " in " + path,
		Begin: &b, End: e, Fields: fields}, nil
}

// derived sources pair two tracepoints; they are the ready-made latencies
// that need state between events.
type derivedDef struct {
	name, desc   string
	begin, end   [2]string // group, event
	beginKey     []string  // fields of begin that identify the event
	endKey       []string  // fields of end, in the same order
	byTid        bool
	beginFields  map[string]string // exposed name -> begin field
	endFields    map[string]string // exposed name -> end field
	shadowFields []string          // documentation: builtins these replace
}

var derived = []derivedDef{
	{name: "sched.runq_latency", desc: "time a woken task waits to run (sched_wakeup/_new to sched_switch)",
		begin: [2]string{"sched", "sched_wakeup"}, end: [2]string{"sched", "sched_switch"},
		beginKey: []string{"pid"}, endKey: []string{"next_pid"},
		beginFields: map[string]string{"pid": "pid", "comm": "comm", "prio": "prio", "target_cpu": "target_cpu"},
		endFields:   map[string]string{"prev_pid": "prev_pid", "prev_comm": "prev_comm"}},
	{name: "block.io_latency", desc: "block request issue to completion",
		begin: [2]string{"block", "block_rq_issue"}, end: [2]string{"block", "block_rq_complete"},
		beginKey: []string{"dev", "sector"}, endKey: []string{"dev", "sector"},
		beginFields: map[string]string{"dev": "dev", "sector": "sector", "bytes": "bytes", "rwbs": "rwbs", "comm": "comm"},
		endFields:   map[string]string{"error": "error", "nr_sector": "nr_sector"}},
	{name: "lock.contention", desc: "lock contention wait (lock:contention_begin to contention_end, slow paths)",
		begin: [2]string{"lock", "contention_begin"}, end: [2]string{"lock", "contention_end"}, byTid: true,
		beginFields: map[string]string{"lock_addr": "lock_addr", "flags": "flags"},
		endFields:   map[string]string{"ret": "ret"}},
}

func derivedNames() string {
	var n []string
	for _, d := range derived {
		n = append(n, d.name)
	}
	return strings.Join(n, ", ")
}

func (c *Catalog) derivedSource(d derivedDef, bad func(string, ...any) error) (*Source, error) {
	bf, err := c.tracepointFormat(d.begin[0], d.begin[1])
	if err != nil {
		return nil, bad("%s needs tracepoint %s:%s: %v", d.name, d.begin[0], d.begin[1], err)
	}
	ef, err := c.tracepointFormat(d.end[0], d.end[1])
	if err != nil {
		return nil, bad("%s needs tracepoint %s:%s: %v", d.name, d.end[0], d.end[1], err)
	}
	find := func(fs []Field, n string) (Field, bool) {
		for _, f := range fs {
			if f.Name == n {
				return f, true
			}
		}
		return Field{}, false
	}
	b := Probe{Kind: ProbeTracepoint, Group: d.begin[0], Event: d.begin[1], PairByTid: d.byTid}
	e := Probe{Kind: ProbeTracepoint, Group: d.end[0], Event: d.end[1], PairByTid: d.byTid}
	for i := range d.beginKey {
		bk, ok1 := find(bf, d.beginKey[i])
		ek, ok2 := find(ef, d.endKey[i])
		if !ok1 || !ok2 || bk.Type != TInt || ek.Type != TInt {
			return nil, bad("%s: tracepoints lack key fields %s/%s", d.name, d.beginKey[i], d.endKey[i])
		}
		b.PairKey = append(b.PairKey, [2]int{bk.Offset, bk.Size})
		e.PairKey = append(e.PairKey, [2]int{ek.Offset, ek.Size})
	}
	var fields []Field
	for _, side := range []struct {
		m    map[string]string
		from []Field
		s    Side
	}{{d.beginFields, bf, SideBegin}, {d.endFields, ef, SideEnd}} {
		names := make([]string, 0, len(side.m))
		for n := range side.m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			f, ok := find(side.from, side.m[n])
			if !ok {
				continue
			}
			f.Name, f.Side = n, side.s
			fields = append(fields, f)
		}
	}
	fields = append(fields, Field{Name: "latency", Type: TInt, Loc: LocLatency, Desc: "ns from begin to end"})
	return &Source{Name: d.name, Desc: d.desc, Begin: &b, End: e, Fields: fields}, nil
}

// Listing is one line of holter trace --list.
type Listing struct {
	Source string   `json:"source"`
	Desc   string   `json:"desc,omitempty"`
	Fields []string `json:"fields,omitempty"`
}

// List enumerates sources whose name matches pattern (a glob; "" is all).
// Fields are filled only when few sources match, since reading every
// tracepoint format takes a while.
func (c *Catalog) List(pattern string) ([]Listing, error) {
	match := func(name string) bool {
		if pattern == "" {
			return true
		}
		if ok, _ := filepath.Match(pattern, name); ok {
			return true
		}
		return strings.Contains(name, pattern)
	}
	var names []Listing
	add := func(name, desc string) {
		if match(name) {
			names = append(names, Listing{Source: name, Desc: desc})
		}
	}
	for _, d := range derived {
		add(d.name, d.desc)
	}
	add("profile.hz_N", "cpu-clock sampling at N Hz on every CPU; fields: builtins with kstack, ustack")
	add("interval.DURATION", "a timer firing every DURATION on CPU 0")
	add(`uprobe."PATH".SYMBOL`, "user function entry, return and latency (arg0..arg5, ret, latency)")
	add(`usdt."PATH".PROVIDER.NAME`, "static marker in a program's ELF notes (arg0..argN); holter trace --list 'usdt.\"PATH\"' lists a file's")
	add("kprobe.FUNCTION / kfunc.FUNCTION", "kernel function entry/return, where the kernel allows it")
	add("tp_btf.EVENT / rawtracepoint.EVENT", "a tracepoint's arguments with their kernel types, by path (args.prev.comm)")
	add("syscall.any", "every system call (nr, arg0..arg5, ret, latency)")
	groups, err := os.ReadDir(filepath.Join(c.tracefs(), "events"))
	if err != nil {
		return nil, fmt.Errorf("list tracepoints: %w (is tracefs mounted?)", err)
	}
	for _, g := range groups {
		if !g.IsDir() {
			continue
		}
		evs, _ := os.ReadDir(filepath.Join(c.tracefs(), "events", g.Name()))
		for _, e := range evs {
			if !e.IsDir() {
				continue
			}
			if g.Name() == "syscalls" {
				if n, ok := strings.CutPrefix(e.Name(), "sys_enter_"); ok {
					add("syscall."+n, "system call "+n)
				}
				continue
			}
			add("tracepoint."+g.Name()+"."+e.Name(), "")
		}
	}
	if kind, rest, ok := strings.Cut(pattern, "."); ok && (kind == "uprobe" || kind == "uretprobe") {
		binary, glob, ok := strings.Cut(rest, ".")
		if strings.HasPrefix(rest, `"`) {
			if end := strings.Index(rest[1:], `".`); end >= 0 {
				binary, glob, ok = rest[1:end+1], rest[end+3:], true
			}
		}
		if !ok || binary == "" || glob == "" {
			return nil, fmt.Errorf("list a binary's functions with %s.BINARY.PATTERN, e.g. %s.libc.mall*", kind, kind)
		}
		pid := 0
		if c != nil {
			pid = c.PID
		}
		path, err := resolveBinary(binary, pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", binary, err)
		}
		fns, err := functions(path, glob)
		if err != nil {
			return nil, fmt.Errorf("functions of %s: %w", path, err)
		}
		names = names[:0]
		for _, fn := range fns {
			names = append(names, Listing{Source: fmt.Sprintf("%s.%q.%s", kind, path, fn)})
		}
		if len(names) > 20 {
			return names, nil
		}
	}
	if strings.HasPrefix(pattern, "usdt.") {
		path := strings.Trim(strings.TrimPrefix(pattern, "usdt."), `"`)
		notes, err := ReadUSDT(path)
		if err != nil {
			return nil, err
		}
		names = names[:0]
		for _, n := range notes {
			names = append(names, Listing{Source: fmt.Sprintf("usdt.%q.%s.%s", path, n.Provider, n.Name), Desc: "args: " + n.Args})
		}
	}
	if len(names) <= 20 {
		for i := range names {
			src, err := c.Lookup(mustRef(names[i].Source))
			if err != nil {
				continue
			}
			for _, f := range src.Fields {
				names[i].Fields = append(names[i].Fields, f.Name+" "+f.Type.String())
			}
		}
	}
	return names, nil
}

func mustRef(s string) SourceRef {
	q, err := Parse("SELECT 1 FROM " + s)
	if err != nil {
		return SourceRef{}
	}
	return q.From
}
