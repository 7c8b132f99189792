package tracequery

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Options bound what a compiled query may use; nil means the defaults.
type Options struct {
	MapSize      int  // keys per interval in the aggregation map (default 10240)
	StashSize    int  // begun-but-not-ended events held by a paired source or join (default 10240)
	StackMapSize int  // distinct stacks per run (default 4096)
	RingSize     int  // bytes of the ring buffer of a streaming query (default 1 MiB)
	StrSize      int  // bytes kept of a string read with str() (default 64)
	UnsafeRead   bool // allow str() on arbitrary addresses
	// PID, if not 0, keeps the events of that process only (holter trace
	// -p, -c): a filter in the probe.
	PID int
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
	// each event through a ring buffer; user space does the rest.
	ModeStream
)

// AggKind is an aggregate of the query.
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
	AggTopK     // heavy hitters by Space-Saving in k slots (topk.go)
	AggKMeans   // the cluster of the group's histogram of a value, among all groups (kmeans.go)
)

var aggNames = map[string]AggKind{"count": AggCount, "sum": AggSum, "min": AggMin, "max": AggMax, "avg": AggAvg,
	"hist": AggHist, "lhist": AggLHist, "quantile": AggQuantile, "median": AggQuantile, "p50": AggQuantile,
	"p90": AggQuantile, "p95": AggQuantile, "p99": AggQuantile, "p999": AggQuantile,
	"count_distinct": AggDistinct, "sample": AggSample, "topk": AggTopK, "kmeans": AggKMeans}

// aggKind says whether c is an aggregate, and which; count(DISTINCT x) is
// count_distinct(x).
func aggKind(c *Call) (AggKind, bool) {
	k, ok := aggNames[c.Name]
	if ok && k == AggCount && c.Distinct {
		return AggDistinct, true
	}
	return k, ok
}

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
	Weight    Node  // topk's weight; nil: 1 an event
	Min, Step int64 // lhist
	Buckets   int64 // lhist
	Q         float64
	K         int    // topk slots, kmeans clusters
	Col       string // column in the partials table
	ValOff    int    // offset of its state in the map value; -1: none
	BucketKey int    // index of its bucket in Plan.Keys (bucketed kinds)
	KeySize   int    // topk: bytes of a slot's key
}

// bucketed says whether the aggregate's values are a key part: its
// buckets (hist, lhist, quantiles) or the values whose histogram is the
// group's feature vector (kmeans).
func (a *Agg) bucketed() bool {
	return a.Kind == AggHist || a.Kind == AggLHist || a.Kind == AggQuantile || a.Kind == AggKMeans
}

// Key is one part of the kernel map key: a GROUP BY expression or the
// bucket of a histogram.
type Key struct {
	Expr   Node
	Type   Type // the probe's
	Size   int  // bytes in the key
	Off    int
	Col    string
	Bucket *Agg // non-nil for a bucket key
}

// Emit is one value a streaming probe sends per event.
type Emit struct {
	Expr Node // a field (Ident), or a call the probe feeds (str, ntop, ksym, usym, kstack(n), …)
	Type Type
	Size int
	Off  int
	Col  string
}

// Plan is a compiled query: the kernel part (source, filter, keys and
// aggregates or emitted values) and the user-space part (over the partial
// aggregates or the events). It is deterministic and needs no privileges.
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
	// PerEvent: each row is handed over as its event arrives (a SELECT
	// without aggregation or ORDER BY), not once per interval.
	PerEvent bool
	// UserSQL is the user-space part as DuckDB SQL over the table
	// "partials" (aggregate) or "events" (stream): what EXPLAIN shows, and
	// what DuckDB runs when the evaluator cannot (user.duck).
	UserSQL    string
	plannedSQL string
	user       *userPart
	Columns    []string // output column names
	HistCols   map[string]bool
	Notes      []string // what was not pushed and why
	// Fields referenced, by name, with the side of a paired source they
	// are read on.
	Fields map[string]*Field
	// BootOffset is added to the kernel's monotonic clock to give Unix
	// ns (time); Start sets it.
	BootOffset int64
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
	src, err := cat.querySource(q)
	if err != nil {
		if q.Join == nil && len(q.From.Parts) == 1 && !probeKinds[strings.ToLower(q.From.Parts[0])] {
			return nil, recordedTableError(q.From)
		}
		return nil, err
	}
	p := &Plan{Query: q, Source: src, Opts: opts.withDefaults(), Fields: map[string]*Field{}, HistCols: map[string]bool{}}
	if err := p.prepare(); err != nil {
		return nil, err
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
	if aggregating {
		notes := p.Notes
		err := p.planAggregate()
		if err == nil {
			if err := p.planAfterAggregation(); err != nil {
				return nil, err
			}
			return p, p.checkUserSQL()
		}
		var np *notPushable
		if !errors.As(err, &np) {
			return nil, err
		}
		p.Notes = append(notes, fmt.Sprintf("aggregation runs in user space: %s (%s)", np.why, p.text(np.node)))
		p.Keys, p.Aggs, p.Filter, p.KeySize, p.ValSize = nil, nil, nil, 0, 0
		p.Fields = map[string]*Field{}
		p.HistCols = map[string]bool{}
	}
	if err := p.planStream(aggregating); err != nil {
		return nil, err
	}
	return p, p.checkUserSQL()
}

// prepare rewrites the query into what the planner expects: aliases of
// the source resolved, SELECT * expanded, GROUP BY aliases replaced by
// their expressions, and SELECT DISTINCT without aggregates as a GROUP BY;
// then names the output columns.
func (p *Plan) prepare() error {
	q := p.Query
	if err := p.resolveNames(); err != nil {
		return err
	}
	var items []SelectItem
	for _, it := range q.Select {
		star, ok := it.Expr.(*Star)
		if !ok {
			items = append(items, it)
			continue
		}
		var own []string
		for _, f := range p.Source.Fields {
			own = append(own, f.Name)
		}
		if len(own) == 0 {
			return errAt(star, "%s has no fields of its own for *: name the builtins you want (time, pid, comm, …)", p.Source.Name)
		}
		for _, n := range own {
			items = append(items, SelectItem{Expr: &Ident{star.span, n}})
		}
	}
	q.Select = items
	// Substitute GROUP BY aliases by their select expressions: an alias
	// the query gave is what it means, even if a field has that name.
	// GROUP BY 2 and ORDER BY 2 are the second output column.
	ordinal := func(n Node) (int, bool, error) {
		num, ok := n.(*Number)
		if !ok || !num.IsInt {
			return 0, false, nil
		}
		if num.Int < 1 || num.Int > int64(len(q.Select)) {
			return 0, false, errAt(n, "there is no output column %d (the SELECT has %d)", num.Int, len(q.Select))
		}
		return int(num.Int) - 1, true, nil
	}
	for i, g := range q.GroupBy {
		if c, ok, err := ordinal(g); err != nil {
			return err
		} else if ok {
			q.GroupBy[i] = q.Select[c].Expr
			continue
		}
		if id, ok := g.(*Ident); ok {
			for _, it := range q.Select {
				if strings.EqualFold(it.Alias, id.Name) {
					q.GroupBy[i] = it.Expr
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
	for i, o := range q.OrderBy {
		if c, ok, err := ordinal(o.Expr); err != nil {
			return err
		} else if ok {
			a, b := o.Expr.Span()
			q.OrderBy[i].Expr = &Ident{span{a, b}, p.Columns[c]}
		}
	}
	if q.Distinct && len(q.GroupBy) == 0 && q.Having == nil {
		agg := false
		for _, it := range q.Select {
			agg = agg || hasAgg(it.Expr)
		}
		if !agg {
			// SELECT DISTINCT a, b is GROUP BY a, b: the probe keeps each
			// combination once.
			for _, it := range q.Select {
				q.GroupBy = append(q.GroupBy, it.Expr)
			}
			q.Distinct = false
		}
	}
	if p.Opts.PID != 0 {
		pid := &Number{Text: fmt.Sprint(p.Opts.PID), Int: int64(p.Opts.PID), Float: float64(p.Opts.PID), IsInt: true}
		cond := &Binary{Op: "=", L: &Ident{Name: "task.pid"}, R: pid}
		if q.Where == nil {
			q.Where = cond
		} else {
			q.Where = &Binary{Op: "and", L: cond, R: q.Where}
		}
	}
	return nil
}

// resolveNames strips a single source's alias (r.fd is fd) and, in a
// join, qualifies the fields named without their side's alias.
func (p *Plan) resolveNames() error {
	q := p.Query
	var bad error
	fix := func(n Node) {
		walk(n, func(x Node) bool {
			id, ok := x.(*Ident)
			if !ok || bad != nil {
				return bad == nil
			}
			if q.Join == nil {
				if a := q.From.Alias; a != "" && strings.HasPrefix(id.Name, a+".") {
					id.Name = id.Name[len(a)+1:]
				}
				return true
			}
			if err := p.Source.qualify(id); err != nil {
				bad = err
			}
			return true
		})
	}
	for _, n := range q.exprs() {
		fix(n)
	}
	return bad
}

func hasAgg(n Node) bool { return findAgg(n) != nil }

func findAgg(n Node) Node {
	var found Node
	walk(n, func(x Node) bool {
		if c, ok := x.(*Call); ok {
			if _, ok := aggKind(c); ok && found == nil {
				found = c
				return false
			}
		}
		return found == nil
	})
	return found
}

func exprKey(n Node) string {
	return sqlText(n, func(Node) (string, bool) { return "", false })
}

// field finds a field of the query's source by name: its own, a builtin,
// task.NAME (the current task's builtin, when the source has a field of
// that name), args.NAME (bpftrace's spelling), or a kernel type path.
func (p *Plan) field(name string) (*Field, bool) { return p.Source.Field(name) }

func (p *Plan) text(n Node) string {
	a, b := n.Span()
	if a == b || b > len(p.Query.Text) {
		return Format(n)
	}
	return p.Query.Text[a:b]
}

func (p *Plan) unknownField(x *Ident) error {
	if err := p.Source.pathError(x); err != nil {
		return err
	}
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
	return errAt(x, "unknown field %s of %s (its fields: %s; on every source: %s, also as task.NAME)", x.Name, p.Source.Name, own, strings.Join(bi, ", "))
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

// conditions are the query's conditions on events: WHERE, and a join's ON
// beyond its key.
func (p *Plan) conditions() []Node {
	conds := splitAnd(p.Query.Where)
	if j := p.Query.Join; j != nil {
		conds = append(p.Source.joinRest, conds...)
	}
	return conds
}

// planWhere pushes the conjuncts the probe can evaluate and returns the
// rest, for user space.
func (p *Plan) planWhere() (rest []Node, err error) {
	if j := p.Source.Join; j != nil {
		// The key's parts: integers of each side, compared as such.
		for i := range j.LeftKey {
			lt, err := p.checkKernel(j.LeftKey[i])
			if err != nil {
				return nil, err
			}
			rt, err := p.checkKernel(j.RightKey[i])
			if err != nil {
				return nil, err
			}
			if !intLike(lt) || !intLike(rt) {
				return nil, errAt(j.LeftKey[i], "a join's key is integers (tid, pid, fd, …): %s is %s and %s %s",
					p.text(j.LeftKey[i]), lt.a(), p.text(j.RightKey[i]), rt.a())
			}
		}
	}
	var pushed []Node
	for _, c := range p.conditions() {
		t, err := p.checkKernel(c)
		var np *notPushable
		switch {
		case errors.As(err, &np):
			if p.Query.Join != nil {
				return nil, errAt(c, "a join's conditions run in the probe, and %s cannot: %s", p.text(c), np.why)
			}
			rest = append(rest, c)
			p.Notes = append(p.Notes, fmt.Sprintf("filter runs in user space: %s (%s)", np.why, p.text(c)))
		case err != nil:
			return nil, err
		case !intLike(t):
			return nil, errAt(c, "type mismatch: WHERE needs a condition, %s is %s", p.text(c), t.a())
		default:
			pushed = append(pushed, c)
		}
	}
	p.Filter = joinAnd(pushed)
	return rest, nil
}

// collectAggs finds the aggregates of SELECT, HAVING and ORDER BY, once
// each, and gives them their partials columns.
func (p *Plan) collectAggs(plan func(*Call, AggKind) (*Agg, error)) (map[string]*Agg, error) {
	q := p.Query
	aggOf := map[string]*Agg{}
	var err error
	collect := func(n Node) {
		walk(n, func(x Node) bool {
			if err != nil {
				return false
			}
			c, ok := x.(*Call)
			if !ok {
				return true
			}
			kind, ok := aggKind(c)
			if !ok {
				return true
			}
			if _, seen := aggOf[exprKey(c)]; seen {
				return false
			}
			var a *Agg
			if a, err = plan(c, kind); err == nil {
				a.Col = fmt.Sprintf("a%d", len(p.Aggs))
				aggOf[exprKey(c)] = a
				p.Aggs = append(p.Aggs, a)
			}
			return false
		})
	}
	for _, it := range q.Select {
		collect(it.Expr)
	}
	collect(q.Having)
	for _, o := range q.OrderBy {
		collect(o.Expr)
	}
	return aggOf, err
}

// planAggregate plans the aggregation in the probe, or says why it cannot
// run there (*notPushable).
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
		if c, ok := g.(*Call); ok {
			if _, dec := decoders[c.Name]; dec {
				// The probe keeps the decoder's argument.
				t, _ = p.checkKernel(c.Args[0])
			}
		}
		k := &Key{Expr: g, Type: t, Col: fmt.Sprintf("k%d", len(p.Keys))}
		switch t {
		case TString:
			if _, lit := g.(*String); lit {
				return errAt(g, "GROUP BY a constant")
			}
			k.Size = p.stringSize(g)
		case TBytes:
			k.Size = (p.kernelSize(g) + 7) &^ 7
		default:
			k.Size = 8
		}
		keyOf[exprKey(g)] = len(p.Keys)
		p.Keys = append(p.Keys, k)
		if p.needsPid(g) {
			if _, ok := keyOf[`"pid"`]; !ok {
				// User addresses mean something only within a process.
				pid := &Ident{span{0, 0}, "pid"}
				p.checkKernel(pid)
				keyOf[`"pid"`] = len(p.Keys)
				p.Keys = append(p.Keys, &Key{Expr: pid, Type: TInt, Size: 8, Col: fmt.Sprintf("k%d", len(p.Keys))})
				p.Notes = append(p.Notes, "user addresses (ustack, usym) also group by pid: they mean something only within a process")
			}
		}
	}
	if _, err := p.collectAggs(p.planAgg); err != nil {
		return err
	}
	// Layout: key = group keys then buckets; value = count, then states.
	bucketOf := map[string]int{}
	for _, a := range p.Aggs {
		if !a.bucketed() {
			continue
		}
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
		case AggTopK:
			a.ValOff, val = val, val+a.K*topSlotSize(a)
		}
	}
	p.ValSize = val
	if p.ValSize > 8192 {
		return errAt(p.Aggs[len(p.Aggs)-1].Call, "the aggregates need %d bytes per group; the probe allows 8192 (fewer topk slots or shorter keys)", p.ValSize)
	}
	p.Mode = ModeAggregate
	return nil
}

// needsPid says whether a group key means something only with its
// process (user stacks and addresses).
func (p *Plan) needsPid(g Node) bool {
	switch x := g.(type) {
	case *Ident:
		f, ok := p.field(x.Name)
		return ok && f.Loc == LocBuiltin && strings.HasSuffix(f.Name, "ustack")
	case *Call:
		return x.Name == "ustack" || x.Name == "usym"
	}
	return false
}

func (p *Plan) stringSize(n Node) int {
	if id, ok := n.(*Ident); ok {
		if f, ok := p.field(id.Name); ok && f.Loc != LocDataLoc {
			return (f.Size + 7) &^ 7
		}
	}
	return p.Opts.StrSize
}

// kernelSize is the bytes of a byte-array value.
func (p *Plan) kernelSize(n Node) int {
	switch x := n.(type) {
	case *Ident:
		if f, ok := p.field(x.Name); ok {
			return f.Size
		}
	case *Call:
		if len(x.Args) > 0 {
			return p.kernelSize(x.Args[0])
		}
	}
	return 8
}

func intArg(n Node, what string) (int64, error) {
	num, ok := n.(*Number)
	if !ok || !num.IsInt {
		return 0, errAt(n, "%s must be an integer constant", what)
	}
	return num.Int, nil
}

// planAgg plans an aggregate in the probe.
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
	if err := p.checkAggArg(a, t); err != nil {
		return nil, err
	}
	switch {
	case kind == AggCount:
	case t == TString && kind == AggTopK:
		a.KeySize = p.stringSize(a.Arg)
	case t == TString || t == TLabel || t == TBytes:
		return nil, &notPushable{a.Arg, fmt.Sprintf("%s() of %s", c.Name, t.a())}
	case t == TStack && kind != AggSample && kind != AggDistinct && kind != AggTopK:
		return nil, errAt(a.Arg, "type mismatch: %s() needs an integer, %s is a stack", c.Name, p.text(a.Arg))
	}
	if a.Weight != nil {
		wt, err := p.checkKernel(a.Weight)
		if err != nil {
			return nil, err
		}
		if wt != TInt {
			return nil, errAt(a.Weight, "type mismatch: a topk weight is an integer, %s is %s", p.text(a.Weight), wt.a())
		}
	}
	return a, nil
}

// checkAggArg refuses the aggregates whose argument cannot mean what
// they compute, wherever they would run.
func (p *Plan) checkAggArg(a *Agg, t Type) error {
	switch a.Kind {
	case AggSum, AggAvg, AggHist, AggLHist, AggQuantile:
		switch t {
		case TInt, TFloat, TNull, TAny:
			return nil
		}
		hint := ""
		if t == TPtr {
			hint = pointerHint(p, a.Arg, t)
			if hint == "" {
				hint = ": an address is not a quantity"
			}
		}
		return errAt(a.Arg, "type mismatch: %s() needs a number, %s is %s%s", a.Call.Name, p.text(a.Arg), t.a(), hint)
	case AggMin, AggMax:
		if t == TStack || t == TBuckets || t == TList || t == TRecord || t == TBytes {
			return errAt(a.Arg, "type mismatch: %s() needs a number or a string, %s is %s", a.Call.Name, p.text(a.Arg), t.a())
		}
	case AggKMeans:
		if t != TInt && t != TSyscall && t != TAny {
			return errAt(a.Arg, "type mismatch: kmeans() clusters the groups by their histogram of an integer (e.g. nr, the syscall number), %s is %s", p.text(a.Arg), t.a())
		}
	}
	return nil
}

// aggParams checks an aggregate's arguments and reads its constants
// (lhist's layout, the quantile, topk's and kmeans' k), wherever the
// aggregate runs.
func aggParams(c *Call, kind AggKind) (*Agg, error) {
	a := &Agg{Kind: kind, Call: c}
	want, most := 1, 1
	switch kind {
	case AggCount:
		if c.Star || len(c.Args) == 0 {
			return a, nil
		}
		// count(x) counts events, like count(*): fields are never NULL here
	case AggLHist:
		want, most = 4, 4
	case AggQuantile:
		if c.Name == "quantile" {
			want, most = 2, 2
		}
	case AggTopK:
		want, most = 2, 3
	case AggKMeans:
		want, most = 2, 2
	}
	if len(c.Args) < want || len(c.Args) > most || c.Star {
		usage := map[AggKind]string{AggLHist: "lhist(value, min, max, step)", AggQuantile: "quantile(value, q) or p50/p90/p95/p99/p999/median(value)",
			AggTopK: "topk(key, k) or topk(key, k, weight)", AggKMeans: "kmeans(value, k): the cluster of each group's histogram of value"}[kind]
		if usage == "" {
			usage = c.Name + "(value)"
		}
		n := fmt.Sprint(want)
		if most > want {
			n = fmt.Sprintf("%d or %d", want, most)
		}
		return nil, errAt(c, "%s takes %s argument(s): %s", c.Name, n, usage)
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
			if !ok || n.Float < 0 || n.Float > 1 {
				return nil, errAt(c.Args[1], "quantile needs a constant between 0 and 1")
			}
			a.Q = n.Float
		} else {
			a.Q = qs[c.Name]
		}
	case AggTopK, AggKMeans:
		k, err := intArg(c.Args[1], c.Name+"'s k")
		if err != nil {
			return nil, err
		}
		lim := int64(maxTopK)
		if kind == AggKMeans {
			lim = 32
		}
		if k < 1 || k > lim {
			return nil, errAt(c.Args[1], "%s's k must be 1 to %d", c.Name, lim)
		}
		a.K = int(k)
		if len(c.Args) == 3 {
			a.Weight = c.Args[2]
		}
	}
	return a, nil
}

// sortedNotes are the plan's notes, sorted.
func (p *Plan) sortedNotes() []string {
	notes := append([]string(nil), p.Notes...)
	sort.Strings(notes)
	return notes
}
