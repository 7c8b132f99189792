package tracequery

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// Joins with recorded tables. A query that names a recorded table (samples,
// vitals, epochs, stacks, spans, …) is written
//
//	WITH live AS (SELECT comm, count() AS calls FROM syscall.any GROUP BY comm)
//	SELECT live.comm, calls, cpu_ns FROM live
//	  LEFT JOIN (SELECT comm, sum(weight) AS cpu_ns FROM samples WHERE vital = 'cpu' GROUP BY comm) USING (comm)
//
// Exactly one part of the WITH reads a probe source: it is compiled like
// any trace query (kernel part, then DuckDB over the partials). The rest of
// the statement is DuckDB's, run each interval in the recording's store
// with the live part's rows in place of its name. A probe source is told
// from a table by its dotted kind (syscall.…, tracepoint.…, the names
// holter trace --list shows); a table is a name without a kind.

// With is the part of a query around its live part.
type With struct {
	Name   string     // the live part's name in the WITH
	Before string     // the WITH's parts before it ("a AS (…), "), verbatim
	After  string     // the text after it: more parts, then the main statement
	Tables []TableRef // recorded tables the rest names
}

// TableRef is a table named outside the live part.
type TableRef struct {
	Name     string
	Pos, End int
}

// probeKinds are the first parts of probe source names.
var probeKinds = map[string]bool{"tracepoint": true, "tp": true, "syscall": true, "uprobe": true, "uretprobe": true, "usdt": true,
	"profile": true, "interval": true, "kprobe": true, "kretprobe": true, "kfunc": true, "kretfunc": true, "fentry": true, "fexit": true,
	"tp_btf": true, "rawtracepoint": true, "raw_tracepoint": true, "raw_tp": true}

// fromEnds are the clauses that end a FROM.
var fromEnds = map[string]bool{"where": true, "group": true, "order": true, "limit": true, "having": true, "qualify": true,
	"window": true, "union": true, "except": true, "intersect": true, "offset": true, "select": true}

func (p *parser) isWord(i int, w string) bool {
	return p.toks[i].kind == tIdent && strings.EqualFold(p.toks[i].text, w)
}

// isProbeSource says whether dotted names a probe source rather than a table.
func isProbeSource(parts []string) bool {
	if len(parts) < 2 {
		return false
	}
	if probeKinds[strings.ToLower(parts[0])] {
		return true
	}
	name := strings.ToLower(strings.Join(parts, "."))
	for _, d := range derived {
		if d.name == name {
			return true
		}
	}
	return false
}

// dottedAt reads a dotted name starting at token i: its parts and the
// index after it.
func (p *parser) dottedAt(i int) (parts []string, next int) {
	for i < len(p.toks) {
		t := p.toks[i]
		if t.kind != tIdent && t.kind != tQuoted && t.kind != tNumber {
			break
		}
		parts = append(parts, t.text)
		i++
		if i < len(p.toks) && p.toks[i].kind == tOp && p.toks[i].text == "." {
			i++
			continue
		}
		break
	}
	return parts, i
}

type cte struct {
	name             string
	nameTok          int
	open, close      int // token indexes of its parentheses
	probe            bool
	probePos, probeE int
}

// with parses WITH … whose one part reads a probe source.
func (p *parser) with(explain bool) (*Query, error) {
	p.i++ // WITH
	if p.isKeyword("RECURSIVE") {
		return nil, p.errHere("WITH RECURSIVE is not supported in a trace query")
	}
	var ctes []cte
	for {
		t := p.peek()
		if t.kind != tIdent && t.kind != tQuoted {
			return nil, p.errHere("expected a name for a part of WITH")
		}
		c := cte{name: t.text, nameTok: p.i}
		p.i++
		if p.op("(") {
			return nil, &Error{Pos: p.toks[p.i-1].pos, End: p.toks[p.i-1].end, Msg: "column lists in WITH are not supported: name the columns with AS inside"}
		}
		if !p.keyword("AS") {
			return nil, p.errHere("expected AS ( after " + t.text)
		}
		if p.keyword("NOT") && !p.isKeyword("MATERIALIZED") {
			return nil, p.errHere("expected MATERIALIZED")
		}
		p.keyword("MATERIALIZED")
		if !p.op("(") {
			return nil, p.errHere("expected ( after AS")
		}
		c.open = p.i - 1
		depth := 1
		for depth > 0 {
			t := p.peek()
			switch {
			case t.kind == tEOF:
				return nil, &Error{Pos: p.toks[c.open].pos, End: p.toks[c.open].end, Msg: "unclosed ( in WITH"}
			case t.kind == tOp && t.text == "(":
				depth++
			case t.kind == tOp && t.text == ")":
				depth--
			case depth == 1 && t.kind == tIdent && strings.EqualFold(t.text, "FROM"):
				if parts, next := p.dottedAt(p.i + 1); isProbeSource(parts) && !c.probe {
					c.probe, c.probePos, c.probeE = true, p.toks[p.i+1].pos, p.toks[next-1].end
				}
			}
			p.i++
		}
		c.close = p.i - 1
		ctes = append(ctes, c)
		if !p.op(",") {
			break
		}
	}
	if p.peek().kind == tEOF {
		return nil, p.errHere("expected the main SELECT after WITH")
	}
	live := -1
	for i, c := range ctes {
		if !c.probe {
			continue
		}
		if live >= 0 {
			return nil, &Error{Pos: c.probePos, End: c.probeE, Msg: fmt.Sprintf("a second probe source: a query reads one, here in %s; join the other's results with holter query", ctes[live].name)}
		}
		live = i
	}
	if live < 0 {
		return nil, &Error{Pos: p.toks[0].pos, End: p.toks[ctes[0].close].end,
			Msg: "no part of WITH reads a probe source (e.g. FROM syscall.read; holter trace --list shows them); recorded tables alone are for holter query"}
	}
	c := ctes[live]
	// The live part, parsed on its own tokens (positions stay the query's).
	toks := append(append([]token(nil), p.toks[c.open+1:c.close]...), token{tEOF, "", p.toks[c.close].pos, p.toks[c.close].pos})
	sub := &parser{q: p.q, toks: toks}
	out, err := sub.selectQuery()
	if err != nil {
		return nil, err
	}
	out.Explain = explain
	w := &With{Name: c.name, Before: p.q[p.toks[ctes[0].nameTok].pos:p.toks[c.nameTok].pos], After: p.q[p.toks[c.close].end:]}
	// The rest reads tables: the WITH's other parts or recorded ones.
	names := map[string]bool{}
	for _, c := range ctes {
		names[strings.ToLower(c.name)] = true
	}
	// Each FROM's items: after FROM, JOIN or a comma at its depth, until
	// a clause that ends it or the parenthesis that closes it.
	depth := make([]int, len(p.toks))
	for i, d := 0, 0; i < len(p.toks); i++ {
		if t := p.toks[i]; t.kind == tOp && t.text == ")" {
			d--
		}
		depth[i] = d
		if t := p.toks[i]; t.kind == tOp && t.text == "(" {
			d++
		}
	}
	for i := 0; i < len(p.toks); i++ {
		if i > c.open && i < c.close || !p.isWord(i, "FROM") {
			continue
		}
		item := true
		for j := i + 1; j < len(p.toks) && depth[j] >= depth[i]; j++ {
			if depth[j] > depth[i] {
				continue
			}
			t := p.toks[j]
			if t.kind == tIdent && fromEnds[strings.ToLower(t.text)] {
				break
			}
			if t.kind == tOp && t.text == "," || p.isWord(j, "JOIN") {
				item = true
				continue
			}
			if !item {
				continue
			}
			item = false
			parts, next := p.dottedAt(j)
			if len(parts) == 0 {
				continue
			}
			start, end := t.pos, p.toks[next-1].end
			switch {
			case isProbeSource(parts):
				return nil, &Error{Pos: start, End: end, Msg: fmt.Sprintf("%s is a probe source, read only in the WITH part %s (one probe source per query)", p.q[start:end], c.name)}
			case len(parts) == 1 && !names[strings.ToLower(parts[0])] && !(p.toks[next].kind == tOp && p.toks[next].text == "("):
				w.Tables = append(w.Tables, TableRef{Name: parts[0], Pos: start, End: end})
			}
			j = next - 1
		}
	}
	out.With = w
	return out, nil
}

// recordedTableError is the error for a plain query whose FROM names a
// table, not a probe source.
func recordedTableError(ref SourceRef) error {
	if len(ref.Parts) != 1 {
		return nil
	}
	n := ref.Parts[0]
	return &Error{Pos: ref.pos, End: ref.end, Msg: fmt.Sprintf("%s is not a probe source (those have a kind, e.g. syscall.read; holter trace --list shows them); "+
		"if it is a recorded table, join it with live data: WITH live AS (SELECT … FROM syscall.read …) SELECT … FROM live JOIN %s …", n, n)}
}

// RecordedTables lists the tables and views of a recording.
func RecordedTables(ctx context.Context, q store.Querier) (map[string]bool, error) {
	res, err := q.Query(ctx, "SELECT table_name FROM duckdb_tables() UNION ALL SELECT view_name FROM duckdb_views() WHERE NOT internal")
	if err != nil {
		return nil, fmt.Errorf("list recorded tables: %w", err)
	}
	out := map[string]bool{}
	for _, r := range res.Rows {
		if s, ok := r[0].(string); ok {
			out[strings.ToLower(s)] = true
		}
	}
	return out, nil
}

// checkRecorded says whether the recording has the tables the plan joins.
func (p *Plan) checkRecorded(ctx context.Context, q store.Querier) error {
	w := p.Query.With
	if w == nil {
		return nil
	}
	if q == nil {
		var names []string
		for _, t := range w.Tables {
			names = append(names, t.Name)
		}
		return fmt.Errorf("the query joins recorded tables (%s), but no recording is open: run it through a recorder, or with --data DIR holding one", strings.Join(names, ", "))
	}
	have, err := RecordedTables(ctx, q)
	if err != nil {
		return err
	}
	for _, t := range w.Tables {
		if !have[strings.ToLower(t.Name)] {
			var list []string
			for n := range have {
				list = append(list, n)
			}
			sort.Strings(list)
			return &Error{Query: p.Query.Text, Pos: t.Pos, End: t.End, Msg: fmt.Sprintf("unknown table %s: not in WITH, and not a recorded table (recorded: %s); probe sources are read in the WITH part %s",
				t.Name, strings.Join(list, ", "), w.Name)}
		}
	}
	return nil
}

// JoinSQL is the statement that runs in the recording's store: the query's
// WITH with the live part's rows in place of its SELECT.
func (p *Plan) JoinSQL(live *store.Result) string { return p.joinText(valuesSQL(live)) }

func (p *Plan) joinText(live string) string {
	w := p.Query.With
	return "WITH " + w.Before + quoteIdent(w.Name) + " AS (" + live + ")" + w.After
}

// joinRecorded runs the rest of a WITH query over an interval's live rows.
func (p *Plan) joinRecorded(ctx context.Context, q store.Querier, live *store.Result) (*store.Result, error) {
	res, err := q.Query(ctx, p.JoinSQL(live))
	if err != nil {
		return nil, fmt.Errorf("the part joined with recorded tables: %w", err)
	}
	return res, nil
}

// valuesSQL writes a result as a SELECT of literals, typed as it was.
func valuesSQL(r *store.Result) string {
	var cols []string
	for i, c := range r.Columns {
		typ := "VARCHAR"
		if i < len(r.Types) && r.Types[i] != "" {
			typ = r.Types[i]
		}
		cols = append(cols, fmt.Sprintf("CAST(c%d AS %s) AS %s", i, typ, quoteIdent(c)))
	}
	if len(cols) == 0 {
		return "SELECT 1 WHERE false"
	}
	if len(r.Rows) == 0 {
		var nulls []string
		for i := range r.Columns {
			nulls = append(nulls, fmt.Sprintf("NULL AS c%d", i))
		}
		return "SELECT " + strings.Join(cols, ", ") + " FROM (SELECT " + strings.Join(nulls, ", ") + ") WHERE false"
	}
	var b strings.Builder
	b.WriteString("SELECT " + strings.Join(cols, ", ") + " FROM (VALUES ")
	for i, row := range r.Rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j, v := range row {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(literal(v))
		}
		b.WriteByte(')')
	}
	var names []string
	for i := range r.Columns {
		names = append(names, fmt.Sprintf("c%d", i))
	}
	b.WriteString(") AS v(" + strings.Join(names, ", ") + ")")
	return b.String()
}

// literal writes a value DuckDB returned as SQL.
func literal(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return "'" + strings.ReplaceAll(x, "'", "''") + "'"
	case bool:
		return strconv.FormatBool(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case int32, int16, int8, int, uint32, uint16, uint8:
		return fmt.Sprint(x)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "'" + strconv.FormatFloat(x, 'g', -1, 64) + "'::DOUBLE"
		}
		return strconv.FormatFloat(x, 'g', -1, 64) + "::DOUBLE"
	case float32:
		return literal(float64(x))
	case time.Time:
		return "'" + x.UTC().Format("2006-01-02 15:04:05.999999999") + "'::TIMESTAMP_NS"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = literal(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		// Buckets keep their order (lo, hi, count); others sort by name.
		order := map[string]int{"lo": 0, "hi": 1, "count": 2}
		sort.Slice(keys, func(i, j int) bool {
			oi, iok := order[keys[i]]
			oj, jok := order[keys[j]]
			if iok && jok {
				return oi < oj
			}
			return keys[i] < keys[j]
		})
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = literal(k) + ": " + literal(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return literal(fmt.Sprint(v))
}

// ErrJoinAcrossHosts refuses a join with recorded tables across hosts.
var ErrJoinAcrossHosts = errors.New("a query joined with recorded tables runs on one host's recording, not across hosts")
