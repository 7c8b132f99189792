package tracequery

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// userPart is the compiled user-space part of a plan. Its input is the
// partial aggregates (aggregate mode; or, in stream mode with
// aggregation, the groups the evaluator aggregates from the events) or
// the events (stream mode without aggregation).
type userPart struct {
	// Stream mode: the conditions the probe cannot run, over events.
	where     evalFn
	whereNode Node
	// Stream mode with aggregation: group keys and aggregate arguments,
	// computed here over events.
	aggregate bool
	keys      []evalFn
	keyTypes  []Type
	args      []evalFn // per Plan.Aggs; nil: none
	weights   []evalFn // topk's weight; nil: 1
	// Over the partials, or the events.
	items    []evalFn
	having   evalFn
	order    []orderTerm
	limit    int64
	distinct bool
	outTypes []Type
	inTypes  []Type // the input table's columns
	inCols   []string
	// duck says why DuckDB runs this part (UserSQL); "": the evaluator.
	duck string
}

type orderTerm struct {
	fn   evalFn
	desc bool
}

// userType is how user space sees a value the probe computes.
func userType(t Type) Type {
	switch t {
	case TString, TStack, TPtr, TSyscall, TLabel:
		return TString
	}
	return t
}

// userType is how user space sees a group key the probe keeps: a
// decoder's value (ntop, ksym, usym) is its text.
func (k *Key) userType() Type {
	if c, ok := k.Expr.(*Call); ok {
		if _, dec := decoders[c.Name]; dec {
			return TString
		}
	}
	return userType(k.Type)
}

// aggResultType is the type of an aggregate's value.
func aggResultType(a *Agg) Type {
	switch a.Kind {
	case AggCount, AggDistinct:
		return TInt
	case AggSum:
		if a.ArgType == TFloat {
			return TFloat
		}
		return TInt
	case AggMin, AggMax:
		return userType(a.ArgType)
	case AggAvg, AggQuantile:
		return TFloat
	case AggHist, AggLHist:
		return TBuckets
	case AggSample:
		return TList
	}
	return TRecord
}

// duckTypeOf is the DuckDB column type of a user-space type.
func duckTypeOf(t Type, a *Agg) string {
	switch t {
	case TInt:
		return "BIGINT"
	case TFloat:
		return "DOUBLE"
	case TBool:
		return "BOOLEAN"
	case TBytes:
		return "BLOB"
	case TBuckets:
		return bucketType
	case TList:
		if a != nil && userType(a.ArgType) == TString {
			return "VARCHAR[]"
		}
		return "BIGINT[]"
	case TRecord:
		if a != nil && a.Kind == AggKMeans {
			return kmeansType
		}
		return topkType
	}
	return "VARCHAR"
}

// planAfterAggregation compiles what follows the probe's aggregation.
func (p *Plan) planAfterAggregation() error {
	keyOf, aggOf := map[string]ucol{}, map[string]ucol{}
	var types []Type
	var cols []string
	for _, k := range p.Keys {
		if k.Bucket == nil {
			t := k.userType()
			keyOf[exprKey(k.Expr)] = ucol{len(types), t, k.Col}
			types, cols = append(types, t), append(cols, k.Col)
		}
	}
	for _, a := range p.Aggs {
		t := aggResultType(a)
		aggOf[exprKey(a.Call)] = ucol{len(types), t, a.Col}
		types, cols = append(types, t), append(cols, a.Col)
	}
	p.user = &userPart{inTypes: types, inCols: cols}
	return p.planOutput("partials", keyOf, aggOf)
}

// planOutput compiles SELECT, HAVING, ORDER BY and LIMIT over the groups.
func (p *Plan) planOutput(table string, keyOf, aggOf map[string]ucol) error {
	q := p.Query
	u := p.user
	var duck []*needsDuck
	env := &uenv{p: p}
	env.col = func(n Node) (ucol, bool) {
		if c, ok := n.(*Call); ok {
			if _, isAgg := aggKind(c); isAgg {
				u, ok := aggOf[exprKey(c)]
				return u, ok
			}
		}
		u, ok := keyOf[exprKey(n)]
		return u, ok
	}
	env.unknown = func(id *Ident) error {
		if _, ok := p.field(id.Name); ok {
			return errAt(id, "%s must appear in GROUP BY or inside an aggregate", p.text(id))
		}
		return p.unknownField(id)
	}
	items, err := p.compileItems(env, &duck)
	if err != nil {
		return err
	}
	env.alias = p.aliasResolver()
	sql := p.selectSQL(items, table)
	u.distinct = q.Distinct
	if q.Having != nil {
		h, err := p.compileUser(env, q.Having, &duck)
		if err != nil {
			return err
		}
		if !isCond(h.t) {
			return errAt(q.Having, "type mismatch: HAVING needs a condition, %s is %s", p.text(q.Having), h.t.a())
		}
		u.having = h.fn
		sql += " WHERE " + h.sql
	}
	if err := p.compileOrder(env, &sql, &duck); err != nil {
		return err
	}
	if q.Limit >= 0 {
		sql += fmt.Sprintf(" LIMIT %d", q.Limit)
	}
	u.limit = q.Limit
	p.setUserSQL(sql, duck)
	return nil
}

// selectSQL is SELECT [DISTINCT] items AS their columns FROM table.
func (p *Plan) selectSQL(items []ucode, table string) string {
	var sqls []string
	for i, c := range items {
		sqls = append(sqls, c.sql+" AS "+quoteIdent(p.Columns[i]))
	}
	sel := "SELECT "
	if p.Query.Distinct {
		sel = "SELECT DISTINCT "
	}
	return sel + strings.Join(sqls, ", ") + " FROM " + table
}

// compileUser compiles n, noting what needs DuckDB.
func (p *Plan) compileUser(env *uenv, n Node, duck *[]*needsDuck) (ucode, error) {
	before := len(env.duckCalls)
	c, err := env.compile(n)
	*duck = append(*duck, env.duckCalls[before:]...)
	return c, err
}

func (p *Plan) compileItems(env *uenv, duck *[]*needsDuck) ([]ucode, error) {
	u := p.user
	var items []ucode
	for i, it := range p.Query.Select {
		c, err := p.compileUser(env, it.Expr, duck)
		if err != nil {
			return nil, err
		}
		items = append(items, c)
		u.items = append(u.items, c.fn)
		u.outTypes = append(u.outTypes, c.t)
		if c.t == TBuckets {
			p.HistCols[p.Columns[i]] = true
		}
	}
	return items, nil
}

// aliasResolver resolves output columns by name, for HAVING and ORDER BY.
func (p *Plan) aliasResolver() func(string) (ucol, bool) {
	return func(name string) (ucol, bool) {
		if i, ok := p.aliasIndex(name); ok {
			return ucol{i, p.user.outTypes[i], quoteIdent(p.Columns[i])}, true
		}
		return ucol{}, false
	}
}

func (p *Plan) compileOrder(env *uenv, sql *string, duck *[]*needsDuck) error {
	var os []string
	for _, o := range p.Query.OrderBy {
		c, err := p.compileUser(env, o.Expr, duck)
		if err != nil {
			return err
		}
		switch c.t {
		case TBuckets, TList, TRecord, TBytes:
			return errAt(o.Expr, "ORDER BY %s: order by a number or a string", c.t.a())
		}
		p.user.order = append(p.user.order, orderTerm{c.fn, o.Desc})
		s := c.sql
		if o.Desc {
			s += " DESC"
		}
		os = append(os, s)
	}
	if len(os) > 0 {
		*sql += " ORDER BY " + strings.Join(os, ", ")
	}
	return nil
}

// setUserSQL records the user-space part's SQL and whether DuckDB must
// run it.
func (p *Plan) setUserSQL(sql string, duck []*needsDuck) {
	p.UserSQL, p.plannedSQL = sql, sql
	if len(duck) == 0 {
		return
	}
	seen := map[string]bool{}
	var whys []string
	for _, d := range duck {
		if !seen[d.why] {
			seen[d.why] = true
			whys = append(whys, d.why)
		}
	}
	p.user.duck = strings.Join(whys, ", ")
}

// emitCalls are the calls whose value the probe sends as it is: strings
// read from memory, and values user space decodes.
func isEmitCall(c *Call) bool {
	if c.Name == "str" || c.Name == "kstack" || c.Name == "ustack" {
		return true
	}
	_, ok := decoders[c.Name]
	return ok
}

// planStream plans a query whose probe sends events: the filter it can
// run, and what it sends; user space does the rest.
func (p *Plan) planStream(aggregating bool) error {
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
				f, ok := p.field(y.Name)
				if !ok {
					if _, isAlias := p.aliasIndex(y.Name); isAlias {
						return false
					}
					bad = p.unknownField(y)
					return false
				}
				if f.Loc == LocBuiltin && (f.Type == TStack) {
					p.Fields[f.Name] = f
				}
				p.Fields[f.Name] = f
				if _, ok := emitOf[f.Name]; !ok {
					e := &Emit{Expr: y, Type: f.Type, Col: f.Name, Size: 8}
					switch f.Type {
					case TString:
						e.Size = p.stringSize(y)
					case TBytes:
						e.Size = (f.Size + 7) &^ 7
					}
					emitOf[f.Name] = e
					p.Emits = append(p.Emits, e)
				}
			case *Call:
				if !isEmitCall(y) {
					return true
				}
				t, err := p.checkKernel(y)
				if err != nil {
					bad = err
					return false
				}
				if _, ok := emitOf[exprKey(y)]; !ok {
					e := &Emit{Expr: y, Type: t, Col: fmt.Sprintf("%s_%d", y.Name, len(p.Emits)), Size: 8}
					switch {
					case y.Name == "str":
						e.Size = p.Opts.StrSize
					case y.Name == "ntop":
						e.Type = TBytes
						e.Size = (p.kernelSize(y.Args[0]) + 7) &^ 7
						if at, _ := p.checkKernel(y.Args[0]); at == TInt {
							e.Size = 8
						}
					}
					emitOf[exprKey(y)] = e
					p.Emits = append(p.Emits, e)
				}
				return false
			case *Index:
				if _, err := p.checkKernel(y); err != nil {
					bad = err
				}
				return false
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
	if slices.ContainsFunc(p.Emits, func(e *Emit) bool { c, ok := e.Expr.(*Call); return ok && c.Name == "usym" }) {
		if _, ok := emitOf["pid"]; !ok {
			id := &Ident{span{}, "pid"}
			p.Fields["pid"] = builtin("pid")
			e := &Emit{Expr: id, Type: TInt, Col: "pid", Size: 8}
			emitOf["pid"] = e
			p.Emits = append(p.Emits, e)
		}
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
	p.Mode = ModeStream
	u := &userPart{}
	p.user = u
	for _, e := range p.Emits {
		u.inCols = append(u.inCols, e.Col)
		u.inTypes = append(u.inTypes, emitUserType(e))
	}
	events := &uenv{p: p}
	events.col = func(n Node) (ucol, bool) {
		var e *Emit
		switch x := n.(type) {
		case *Ident:
			if f, ok := p.field(x.Name); ok {
				e = emitOf[f.Name]
			}
		case *Call:
			if isEmitCall(x) {
				e = emitOf[exprKey(x)]
			}
		}
		if e == nil {
			return ucol{}, false
		}
		i := slices.Index(p.Emits, e)
		return ucol{i, u.inTypes[i], quoteIdent(e.Col)}, true
	}
	events.unknown = p.unknownField
	var duck []*needsDuck
	var whereSQL string
	if len(rest) > 0 {
		w, err := p.compileUser(events, joinAnd(rest), &duck)
		if err != nil {
			return err
		}
		if !isCond(w.t) {
			return errAt(joinAnd(rest), "type mismatch: WHERE needs a condition, %s is %s", p.text(joinAnd(rest)), w.t.a())
		}
		u.where, u.whereNode, whereSQL = w.fn, joinAnd(rest), " WHERE "+w.sql
	}
	if !aggregating {
		items, err := p.compileItems(events, &duck)
		if err != nil {
			return err
		}
		events.alias = p.aliasResolver()
		sql := p.selectSQL(items, "events") + whereSQL
		u.distinct = q.Distinct
		if err := p.compileOrder(events, &sql, &duck); err != nil {
			return err
		}
		if q.Limit >= 0 {
			sql += fmt.Sprintf(" LIMIT %d", q.Limit)
		}
		u.limit = q.Limit
		p.setUserSQL(sql, duck)
		p.PerEvent = len(q.OrderBy) == 0 && !q.Distinct && u.duck == ""
		return nil
	}
	return p.planUserAggregation(events, emitOf, whereSQL, duck)
}

// planUserAggregation plans an aggregation the evaluator does over the
// events (the probe could not): group keys and aggregate arguments over
// the events, then the output over the groups as after the probe's.
func (p *Plan) planUserAggregation(events *uenv, emitOf map[string]*Emit, whereSQL string, duck []*needsDuck) error {
	q := p.Query
	u := p.user
	u.aggregate = true
	keyOf := map[string]ucol{}
	var keySQL []string
	for i, g := range q.GroupBy {
		c, err := p.compileUser(events, g, &duck)
		if err != nil {
			return err
		}
		switch c.t {
		case TBuckets, TList, TRecord:
			return errAt(g, "GROUP BY %s", c.t.a())
		}
		keyOf[exprKey(g)] = ucol{i, c.t, fmt.Sprintf("k%d", i)}
		u.keys, u.keyTypes = append(u.keys, c.fn), append(u.keyTypes, c.t)
		keySQL = append(keySQL, c.sql)
	}
	aggSQL := map[string]string{}
	_, err := p.collectAggs(func(c *Call, kind AggKind) (*Agg, error) {
		a, err := aggParams(c, kind)
		if err != nil {
			return nil, err
		}
		var arg, weight evalFn
		argSQL := "1"
		if a.Arg != nil {
			ac, err := p.compileUser(events, a.Arg, &duck)
			if err != nil {
				return nil, err
			}
			a.ArgType = ac.t
			if ac.t == TString && kind == AggTopK {
				a.KeySize = p.Opts.StrSize
			}
			if err := p.checkAggArg(a, ac.t); err != nil {
				return nil, err
			}
			arg, argSQL = ac.fn, ac.sql
		}
		if a.Weight != nil {
			wc, err := p.compileUser(events, a.Weight, &duck)
			if err != nil {
				return nil, err
			}
			if wc.t != TInt && wc.t != TAny {
				return nil, errAt(a.Weight, "type mismatch: a topk weight is an integer, %s is %s", p.text(a.Weight), wc.t.a())
			}
			weight = wc.fn
		}
		u.args, u.weights = append(u.args, arg), append(u.weights, weight)
		aggSQL[exprKey(c)] = duckAggSQL(a, argSQL)
		return a, nil
	})
	if err != nil {
		return err
	}
	// The evaluator's groups are its own input table: keys, then aggregates.
	eventTypes, eventCols := u.inTypes, u.inCols
	aggOf := map[string]ucol{}
	groupTypes := append([]Type(nil), u.keyTypes...)
	var groupCols []string
	for i := range q.GroupBy {
		groupCols = append(groupCols, fmt.Sprintf("k%d", i))
	}
	for i, a := range p.Aggs {
		t := aggResultType(a)
		aggOf[exprKey(a.Call)] = ucol{len(q.GroupBy) + i, t, a.Col}
		groupTypes, groupCols = append(groupTypes, t), append(groupCols, a.Col)
	}
	if len(duck) == 0 {
		u.inTypes, u.inCols = groupTypes, groupCols
		u.items, u.outTypes, u.order = nil, nil, nil
		if err := p.planOutput("partials", keyOf, aggOf); err != nil {
			return err
		}
		if u.duck == "" {
			return nil
		}
		duck = append(duck, &needsDuck{nil, u.duck})
	}
	// DuckDB aggregates the events: one statement over them.
	u.inTypes, u.inCols = eventTypes, eventCols
	u.items, u.outTypes, u.order, u.having = nil, nil, nil, nil
	env := &uenv{p: p, unknown: events.unknown}
	env.col = func(n Node) (ucol, bool) {
		if c, ok := n.(*Call); ok {
			if _, isAgg := aggKind(c); isAgg {
				if s, ok := aggSQL[exprKey(c)]; ok {
					a := p.aggOf(c)
					return ucol{-1, aggResultType(a), s}, true
				}
			}
		}
		return events.col(n)
	}
	var ignore []*needsDuck
	items, err := p.compileItems(env, &ignore)
	if err != nil {
		return err
	}
	env.alias = p.aliasResolver()
	sql := p.selectSQL(items, "events") + whereSQL
	if len(keySQL) > 0 {
		sql += " GROUP BY " + strings.Join(keySQL, ", ")
	}
	if q.Having != nil {
		h, err := p.compileUser(env, q.Having, &ignore)
		if err != nil {
			return err
		}
		sql += " HAVING " + h.sql
	}
	if err := p.compileOrder(env, &sql, &ignore); err != nil {
		return err
	}
	if q.Limit >= 0 {
		sql += fmt.Sprintf(" LIMIT %d", q.Limit)
	}
	u.aggregate = false
	p.setUserSQL(sql, duck)
	return nil
}

// aggOf is the plan's aggregate for a call.
func (p *Plan) aggOf(c *Call) *Agg {
	for _, a := range p.Aggs {
		if exprKey(a.Call) == exprKey(c) {
			return a
		}
	}
	return nil
}

// aliasIndex finds an output column by its name or alias.
func (p *Plan) aliasIndex(name string) (int, bool) {
	for i, it := range p.Query.Select {
		if strings.EqualFold(it.Alias, name) || i < len(p.Columns) && p.Columns[i] == name {
			return i, true
		}
	}
	return 0, false
}

// emitUserType is how user space sees an emitted value.
func emitUserType(e *Emit) Type {
	if c, ok := e.Expr.(*Call); ok && c.Name != "str" && c.Name != "kstack" && c.Name != "ustack" {
		return TString // decoded: ntop, ksym, usym
	}
	return userType(e.Type)
}

// duckAggSQL is DuckDB's text of an aggregate over events.
func duckAggSQL(a *Agg, arg string) string {
	switch a.Kind {
	case AggCount:
		return "count(*)"
	case AggSum:
		if a.ArgType == TFloat {
			return "sum(" + arg + ")"
		}
		return "CAST(sum(" + arg + ") AS BIGINT)"
	case AggMin, AggMax, AggAvg:
		return fmt.Sprintf("%s(%s)", map[AggKind]string{AggMin: "min", AggMax: "max", AggAvg: "avg"}[a.Kind], arg)
	}
	values := "coalesce(list(CAST(" + arg + " AS BIGINT)), [])"
	switch a.Kind {
	case AggHist:
		return "holter_hist(" + values + ")"
	case AggLHist:
		return fmt.Sprintf("holter_lhist(%s, %d, %d, %d)", values, a.Min, a.Min+a.Buckets*a.Step, a.Step)
	case AggQuantile:
		return fmt.Sprintf("holter_quantile(%s, %v)", values, a.Q)
	case AggDistinct:
		return "count(DISTINCT " + arg + ")"
	case AggSample:
		return "list_filter(list_select(list(" + arg + "), [1, 2, 4, 8, 16, 32, 64, 128]), v -> v IS NOT NULL)"
	}
	return "NULL"
}
