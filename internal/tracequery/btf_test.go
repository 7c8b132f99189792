package tracequery

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/testutil"
)

// btfFixturePath is a few types of a 6.18 kernel's BTF (the functions and
// tracepoints the golden plans use, their structs with some members), so
// that BTF sources are compiled and golden-tested on any machine.
const btfFixturePath = "testdata/btf/min.btf"

// btfKeep are the structs the fixture keeps, with the members kept (the
// others are dropped: BTF members carry their offsets).
var btfKeep = map[string][]string{
	"task_struct":   {"pid", "tgid", "comm", "real_parent"},
	"request":       {"q", "__data_len", "__sector"},
	"request_queue": {"disk"},
	"gendisk":       {"disk_name", "major", "first_minor"},
	"file":          {"f_flags", "f_inode", "f_mode"},
	"inode":         {"i_ino", "i_size"},
}

// btfRoots are the functions the fixture keeps.
var btfRoots = []string{"__traceiter_sched_switch", "__traceiter_block_rq_issue", "__traceiter_signal_generate", "vfs_read"}

// fixtureWithBTF is the fixture tracefs with the fixture BTF, where
// kernel function probes are allowed.
var fixtureWithBTF = &Catalog{TraceFS: "testdata/tracefs", KernelFuncProbe: func(string) error { return nil }, BTF: loadBTFFixture}

func loadBTFFixture() (*btf.Spec, error) {
	b, err := os.ReadFile(btfFixturePath)
	if err != nil {
		return nil, err
	}
	return btf.LoadSpecFromReader(bytes.NewReader(b))
}

// trimType copies t keeping only the structs' members btfKeep names.
func trimType(t btf.Type, memo map[btf.Type]btf.Type) btf.Type {
	if c, ok := memo[t]; ok {
		return c
	}
	switch v := t.(type) {
	case *btf.Struct:
		c := &btf.Struct{Name: v.Name, Size: v.Size}
		memo[t] = c
		for _, m := range v.Members {
			for _, k := range btfKeep[v.Name] {
				if m.Name == k {
					m.Type = trimType(m.Type, memo)
					c.Members = append(c.Members, m)
				}
			}
		}
		return c
	case *btf.Union:
		c := &btf.Union{Name: v.Name, Size: v.Size}
		memo[t] = c
		return c
	case *btf.Pointer:
		c := &btf.Pointer{}
		memo[t] = c
		c.Target = trimType(v.Target, memo)
		return c
	case *btf.Typedef:
		c := &btf.Typedef{Name: v.Name}
		memo[t] = c
		c.Type = trimType(v.Type, memo)
		return c
	case *btf.Const:
		return &btf.Const{Type: trimType(v.Type, memo)}
	case *btf.Volatile:
		return &btf.Volatile{Type: trimType(v.Type, memo)}
	case *btf.Restrict:
		return &btf.Restrict{Type: trimType(v.Type, memo)}
	case *btf.Array:
		return &btf.Array{Index: trimType(v.Index, memo), Type: trimType(v.Type, memo), Nelems: v.Nelems}
	case *btf.FuncProto:
		c := &btf.FuncProto{Return: trimType(v.Return, memo)}
		for _, p := range v.Params {
			c.Params = append(c.Params, btf.FuncParam{Name: p.Name, Type: trimType(p.Type, memo)})
		}
		return c
	case *btf.Func:
		return &btf.Func{Name: v.Name, Type: trimType(v.Type, memo), Linkage: v.Linkage}
	case *btf.Int:
		c := *v
		return &c
	case *btf.Enum:
		c := *v
		return &c
	}
	return &btf.Void{}
}

// TestBTFFixture checks the fixture loads with what the goldens need;
// with -update it is written again from the running kernel's BTF.
func TestBTFFixture(t *testing.T) {
	if *update {
		spec, err := btf.LoadKernelSpec()
		if err != nil {
			t.Fatal(err)
		}
		var roots []btf.Type
		memo := map[btf.Type]btf.Type{}
		for _, n := range btfRoots {
			var fn *btf.Func
			if err := spec.TypeByName(n, &fn); err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			roots = append(roots, trimType(fn, memo))
		}
		b, err := btf.NewBuilder(roots, nil)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := b.Marshal(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(btfFixturePath), 0o755)
		if err := os.WriteFile(btfFixturePath, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := loadBTFFixture()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range btfRoots {
		var fn *btf.Func
		if err := spec.TypeByName(n, &fn); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// TestBTFPaths resolves arguments and paths through kernel types, and
// says what is wrong with a path that does not resolve.
func TestBTFPaths(t *testing.T) {
	ok := []struct{ query, plan string }{
		{"SELECT args.prev.comm, args.next.pid, prev_state, preempt FROM tp_btf.sched_switch", "emit per event"},
		{"SELECT args.rq.q.disk.disk_name AS disk, sum(args.rq.__data_len) FROM tp_btf.block_rq_issue GROUP BY disk", "group by: k0=args.rq.q.disk.disk_name string"},
		{"SELECT args.prev.real_parent.comm AS parent, count() FROM rawtracepoint.sched_switch GROUP BY parent", "program probe on raw tracepoint sched_switch"},
		{"SELECT args.file.f_inode.i_ino, count AS bytes FROM kfunc.vfs_read", "program probe on fentry vfs_read"},
		{"SELECT retval, args.count FROM kretfunc.vfs_read", "program probe on fexit vfs_read"},
		{"SELECT count(), sum(args.count) FROM kprobe.vfs_read WHERE args.file.f_flags & 1 = 0", "program probe on kprobe vfs_read"},
	}
	for _, c := range ok {
		p, err := Compile(c.query, fixtureWithBTF, nil)
		if err != nil {
			t.Errorf("%s: %v", c.query, err)
			continue
		}
		ex, err := p.Explain(false)
		if err != nil || !strings.Contains(ex, c.plan) {
			t.Errorf("%s: %v\n%s", c.query, err, ex)
		}
	}
	bad := []struct{ query, msg, caret string }{
		{"SELECT args.rq.disk.disk_name FROM tp_btf.block_rq_issue", "rq (struct request): no member disk (its members: q, __data_len, __sector)", "args.rq.disk.disk_name"},
		{"SELECT args.prev FROM tp_btf.sched_switch WHERE args.prev.comm > 3", "type mismatch", "args.prev.comm"},
		{"SELECT args.nope.comm FROM tp_btf.sched_switch", "tp_btf.sched_switch has no argument nope (its arguments: preempt, prev, next, prev_state)", "args.nope.comm"},
		{"SELECT args.prev.real_parent FROM tp_btf.sched_switch WHERE prev_state.x = 1", "prev_state is a unsigned int, not a struct or a pointer to one", "prev_state.x"},
		{"SELECT sum(args.prev.comm) FROM tp_btf.sched_switch", "type mismatch: sum() needs a number", "args.prev.comm"},
		{"SELECT count() FROM tp_btf.no_such_tracepoint", "the kernel's BTF has no tracepoint no_such_tracepoint", "tp_btf.no_such_tracepoint"},
	}
	for _, c := range bad {
		_, err := Compile(c.query, fixtureWithBTF, nil)
		var qe *Error
		if !errors.As(err, &qe) || !strings.Contains(err.Error(), c.msg) || c.query[qe.Pos:qe.End] != c.caret {
			t.Errorf("%s: error %v, want %q at %q", c.query, err, c.msg, c.caret)
		}
	}
}

// TestKernelFunctionsProbed asks this kernel for kprobes and fentry: the
// test machines have neither (no kprobes built in; fentry refused under
// lockdown), and a kernel function query must say so before anything
// else, naming the reason; where the kernel allows them, the answer is nil
// and such a query compiles.
func TestKernelFunctionsProbed(t *testing.T) {
	testutil.RequireRoot(t)
	for _, kind := range []string{"kprobe", "kfunc"} {
		err := ProbeKernelFuncs(kind)
		t.Logf("%s: %v", kind, err)
		q := "SELECT count() FROM " + kind + ".vfs_read"
		_, cerr := Compile(q, nil, nil)
		if err == nil {
			if cerr != nil {
				t.Errorf("%s: the kernel allows %s probes, but %s: %v", kind, kind, q, cerr)
			}
			continue
		}
		if !errors.Is(cerr, ErrKernelFuncUnavailable) && !strings.Contains(fmtErr(cerr), ErrKernelFuncUnavailable.Error()) ||
			!strings.Contains(fmtErr(cerr), err.Error()) {
			t.Errorf("%s: %v; the query's error should name it: %v", kind, err, cerr)
		}
	}
	// The refusals the probes classify, as the kernel gives them.
	for _, c := range []struct {
		err  error
		want string
	}{
		{unix.EPERM, "the kernel refused to load x: operation not permitted"},
		{unix.ENOENT, "this kernel cannot load x: no such file or directory"},
		{unix.ENOTSUP, "this kernel cannot load x"},
	} {
		if got := classifyProbeError("load x", c.err).Error(); !strings.HasPrefix(got, c.want) {
			t.Errorf("%v: %q, want it to begin %q", c.err, got, c.want)
		}
	}
	if mode := lockdownMode(); mode != "" && mode != "none" {
		if got := classifyProbeError("load x", unix.EPERM).Error(); !strings.Contains(got, "locked down: "+mode) {
			t.Errorf("EPERM under lockdown %s: %q", mode, got)
		}
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
