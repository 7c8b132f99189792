package tracequery

import (
	"fmt"
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
			for _, op := range []string{"<=", ">=", "!=", "<>", "==", "<<", ">>", "||"} {
				if strings.HasPrefix(q[i:], op) {
					toks = append(toks, token{tOp, op, i, i + 2})
					i += 2
					goto next
				}
			}
			if strings.ContainsRune("=<>+-*/%&|^(),.@~", rune(c)) || lenient && c < 0x80 {
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

// Ident names a field (or, in ORDER BY and HAVING, an output column).
type Ident struct {
	span
	Name string
}

// Number is an integer or decimal literal.
type Number struct {
	span
	Text  string
	Int   int64
	IsInt bool
}

// String is a '…' literal.
type String struct {
	span
	Val string
}

// Call is f(args…); Star marks count(*).
type Call struct {
	span
	Name string
	Args []Node
	Star bool
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

// SourceRef is the FROM clause: dotted parts, quoted parts kept verbatim.
type SourceRef struct {
	span
	Parts []string
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

// Query is a parsed trace query.
type Query struct {
	Text    string
	Explain bool
	Select  []SelectItem
	From    SourceRef
	Where   Node
	GroupBy []Node
	Having  Node
	OrderBy []OrderItem
	Limit   int64 // -1: none
	// With, for WITH name AS (SELECT … FROM source …) SELECT …, is the
	// rest of the statement: DuckDB over the live part and recorded
	// tables (join.go). The fields above are then the live part's.
	With *With
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

// selectQuery parses SELECT … up to the end of p's tokens.
func (p *parser) selectQuery() (*Query, error) {
	out := &Query{Text: p.q, Limit: -1}
	var err error
	if !p.keyword("SELECT") {
		return nil, p.errHere("expected SELECT")
	}
	for {
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		item := SelectItem{Expr: e}
		if p.keyword("AS") {
			t := p.peek()
			if t.kind != tIdent && t.kind != tQuoted {
				return nil, p.errHere("expected a column name after AS")
			}
			item.Alias = t.text
			p.i++
		}
		out.Select = append(out.Select, item)
		if !p.op(",") {
			break
		}
	}
	if !p.keyword("FROM") {
		return nil, p.errHere("expected FROM and a source, e.g. FROM syscall.read (holter trace --list shows them)")
	}
	if out.From, err = p.source(); err != nil {
		return nil, err
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
	if t := p.peek(); t.kind != tEOF {
		return nil, p.errHere(fmt.Sprintf("unexpected %q", t.text))
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
			return SourceRef{}, p.errHere("expected a source, e.g. syscall.read or tracepoint.sched.sched_switch (holter trace --list shows them)")
		}
		if !p.op(".") {
			break
		}
	}
	return SourceRef{span: span{start, end}, Parts: parts}, nil
}

// Operator precedence, lowest first.
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

func (p *parser) expr() (Node, error) { return p.binary(0) }

func (p *parser) binary(level int) (Node, error) {
	if level == len(binaryLevels) {
		return p.unary()
	}
	if level == 2 && p.isKeyword("NOT") {
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
		t := p.peek()
		op := ""
		for _, o := range binaryLevels[level] {
			if (o == "or" || o == "and" || o == "like") && t.kind == tIdent && strings.EqualFold(t.text, o) ||
				t.kind == tOp && t.text == o {
				op = o
			}
		}
		if level == 2 && p.isKeyword("NOT") && p.toks[p.i+1].kind == tIdent && strings.EqualFold(p.toks[p.i+1].text, "LIKE") {
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

func (p *parser) unary() (Node, error) {
	t := p.peek()
	if t.kind == tOp && (t.text == "-" || t.text == "~") {
		p.i++
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		_, end := x.Span()
		if n, ok := x.(*Number); ok && t.text == "-" {
			n.Text = "-" + n.Text
			n.Int = -n.Int
			n.pos = t.pos
			return n, nil
		}
		return &Unary{span{t.pos, end}, t.text, x}, nil
	}
	return p.primary()
}

var reserved = map[string]bool{"select": true, "from": true, "where": true, "group": true, "by": true,
	"having": true, "order": true, "limit": true, "as": true, "and": true, "or": true, "not": true, "asc": true, "desc": true, "like": true}

func (p *parser) primary() (Node, error) {
	t := p.peek()
	switch t.kind {
	case tNumber:
		p.i++
		n := &Number{span: span{t.pos, t.end}, Text: t.text}
		if v, err := strconv.ParseInt(t.text, 0, 64); err == nil {
			n.Int, n.IsInt = v, true
		} else if v, err := strconv.ParseUint(t.text, 0, 64); err == nil {
			n.Int, n.IsInt = int64(v), true
		} else if _, err := strconv.ParseFloat(t.text, 64); err != nil {
			return nil, &Error{Pos: t.pos, End: t.end, Msg: fmt.Sprintf("bad number %q", t.text)}
		}
		return n, nil
	case tString:
		p.i++
		return &String{span{t.pos, t.end}, t.text}, nil
	case tQuoted:
		p.i++
		return &Ident{span{t.pos, t.end}, t.text}, nil
	case tIdent:
		if reserved[strings.ToLower(t.text)] {
			return nil, p.errHere(fmt.Sprintf("expected an expression, found %s", strings.ToUpper(t.text)))
		}
		p.i++
		if !p.op("(") {
			return &Ident{span{t.pos, t.end}, t.text}, nil
		}
		c := &Call{Name: strings.ToLower(t.text)}
		if p.op("*") {
			c.Star = true
		} else if p.peek().kind != tOp || p.peek().text != ")" {
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
			return nil, p.errHere("expected ) to close " + t.text + "(")
		}
		c.span = span{t.pos, end.end}
		return c, nil
	case tOp:
		if t.text == "(" {
			p.i++
			e, err := p.expr()
			if err != nil {
				return nil, err
			}
			if !p.op(")") {
				return nil, p.errHere("expected )")
			}
			return e, nil
		}
	case tEOF:
		return nil, p.errHere("unexpected end of query")
	}
	return nil, p.errHere(fmt.Sprintf("unexpected %q", t.text))
}

// sqlText prints an expression as DuckDB SQL, with rename replacing the
// sub-expressions it knows (aggregates and keys by their columns).
func sqlText(n Node, rename func(Node) (string, bool)) string {
	if s, ok := rename(n); ok {
		return s
	}
	switch x := n.(type) {
	case *Ident:
		return quoteIdent(x.Name)
	case *Number:
		return x.Text
	case *String:
		return "'" + strings.ReplaceAll(x.Val, "'", "''") + "'"
	case *Call:
		if x.Star {
			return x.Name + "(*)"
		}
		args := make([]string, len(x.Args))
		for i, a := range x.Args {
			args[i] = sqlText(a, rename)
		}
		return x.Name + "(" + strings.Join(args, ", ") + ")"
	case *Binary:
		op := x.Op
		if op == "and" || op == "or" || op == "like" || op == "not like" {
			op = strings.ToUpper(op)
		}
		if op == "^" {
			op = "xor"
			return "xor(" + sqlText(x.L, rename) + ", " + sqlText(x.R, rename) + ")"
		}
		return "(" + sqlText(x.L, rename) + " " + op + " " + sqlText(x.R, rename) + ")"
	case *Unary:
		if x.Op == "not" {
			return "(NOT " + sqlText(x.X, rename) + ")"
		}
		return "(" + x.Op + sqlText(x.X, rename) + ")"
	}
	return "NULL"
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
