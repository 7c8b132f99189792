package tracequery

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/engine"
	"github.com/holter-dev/holter/internal/store"
)

// duckEngine is an in-memory DuckDB, in an engine process of its own
// (internal/engine), for the user-space parts the evaluator cannot
// compute; it starts only when one is run. When DuckDB runs a query's
// aggregation (the evaluator lacks a function it uses), it computes hist,
// lhist and the quantiles by the very buckets the probe uses (the
// engine's "trace" functions, internal/hist); sample() keeps the values
// at counts 1, 2, 4, … 128; count_distinct() is exact there.
type duckEngine struct {
	db *sql.DB
}

// bucketType is the DuckDB type of hist's and lhist's value.
const bucketType = "STRUCT(lo BIGINT, hi BIGINT, count BIGINT)[]"

func (d *duckEngine) close() {
	if d.db != nil {
		d.db.Close()
		d.db = nil
	}
}

// run loads rows into table (cols of types) and runs query over it.
func (d *duckEngine) run(ctx context.Context, table string, cols, types []string, rows [][]any, query string, columns []string) (*store.Result, error) {
	if d.db == nil {
		c, err := engine.NewConnector(engine.Options{Config: map[string]string{"threads": "1"},
			Init: []string{"SET enable_external_access = false"}, Functions: []string{"trace"}, CheckpointAbove: -1})
		if err != nil {
			return nil, fmt.Errorf("user-space engine: %w", err)
		}
		d.db = sql.OpenDB(c)
		d.db.SetMaxOpenConns(1)
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var defs []string
	for i := range cols {
		defs = append(defs, quoteIdent(cols[i])+" "+types[i])
	}
	if len(defs) == 0 {
		defs = []string{"_ BIGINT"}
	}
	if _, err := conn.ExecContext(ctx, "CREATE OR REPLACE TABLE "+table+" ("+strings.Join(defs, ", ")+")"); err != nil {
		return nil, fmt.Errorf("user-space table: %w", err)
	}
	if len(rows) > 0 {
		err = conn.Raw(func(dc any) error {
			a, err := engine.NewAppender(dc.(driver.Conn), "", table)
			if err != nil {
				return err
			}
			for _, r := range rows {
				vals := make([]driver.Value, len(r))
				for i, v := range r {
					vals[i] = v
				}
				if err := a.AppendRow(vals...); err != nil {
					a.Close()
					return err
				}
			}
			return a.Close()
		})
		if err != nil {
			return nil, fmt.Errorf("user-space table: %w", err)
		}
	}
	rs, err := conn.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	res := &store.Result{Columns: columns}
	cts, _ := rs.ColumnTypes()
	for _, ct := range cts {
		res.Types = append(res.Types, ct.DatabaseTypeName())
	}
	for rs.Next() {
		vals := make([]any, len(cts))
		ptrs := make([]any, len(cts))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			return nil, err
		}
		for i, v := range vals {
			if u, ok := v.(uint64); ok && u <= math.MaxInt64 {
				vals[i] = int64(u)
			}
		}
		res.Rows = append(res.Rows, vals)
	}
	return res, rs.Err()
}

// inputTable is the table the user-space part reads: its name, columns
// and their DuckDB types.
func (p *Plan) inputTable() (name string, cols, types []string) {
	u := p.user
	name = "partials"
	if p.Mode == ModeStream && !u.aggregate {
		name = "events"
	}
	for i, c := range u.inCols {
		var a *Agg
		if name == "partials" && i >= len(u.inCols)-len(p.Aggs) {
			a = p.Aggs[i-(len(u.inCols)-len(p.Aggs))]
		}
		cols, types = append(cols, c), append(types, duckTypeOf(u.inTypes[i], a))
	}
	return name, cols, types
}

// checkUserSQL has DuckDB check a user-space part it is to run, before
// anything attaches: an unknown function, or arguments it refuses, are
// the query's mistakes, shown at the call.
func (p *Plan) checkUserSQL() error {
	if p.user == nil || p.user.duck == "" {
		return nil
	}
	var d duckEngine
	defer d.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	table, cols, types := p.inputTable()
	if _, err := d.run(ctx, table, cols, types, nil, p.UserSQL, p.Columns); err != nil {
		return p.duckError(err)
	}
	return nil
}

var duckMessage = regexp.MustCompile(`^[A-Za-z ]+ Error: `)

// duckError tells a DuckDB error about the user-space part in terms of
// the query: at the function it names, without the SQL holter wrote.
func (p *Plan) duckError(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "\n\nLINE "); i >= 0 {
		msg = msg[:i]
	}
	if i := strings.Index(msg, "\nLINE "); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimSpace(duckMessage.ReplaceAllString(msg, ""))
	var at Node
	p.walkQuery(func(n Node) bool {
		c, ok := n.(*Call)
		if ok && at == nil && (strings.Contains(msg, " "+c.Name+" ") || strings.Contains(msg, "'"+c.Name+"(") || strings.Contains(msg, `"`+c.Name+`"`) ||
			strings.Contains(msg, " "+c.Name+"(") || strings.HasSuffix(msg, " "+c.Name)) {
			at = c
		}
		return at == nil
	})
	msg = strings.ReplaceAll(msg, "\n", " ")
	if at != nil {
		return errAt(at, "%s: %s", p.text(at), msg)
	}
	return fmt.Errorf("the user-space part (DuckDB): %s", msg)
}

// walkQuery walks every expression of the query.
func (p *Plan) walkQuery(f func(Node) bool) {
	for _, n := range p.Query.exprs() {
		walk(n, f)
	}
}
