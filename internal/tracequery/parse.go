package tracequery

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// Error is a mistake in a query, with the byte range of the offending part
// so that it can be shown under the query with a caret.
type Error struct {
	Query    string
	Pos, End int // byte offsets into Query; End > Pos
	Msg      string
}

func (e *Error) Error() string {
	if e.Query == "" {
		return e.Msg
	}
	line, col := e.Query, e.Pos
	start := strings.LastIndexByte(e.Query[:e.Pos], '\n') + 1
	if end := strings.IndexByte(e.Query[start:], '\n'); end >= 0 {
		line = e.Query[start : start+end]
	} else {
		line = e.Query[start:]
	}
	col = e.Pos - start
	width := e.End - e.Pos
	if width < 1 {
		width = 1
	}
	if col+width > len(line) {
		width = max(1, len(line)-col)
	}
	return fmt.Sprintf("%s (at column %d)\n  %s\n  %s%s", e.Msg, col+1, line, strings.Repeat(" ", col), strings.Repeat("^", width))
}

func errAt(n Node, format string, args ...any) *Error {
	p, e := n.Span()
	return &Error{Pos: p, End: e, Msg: fmt.Sprintf(format, args...)}
}

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tQuoted // "…": an identifier that may hold any character (paths)
	tString // '…'
	tNumber
	tOp
)

type token struct {
	kind     tokKind
	text     string // identifiers as written; strings unquoted
	pos, end int
}

func lex(q string) ([]token, error) { return lexAll(q, false) }

// lexAll splits q into tokens; with lenient (the DuckDB text around a
// WITH's live part) any other character is an operator token of its own.
func lexAll(q string, lenient bool) ([]token, error) {
	var toks []token
	i := 0
	for i < len(q) {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(q) && isIdentChar(q[j]) {
				j++
			}
			toks = append(toks, token{tIdent, q[i:j], i, j})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(q) && (isIdentChar(q[j])) {
				j++
			}
			if j < len(q) && q[j] == '.' && j+1 < len(q) && q[j+1] >= '0' && q[j+1] <= '9' {
				j++
				for j < len(q) && isIdentChar(q[j]) {
					j++
				}
			}
			toks = append(toks, token{tNumber, q[i:j], i, j})
			i = j
		case c == '\'' || c == '"':
			j := i + 1
			var sb strings.Builder
			for {
				if j >= len(q) {
					return nil, &Error{Pos: i, End: len(q), Msg: "unterminated quote"}
				}
				if q[j] == c {
					if j+1 < len(q) && q[j+1] == c {
						sb.WriteByte(c)
						j += 2
						continue
					}
					break
				}
				sb.WriteByte(q[j])
				j++
			}
			k := tString
			if c == '"' {
				k = tQuoted
			}
			toks = append(toks, token{k, sb.String(), i, j + 1})
			i = j + 1
		default:
			for _, op := range []string{"<=", ">=", "!=", "<>", "==", "<<", ">>", "||", "::"} {
				if strings.HasPrefix(q[i:], op) {
					toks = append(toks, token{tOp, op, i, i + 2})
					i += 2
					goto next
				}
			}
			if strings.ContainsRune("=<>+-*/%&|^(),.@~[];", rune(c)) || lenient && c < 0x80 {
				toks = append(toks, token{tOp, string(c), i, i + 1})
				i++
				continue
			}
			return nil, &Error{Pos: i, End: i + 1, Msg: fmt.Sprintf("unexpected character %q", c)}
		next:
		}
	}
	toks = append(toks, token{tEOF, "", len(q), len(q)})
	return toks, nil
}

func isIdentStart(c byte) bool { return c == '_' || unicode.IsLetter(rune(c)) }
func isIdentChar(c byte) bool  { return isIdentStart(c) || c >= '0' && c <= '9' }

// Node is an expression of the query.
type Node interface {
	Span() (pos, end int)
}

type span struct{ pos, end int }

func (s span) Span() (int, int) { return s.pos, s.end }

// Ident names a field (or, in ORDER BY and HAVING, an output column). A
// dotted name is one Ident: task.comm, args.prev.comm, or alias.field in
// a join.
type Ident struct {
	span
	Name string
}

// Number is an integer or decimal literal. A decimal with an integral
// value (1e6) is an integer.
type Number struct {
	span
	Text  string
	Int   int64
	Float float64
	IsInt bool
}

// String is a '…' literal.
type String struct {
	span
	Val string
}

// Null is the NULL literal.
type Null struct{ span }

// Star is the * of SELECT *.
type Star struct{ span }

// Call is f(args…); Star marks count(*), Distinct count(DISTINCT x).
type Call struct {
	span
	Name     string
	Args     []Node
	Star     bool
	Distinct bool
}

// Binary is l op r; op is lower case for AND/OR.
type Binary struct {
	span
	Op   string
	L, R Node
}

// Unary is -x, NOT x or ~x.
type Unary struct {
	span
	Op string
	X  Node
}

// Case is CASE [operand] WHEN … THEN … [ELSE …] END.
type Case struct {
	span
	Operand Node // nil: each WHEN is a condition
	Whens   []When
	Else    Node // nil: NULL
}

// When is one WHEN … THEN … of a Case.
type When struct{ Cond, Then Node }

// In is x [NOT] IN (list).
type In struct {
	span
	X    Node
	List []Node
	Not  bool
}

// Between is x [NOT] BETWEEN lo AND hi.
type Between struct {
	span
	X, Lo, Hi Node
	Not       bool
}

// IsNull is x IS [NOT] NULL.
type IsNull struct {
	span
	X   Node
	Not bool
}

// Cast is CAST(x AS type) or x::type; To is the type in upper case.
type Cast struct {
	span
	X  Node
	To string
}

// Index is x[i].
type Index struct {
	span
	X, I Node
}

// SelectItem is one output column.
type SelectItem struct {
	Expr  Node
	Alias string
}

// OrderItem is one ORDER BY term.
type OrderItem struct {
	Expr Node
	Desc bool
}

// SourceRef is a source of the FROM clause: dotted parts, quoted parts
// kept verbatim, and its alias.
type SourceRef struct {
	span
	Parts []string
	Alias string
}

func (s SourceRef) String() string {
	var b strings.Builder
	for i, p := range s.Parts {
		if i > 0 {
			b.WriteByte('.')
		}
		if strings.ContainsAny(p, "/.") || p == "" {
			b.WriteString(strconv.Quote(p))
		} else {
			b.WriteString(p)
		}
	}
	return b.String()
}

// JoinKind says how a temporal join matches its two streams.
type JoinKind int

const (
	// JoinLatest (FROM a JOIN b ON …): each b event meets the latest a
	// event with the same key, which stays for the b events after it.
	JoinLatest JoinKind = iota
	// JoinFollowedBy (FROM a FOLLOWED BY b ON …): each a event meets the
	// first b event with its key after it, and is then forgotten.
	JoinFollowedBy
)

func (k JoinKind) String() string {
	if k == JoinFollowedBy {
		return "FOLLOWED BY"
	}
	return "JOIN"
}

// Join is the second stream of a temporal join (Fay §3: events of one
// stream matched to the latest, or the open, event of another by a key).
type Join struct {
	span
	Kind  JoinKind
	Right SourceRef
	On    Node
}

// Query is a parsed trace query.
type Query struct {
	Text     string
	Explain  bool
	Distinct bool
	Select   []SelectItem
	From     SourceRef
	Join     *Join // a second probe stream; nil: one source
	Where    Node
	GroupBy  []Node
	Having   Node
	OrderBy  []OrderItem
	Limit    int64 // -1: none
	// With, for WITH name AS (SELECT … FROM source …) SELECT …, is the
	// rest of the statement: DuckDB over the live part and recorded
	// tables (join.go). The fields above are then the live part's.
	With *With
}

// exprs are the query's expressions, clause by clause: SELECT, WHERE, a
// join's ON, GROUP BY, HAVING, ORDER BY.
func (q *Query) exprs() []Node {
	var out []Node
	for _, it := range q.Select {
		out = append(out, it.Expr)
	}
	out = append(out, q.Where)
	if q.Join != nil {
		out = append(out, q.Join.On)
	}
	out = append(out, q.GroupBy...)
	out = append(out, q.Having)
	for _, o := range q.OrderBy {
		out = append(out, o.Expr)
	}
	return out
}

type parser struct {
	q    string
	toks []token
	i    int
}

// Parse parses a trace query. Errors are *Error with the query attached.
func Parse(q string) (*Query, error) {
	qq, err := parse(q)
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Query = q
		}
		return nil, err
	}
	return qq, nil
}

func parse(q string) (*Query, error) {
	toks, err := lex(q)
	if err != nil {
		// DuckDB's syntax (::, [ ], lambdas) is welcome around a live part.
		if lt, lerr := lexAll(q, true); lerr == nil && len(lt) > 1 && (strings.EqualFold(lt[0].text, "WITH") ||
			strings.EqualFold(lt[0].text, "EXPLAIN") && strings.EqualFold(lt[1].text, "WITH")) {
			toks, err = lt, nil
		} else {
			return nil, err
		}
	}
	p := &parser{q: q, toks: toks}
	explain := p.keyword("EXPLAIN")
	if p.isKeyword("WITH") {
		return p.with(explain)
	}
	out, err := p.selectQuery()
	if err != nil {
		return nil, err
	}
	out.Explain = explain
	return out, nil
}

// notSupported are SQL words a trace query does not take, with what to
// do instead; the parser names them rather than expecting something else.
var notSupported = map[string]string{
	"over":      "window functions (OVER); holter trace --window DURATION --slide DURATION aggregates over a sliding window of intervals",
	"union":     "UNION: a trace query is one SELECT",
	"intersect": "INTERSECT: a trace query is one SELECT",
	"except":    "EXCEPT: a trace query is one SELECT",
	"offset":    "OFFSET",
	"qualify":   "QUALIFY",
	"window":    "WINDOW clauses; holter trace --window DURATION --slide DURATION aggregates over a sliding window of intervals",
	"filter":    "aggregate FILTER clauses; put a CASE inside the aggregate, e.g. sum(CASE WHEN ret < 0 THEN 1 ELSE 0 END)",
	"left":      "LEFT joins: two probe streams join with JOIN (each event meets the latest of the other stream by key) or FOLLOWED BY (each event meets the next one); recorded tables join in WITH",
	"right":     "RIGHT joins: two probe streams join with JOIN or FOLLOWED BY; recorded tables join in WITH",
	"full":      "FULL joins: two probe streams join with JOIN or FOLLOWED BY; recorded tables join in WITH",
	"cross":     "CROSS joins: two probe streams join with JOIN or FOLLOWED BY; recorded tables join in WITH",
	"inner":     "INNER: a temporal join is written JOIN or FOLLOWED BY",
	"natural":   "NATURAL joins: a temporal join's key is ON a.x = b.y",
	"using":     "USING: a temporal join's key is ON a.x = b.y",
	"exists":    "EXISTS (subqueries)",
	"interval":  "INTERVAL literals: times are integers of ns, e.g. 1000000 for 1 ms",
	"nulls":     "NULLS FIRST/LAST",
	"collate":   "COLLATE",
	"escape":    "LIKE … ESCAPE",
	"ilike":     "ILIKE: use lower(x) LIKE '…'",
	"similar":   "SIMILAR TO: use LIKE",
	"glob":      "GLOB: use LIKE",
	"rollup":    "ROLLUP",
	"cube":      "CUBE",
	"grouping":  "GROUPING SETS",
	"lateral":   "LATERAL",
	"values":    "VALUES",
	"recursive": "WITH RECURSIVE",
	"pivot":     "PIVOT",
	"unpivot":   "UNPIVOT",
	"into":      "SELECT … INTO: holter trace --save NAME keeps results in a table",
	"fetch":     "FETCH: use LIMIT",
}

// unsupported says whether the current token is a word a trace query does
// not take, and returns the error naming it.
func (p *parser) unsupported() (*Error, bool) {
	t := p.peek()
	if t.kind != tIdent {
		return nil, false
	}
	why, ok := notSupported[strings.ToLower(t.text)]
	if !ok {
		return nil, false
	}
	return &Error{Pos: t.pos, End: t.end, Msg: "not supported: " + why}, true
}

// errExpected is the error at the current token: "not supported: …" if it
// is a word a trace query does not take, else msg.
func (p *parser) errExpected(msg string) *Error {
	if e, ok := p.unsupported(); ok {
		return e
	}
	return p.errHere(msg)
}

// clauseWords end an expression in the SELECT list or FROM clause, so
// they are not taken as an alias written without AS.
var clauseWords = map[string]bool{"from": true, "where": true, "group": true, "having": true, "order": true, "limit": true,
	"join": true, "followed": true, "on": true, "as": true}

// alias reads [AS] name, or nothing.
func (p *parser) alias() (string, error) {
	if p.keyword("AS") {
		t := p.peek()
		if t.kind != tIdent && t.kind != tQuoted || t.kind == tIdent && reserved[strings.ToLower(t.text)] {
			return "", p.errExpected("expected a name after AS")
		}
		p.i++
		return t.text, nil
	}
	t := p.peek()
	if t.kind == tQuoted || t.kind == tIdent && !reserved[strings.ToLower(t.text)] && !clauseWords[strings.ToLower(t.text)] {
		if e, bad := p.unsupported(); bad {
			return "", e
		}
		p.i++
		return t.text, nil
	}
	return "", nil
}

// selectQuery parses SELECT … up to the end of p's tokens.
func (p *parser) selectQuery() (*Query, error) {
	out := &Query{Text: p.q, Limit: -1}
	var err error
	if !p.keyword("SELECT") {
		return nil, p.errExpected("expected SELECT")
	}
	if p.keyword("DISTINCT") {
		out.Distinct = true
	} else {
		p.keyword("ALL")
	}
	for {
		var item SelectItem
		if t := p.peek(); t.kind == tOp && t.text == "*" {
			p.i++
			item.Expr = &Star{span{t.pos, t.end}}
		} else {
			if item.Expr, err = p.expr(); err != nil {
				return nil, err
			}
			if item.Alias, err = p.alias(); err != nil {
				return nil, err
			}
		}
		out.Select = append(out.Select, item)
		if !p.op(",") {
			break
		}
	}
	if !p.keyword("FROM") {
		return nil, p.errExpected("expected FROM and a source, e.g. FROM syscall.read (holter trace --list shows them)")
	}
	if out.From, err = p.source(); err != nil {
		return nil, err
	}
	if t := p.peek(); p.isKeyword("JOIN") || p.isKeyword("FOLLOWED") {
		j := &Join{span: span{t.pos, t.end}}
		p.i++
		if strings.EqualFold(t.text, "FOLLOWED") {
			if !p.keyword("BY") {
				return nil, p.errHere("expected BY after FOLLOWED")
			}
			j.Kind = JoinFollowedBy
		}
		if j.Right, err = p.source(); err != nil {
			return nil, err
		}
		if !p.keyword("ON") {
			return nil, p.errExpected("expected ON and the key that matches the two streams, e.g. ON a.tid = b.tid")
		}
		if j.On, err = p.expr(); err != nil {
			return nil, err
		}
		_, j.end = j.On.Span()
		out.Join = j
	}
	if p.keyword("WHERE") {
		if out.Where, err = p.expr(); err != nil {
			return nil, err
		}
	}
	if p.keyword("GROUP") {
		if !p.keyword("BY") {
			return nil, p.errHere("expected BY after GROUP")
		}
		for {
			e, err := p.expr()
			if err != nil {
				return nil, err
			}
			out.GroupBy = append(out.GroupBy, e)
			if !p.op(",") {
				break
			}
		}
	}
	if p.keyword("HAVING") {
		if out.Having, err = p.expr(); err != nil {
			return nil, err
		}
	}
	if p.keyword("ORDER") {
		if !p.keyword("BY") {
			return nil, p.errHere("expected BY after ORDER")
		}
		for {
			e, err := p.expr()
			if err != nil {
				return nil, err
			}
			it := OrderItem{Expr: e}
			if p.keyword("DESC") {
				it.Desc = true
			} else {
				p.keyword("ASC")
			}
			out.OrderBy = append(out.OrderBy, it)
			if !p.op(",") {
				break
			}
		}
	}
	if p.keyword("LIMIT") {
		t := p.peek()
		n, err := strconv.ParseInt(t.text, 10, 64)
		if t.kind != tNumber || err != nil || n < 0 {
			return nil, p.errHere("expected a row count after LIMIT")
		}
		out.Limit = n
		p.i++
	}
	p.op(";")
	if t := p.peek(); t.kind != tEOF {
		return nil, p.errExpected(fmt.Sprintf("unexpected %q", t.text))
	}
	return out, nil
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) errHere(msg string) *Error {
	t := p.peek()
	end := t.end
	if end == t.pos {
		end++
	}
	return &Error{Pos: t.pos, End: end, Msg: msg}
}

func (p *parser) keyword(kw string) bool {
	t := p.peek()
	if t.kind == tIdent && strings.EqualFold(t.text, kw) {
		p.i++
		return true
	}
	return false
}

func (p *parser) isKeyword(kw string) bool {
	t := p.peek()
	return t.kind == tIdent && strings.EqualFold(t.text, kw)
}

func (p *parser) op(o string) bool {
	t := p.peek()
	if t.kind == tOp && t.text == o {
		p.i++
		return true
	}
	return false
}

func (p *parser) source() (SourceRef, error) {
	start := p.peek().pos
	if t := p.peek(); t.kind == tOp && t.text == "(" {
		if p.toks[p.i+1].kind == tIdent && strings.EqualFold(p.toks[p.i+1].text, "SELECT") {
			return SourceRef{}, &Error{Pos: t.pos, End: p.toks[p.i+1].end, Msg: "not supported: subqueries in FROM; a query reads a probe source, and joins recorded tables in WITH live AS (SELECT … FROM source …) SELECT …"}
		}
	}
	var parts []string
	end := start
	for {
		t := p.peek()
		switch t.kind {
		case tIdent, tQuoted, tNumber:
			parts = append(parts, t.text)
			end = t.end
			p.i++
		default:
			return SourceRef{}, p.errExpected("expected a source, e.g. syscall.read or tracepoint.sched.sched_switch (holter trace --list shows them)")
		}
		if !p.op(".") {
			break
		}
	}
	ref := SourceRef{span: span{start, end}, Parts: parts}
	alias, err := p.alias()
	if err != nil {
		return SourceRef{}, err
	}
	ref.Alias = alias
	return ref, nil
}

// Operator precedence, lowest first. Level 2 also has the postfix
// comparisons: [NOT] LIKE, [NOT] IN, [NOT] BETWEEN, IS [NOT] NULL.
var binaryLevels = [][]string{
	{"or"},
	{"and"},
	{"=", "==", "!=", "<>", "<", "<=", ">", ">=", "like"},
	{"|"},
	{"^"},
	{"&"},
	{"<<", ">>"},
	{"+", "-", "||"},
	{"*", "/", "%"},
}

const cmpLevel = 2

func (p *parser) expr() (Node, error) { return p.binary(0) }

func (p *parser) binary(level int) (Node, error) {
	if level == len(binaryLevels) {
		return p.unary()
	}
	if level == cmpLevel && p.isKeyword("NOT") {
		// NOT binds looser than comparisons: NOT a = b is NOT (a = b).
		t := p.peek()
		p.i++
		x, err := p.binary(level)
		if err != nil {
			return nil, err
		}
		_, end := x.Span()
		return &Unary{span{t.pos, end}, "not", x}, nil
	}
	l, err := p.binary(level + 1)
	if err != nil {
		return nil, err
	}
	for {
		if level == cmpLevel {
			if n, ok, err := p.postfixComparison(l); err != nil {
				return nil, err
			} else if ok {
				l = n
				continue
			}
		}
		t := p.peek()
		op := ""
		for _, o := range binaryLevels[level] {
			if (o == "or" || o == "and" || o == "like") && t.kind == tIdent && strings.EqualFold(t.text, o) ||
				t.kind == tOp && t.text == o {
				op = o
			}
		}
		if level == cmpLevel && p.isKeyword("NOT") && p.toks[p.i+1].kind == tIdent && strings.EqualFold(p.toks[p.i+1].text, "LIKE") {
			op = "not like"
			p.i++
		}
		if op == "" {
			return l, nil
		}
		p.i++
		r, err := p.binary(level + 1)
		if err != nil {
			return nil, err
		}
		lp, _ := l.Span()
		_, re := r.Span()
		switch op {
		case "==":
			op = "="
		case "<>":
			op = "!="
		}
		l = &Binary{span{lp, re}, op, l, r}
	}
}

// postfixComparison parses [NOT] IN (…), [NOT] BETWEEN … AND … and
// IS [NOT] NULL after x.
func (p *parser) postfixComparison(x Node) (Node, bool, error) {
	start, _ := x.Span()
	save := p.i
	not := false
	if p.isKeyword("NOT") && p.toks[p.i+1].kind == tIdent &&
		(strings.EqualFold(p.toks[p.i+1].text, "IN") || strings.EqualFold(p.toks[p.i+1].text, "BETWEEN")) {
		not = true
		p.i++
	}
	switch {
	case p.keyword("IN"):
		if !p.op("(") {
			return nil, false, p.errHere("expected ( and a list after IN")
		}
		if p.isKeyword("SELECT") {
			return nil, false, p.errHere("not supported: subqueries (IN (SELECT …)); list the values, e.g. IN (1, 2, 3)")
		}
		n := &In{X: x, Not: not}
		for {
			e, err := p.expr()
			if err != nil {
				return nil, false, err
			}
			n.List = append(n.List, e)
			if !p.op(",") {
				break
			}
		}
		end := p.peek()
		if !p.op(")") {
			return nil, false, p.errHere("expected ) to close IN (")
		}
		n.span = span{start, end.end}
		return n, true, nil
	case p.keyword("BETWEEN"):
		lo, err := p.binary(cmpLevel + 1)
		if err != nil {
			return nil, false, err
		}
		if !p.keyword("AND") {
			return nil, false, p.errHere("expected AND in BETWEEN … AND …")
		}
		hi, err := p.binary(cmpLevel + 1)
		if err != nil {
			return nil, false, err
		}
		_, end := hi.Span()
		return &Between{span{start, end}, x, lo, hi, not}, true, nil
	case p.keyword("IS"):
		n := &IsNull{X: x}
		if p.keyword("NOT") {
			n.Not = true
		}
		end := p.peek()
		if !p.keyword("NULL") {
			return nil, false, p.errHere("expected NULL or NOT NULL after IS")
		}
		n.span = span{start, end.end}
		return n, true, nil
	}
	p.i = save
	return nil, false, nil
}

func (p *parser) unary() (Node, error) {
	t := p.peek()
	if t.kind == tOp && (t.text == "-" || t.text == "~" || t.text == "+") {
		p.i++
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		if t.text == "+" {
			return x, nil
		}
		_, end := x.Span()
		if n, ok := x.(*Number); ok && t.text == "-" {
			n.Text = "-" + n.Text
			n.Int, n.Float = -n.Int, -n.Float
			n.pos = t.pos
			return n, nil
		}
		return &Unary{span{t.pos, end}, t.text, x}, nil
	}
	return p.postfix()
}

// postfix parses a primary expression and its ::TYPE casts and [i] indexes.
func (p *parser) postfix() (Node, error) {
	x, err := p.primary()
	if err != nil {
		return nil, err
	}
	for {
		start, _ := x.Span()
		switch {
		case p.op("::"):
			to, end, err := p.typeName()
			if err != nil {
				return nil, err
			}
			x = &Cast{span{start, end}, x, to}
		case p.op("["):
			i, err := p.expr()
			if err != nil {
				return nil, err
			}
			end := p.peek()
			if !p.op("]") {
				return nil, p.errHere("expected ] to close [")
			}
			x = &Index{span{start, end.end}, x, i}
		default:
			return x, nil
		}
	}
}

// typeName reads a type name (BIGINT, DOUBLE PRECISION, VARCHAR, …).
func (p *parser) typeName() (string, int, error) {
	t := p.peek()
	if t.kind != tIdent {
		return "", 0, p.errHere("expected a type, e.g. BIGINT, DOUBLE or VARCHAR")
	}
	p.i++
	name, end := strings.ToUpper(t.text), t.end
	if name == "DOUBLE" && p.isKeyword("PRECISION") {
		end = p.peek().end
		p.i++
	}
	return name, end, nil
}

var reserved = map[string]bool{"select": true, "from": true, "where": true, "group": true, "by": true,
	"having": true, "order": true, "limit": true, "as": true, "and": true, "or": true, "not": true, "asc": true, "desc": true,
	"like": true, "case": true, "when": true, "then": true, "else": true, "end": true, "in": true, "between": true,
	"is": true, "null": true, "distinct": true, "join": true, "on": true, "followed": true, "cast": true, "all": true}

func (p *parser) primary() (Node, error) {
	t := p.peek()
	switch t.kind {
	case tNumber:
		p.i++
		return number(t)
	case tString:
		p.i++
		return &String{span{t.pos, t.end}, t.text}, nil
	case tQuoted:
		p.i++
		return p.dotted(t), nil
	case tIdent:
		kw := strings.ToLower(t.text)
		switch kw {
		case "null":
			p.i++
			return &Null{span{t.pos, t.end}}, nil
		case "true", "false":
			p.i++
			v := int64(0)
			if kw == "true" {
				v = 1
			}
			return &Number{span: span{t.pos, t.end}, Text: strings.ToUpper(kw), Int: v, Float: float64(v), IsInt: true}, nil
		case "case":
			return p.caseExpr()
		case "cast":
			if p.toks[p.i+1].kind == tOp && p.toks[p.i+1].text == "(" {
				return p.castExpr()
			}
		}
		if e, ok := p.unsupported(); ok {
			return nil, e
		}
		if reserved[kw] {
			return nil, p.errHere(fmt.Sprintf("expected an expression, found %s", strings.ToUpper(t.text)))
		}
		p.i++
		if !p.op("(") {
			return p.dotted(t), nil
		}
		c := &Call{Name: strings.ToLower(t.text)}
		if p.op("*") {
			c.Star = true
		} else if p.peek().kind != tOp || p.peek().text != ")" {
			if p.keyword("DISTINCT") {
				c.Distinct = true
			}
			for {
				a, err := p.expr()
				if err != nil {
					return nil, err
				}
				c.Args = append(c.Args, a)
				if !p.op(",") {
					break
				}
			}
		}
		end := p.peek()
		if !p.op(")") {
			if p.isKeyword("ORDER") || p.isKeyword("SEPARATOR") {
				return nil, p.errHere("not supported: ORDER BY inside an aggregate")
			}
			return nil, p.errExpected("expected ) to close " + t.text + "(")
		}
		c.span = span{t.pos, end.end}
		if p.isKeyword("OVER") || p.isKeyword("FILTER") {
			e, _ := p.unsupported()
			return nil, e
		}
		return c, nil
	case tOp:
		if t.text == "(" {
			p.i++
			if p.isKeyword("SELECT") {
				return nil, &Error{Pos: t.pos, End: p.peek().end, Msg: "not supported: subqueries; recorded tables join in WITH live AS (SELECT … FROM source …) SELECT …"}
			}
			e, err := p.expr()
			if err != nil {
				return nil, err
			}
			if !p.op(")") {
				return nil, p.errExpected("expected )")
			}
			return e, nil
		}
		if t.text == "*" {
			return nil, p.errHere("* stands only alone in the SELECT list (SELECT *), or in count(*)")
		}
	case tEOF:
		return nil, p.errHere("unexpected end of query")
	}
	return nil, p.errExpected(fmt.Sprintf("unexpected %q", t.text))
}

// number makes a Number of a numeric token.
func number(t token) (*Number, error) {
	n := &Number{span: span{t.pos, t.end}, Text: t.text}
	if v, err := strconv.ParseInt(t.text, 0, 64); err == nil {
		n.Int, n.Float, n.IsInt = v, float64(v), true
	} else if v, err := strconv.ParseUint(t.text, 0, 64); err == nil {
		n.Int, n.Float, n.IsInt = int64(v), float64(v), true
	} else if f, err := strconv.ParseFloat(t.text, 64); err == nil {
		n.Float = f
		if f == math.Trunc(f) && math.Abs(f) < 1<<62 {
			n.Int, n.IsInt = int64(f), true
		}
	} else {
		return nil, &Error{Pos: t.pos, End: t.end, Msg: fmt.Sprintf("bad number %q", t.text)}
	}
	return n, nil
}

// dotted reads a.b.c (after its first part, t) into one Ident.
func (p *parser) dotted(t token) *Ident {
	id := &Ident{span{t.pos, t.end}, t.text}
	for p.peek().kind == tOp && p.peek().text == "." {
		next := p.toks[p.i+1]
		if next.kind != tIdent && next.kind != tQuoted {
			break
		}
		p.i += 2
		id.Name += "." + next.text
		id.end = next.end
	}
	return id
}

func (p *parser) caseExpr() (Node, error) {
	t := p.peek()
	p.i++
	c := &Case{}
	if !p.isKeyword("WHEN") {
		op, err := p.expr()
		if err != nil {
			return nil, err
		}
		c.Operand = op
	}
	for p.keyword("WHEN") {
		cond, err := p.expr()
		if err != nil {
			return nil, err
		}
		if !p.keyword("THEN") {
			return nil, p.errExpected("expected THEN after CASE … WHEN …")
		}
		then, err := p.expr()
		if err != nil {
			return nil, err
		}
		c.Whens = append(c.Whens, When{cond, then})
	}
	if len(c.Whens) == 0 {
		return nil, p.errExpected("expected WHEN in CASE")
	}
	if p.keyword("ELSE") {
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		c.Else = e
	}
	end := p.peek()
	if !p.keyword("END") {
		return nil, p.errExpected("expected END to close CASE")
	}
	c.span = span{t.pos, end.end}
	return c, nil
}

func (p *parser) castExpr() (Node, error) {
	t := p.peek()
	p.i += 2 // CAST (
	x, err := p.expr()
	if err != nil {
		return nil, err
	}
	if !p.keyword("AS") {
		return nil, p.errExpected("expected AS and a type in CAST(x AS type)")
	}
	to, _, err := p.typeName()
	if err != nil {
		return nil, err
	}
	end := p.peek()
	if !p.op(")") {
		return nil, p.errExpected("expected ) to close CAST(")
	}
	return &Cast{span{t.pos, end.end}, x, to}, nil
}

// walk calls f on n and, while f returns true, on its parts.
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
	case *Case:
		walk(x.Operand, f)
		for _, w := range x.Whens {
			walk(w.Cond, f)
			walk(w.Then, f)
		}
		walk(x.Else, f)
	case *In:
		walk(x.X, f)
		for _, e := range x.List {
			walk(e, f)
		}
	case *Between:
		walk(x.X, f)
		walk(x.Lo, f)
		walk(x.Hi, f)
	case *IsNull:
		walk(x.X, f)
	case *Cast:
		walk(x.X, f)
	case *Index:
		walk(x.X, f)
		walk(x.I, f)
	}
}

// sqlText prints an expression as DuckDB SQL, with rename replacing the
// sub-expressions it knows (aggregates and keys by their columns).
func sqlText(n Node, rename func(Node) (string, bool)) string {
	return printer{rename: rename, sql: true}.print(n, 0)
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Precedences for printing, lowest first.
const (
	precOr = iota + 1
	precAnd
	precNot
	precCmp
	precBitOr
	precXor
	precBitAnd
	precShift
	precAdd
	precMul
	precUnary
	precAtom
)

var binaryPrec = map[string]int{"or": precOr, "and": precAnd, "=": precCmp, "!=": precCmp, "<": precCmp, "<=": precCmp,
	">": precCmp, ">=": precCmp, "like": precCmp, "not like": precCmp, "|": precBitOr, "^": precXor, "&": precBitAnd,
	"<<": precShift, ">>": precShift, "+": precAdd, "-": precAdd, "||": precAdd, "*": precMul, "/": precMul, "%": precMul}

// Format prints an expression as the query would write it, with the
// parentheses its meaning needs and no others: what EXPLAIN shows.
func Format(n Node) string { return printer{}.print(n, 0) }

// printer writes expressions: as the query would (Format), or as DuckDB
// SQL (sql: identifiers quoted, every compound part in parentheses since
// DuckDB ranks the bitwise operators otherwise, ^ as xor()), with rename
// replacing the parts it knows.
type printer struct {
	rename func(Node) (string, bool)
	sql    bool
}

func (pr printer) print(n Node, outer int) string {
	if pr.rename != nil {
		if s, ok := pr.rename(n); ok {
			return s
		}
	}
	s, prec := pr.printPrec(n)
	if pr.sql && prec < precAtom || prec < outer {
		return "(" + s + ")"
	}
	return s
}

func (pr printer) printPrec(n Node) (string, int) {
	sub := func(x Node, outer int) string { return pr.print(x, outer) }
	switch x := n.(type) {
	case *Ident:
		if pr.sql || strings.ContainsAny(x.Name, " /\"") {
			return quoteIdent(x.Name), precAtom
		}
		return x.Name, precAtom
	case *Number:
		if pr.sql && x.IsInt {
			return strconv.FormatInt(x.Int, 10), precAtom
		}
		return x.Text, precAtom
	case *String:
		return quoteString(x.Val), precAtom
	case *Null:
		return "NULL", precAtom
	case *Star:
		return "*", precAtom
	case *Call:
		if x.Star {
			return x.Name + "(*)", precAtom
		}
		args := make([]string, len(x.Args))
		for i, a := range x.Args {
			args[i] = sub(a, 0)
		}
		d := ""
		if x.Distinct {
			d = "DISTINCT "
		}
		return x.Name + "(" + d + strings.Join(args, ", ") + ")", precAtom
	case *Binary:
		if pr.sql && x.Op == "^" {
			return "xor(" + sub(x.L, 0) + ", " + sub(x.R, 0) + ")", precAtom
		}
		prec := binaryPrec[x.Op]
		op := x.Op
		switch op {
		case "and", "or", "like", "not like":
			op = strings.ToUpper(op)
		case "!=":
			if !pr.sql {
				op = "<>"
			}
		}
		// Left-associative: a right operand of the same precedence
		// needs its parentheses (a - (b - c)).
		return sub(x.L, prec) + " " + op + " " + sub(x.R, prec+1), prec
	case *Unary:
		if x.Op == "not" {
			return "NOT " + sub(x.X, precNot), precNot
		}
		return x.Op + sub(x.X, precUnary), precUnary
	case *Case:
		var b strings.Builder
		b.WriteString("CASE")
		if x.Operand != nil {
			b.WriteString(" " + sub(x.Operand, 0))
		}
		for _, w := range x.Whens {
			b.WriteString(" WHEN " + sub(w.Cond, 0) + " THEN " + sub(w.Then, 0))
		}
		if x.Else != nil {
			b.WriteString(" ELSE " + sub(x.Else, 0))
		}
		return b.String() + " END", precAtom
	case *In:
		items := make([]string, len(x.List))
		for i, e := range x.List {
			items[i] = sub(e, 0)
		}
		not := ""
		if x.Not {
			not = "NOT "
		}
		return sub(x.X, precCmp+1) + " " + not + "IN (" + strings.Join(items, ", ") + ")", precCmp
	case *Between:
		not := ""
		if x.Not {
			not = "NOT "
		}
		return sub(x.X, precCmp+1) + " " + not + "BETWEEN " + sub(x.Lo, precCmp+1) + " AND " + sub(x.Hi, precCmp+1), precCmp
	case *IsNull:
		if x.Not {
			return sub(x.X, precCmp+1) + " IS NOT NULL", precCmp
		}
		return sub(x.X, precCmp+1) + " IS NULL", precCmp
	case *Cast:
		return "CAST(" + sub(x.X, 0) + " AS " + x.To + ")", precAtom
	case *Index:
		return sub(x.X, precAtom) + "[" + sub(x.I, 0) + "]", precAtom
	}
	return "NULL", precAtom
}
