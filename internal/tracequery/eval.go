package tracequery

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The user-space part of a query — what the probe cannot compute, and
// what comes after its aggregation (expressions over aggregates, HAVING,
// ORDER BY, LIMIT) — is compiled here into Go closures, type-checked
// before anything attaches. Only a function this evaluator lacks sends the
// part to DuckDB (EXPLAIN says which and why). The compiler also writes the
// DuckDB text of each expression, so that both engines compute the same
// thing: an integer divided by an integer is the truncated integer
// quotient everywhere (as in the probe; DuckDB's / would give a DOUBLE),
// and x / 0 and x % 0 are NULL.

// evalFn computes a value from the input row (partials or events) and
// the output columns computed before it (for aliases in HAVING and
// ORDER BY). Values are nil (NULL), int64, float64, string, bool, []byte,
// or the lists and maps of histograms and samples.
type evalFn func(in, out []any) any

// ucode is a compiled user-space expression.
type ucode struct {
	fn  evalFn
	t   Type
	sql string
}

// needsDuck says that an expression uses something only DuckDB has.
type needsDuck struct {
	node Node
	why  string
}

func (e *needsDuck) Error() string { return e.why }

// ucol is what a node resolves to in the input table.
type ucol struct {
	idx int
	t   Type
	sql string // its name in the DuckDB text
}

// uenv resolves the leaves of user-space expressions.
type uenv struct {
	p *Plan
	// col resolves a node that is an input column: a group key, an
	// aggregate, an emitted field or value.
	col func(n Node) (ucol, bool)
	// alias resolves an output column by its name (HAVING, ORDER BY).
	alias func(name string) (ucol, bool)
	// unknown is the error for an identifier neither resolves.
	unknown func(id *Ident) error
	// duckCalls are the parts only DuckDB computes: with any, DuckDB
	// runs the user-space part (the closures are then not used).
	duckCalls []*needsDuck
}

func (e *uenv) text(n Node) string { return e.p.text(n) }

func isNum(t Type) bool  { return t == TInt || t == TFloat }
func isCond(t Type) bool { return t == TBool || t == TInt || t == TNull || t == TAny }

// compile compiles n for user space.
func (e *uenv) compile(n Node) (ucode, error) {
	if c, ok := e.col(n); ok {
		i := c.idx
		if i < 0 {
			return ucode{nil, c.t, c.sql}, nil // DuckDB's alone
		}
		return ucode{func(in, _ []any) any { return in[i] }, c.t, c.sql}, nil
	}
	switch x := n.(type) {
	case *Ident:
		if e.alias != nil {
			if c, ok := e.alias(x.Name); ok {
				i := c.idx
				return ucode{func(_, out []any) any { return out[i] }, c.t, c.sql}, nil
			}
		}
		return ucode{}, e.unknown(x)
	case *Number:
		if x.IsInt {
			v := x.Int
			return ucode{func(_, _ []any) any { return v }, TInt, strconv.FormatInt(v, 10)}, nil
		}
		v := x.Float
		return ucode{func(_, _ []any) any { return v }, TFloat, "CAST(" + x.Text + " AS DOUBLE)"}, nil
	case *String:
		v := x.Val
		return ucode{func(_, _ []any) any { return v }, TString, quoteString(v)}, nil
	case *Null:
		return ucode{func(_, _ []any) any { return nil }, TNull, "NULL"}, nil
	case *Unary:
		return e.unary(x)
	case *Binary:
		return e.binary(x)
	case *Case:
		return e.caseExpr(x)
	case *In:
		return e.in(x)
	case *Between:
		return e.between(x)
	case *IsNull:
		a, err := e.compile(x.X)
		if err != nil {
			return ucode{}, err
		}
		not := x.Not
		sql := "(" + a.sql + " IS NULL)"
		if not {
			sql = "(" + a.sql + " IS NOT NULL)"
		}
		return ucode{func(in, out []any) any { return (a.fn(in, out) == nil) != not }, TBool, sql}, nil
	case *Cast:
		return e.cast(x)
	case *Call:
		if _, ok := aggNames[x.Name]; ok {
			return ucode{}, errAt(x, "aggregate %s() inside another aggregate or where no aggregation is done", x.Name)
		}
		if x.Name == "count" && x.Distinct {
			return ucode{}, errAt(x, "count(DISTINCT …) inside another aggregate")
		}
		return e.call(x)
	case *Star:
		return ucode{}, errAt(x, "* stands only alone in the SELECT list")
	case *Index:
		return ucode{}, errAt(x, "not supported here: [ ] indexes a pointer array field in the probe (str(argv[1]))")
	}
	return ucode{}, errAt(n, "unsupported expression")
}

func (e *uenv) unary(x *Unary) (ucode, error) {
	a, err := e.compile(x.X)
	if err != nil {
		return ucode{}, err
	}
	f := a.fn
	switch x.Op {
	case "not":
		if !isCond(a.t) {
			return ucode{}, errAt(x.X, "type mismatch: NOT needs a condition, %s is %s", e.text(x.X), a.t.a())
		}
		return ucode{func(in, out []any) any {
			b, ok := truth(f(in, out))
			if !ok {
				return nil
			}
			return !b
		}, TBool, "(NOT " + a.sql + ")"}, nil
	case "-":
		switch a.t {
		case TInt:
			return ucode{func(in, out []any) any {
				if v, ok := f(in, out).(int64); ok {
					return -v
				}
				return nil
			}, TInt, "(-" + a.sql + ")"}, nil
		case TFloat:
			return ucode{func(in, out []any) any {
				if v, ok := f(in, out).(float64); ok {
					return -v
				}
				return nil
			}, TFloat, "(-" + a.sql + ")"}, nil
		case TNull:
			return a, nil
		}
		return ucode{}, errAt(x.X, "type mismatch: - needs a number, %s is %s", e.text(x.X), a.t.a())
	case "~":
		if a.t != TInt && a.t != TNull {
			return ucode{}, errAt(x.X, "type mismatch: ~ needs an integer, %s is %s", e.text(x.X), a.t.a())
		}
		return ucode{func(in, out []any) any {
			if v, ok := f(in, out).(int64); ok {
				return ^v
			}
			return nil
		}, TInt, "(~" + a.sql + ")"}, nil
	}
	return ucode{}, errAt(x, "unsupported operator %s", x.Op)
}

// truth is a value as a condition: false for NULL's ok.
func truth(v any) (b, ok bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case int64:
		return x != 0, true
	case float64:
		return x != 0, true
	}
	return false, false
}

// numeric gives v as int64 or float64, and which.
func numeric(v any) (i int64, f float64, isInt, ok bool) {
	switch x := v.(type) {
	case int64:
		return x, float64(x), true, true
	case float64:
		return 0, x, false, true
	case bool:
		if x {
			return 1, 1, true, true
		}
		return 0, 0, true, true
	}
	return 0, 0, false, false
}

func (e *uenv) binary(x *Binary) (ucode, error) {
	l, err := e.compile(x.L)
	if err != nil {
		return ucode{}, err
	}
	r, err := e.compile(x.R)
	if err != nil {
		return ucode{}, err
	}
	lf, rf := l.fn, r.fn
	switch x.Op {
	case "and", "or":
		for _, s := range []struct {
			n Node
			c ucode
		}{{x.L, l}, {x.R, r}} {
			if !isCond(s.c.t) {
				return ucode{}, errAt(s.n, "type mismatch: %s needs conditions, %s is %s", strings.ToUpper(x.Op), e.text(s.n), s.c.t.a())
			}
		}
		and := x.Op == "and"
		return ucode{func(in, out []any) any {
			a, aok := truth(lf(in, out))
			if aok && a != and {
				return a // false AND …, true OR …
			}
			b, bok := truth(rf(in, out))
			if bok && b != and {
				return b
			}
			if !aok || !bok {
				return nil
			}
			return and
		}, TBool, "(" + l.sql + " " + strings.ToUpper(x.Op) + " " + r.sql + ")"}, nil
	case "=", "!=", "<", "<=", ">", ">=":
		if err := e.comparable(x, x.L, l.t, x.R, r.t); err != nil {
			return ucode{}, err
		}
		op := x.Op
		sqlOp := op
		return ucode{func(in, out []any) any {
			c, ok := compareValues(lf(in, out), rf(in, out))
			if !ok {
				return nil
			}
			return cmpHolds(op, c)
		}, TBool, "(" + l.sql + " " + sqlOp + " " + r.sql + ")"}, nil
	case "like", "not like":
		for _, s := range []struct {
			n Node
			c ucode
		}{{x.L, l}, {x.R, r}} {
			if s.c.t != TString && s.c.t != TNull && s.c.t != TAny {
				return ucode{}, errAt(s.n, "type mismatch: LIKE matches strings, %s is %s", e.text(s.n), s.c.t.a())
			}
		}
		not := x.Op == "not like"
		return ucode{func(in, out []any) any {
			s, ok1 := lf(in, out).(string)
			pat, ok2 := rf(in, out).(string)
			if !ok1 || !ok2 {
				return nil
			}
			return likeMatch(pat, s) != not
		}, TBool, "(" + l.sql + " " + strings.ToUpper(x.Op) + " " + r.sql + ")"}, nil
	case "||":
		for _, s := range []struct {
			n Node
			c ucode
		}{{x.L, l}, {x.R, r}} {
			if s.c.t != TString && s.c.t != TInt && s.c.t != TNull && s.c.t != TAny {
				return ucode{}, errAt(s.n, "type mismatch: || joins strings and integers, %s is %s", e.text(s.n), s.c.t.a())
			}
		}
		return ucode{func(in, out []any) any {
			a, b := lf(in, out), rf(in, out)
			if a == nil || b == nil {
				return nil
			}
			return textOf(a) + textOf(b)
		}, TString, "(" + l.sql + " || " + r.sql + ")"}, nil
	}
	// Arithmetic.
	intOnly := strings.Contains("&|^<<>>", x.Op)
	for _, s := range []struct {
		n Node
		c ucode
	}{{x.L, l}, {x.R, r}} {
		if s.c.t == TNull || s.c.t == TAny || s.c.t == TInt || s.c.t == TFloat && !intOnly {
			continue
		}
		want := "numbers"
		if intOnly {
			want = "integers"
		}
		return ucode{}, errAt(s.n, "type mismatch: %s needs %s, %s is %s%s", x.Op, want, e.text(s.n), s.c.t.a(), pointerHint(e.p, s.n, s.c.t))
	}
	t := TInt
	if l.t == TFloat || r.t == TFloat {
		t = TFloat
	}
	op := x.Op
	sql := "(" + l.sql + " " + op + " " + r.sql + ")"
	switch op {
	case "^":
		sql = "xor(" + l.sql + ", " + r.sql + ")"
	case "/":
		if t == TInt {
			sql = "(" + l.sql + " // " + r.sql + ")"
		} else {
			sql = "(CAST(" + l.sql + " AS DOUBLE) / " + r.sql + ")"
		}
	}
	return ucode{func(in, out []any) any { return arith(op, lf(in, out), rf(in, out)) }, t, sql}, nil
}

// pointerHint tells how to read what a pointer points to.
func pointerHint(p *Plan, n Node, t Type) string {
	if t != TPtr {
		return ""
	}
	if id, ok := n.(*Ident); ok {
		if f, ok := p.field(id.Name); ok && f.CType != "" {
			if f.stringPointer() {
				return fmt.Sprintf(" (%s): str(%s) reads the string it points to", f.CType, id.Name)
			}
			return fmt.Sprintf(" (%s)", f.CType)
		}
	}
	return ""
}

func arith(op string, a, b any) any {
	ai, af, aInt, ok1 := numeric(a)
	bi, bf, bInt, ok2 := numeric(b)
	if !ok1 || !ok2 {
		return nil
	}
	if aInt && bInt {
		switch op {
		case "+":
			return ai + bi
		case "-":
			return ai - bi
		case "*":
			return ai * bi
		case "/":
			if bi == 0 || ai == math.MinInt64 && bi == -1 {
				return nil
			}
			return ai / bi
		case "%":
			if bi == 0 || bi == -1 {
				if bi == -1 {
					return int64(0)
				}
				return nil
			}
			return ai % bi
		case "&":
			return ai & bi
		case "|":
			return ai | bi
		case "^":
			return ai ^ bi
		case "<<":
			if bi < 0 || bi > 63 {
				return int64(0)
			}
			return ai << bi
		case ">>":
			if bi < 0 || bi > 63 {
				if ai < 0 {
					return int64(-1)
				}
				return int64(0)
			}
			return ai >> bi
		}
		return nil
	}
	switch op {
	case "+":
		return af + bf
	case "-":
		return af - bf
	case "*":
		return af * bf
	case "/":
		return af / bf
	case "%":
		if bf == 0 {
			return nil
		}
		return math.Mod(af, bf)
	}
	return nil
}

// comparable checks that two operands can be compared.
func (e *uenv) comparable(x, l Node, lt Type, r Node, rt Type) error {
	switch {
	case lt == TNull || rt == TNull || lt == TAny || rt == TAny:
		return nil
	case isNum(lt) && isNum(rt), lt == rt && (lt == TString || lt == TBool):
		return nil
	case lt == TBool && rt == TInt || lt == TInt && rt == TBool:
		return nil
	}
	return errAt(x, "type mismatch: %s compares %s with %s", e.text(x), lt.a(), rt.a())
}

// compareValues orders a and b: -1, 0 or 1; false if either is NULL or
// they do not compare.
func compareValues(a, b any) (int, bool) {
	if a == nil || b == nil {
		return 0, false
	}
	if as, ok := a.(string); ok {
		bs, ok := b.(string)
		if !ok {
			return 0, false
		}
		return strings.Compare(as, bs), true
	}
	ai, af, aInt, ok1 := numeric(a)
	bi, bf, bInt, ok2 := numeric(b)
	if !ok1 || !ok2 {
		return 0, false
	}
	if aInt && bInt {
		switch {
		case ai < bi:
			return -1, true
		case ai > bi:
			return 1, true
		}
		return 0, true
	}
	switch {
	case af < bf:
		return -1, true
	case af > bf:
		return 1, true
	}
	return 0, true
}

func cmpHolds(op string, c int) bool {
	switch op {
	case "=":
		return c == 0
	case "!=":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	}
	return c >= 0
}

// textOf is a value as || and concat() write it.
func textOf(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// likeMatch is SQL LIKE: % any run of characters, _ one character.
func likeMatch(pat, s string) bool {
	for len(pat) > 0 {
		c, n := utf8.DecodeRuneInString(pat)
		switch c {
		case '%':
			rest := pat[n:]
			for i := 0; ; {
				if likeMatch(rest, s[i:]) {
					return true
				}
				if i >= len(s) {
					return false
				}
				_, w := utf8.DecodeRuneInString(s[i:])
				i += w
			}
		case '_':
			if s == "" {
				return false
			}
			_, w := utf8.DecodeRuneInString(s)
			s, pat = s[w:], pat[n:]
		default:
			if !strings.HasPrefix(s, pat[:n]) {
				return false
			}
			s, pat = s[n:], pat[n:]
		}
	}
	return s == ""
}

// unify is the type several values share (CASE results, COALESCE
// arguments, IN lists): numbers widen to DOUBLE; NULL takes the other's.
func unify(ts []Type) (Type, bool) {
	t := TNull
	for _, u := range ts {
		switch {
		case u == TNull || u == t:
		case t == TNull || t == TAny:
			t = u
		case u == TAny:
		case isNum(t) && isNum(u):
			t = TFloat
		case t == TBool && u == TInt || t == TInt && u == TBool:
			t = TInt
		default:
			return t, false
		}
	}
	return t, true
}

// convert makes v of type t (after unify widened it).
func convert(v any, t Type) any {
	if t == TFloat {
		if i, ok := v.(int64); ok {
			return float64(i)
		}
	}
	if t == TInt {
		if b, ok := v.(bool); ok {
			if b {
				return int64(1)
			}
			return int64(0)
		}
	}
	return v
}

func (e *uenv) caseExpr(x *Case) (ucode, error) {
	var op ucode
	var err error
	if x.Operand != nil {
		if op, err = e.compile(x.Operand); err != nil {
			return ucode{}, err
		}
	}
	conds := make([]ucode, len(x.Whens))
	thens := make([]ucode, len(x.Whens))
	var ts []Type
	for i, w := range x.Whens {
		if conds[i], err = e.compile(w.Cond); err != nil {
			return ucode{}, err
		}
		if x.Operand != nil {
			if err := e.comparable(w.Cond, x.Operand, op.t, w.Cond, conds[i].t); err != nil {
				return ucode{}, err
			}
		} else if !isCond(conds[i].t) {
			return ucode{}, errAt(w.Cond, "type mismatch: WHEN needs a condition, %s is %s", e.text(w.Cond), conds[i].t.a())
		}
		if thens[i], err = e.compile(w.Then); err != nil {
			return ucode{}, err
		}
		ts = append(ts, thens[i].t)
	}
	var els ucode
	if x.Else != nil {
		if els, err = e.compile(x.Else); err != nil {
			return ucode{}, err
		}
		ts = append(ts, els.t)
	}
	t, ok := unify(ts)
	if !ok {
		return ucode{}, errAt(x, "type mismatch: the results of CASE are of different types (%s)", typeList(ts))
	}
	var b strings.Builder
	b.WriteString("(CASE")
	if x.Operand != nil {
		b.WriteString(" " + op.sql)
	}
	for i := range x.Whens {
		b.WriteString(" WHEN " + conds[i].sql + " THEN " + thens[i].sql)
	}
	if x.Else != nil {
		b.WriteString(" ELSE " + els.sql)
	}
	b.WriteString(" END)")
	hasOp, hasElse := x.Operand != nil, x.Else != nil
	return ucode{func(in, out []any) any {
		var ov any
		if hasOp {
			ov = op.fn(in, out)
		}
		for i := range conds {
			c := conds[i].fn(in, out)
			var hit bool
			if hasOp {
				cmp, ok := compareValues(ov, c)
				hit = ok && cmp == 0
			} else {
				hit, _ = truth(c)
			}
			if hit {
				return convert(thens[i].fn(in, out), t)
			}
		}
		if hasElse {
			return convert(els.fn(in, out), t)
		}
		return nil
	}, t, b.String()}, nil
}

func typeList(ts []Type) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.String())
	}
	return strings.Join(s, ", ")
}

func (e *uenv) in(x *In) (ucode, error) {
	a, err := e.compile(x.X)
	if err != nil {
		return ucode{}, err
	}
	items := make([]ucode, len(x.List))
	var sqls []string
	for i, it := range x.List {
		if items[i], err = e.compile(it); err != nil {
			return ucode{}, err
		}
		if err := e.comparable(it, x.X, a.t, it, items[i].t); err != nil {
			return ucode{}, err
		}
		sqls = append(sqls, items[i].sql)
	}
	not := x.Not
	sql := "(" + a.sql + " IN (" + strings.Join(sqls, ", ") + "))"
	if not {
		sql = "(" + a.sql + " NOT IN (" + strings.Join(sqls, ", ") + "))"
	}
	return ucode{func(in, out []any) any {
		v := a.fn(in, out)
		if v == nil {
			return nil
		}
		sawNull := false
		for _, it := range items {
			c, ok := compareValues(v, it.fn(in, out))
			if !ok {
				sawNull = true
				continue
			}
			if c == 0 {
				return !not
			}
		}
		if sawNull {
			return nil
		}
		return not
	}, TBool, sql}, nil
}

func (e *uenv) between(x *Between) (ucode, error) {
	a, err := e.compile(x.X)
	if err != nil {
		return ucode{}, err
	}
	lo, err := e.compile(x.Lo)
	if err != nil {
		return ucode{}, err
	}
	hi, err := e.compile(x.Hi)
	if err != nil {
		return ucode{}, err
	}
	if err := e.comparable(x, x.X, a.t, x.Lo, lo.t); err != nil {
		return ucode{}, err
	}
	if err := e.comparable(x, x.X, a.t, x.Hi, hi.t); err != nil {
		return ucode{}, err
	}
	not := x.Not
	sql := "(" + a.sql + " BETWEEN " + lo.sql + " AND " + hi.sql + ")"
	if not {
		sql = "(" + a.sql + " NOT BETWEEN " + lo.sql + " AND " + hi.sql + ")"
	}
	return ucode{func(in, out []any) any {
		v := a.fn(in, out)
		c1, ok1 := compareValues(v, lo.fn(in, out))
		c2, ok2 := compareValues(v, hi.fn(in, out))
		// Three-valued: v >= lo AND v <= hi.
		switch {
		case ok1 && c1 < 0 || ok2 && c2 > 0:
			return not
		case !ok1 || !ok2:
			return nil
		}
		return !not
	}, TBool, sql}, nil
}

// castTypes are the CAST targets the evaluator computes.
var castTypes = map[string]Type{"BIGINT": TInt, "INT": TInt, "INTEGER": TInt, "INT8": TInt, "INT64": TInt, "LONG": TInt,
	"DOUBLE": TFloat, "FLOAT8": TFloat, "FLOAT": TFloat, "REAL": TFloat,
	"VARCHAR": TString, "TEXT": TString, "STRING": TString}

func (e *uenv) cast(x *Cast) (ucode, error) {
	a, err := e.compile(x.X)
	if err != nil {
		return ucode{}, err
	}
	to, ok := castTypes[x.To]
	if !ok || to == TString && a.t == TFloat {
		why := "CAST to " + x.To
		if ok {
			why = "a DOUBLE written as text"
		}
		e.duckCalls = append(e.duckCalls, &needsDuck{x, why})
		return ucode{nil, TAny, "CAST(" + a.sql + " AS " + x.To + ")"}, nil
	}
	duckType := map[Type]string{TInt: "BIGINT", TFloat: "DOUBLE", TString: "VARCHAR"}[to]
	sql := "CAST(" + a.sql + " AS " + duckType + ")"
	f := a.fn
	switch to {
	case TInt:
		return ucode{func(in, out []any) any {
			switch v := f(in, out).(type) {
			case int64:
				return v
			case bool:
				if v {
					return int64(1)
				}
				return int64(0)
			case float64:
				r := math.RoundToEven(v) // as DuckDB casts a DOUBLE
				if math.IsNaN(r) || r >= 9.223372036854775807e18 || r < -9.223372036854775808e18 {
					return nil
				}
				return int64(r)
			case string:
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return nil
				}
				return n
			}
			return nil
		}, TInt, sql}, nil
	case TFloat:
		return ucode{func(in, out []any) any {
			switch v := f(in, out).(type) {
			case int64:
				return float64(v)
			case float64:
				return v
			case string:
				n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return nil
				}
				return n
			}
			return nil
		}, TFloat, sql}, nil
	}
	return ucode{func(in, out []any) any {
		v := f(in, out)
		if v == nil {
			return nil
		}
		return textOf(v)
	}, TString, sql}, nil
}

// ufunc is a scalar function the evaluator computes.
type ufunc struct {
	min, max int // arguments; max -1: any number
	// typ checks the argument types and gives the result's; a non-empty
	// string is what is wrong.
	typ func(ts []Type) (Type, string)
	fn  func(args []any) any
	// sql, if set, writes the DuckDB text (default: name(args)).
	sql func(args []string) string
}

func strArgs(name string, n int, out Type) func([]Type) (Type, string) {
	return func(ts []Type) (Type, string) {
		for _, t := range ts[:min(n, len(ts))] {
			if t != TString && t != TNull && t != TAny {
				return 0, name + "() needs strings"
			}
		}
		return out, ""
	}
}

var ufuncs = map[string]ufunc{
	"lower": {1, 1, strArgs("lower", 1, TString), func(a []any) any {
		if s, ok := a[0].(string); ok {
			return strings.ToLower(s)
		}
		return nil
	}, nil},
	"upper": {1, 1, strArgs("upper", 1, TString), func(a []any) any {
		if s, ok := a[0].(string); ok {
			return strings.ToUpper(s)
		}
		return nil
	}, nil},
	"length": {1, 1, strArgs("length", 1, TInt), func(a []any) any {
		if s, ok := a[0].(string); ok {
			return int64(utf8.RuneCountInString(s))
		}
		return nil
	}, nil},
	"starts_with": {2, 2, strArgs("starts_with", 2, TBool), func(a []any) any {
		s, ok1 := a[0].(string)
		p, ok2 := a[1].(string)
		if !ok1 || !ok2 {
			return nil
		}
		return strings.HasPrefix(s, p)
	}, nil},
	"contains": {2, 2, strArgs("contains", 2, TBool), func(a []any) any {
		s, ok1 := a[0].(string)
		p, ok2 := a[1].(string)
		if !ok1 || !ok2 {
			return nil
		}
		return strings.Contains(s, p)
	}, nil},
	"abs": {1, 1, func(ts []Type) (Type, string) {
		if !isNum(ts[0]) && ts[0] != TNull {
			return 0, "abs() needs a number"
		}
		return ts[0], ""
	}, func(a []any) any {
		switch v := a[0].(type) {
		case int64:
			if v < 0 {
				return -v
			}
			return v
		case float64:
			return math.Abs(v)
		}
		return nil
	}, nil},
	"round": {1, 2, func(ts []Type) (Type, string) {
		if !isNum(ts[0]) && ts[0] != TNull || len(ts) == 2 && ts[1] != TInt {
			return 0, "round() takes a number and an integer count of decimals"
		}
		return TFloat, ""
	}, func(a []any) any {
		_, f, _, ok := numeric(a[0])
		if !ok {
			return nil
		}
		if len(a) == 1 {
			return math.Round(f)
		}
		d, ok := a[1].(int64)
		if !ok {
			return nil
		}
		p := math.Pow(10, float64(d))
		return math.Round(f*p) / p
	}, func(args []string) string {
		args[0] = "CAST(" + args[0] + " AS DOUBLE)"
		return "round(" + strings.Join(args, ", ") + ")"
	}},
	"coalesce": {1, -1, func(ts []Type) (Type, string) {
		t, ok := unify(ts)
		if !ok {
			return 0, "the arguments of coalesce() are of different types (" + typeList(ts) + ")"
		}
		return t, ""
	}, func(a []any) any {
		for _, v := range a {
			if v != nil {
				return v
			}
		}
		return nil
	}, nil},
	"nullif": {2, 2, func(ts []Type) (Type, string) {
		if _, ok := unify(ts); !ok {
			return 0, "nullif() compares values of different types (" + typeList(ts) + ")"
		}
		return ts[0], ""
	}, func(a []any) any {
		if c, ok := compareValues(a[0], a[1]); ok && c == 0 {
			return nil
		}
		return a[0]
	}, nil},
	"least":    {1, -1, extremeType("least"), func(a []any) any { return extreme(a, -1) }, nil},
	"greatest": {1, -1, extremeType("greatest"), func(a []any) any { return extreme(a, 1) }, nil},
	"concat": {1, -1, func(ts []Type) (Type, string) {
		for _, t := range ts {
			if t != TString && t != TInt && t != TNull && t != TAny {
				return 0, "concat() joins strings and integers"
			}
		}
		return TString, ""
	}, func(a []any) any {
		var b strings.Builder
		for _, v := range a {
			if v != nil {
				b.WriteString(textOf(v))
			}
		}
		return b.String()
	}, nil},
	"substr":    {2, 3, substrType, substr, nil},
	"substring": {2, 3, substrType, substr, nil},
}

func extremeType(name string) func([]Type) (Type, string) {
	return func(ts []Type) (Type, string) {
		t, ok := unify(ts)
		if !ok || t != TNull && !isNum(t) && t != TString {
			return 0, name + "() compares numbers or strings, not " + typeList(ts)
		}
		return t, ""
	}
}

// extreme is least (dir -1) or greatest (1) of the non-NULL values.
func extreme(a []any, dir int) any {
	var best any
	for _, v := range a {
		if v == nil {
			continue
		}
		if best == nil {
			best = v
			continue
		}
		if c, ok := compareValues(v, best); ok && c*dir > 0 {
			best = v
		}
	}
	if _, isFloat := best.(float64); !isFloat {
		for _, v := range a {
			if _, ok := v.(float64); ok {
				if i, ok := best.(int64); ok {
					return float64(i)
				}
			}
		}
	}
	return best
}

func substrType(ts []Type) (Type, string) {
	if ts[0] != TString && ts[0] != TNull || ts[1] != TInt || len(ts) == 3 && ts[2] != TInt {
		return 0, "substr() takes a string, a start (from 1) and a length"
	}
	return TString, ""
}

// substr is DuckDB's: characters from start (1-based; 0 is before the
// first; negative counts from the end), length of them.
func substr(a []any) any {
	s, ok := a[0].(string)
	start, ok2 := a[1].(int64)
	if !ok || !ok2 {
		return nil
	}
	r := []rune(s)
	n := int64(len(r))
	var begin int64
	switch {
	case start > 0:
		begin = start - 1
	case start == 0:
		begin = -1
	default:
		begin = n + start
	}
	end := n
	if len(a) == 3 {
		l, ok := a[2].(int64)
		if !ok {
			return nil
		}
		if l < 0 {
			return ""
		}
		end = begin + l
	}
	begin, end = max(begin, 0), min(end, n)
	if begin >= end {
		return ""
	}
	return string(r[begin:end])
}

func (e *uenv) call(x *Call) (ucode, error) {
	f, ok := ufuncs[x.Name]
	if !ok {
		// DuckDB's, or a mistake DuckDB will name before the probes
		// attach (Plan.checkUserSQL).
		var sqls []string
		for _, a := range x.Args {
			c, err := e.compile(a)
			if err != nil {
				return ucode{}, err
			}
			sqls = append(sqls, c.sql)
		}
		if x.Star {
			sqls = []string{"*"}
		}
		d := ""
		if x.Distinct {
			d = "DISTINCT "
		}
		e.duckCalls = append(e.duckCalls, &needsDuck{x, x.Name + "() is DuckDB's"})
		return ucode{nil, TAny, x.Name + "(" + d + strings.Join(sqls, ", ") + ")"}, nil
	}
	if len(x.Args) < f.min || f.max >= 0 && len(x.Args) > f.max || x.Star || x.Distinct {
		return ucode{}, errAt(x, "%s() takes %s", x.Name, arity(f.min, f.max))
	}
	args := make([]ucode, len(x.Args))
	ts := make([]Type, len(x.Args))
	sqls := make([]string, len(x.Args))
	for i, a := range x.Args {
		c, err := e.compile(a)
		if err != nil {
			return ucode{}, err
		}
		args[i], ts[i], sqls[i] = c, c.t, c.sql
	}
	t, bad := f.typ(ts)
	if bad != "" {
		return ucode{}, errAt(x, "type mismatch: %s (here %s)", bad, typeList(ts))
	}
	sql := x.Name + "(" + strings.Join(sqls, ", ") + ")"
	if f.sql != nil {
		sql = f.sql(sqls)
	}
	fn := f.fn
	return ucode{func(in, out []any) any {
		vals := make([]any, len(args))
		for i, a := range args {
			vals[i] = a.fn(in, out)
		}
		return convert(fn(vals), t)
	}, t, sql}, nil
}

func arity(lo, hi int) string {
	switch {
	case hi < 0:
		return fmt.Sprintf("at least %d argument(s)", lo)
	case lo == hi:
		return fmt.Sprintf("%d argument(s)", lo)
	}
	return fmt.Sprintf("%d to %d arguments", lo, hi)
}
