package tracequery

import (
	"errors"
	"strings"

	"github.com/holter-dev/holter/internal/sysname"
)

// checkKernel type-checks an expression for the probe. A *notPushable
// error means user space could still compute it; any other error is the
// query's mistake.
func (p *Plan) checkKernel(n Node) (Type, error) {
	switch x := n.(type) {
	case *Ident:
		f, ok := p.field(x.Name)
		if !ok {
			return 0, p.unknownField(x)
		}
		p.Fields[f.Name] = f
		return f.Type, nil
	case *Number:
		if !x.IsInt {
			return 0, &notPushable{x, "the probe computes with integers only"}
		}
		return TInt, nil
	case *String:
		return TString, nil
	case *Null:
		return 0, &notPushable{x, "NULL"}
	case *Unary:
		t, err := p.checkKernel(x.X)
		if err != nil {
			return 0, err
		}
		if !intLike(t) || t == TPtr && x.Op != "not" {
			return 0, errAt(x.X, "type mismatch: %s needs an integer, %s is %s%s", strings.ToUpper(x.Op), p.text(x.X), t.a(), pointerHint(p, x.X, t))
		}
		return TInt, nil
	case *Binary:
		return p.checkBinary(x)
	case *Case:
		return p.checkCase(x)
	case *In:
		xt, err := p.checkKernel(x.X)
		if err != nil {
			return 0, err
		}
		for _, e := range x.List {
			if err := p.checkOperands(x, x.X, xt, e); err != nil {
				return 0, err
			}
		}
		return TInt, nil
	case *Between:
		xt, err := p.checkKernel(x.X)
		if err != nil {
			return 0, err
		}
		for _, e := range []Node{x.Lo, x.Hi} {
			et, err := p.checkKernel(e)
			if err != nil {
				return 0, err
			}
			if !intLike(xt) || !intLike(et) {
				return 0, errAt(x, "type mismatch: BETWEEN compares integers, here %s and %s", xt.a(), et.a())
			}
		}
		return TInt, nil
	case *IsNull:
		// The probe's values are never NULL: the test is a constant.
		if _, err := p.checkKernel(x.X); err != nil {
			return 0, err
		}
		return TInt, nil
	case *Cast:
		t, err := p.checkKernel(x.X)
		if err != nil {
			return 0, err
		}
		if ct, ok := castTypes[x.To]; ok && ct == TInt && intLike(t) {
			return TInt, nil
		}
		return 0, &notPushable{x, "CAST to " + x.To}
	case *Index:
		return p.checkIndex(x)
	case *Call:
		return p.checkCall(x)
	}
	return 0, errAt(n, "unsupported expression")
}

// checkOperands checks that e can be compared with l (of type lt) in the
// probe: integers with integers, strings with a constant or another
// string field, a syscall number with its name.
func (p *Plan) checkOperands(x, l Node, lt Type, e Node) error {
	et, err := p.checkKernel(e)
	if err != nil {
		return err
	}
	_, lLit := l.(*String)
	_, eLit := e.(*String)
	switch {
	case intLike(lt) && intLike(et):
		return nil
	case lt == TSyscall && eLit:
		_, err := p.syscallNumber(e.(*String))
		return err
	case et == TSyscall && lLit:
		_, err := p.syscallNumber(l.(*String))
		return err
	case lt == TString && et == TString && !(lLit && eLit):
		return nil
	case lt == TString && et == TString:
		return &notPushable{x, "comparing two constants"}
	case lt == TLabel || et == TLabel:
		return &notPushable{x, "the probe compares a CASE of strings only as a group key"}
	case lt == TBytes || et == TBytes:
		return &notPushable{x, "the probe does not compare byte arrays"}
	}
	return errAt(x, "type mismatch: %s compares %s with %s", p.text(x), lt.a(), et.a())
}

func (p *Plan) checkBinary(x *Binary) (Type, error) {
	lt, err := p.checkKernel(x.L)
	if err != nil {
		return 0, err
	}
	switch x.Op {
	case "=", "!=", "<", "<=", ">", ">=":
		rt, err := p.checkKernel(x.R)
		if err != nil {
			return 0, err
		}
		if (lt == TString || rt == TString) && x.Op != "=" && x.Op != "!=" {
			if lt == TString && rt == TString {
				return 0, &notPushable{x, "the probe orders strings only by = and <>"}
			}
			bad, bt := x.L, lt
			if lt != TString {
				bad, bt = x.R, rt
			}
			return 0, errAt(bad, "type mismatch: %s needs numbers, %s is %s", x.Op, p.text(bad), bt.a())
		}
		if lt == TSyscall || rt == TSyscall {
			if _, lLit := x.L.(*String); !lLit {
				if _, rLit := x.R.(*String); !rLit {
					if intLike(lt) && intLike(rt) {
						return TInt, nil
					}
				}
			}
		}
		return TInt, p.checkOperands(x, x.L, lt, x.R)
	case "like", "not like":
		rt, err := p.checkKernel(x.R)
		if err != nil {
			return 0, err
		}
		if lt != TString {
			return 0, errAt(x.L, "type mismatch: LIKE matches a string, %s is %s", p.text(x.L), lt.a())
		}
		if rt != TString {
			return 0, errAt(x.R, "type mismatch: a LIKE pattern is a string, %s is %s", p.text(x.R), rt.a())
		}
		if _, ok := x.R.(*String); !ok {
			return 0, &notPushable{x, "the probe matches LIKE only against a constant pattern"}
		}
		if _, ok := x.L.(*String); ok {
			return 0, &notPushable{x, "LIKE of a constant"}
		}
		return TInt, nil
	case "||":
		if _, err := p.checkKernel(x.R); err != nil {
			var np *notPushable
			if !errors.As(err, &np) {
				return 0, err
			}
		}
		return 0, &notPushable{x, "the probe does not concatenate strings"}
	case "and", "or":
		rt, err := p.checkKernel(x.R)
		if err != nil {
			return 0, err
		}
		for _, s := range []struct {
			n Node
			t Type
		}{{x.L, lt}, {x.R, rt}} {
			if !intLike(s.t) {
				return 0, errAt(s.n, "type mismatch: %s needs conditions, %s is %s", strings.ToUpper(x.Op), p.text(s.n), s.t.a())
			}
		}
		return TInt, nil
	}
	rt, err := p.checkKernel(x.R)
	if err != nil {
		return 0, err
	}
	if lt != TInt || rt != TInt {
		bad := x.L
		if lt == TInt {
			bad, lt = x.R, rt
		}
		return 0, errAt(bad, "type mismatch: %s needs integers, %s is %s%s", x.Op, p.text(bad), lt.a(), pointerHint(p, bad, lt))
	}
	if x.Op == "/" || x.Op == "%" {
		if n, ok := x.R.(*Number); ok && n.Int == 0 {
			return 0, errAt(x.R, "division by zero: %s", p.text(x))
		}
	}
	return TInt, nil
}

// checkCase: integer results run in the probe; results that are all
// string constants run there as the number of the branch taken, which
// user space turns back into its string (TLabel).
func (p *Plan) checkCase(x *Case) (Type, error) {
	var ot Type
	if x.Operand != nil {
		t, err := p.checkKernel(x.Operand)
		if err != nil {
			return 0, err
		}
		ot = t
	}
	for _, w := range x.Whens {
		if x.Operand != nil {
			if err := p.checkOperands(w.Cond, x.Operand, ot, w.Cond); err != nil {
				return 0, err
			}
		} else {
			t, err := p.checkKernel(w.Cond)
			if err != nil {
				return 0, err
			}
			if !intLike(t) {
				return 0, errAt(w.Cond, "type mismatch: WHEN needs a condition, %s is %s", p.text(w.Cond), t.a())
			}
		}
	}
	labels, ints := true, true
	results := []Node{}
	for _, w := range x.Whens {
		results = append(results, w.Then)
	}
	if x.Else != nil {
		results = append(results, x.Else)
	}
	for _, r := range results {
		if _, ok := r.(*String); !ok {
			labels = false
		}
		if _, ok := r.(*Null); ok {
			continue
		}
		t, err := p.checkKernel(r)
		var np *notPushable
		switch {
		case errors.As(err, &np):
			ints = false
			if !labels {
				return 0, err
			}
		case err != nil:
			return 0, err
		case t != TInt:
			ints = false
		}
	}
	switch {
	case labels:
		return TLabel, nil
	case ints && x.Else != nil:
		return TInt, nil
	case ints:
		return 0, &notPushable{x, "a CASE without ELSE is NULL when no WHEN holds"}
	}
	return 0, &notPushable{x, "the probe computes a CASE of integers, or of string constants"}
}

// checkIndex: argv[i] reads the i-th pointer of a pointer array in user
// memory.
func (p *Plan) checkIndex(x *Index) (Type, error) {
	id, ok := x.X.(*Ident)
	var f *Field
	if ok {
		f, ok = p.field(id.Name)
	}
	if !ok || f.Type != TPtr || strings.Count(f.CType, "*") < 2 {
		return 0, errAt(x, "[ ] reads an element of a pointer array field (e.g. argv[1] of syscall.execve); %s is not one", p.text(x.X))
	}
	if _, err := intArg(x.I, "an index"); err != nil {
		return 0, err
	}
	if n := x.I.(*Number).Int; n < 0 || n > 63 {
		return 0, errAt(x.I, "an index from 0 to 63")
	}
	p.Fields[f.Name] = f
	return TPtr, nil
}

// decoders are functions of a value the probe computes whose result user
// space writes (an address as an IP address or a symbol).
var decoders = map[string]string{"ntop": "an IP address of 4 or 16 bytes (or a 32-bit integer) as text",
	"ksym": "a kernel address as its function", "usym": "a user address as its function (grouping also by pid)"}

func (p *Plan) checkCall(x *Call) (Type, error) {
	if _, ok := aggKind(x); ok {
		return 0, errAt(x, "aggregate %s() inside an expression the probe computes", x.Name)
	}
	switch x.Name {
	case "str":
		return TString, p.checkStr(x)
	case "kstack", "ustack":
		if len(x.Args) != 1 {
			return 0, errAt(x, "%s(n) takes the number of frames to keep (1 to %d)", x.Name, maxStackDepth)
		}
		n, err := intArg(x.Args[0], x.Name+"'s depth")
		if err != nil {
			return 0, err
		}
		if n < 1 || n > maxStackDepth {
			return 0, errAt(x.Args[0], "%s keeps 1 to %d frames", x.Name, maxStackDepth)
		}
		return TStack, nil
	case "coalesce":
		// The probe's values are never NULL: the first argument is it.
		var t0 Type
		for i, a := range x.Args {
			t, err := p.checkKernel(a)
			if err != nil {
				return 0, err
			}
			if i == 0 {
				t0 = t
			} else if t != t0 && !(intLike(t) && intLike(t0)) {
				return 0, errAt(x, "type mismatch: the arguments of coalesce() are %s and %s", t0.a(), t.a())
			}
		}
		if len(x.Args) == 0 {
			return 0, errAt(x, "coalesce() takes at least one argument")
		}
		return t0, nil
	}
	if _, ok := decoders[x.Name]; ok {
		if len(x.Args) != 1 {
			return 0, errAt(x, "%s() takes one argument: %s", x.Name, decoders[x.Name])
		}
		t, err := p.checkKernel(x.Args[0])
		if err != nil {
			return 0, err
		}
		switch {
		case x.Name == "ntop" && (t == TBytes && (p.kernelSize(x.Args[0]) == 4 || p.kernelSize(x.Args[0]) == 16) || t == TInt):
		case x.Name != "ntop" && (t == TInt || t == TPtr):
		default:
			return 0, errAt(x.Args[0], "type mismatch: %s() writes %s; %s is %s", x.Name, decoders[x.Name], p.text(x.Args[0]), t.a())
		}
		if x.Name == "usym" {
			p.Fields["pid"] = builtin("pid")
		}
		return TString, nil
	}
	// Any other function is user space's: check the arguments exist.
	for _, a := range x.Args {
		if _, err := p.checkKernel(a); err != nil {
			var np *notPushable
			if !errors.As(err, &np) && !isTypeErr(err) {
				return 0, err
			}
		}
	}
	return 0, &notPushable{x, x.Name + "() runs in user space, not in the probe"}
}

func builtin(name string) *Field {
	for i := range Builtins {
		if Builtins[i].Name == name {
			return &Builtins[i]
		}
	}
	return nil
}

func isTypeErr(err error) bool {
	var e *Error
	return errors.As(err, &e) && strings.HasPrefix(e.Msg, "type mismatch")
}

func (p *Plan) checkStr(x *Call) error {
	if len(x.Args) != 1 {
		return errAt(x, "str(pointer) takes one argument")
	}
	arg := x.Args[0]
	t, err := p.checkKernel(arg)
	if err != nil {
		return err
	}
	if t != TInt && t != TPtr {
		return errAt(arg, "type mismatch: str() reads from an address, %s is %s", p.text(arg), t.a())
	}
	var f *Field
	switch a := arg.(type) {
	case *Ident:
		f, _ = p.field(a.Name)
	case *Index:
		if id, ok := a.X.(*Ident); ok {
			af, _ := p.field(id.Name)
			if af != nil {
				// One level of pointers less.
				c := *af
				c.CType = strings.TrimSpace(c.CType[:strings.LastIndex(c.CType, "*")])
				f = &c
			}
		}
	}
	if f != nil && f.Type == TPtr && !f.stringPointer() {
		if strings.Count(f.CType, "*") >= 2 && strings.Contains(f.CType, "char") {
			return errAt(arg, "%s is a %s, an array of strings: str() reads one char *; str(%s[0]) reads the first, str(%s[1]) the next", p.text(arg), f.CType, p.text(arg), p.text(arg))
		}
		return errAt(arg, "%s is a %s, not a string: str() reads a char *", p.text(arg), f.CType)
	}
	if f != nil && f.UserString {
		return nil
	}
	if !p.Opts.UnsafeRead {
		return errAt(x, "str() of %s reads user memory at an arbitrary address: pass --unsafe-read to allow it (only char * syscall arguments are read without it)", p.text(arg))
	}
	return nil
}

// syscallNumber is the number of the system call a string names.
func (p *Plan) syscallNumber(s *String) (int64, error) {
	if nr, ok := sysname.SyscallNumber(s.Val); ok {
		return int64(nr), nil
	}
	return 0, errAt(s, "no system call named %q", s.Val)
}

// maxTopK bounds topk's slots: the probe scans them all on each event.
const maxTopK = 64

func topSlotSize(a *Agg) int { return 16 + max(a.KeySize, 8) }
