package tracequery

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Options bound what a compiled query may use; nil means the defaults.
type Options struct {
	MapSize      int  // keys per interval in the aggregation map (default 10240)
	StashSize    int  // begun-but-not-ended events held by a paired source (default 10240)
	StackMapSize int  // distinct stacks per run (default 4096)
	RingSize     int  // bytes of the ring buffer of a streaming query (default 1 MiB)
	StrSize      int  // bytes kept of a string read with str() (default 64)
	UnsafeRead   bool // allow str() on arbitrary addresses
}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.MapSize <= 0 {
		out.MapSize = 10240
	}
	if out.StashSize <= 0 {
		out.StashSize = 10240
	}
	if out.StackMapSize <= 0 {
		out.StackMapSize = 4096
	}
	if out.RingSize <= 0 {
		out.RingSize = 1 << 20
	}
	if out.StrSize <= 0 {
		out.StrSize = 64
	}
	out.StrSize = (out.StrSize + 7) &^ 7
	if out.StrSize > 256 {
		out.StrSize = 256
	}
	return out
}

// Mode is how the kernel part hands results to user space.
type Mode int

const (
	// ModeAggregate: the probe keeps partial aggregates per group in
	// per-CPU maps; only those leave the kernel, once per interval.
	ModeAggregate Mode = iota
	// ModeStream: the probe filters and sends the referenced fields of
	// each event through a ring buffer; DuckDB does the rest.
	ModeStream
)

// AggKind is an aggregate the probe computes.
type AggKind int

const (
	AggCount AggKind = iota
	AggSum
	AggMin
	AggMax
	AggAvg
	AggHist     // log2 buckets
	AggLHist    // linear buckets
	AggQuantile // from log-linear buckets (4 per power of 2)
	AggDistinct // linear counting over a 4096-bit bitmap
	AggSample   // logarithmic sample: values at counts 1, 2, 4, … 128 (seed 000)
)

var aggNames = map[string]AggKind{"count": AggCount, "sum": AggSum, "min": AggMin, "max": AggMax, "avg": AggAvg,
	"hist": AggHist, "lhist": AggLHist, "quantile": AggQuantile, "median": AggQuantile, "p50": AggQuantile,
	"p90": AggQuantile, "p95": AggQuantile, "p99": AggQuantile, "p999": AggQuantile,
	"count_distinct": AggDistinct, "sample": AggSample}

const (
	distinctBits = 4096
	sampleSlots  = 8
)

// Agg is one aggregate of the query.
type Agg struct {
	Kind      AggKind
	Call      *Call
	Arg       Node
	ArgType   Type
	Min, Step int64 // lhist
	Buckets   int64 // lhist
	Q         float64
	Col       string // column in the partials table
	ValOff    int    // offset of its state in the map value; -1: none
	BucketKey int    // index of its bucket in Plan.Keys (bucketed kinds)
}

func (a *Agg) bucketed() bool {
	return a.Kind == AggHist || a.Kind == AggLHist || a.Kind == AggQuantile
}

// Key is one part of the kernel map key: a GROUP BY expression or the
// bucket of a histogram.
type Key struct {
	Expr   Node
	Type   Type
	Size   int // bytes in the key
	Off    int
	Col    string
	Bucket *Agg // non-nil for a bucket key
}

// Emit is one value a streaming probe sends per event.
type Emit struct {
	Expr Node // a field (Ident) or a str() call
	Type Type
	Size int
	Off  int
	Col  string
}

// Plan is a compiled query: the kernel part (source, filter, keys and
// aggregates or emitted values) and the user-space part (SQL over the
// partials). It is deterministic and needs no privileges.
type Plan struct {
	Query  *Query
	Source *Source
	Mode   Mode
	Opts   Options

	Filter  Node // pushed into the probe; nil: none
	Keys    []*Key
	Aggs    []*Agg
	Emits   []*Emit
	KeySize int // bytes of the map key (aggregate) or event record (stream)
	ValSize int
	UserSQL string // over the table "partials" (aggregate) or "events" (stream)
	// Direct, when UserSQL only picks and renames columns of the partials,
	// says which partials column each output column is: the user-space
	// part is then done without DuckDB (see Session.userPart), as long as
	// UserSQL is still directSQL, the projection that was planned.
	Direct    []int
	directSQL string
	Columns   []string // output column names
	HistCols  map[string]bool
	Notes     []string // what was not pushed and why
	// Fields referenced, by name, with the side of a paired source they
	// are read on.
	Fields map[string]*Field
}

// notPushable is why part of a query cannot run in the probe.
type notPushable struct {
	node Node
	why  string
}

func (e *notPushable) Error() string { return e.why }

// Compile parses, checks and plans a query.
func Compile(text string, cat *Catalog, opts *Options) (*Plan, error) {
	q, err := Parse(text)
	if err != nil {
		return nil, err
	}
	p, err := CompileQuery(q, cat, opts)
	if err != nil {
		var qe *Error
		if errors.As(err, &qe) && qe.Query == "" {
			qe.Query = text
		}
		return nil, err
	}
	return p, nil
}

// CompileQuery plans a parsed query.
func CompileQuery(q *Query, cat *Catalog, opts *Options) (*Plan, error) {
	src, err := cat.Lookup(q.From)
	if err != nil {
		if len(q.From.Parts) == 1 && !probeKinds[strings.ToLower(q.From.Parts[0])] {
			return nil, recordedTableError(q.From)
		}
		return nil, err
	}
	p := &Plan{Query: q, Source: src, Opts: opts.withDefaults(), Fields: map[string]*Field{}, HistCols: map[string]bool{}}
	// Substitute GROUP BY aliases by their select expressions.
	for i, g := range q.GroupBy {
		if id, ok := g.(*Ident); ok {
			if _, isField := src.Field(id.Name); !isField {
				for _, it := range q.Select {
					if strings.EqualFold(it.Alias, id.Name) {
						q.GroupBy[i] = it.Expr
					}
				}
			}
		}
	}
	for i, it := range q.Select {
		name := it.Alias
		if name == "" {
			if id, ok := it.Expr.(*Ident); ok {
				name = id.Name
			} else {
				a, b := it.Expr.Span()
				name = q.Text[a:b]
			}
		}
		for _, prev := range p.Columns {
			if prev == name {
				name = fmt.Sprintf("%s_%d", name, i)
			}
		}
		p.Columns = append(p.Columns, name)
	}
	aggregating := len(q.GroupBy) > 0 || q.Having != nil
	for _, it := range q.Select {
		if hasAgg(it.Expr) {
			aggregating = true
		}
	}
	if q.Where != nil && hasAgg(q.Where) {
		n := findAgg(q.Where)
		return nil, errAt(n, "aggregates are not allowed in WHERE; use HAVING")
	}
	var np *notPushable
	if aggregating {
		err := p.planAggregate()
		if err == nil {
			return p, nil
		}
		if !errors.As(err, &np) {
			return nil, err
		}
		a, b := np.node.Span()
		p.Notes = append(p.Notes, fmt.Sprintf("aggregation runs in user space: %s (%s)", np.why, q.Text[a:b]))
		p.Keys, p.Aggs, p.Filter, p.KeySize, p.ValSize = nil, nil, nil, 0, 0
		p.Fields = map[string]*Field{}
		p.HistCols = map[string]bool{}
	}
	return p, p.planStream()
}

func hasAgg(n Node) bool { return findAgg(n) != nil }

func findAgg(n Node) Node {
	var found Node
	walk(n, func(x Node) bool {
		if c, ok := x.(*Call); ok {
			if _, ok := aggNames[c.Name]; ok && found == nil {
				found = c
				return false
			}
		}
		return found == nil
	})
	return found
}

func walk(n Node, f func(Node) bool) {
	if n == nil || !f(n) {
		return
	}
	switch x := n.(type) {
	case *Call:
		for _, a := range x.Args {
			walk(a, f)
		}
	case *Binary:
		walk(x.L, f)
		walk(x.R, f)
	case *Unary:
		walk(x.X, f)
	}
}

func exprKey(n Node) string {
	return sqlText(n, func(Node) (string, bool) { return "", false })
}

// checkKernel type-checks an expression for the probe. A *notPushable
// error means user space could still compute it; any other error is the
// query's mistake.
func (p *Plan) checkKernel(n Node) (Type, error) {
	switch x := n.(type) {
	case *Ident:
		f, ok := p.Source.Field(x.Name)
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
	case *Unary:
		t, err := p.checkKernel(x.X)
		if err != nil {
			return 0, err
		}
		if t != TInt {
			return 0, errAt(x, "type mismatch: %s needs an integer, %s is a %s", x.Op, p.text(x.X), t)
		}
		return TInt, nil
	case *Binary:
		lt, err := p.checkKernel(x.L)
		if err != nil {
			return 0, err
		}
		rt, err := p.checkKernel(x.R)
		if err != nil {
			return 0, err
		}
		switch x.Op {
		case "=", "!=":
			if lt == TString || rt == TString {
				_, lLit := x.L.(*String)
				_, rLit := x.R.(*String)
				if lt == TString && rt == TString && !(lLit && rLit) {
					return TInt, nil
				}
				if lt == TString && rt == TString {
					return 0, &notPushable{x, "the probe compares a string field with a constant or another string field"}
				}
				return 0, errAt(x, "type mismatch: %s compares a %s with a %s", p.text(x), lt, rt)
			}
		case "like", "not like":
			if lt != TString {
				return 0, errAt(x.L, "type mismatch: LIKE matches a string, %s is a %s", p.text(x.L), lt)
			}
			if rt != TString {
				return 0, errAt(x.R, "type mismatch: a LIKE pattern is a string, %s is a %s", p.text(x.R), rt)
			}
			if _, ok := x.R.(*String); !ok {
				return 0, &notPushable{x, "the probe matches LIKE only against a constant pattern"}
			}
			if _, ok := x.L.(*String); ok {
				return 0, &notPushable{x, "LIKE of a constant"}
			}
			return TInt, nil
		case "||":
			return 0, &notPushable{x, "the probe does not concatenate strings"}
		}
		if lt != TInt || rt != TInt {
			bad := x.L
			if lt == TInt {
				bad, lt = x.R, rt
			}
			return 0, errAt(bad, "type mismatch: %s needs integers, %s is a %s", x.Op, p.text(bad), lt)
		}
		return TInt, nil
	case *Call:
		if _, ok := aggNames[x.Name]; ok {
			return 0, errAt(x, "aggregate %s() inside an expression the probe computes", x.Name)
		}
		if x.Name == "str" {
			return TString, p.checkStr(x)
		}
		// Any other function is DuckDB's: check the arguments exist.
		for _, a := range x.Args {
			if _, err := p.checkKernel(a); err != nil {
				var np *notPushable
				if !errors.As(err, &np) && !isTypeErr(err) {
					return 0, err
				}
			}
		}
		return 0, &notPushable{x, x.Name + "() is a DuckDB function, not one the probe computes"}
	}
	return 0, errAt(n, "unsupported expression")
}

func isTypeErr(err error) bool {
	var e *Error
	return errors.As(err, &e) && strings.HasPrefix(e.Msg, "type mismatch")
}

func (p *Plan) checkStr(x *Call) error {
	if len(x.Args) < 1 || len(x.Args) > 1 {
		return errAt(x, "str(pointer) takes one argument")
	}
	t, err := p.checkKernel(x.Args[0])
	if err != nil {
		return err
	}
	if t != TInt {
		return errAt(x.Args[0], "type mismatch: str() reads from an address, %s is a %s", p.text(x.Args[0]), t)
	}
	id, ok := x.Args[0].(*Ident)
	if f, _ := p.Source.Field(identName(id, ok)); ok && f != nil && f.UserString {
		return nil
	}
	if !p.Opts.UnsafeRead {
		return errAt(x, "str() of %s reads user memory at an arbitrary address: pass --unsafe-read to allow it (only char * syscall arguments are read without it)", p.text(x.Args[0]))
	}
	return nil
}

func identName(id *Ident, ok bool) string {
	if !ok {
		return ""
	}
	return id.Name
}

func (p *Plan) text(n Node) string {
	a, b := n.Span()
	return p.Query.Text[a:b]
}

func (p *Plan) unknownField(x *Ident) error {
	var names []string
	for _, f := range p.Source.Fields {
		names = append(names, f.Name)
	}
	var bi []string
	for _, f := range Builtins {
		bi = append(bi, f.Name)
	}
	own := "none"
	if len(names) > 0 {
		own = strings.Join(names, ", ")
	}
	return errAt(x, "unknown field %s of %s (its fields: %s; on every source: %s)", x.Name, p.Source.Name, own, strings.Join(bi, ", "))
}

// splitAnd breaks a WHERE clause into its conjuncts.
func splitAnd(n Node) []Node {
	if b, ok := n.(*Binary); ok && b.Op == "and" {
		return append(splitAnd(b.L), splitAnd(b.R)...)
	}
	if n == nil {
		return nil
	}
	return []Node{n}
}

func joinAnd(ns []Node) Node {
	var out Node
	for _, n := range ns {
		if out == nil {
			out = n
			continue
		}
		a, _ := out.Span()
		_, b := n.Span()
		out = &Binary{span{a, b}, "and", out, n}
	}
	return out
}

// planWhere pushes the conjuncts the probe can evaluate and returns the
// rest, for DuckDB.
func (p *Plan) planWhere() (rest []Node, err error) {
	var pushed []Node
	for _, c := range splitAnd(p.Query.Where) {
		t, err := p.checkKernel(c)
		var np *notPushable
		switch {
		case errors.As(err, &np):
			rest = append(rest, c)
			p.Notes = append(p.Notes, fmt.Sprintf("filter runs in user space: %s (%s)", np.why, p.text(c)))
		case err != nil:
			return nil, err
		case t != TInt:
			return nil, errAt(c, "type mismatch: WHERE needs a condition, %s is a %s", p.text(c), t)
		default:
			pushed = append(pushed, c)
		}
	}
	p.Filter = joinAnd(pushed)
	return rest, nil
}

func (p *Plan) planAggregate() error {
	q := p.Query
	rest, err := p.planWhere()
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return &notPushable{rest[0], "part of WHERE runs in user space, so every event must reach it"}
	}
	keyOf := map[string]int{}
	for _, g := range q.GroupBy {
		t, err := p.checkKernel(g)
		if err != nil {
			return err
		}
		k := &Key{Expr: g, Type: t, Col: fmt.Sprintf("k%d", len(p.Keys))}
		switch t {
		case TInt, TStack:
			k.Size = 8
		case TString:
			if _, lit := g.(*String); lit {
				return errAt(g, "GROUP BY a constant")
			}
			k.Size = p.stringSize(g)
		}
		keyOf[exprKey(g)] = len(p.Keys)
		p.Keys = append(p.Keys, k)
		if t == TStack && exprKey(g) == `"ustack"` {
			if _, ok := keyOf[`"pid"`]; !ok {
				// User addresses mean something only within a process.
				pid := &Ident{span{0, 0}, "pid"}
				p.checkKernel(pid)
				keyOf[`"pid"`] = len(p.Keys)
				p.Keys = append(p.Keys, &Key{Expr: pid, Type: TInt, Size: 8, Col: fmt.Sprintf("k%d", len(p.Keys))})
				p.Notes = append(p.Notes, "ustack keys also group by pid (user addresses are per process)")
			}
		}
	}
	aggOf := map[string]*Agg{}
	var collect func(n Node) error
	collect = func(n Node) error {
		var err error
		walk(n, func(x Node) bool {
			if err != nil {
				return false
			}
			c, ok := x.(*Call)
			if !ok {
				return true
			}
			kind, ok := aggNames[c.Name]
			if !ok {
				return true
			}
			if _, seen := aggOf[exprKey(c)]; seen {
				return false
			}
			var a *Agg
			a, err = p.planAgg(c, kind)
			if err == nil {
				a.Col = fmt.Sprintf("a%d", len(p.Aggs))
				aggOf[exprKey(c)] = a
				p.Aggs = append(p.Aggs, a)
			}
			return false
		})
		return err
	}
	for _, it := range q.Select {
		if err := collect(it.Expr); err != nil {
			return err
		}
	}
	if err := collect(q.Having); err != nil {
		return err
	}
	for _, o := range q.OrderBy {
		if err := collect(o.Expr); err != nil {
			return err
		}
	}
	// Layout: key = group keys then buckets; value = count, then states.
	bucketOf := map[string]int{}
	for _, a := range p.Aggs {
		if a.bucketed() {
			// Aggregates bucketing the same value the same way share a key.
			kind := a.Kind
			if kind == AggLHist {
				kind = AggKind(1000 + len(p.Keys)) // each linear layout is its own
			}
			id := fmt.Sprintf("%d/%s", kind, exprKey(a.Arg))
			if i, ok := bucketOf[id]; ok {
				a.BucketKey = i
				continue
			}
			bucketOf[id] = len(p.Keys)
			a.BucketKey = len(p.Keys)
			p.Keys = append(p.Keys, &Key{Expr: a.Arg, Type: TInt, Size: 8, Col: fmt.Sprintf("b%d", len(p.Keys)), Bucket: a})
		}
	}
	off := 0
	for _, k := range p.Keys {
		k.Off = off
		off += k.Size
	}
	p.KeySize = max(off, 8)
	if p.KeySize > 256 {
		return errAt(q.GroupBy[0], "the group key needs %d bytes; the probe allows 256 (use fewer or shorter strings)", p.KeySize)
	}
	val := 8
	for _, a := range p.Aggs {
		a.ValOff = -1
		switch a.Kind {
		case AggSum, AggMin, AggMax, AggAvg:
			a.ValOff, val = val, val+8
		case AggDistinct:
			a.ValOff, val = val, val+distinctBits/8
		case AggSample:
			a.ValOff, val = val, val+8*sampleSlots
		}
	}
	p.ValSize = val
	// The user-space part: SELECT over the merged partials.
	rename := func(n Node) (string, bool) {
		if c, ok := n.(*Call); ok {
			if a, ok := aggOf[exprKey(c)]; ok {
				return a.Col, true
			}
		}
		if i, ok := keyOf[exprKey(n)]; ok {
			return p.Keys[i].Col, true
		}
		return "", false
	}
	var bad Node
	check := func(n Node, clause string) {
		walk(n, func(x Node) bool {
			if _, ok := rename(x); ok {
				return false
			}
			if id, ok := x.(*Ident); ok && bad == nil {
				if _, isField := p.Source.Field(id.Name); isField || clause == "SELECT" {
					bad = x
				}
			}
			return true
		})
	}
	var items []string
	for i, it := range q.Select {
		check(it.Expr, "SELECT")
		items = append(items, sqlText(it.Expr, rename)+" AS "+quoteIdent(p.Columns[i]))
		if c, ok := it.Expr.(*Call); ok {
			if a, ok := aggOf[exprKey(c)]; ok && (a.Kind == AggHist || a.Kind == AggLHist) {
				p.HistCols[p.Columns[i]] = true
			}
		}
	}
	if bad != nil {
		return errAt(bad, "%s must appear in GROUP BY or inside an aggregate", p.text(bad))
	}
	sql := "SELECT " + strings.Join(items, ", ") + " FROM partials"
	if q.Having != nil {
		check(q.Having, "HAVING")
		sql += " WHERE " + sqlText(q.Having, rename)
	}
	if len(q.OrderBy) > 0 {
		var os []string
		for _, o := range q.OrderBy {
			check(o.Expr, "ORDER BY")
			s := sqlText(o.Expr, rename)
			if o.Desc {
				s += " DESC"
			}
			os = append(os, s)
		}
		sql += " ORDER BY " + strings.Join(os, ", ")
	}
	if bad != nil {
		return errAt(bad, "%s must appear in GROUP BY or inside an aggregate", p.text(bad))
	}
	if q.Limit >= 0 {
		sql += fmt.Sprintf(" LIMIT %d", q.Limit)
	}
	p.UserSQL = sql
	p.Mode = ModeAggregate
	if q.Having == nil && len(q.OrderBy) == 0 && q.Limit < 0 {
		p.Direct, p.directSQL = p.directColumns(q, rename), sql
	}
	return nil
}

// directColumns maps each SELECT item that is a bare group key or
// aggregate to its column of the partials (group keys without buckets,
// then aggregates), or returns nil if any item is more than that.
func (p *Plan) directColumns(q *Query, rename func(Node) (string, bool)) []int {
	var partials []string
	for _, k := range p.Keys {
		if k.Bucket == nil {
			partials = append(partials, k.Col)
		}
	}
	for _, a := range p.Aggs {
		partials = append(partials, a.Col)
	}
	var direct []int
	for _, it := range q.Select {
		col, ok := rename(it.Expr)
		if !ok {
			return nil
		}
		i := slices.Index(partials, col)
		if i < 0 {
			return nil
		}
		direct = append(direct, i)
	}
	return direct
}

func (p *Plan) stringSize(n Node) int {
	if id, ok := n.(*Ident); ok {
		if f, ok := p.Source.Field(id.Name); ok && f.Loc != LocDataLoc {
			return (f.Size + 7) &^ 7
		}
	}
	return p.Opts.StrSize
}

func intArg(n Node, what string) (int64, error) {
	num, ok := n.(*Number)
	if !ok || !num.IsInt {
		return 0, errAt(n, "%s must be an integer constant", what)
	}
	return num.Int, nil
}

func (p *Plan) planAgg(c *Call, kind AggKind) (*Agg, error) {
	a, err := aggParams(c, kind)
	if err != nil || a.Arg == nil {
		return a, err
	}
	t, err := p.checkKernel(a.Arg)
	if err != nil {
		return nil, err
	}
	a.ArgType = t
	switch {
	case kind == AggCount:
	case t == TString:
		return nil, &notPushable{a.Arg, fmt.Sprintf("%s() of a string", c.Name)}
	case t == TStack && kind != AggSample && kind != AggDistinct:
		return nil, errAt(a.Arg, "type mismatch: %s() needs an integer, %s is a stack", c.Name, p.text(a.Arg))
	}
	return a, nil
}

// aggParams checks an aggregate's arguments and reads its constants
// (lhist's layout, the quantile), wherever the aggregate runs.
func aggParams(c *Call, kind AggKind) (*Agg, error) {
	a := &Agg{Kind: kind, Call: c}
	want := 1
	switch kind {
	case AggCount:
		if c.Star || len(c.Args) == 0 {
			return a, nil
		}
		want = 1 // count(x) counts events, like count(*): fields are never NULL here
	case AggLHist:
		want = 4
	case AggQuantile:
		if c.Name == "quantile" {
			want = 2
		}
	}
	if len(c.Args) != want || c.Star {
		usage := map[AggKind]string{AggLHist: "lhist(value, min, max, step)", AggQuantile: "quantile(value, q) or p50/p90/p95/p99/p999/median(value)"}[kind]
		if usage == "" {
			usage = c.Name + "(value)"
		}
		return nil, errAt(c, "%s takes %d argument(s): %s", c.Name, want, usage)
	}
	a.Arg = c.Args[0]
	switch kind {
	case AggLHist:
		var err error
		var mx int64
		if a.Min, err = intArg(c.Args[1], "lhist min"); err != nil {
			return nil, err
		}
		if mx, err = intArg(c.Args[2], "lhist max"); err != nil {
			return nil, err
		}
		if a.Step, err = intArg(c.Args[3], "lhist step"); err != nil {
			return nil, err
		}
		if a.Step <= 0 || mx <= a.Min {
			return nil, errAt(c, "lhist needs min < max and step > 0")
		}
		a.Buckets = (mx - a.Min + a.Step - 1) / a.Step
		if a.Buckets > 1000 {
			return nil, errAt(c, "lhist with %d buckets; at most 1000", a.Buckets)
		}
	case AggQuantile:
		qs := map[string]float64{"median": 0.5, "p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999}
		if c.Name == "quantile" {
			n, ok := c.Args[1].(*Number)
			var q float64
			if ok {
				fmt.Sscan(n.Text, &q)
			}
			if !ok || q < 0 || q > 1 {
				return nil, errAt(c.Args[1], "quantile needs a constant between 0 and 1")
			}
			a.Q = q
		} else {
			a.Q = qs[c.Name]
		}
	}
	return a, nil
}

func (p *Plan) planStream() error {
	q := p.Query
	rest, err := p.planWhere()
	if err != nil {
		return err
	}
	emitOf := map[string]*Emit{}
	var bad error
	add := func(n Node) {
		walk(n, func(x Node) bool {
			if bad != nil {
				return false
			}
			switch y := x.(type) {
			case *Ident:
				f, ok := p.Source.Field(y.Name)
				if !ok {
					for _, it := range q.Select {
						if strings.EqualFold(it.Alias, y.Name) {
							return false
						}
					}
					bad = p.unknownField(y)
					return false
				}
				p.Fields[f.Name] = f
				if _, ok := emitOf[f.Name]; !ok {
					e := &Emit{Expr: y, Type: f.Type, Col: f.Name}
					e.Size = 8
					if f.Type == TString {
						e.Size = p.stringSize(y)
					}
					emitOf[f.Name] = e
					p.Emits = append(p.Emits, e)
				}
			case *Call:
				if y.Name == "str" {
					if err := p.checkStr(y); err != nil {
						bad = err
						return false
					}
					if _, ok := emitOf[exprKey(y)]; !ok {
						e := &Emit{Expr: y, Type: TString, Size: p.Opts.StrSize, Col: fmt.Sprintf("str_%d", len(p.Emits))}
						emitOf[exprKey(y)] = e
						p.Emits = append(p.Emits, e)
					}
					return false
				}
			}
			return true
		})
	}
	for _, it := range q.Select {
		add(it.Expr)
	}
	for _, n := range rest {
		add(n)
	}
	for _, g := range q.GroupBy {
		add(g)
	}
	add(q.Having)
	for _, o := range q.OrderBy {
		add(o.Expr)
	}
	if bad != nil {
		return bad
	}
	sort.SliceStable(p.Emits, func(i, j int) bool { return p.Emits[i].Type != TString && p.Emits[j].Type == TString })
	off := 0
	for _, e := range p.Emits {
		e.Off = off
		off += e.Size
	}
	p.KeySize = max(off, 8)
	if p.KeySize > 480 {
		return errAt(q.Select[0].Expr, "an event record of %d bytes; the probe allows 480", p.KeySize)
	}
	// The probe's aggregates that DuckDB lacks are computed there the
	// probe's way (userfuncs.go).
	streamAggs := map[Node]*Agg{}
	var aggErr error
	findAggs := func(n Node) {
		walk(n, func(x Node) bool {
			c, ok := x.(*Call)
			if !ok {
				return true
			}
			if kind, ok := aggNames[c.Name]; ok && aggErr == nil {
				a, err := aggParams(c, kind)
				if err != nil {
					aggErr = err
				}
				streamAggs[c] = a
			}
			return true
		})
	}
	for _, it := range q.Select {
		findAggs(it.Expr)
	}
	findAggs(q.Having)
	for _, o := range q.OrderBy {
		findAggs(o.Expr)
	}
	if aggErr != nil {
		return aggErr
	}
	var rename func(n Node) (string, bool)
	rename = func(n Node) (string, bool) {
		c, ok := n.(*Call)
		if ok && c.Name == "str" {
			return emitOf[exprKey(c)].Col, true
		}
		if ok {
			return streamAggSQL(c, streamAggs[c], func(a Node) string { return sqlText(a, rename) })
		}
		return "", false
	}
	var items []string
	for i, it := range q.Select {
		items = append(items, sqlText(it.Expr, rename)+" AS "+quoteIdent(p.Columns[i]))
		if a := streamAggs[it.Expr]; a != nil && (a.Kind == AggHist || a.Kind == AggLHist) {
			p.HistCols[p.Columns[i]] = true
		}
	}
	sql := "SELECT " + strings.Join(items, ", ") + " FROM events"
	if len(rest) > 0 {
		sql += " WHERE " + sqlText(joinAnd(rest), rename)
	}
	if len(q.GroupBy) > 0 {
		var gs []string
		for _, g := range q.GroupBy {
			gs = append(gs, sqlText(g, rename))
		}
		sql += " GROUP BY " + strings.Join(gs, ", ")
	}
	if q.Having != nil {
		sql += " HAVING " + sqlText(q.Having, rename)
	}
	if len(q.OrderBy) > 0 {
		var os []string
		for _, o := range q.OrderBy {
			s := sqlText(o.Expr, rename)
			if o.Desc {
				s += " DESC"
			}
			os = append(os, s)
		}
		sql += " ORDER BY " + strings.Join(os, ", ")
	}
	if q.Limit >= 0 {
		sql += fmt.Sprintf(" LIMIT %d", q.Limit)
	}
	p.UserSQL = sql
	p.Mode = ModeStream
	return nil
}
