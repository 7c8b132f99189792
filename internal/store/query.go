package store

import (
	"bytes"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/big"
	"time"

	"github.com/holter-dev/holter/internal/engine"
)

// ErrBusy is returned when MaxQueries queries run and none ended within
// QueueWait; the caller may try again shortly.
var ErrBusy = errors.New("too many queries running; try again shortly")

// ErrQueryTimeout is returned for a query stopped at its time limit.
var ErrQueryTimeout = errors.New("query time limit reached")

// ErrClosed is returned for a query on a closed store.
var ErrClosed = errors.New("store is closed")

// Result is the answer to a query.
type Result struct {
	Columns []string `json:"columns"`
	Types   []string `json:"types"`
	Rows    [][]any  `json:"rows"`
	// Truncated says rows were left out: the answer reached the query's
	// limit of rows or bytes.
	Truncated bool `json:"truncated,omitempty"`
}

// Query runs one read-only statement (see sandbox.go) and returns its
// answer, args filling its placeholders ($1 or ?).
func (s *Store) Query(ctx context.Context, query string, args ...any) (*Result, error) {
	return s.query(ctx, query, false, args)
}

func (s *Store) query(ctx context.Context, query string, internal bool, args []any) (*Result, error) {
	rows, err := s.queryRows(ctx, query, internal, args)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	res := &Result{Columns: rows.Columns, Types: rows.Types, Rows: [][]any{}}
	for rows.Next() {
		res.Rows = append(res.Rows, rows.Row())
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	res.Truncated = rows.Truncated()
	return res, nil
}

// Rows is the answer to a query, read a row at a time, within the store's
// limits: QueryTimeout from the start of the query to the last row read,
// MaxResultRows and MaxResultBytes (what Go holds of the values) of rows.
// Close it.
type Rows struct {
	Columns []string
	Types   []string

	ctx       context.Context
	cancel    context.CancelFunc
	timeout   time.Duration
	maxRows   int
	maxBytes  int64
	conn      driver.Conn
	connDone  func()
	rows      driver.Rows
	dest      []driver.Value
	row       []any
	n         int
	bytes     int64
	truncated bool
	err       error
	budgeted  bool
	release   func()
}

// QueryRows starts one read-only statement, args filling its placeholders.
// It runs on a connection of its own, closed with the Rows, once one of
// MaxQueries slots is free (ErrBusy after QueueWait).
func (s *Store) QueryRows(ctx context.Context, query string, args ...any) (*Rows, error) {
	return s.queryRows(ctx, query, false, args)
}

// queryRows is QueryRows; an internal query is not parsed by the sandbox.
func (s *Store) queryRows(ctx context.Context, query string, internal bool, args []any) (*Rows, error) {
	release, err := s.startQuery(ctx)
	if err != nil {
		return nil, err
	}
	r := &Rows{timeout: s.opts.QueryTimeout, maxRows: s.opts.MaxResultRows, maxBytes: s.opts.MaxResultBytes}
	r.ctx, r.cancel = context.WithTimeout(ctx, s.opts.QueryTimeout)
	stop := context.AfterFunc(s.closing, r.cancel)
	r.release = func() { stop(); release() }
	if err := r.start(s, query, internal, args); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// startQuery takes a query slot, waiting QueueWait at most; release gives
// it back.
func (s *Store) startQuery(ctx context.Context) (release func(), err error) {
	s.qmu.Lock()
	if s.closing.Err() != nil {
		s.qmu.Unlock()
		return nil, fmt.Errorf("query: %w", ErrClosed)
	}
	s.running.Add(1)
	s.qmu.Unlock()
	release = func() { <-s.queries; s.running.Done() }
	select {
	case s.queries <- struct{}{}:
		return release, nil
	default:
	}
	wait := time.NewTimer(QueueWait)
	defer wait.Stop()
	select {
	case s.queries <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-s.closing.Done():
		err = ErrClosed
	case <-wait.C:
		err = fmt.Errorf("%d queries running, the most the store runs at once (none ended within %v): %w",
			cap(s.queries), QueueWait, ErrBusy)
	}
	s.running.Done()
	return nil, fmt.Errorf("query: %w", err)
}

func (r *Rows) start(s *Store, query string, internal bool, args []any) error {
	dc, done, err := s.db.connect(r.ctx)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	r.conn, r.connDone = dc, done
	conn, ok := dc.(queryConn)
	if !ok {
		return fmt.Errorf("query: unexpected driver connection %T", dc)
	}
	var p passed
	if internal {
		p = passed{run: budgeted(query, s.opts.MaxResultRows), want: engine.StatementSelect, budgeted: true}
	} else if p, err = s.sandbox(r.ctx, conn, query); err != nil {
		return r.failed(err)
	}
	// Prepare, unlike PrepareContext, runs nothing of a text of several
	// statements: it refuses it. The text passed holds one, so the
	// QueryContext below, which runs all but the last, runs none.
	stmt, err := conn.Prepare(p.run)
	if err != nil {
		return r.failed(fmt.Errorf("query: %w", err))
	}
	t, err := statementType(stmt)
	stmt.Close()
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	if t != p.want {
		return fmt.Errorf("query: the statement prepared is not a query: %w", ErrNotReadOnly)
	}
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	ctx := s.atQueryPriority(r.ctx)
	if p.budgeted {
		r.budgeted = true
		ctx = engine.WithResultBudget(ctx, r.maxBytes)
	}
	// The connection's QueryContext, not the statement's: it gives the
	// budget to engine.BudgetFunction.
	rows, err := conn.QueryContext(ctx, p.run, named)
	if err != nil {
		return r.failed(fmt.Errorf("query: %w", err))
	}
	r.rows = rows
	r.Columns = rows.Columns()
	typed, _ := rows.(driver.RowsColumnTypeDatabaseTypeName)
	r.Types = make([]string, len(r.Columns))
	for i := range r.Columns {
		if typed != nil {
			r.Types[i] = typed.ColumnTypeDatabaseTypeName(i)
		}
	}
	r.dest = make([]driver.Value, len(r.Columns))
	return nil
}

// queryConn is what a query needs of its connection: an engine's.
type queryConn interface {
	driver.Conn
	driver.QueryerContext
}

// statementType is the type of a statement an engine connection prepared.
func statementType(st driver.Stmt) (engine.StmtType, error) {
	typed, ok := st.(interface {
		StatementType() (engine.StmtType, error)
	})
	if !ok {
		return 0, fmt.Errorf("unexpected statement %T", st)
	}
	return typed.StatementType()
}

// queryNice is the nice value queries run at: DuckDB runs a query on the
// thread that calls it (threads = 1), and there it competes for the CPU
// with the recorder's commits at a tenth of their weight rather than as
// an equal.
const queryNice = 10

// atQueryPriority is ctx for a query run at queryNice in the engine
// process. A store opened read-only (a command reading a recording no
// recorder holds) commits nothing its queries could hold up: they run at
// the caller's priority, as the user asked for them.
func (s *Store) atQueryPriority(ctx context.Context) context.Context {
	if s.readOnly {
		return ctx
	}
	return engine.WithNice(ctx, queryNice)
}

// failed is err, or the time limit's error when the query ran out of time.
func (r *Rows) failed(err error) error {
	if errors.Is(r.ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("query: stopped after %v, the time one query may take (--query-timeout): %w", r.timeout, ErrQueryTimeout)
	}
	return err
}

// Next reads the next row; false at the end, at a limit (Truncated) or on
// an error (Err).
func (r *Rows) Next() bool {
	if r.rows == nil || r.err != nil || r.truncated {
		return false
	}
	if err := r.ctx.Err(); err != nil {
		r.err = r.failed(fmt.Errorf("query: %w", err))
		return false
	}
	err := r.rows.Next(r.dest)
	if err == io.EOF {
		// The rows past the byte budget were left out before the first
		// was read: DuckDB makes the whole answer first.
		over, _ := r.rows.(interface{ Over() bool })
		r.truncated = r.budgeted && over != nil && over.Over()
		return false
	}
	if err != nil {
		r.err = r.failed(fmt.Errorf("query: %w", err))
		return false
	}
	if r.n == r.maxRows {
		r.truncated = true
		return false
	}
	row := make([]any, len(r.dest))
	size := int64(0)
	for i, v := range r.dest {
		if b, ok := v.([]byte); ok { // the driver may reuse it
			v = bytes.Clone(b)
		}
		row[i] = v
		size += valueBytes(v)
	}
	if r.bytes+size > r.maxBytes {
		r.truncated = true
		return false
	}
	r.n++
	r.bytes += size
	r.row = row
	return true
}

// Row is the row Next read; it stays valid after the next call.
func (r *Rows) Row() []any { return r.row }

// Truncated says the answer was cut at the row or byte limit.
func (r *Rows) Truncated() bool { return r.truncated }

// Err is what stopped the reading, if not its end or a limit.
func (r *Rows) Err() error { return r.err }

// Close ends the query and closes its connection; it may be called again.
func (r *Rows) Close() error {
	if r.release == nil {
		return nil
	}
	if r.rows != nil {
		r.rows.Close()
	}
	if r.conn != nil {
		r.conn.Close()
		r.connDone()
	}
	r.cancel()
	r.release()
	r.release = nil
	return nil
}

// valueBytes is about what v holds in Go: its header and what it points to.
func valueBytes(v any) int64 {
	const header = 16
	switch x := v.(type) {
	case string:
		return header + int64(len(x))
	case []byte:
		return header + int64(len(x))
	case *big.Int:
		return header + int64(len(x.Bits())*8)
	case []any:
		n := int64(header)
		for _, e := range x {
			n += valueBytes(e)
		}
		return n
	case map[string]any:
		n := int64(header)
		for k, e := range x {
			n += header + int64(len(k)) + valueBytes(e)
		}
		return n
	case engine.Map:
		n := int64(header)
		for k, e := range x {
			n += valueBytes(k) + valueBytes(e)
		}
		return n
	}
	return header
}

// Querier answers read-only SQL without arguments: a store through Plain,
// or a running recorder's API, which takes SQL text only.
type Querier interface {
	Query(ctx context.Context, sql string) (*Result, error)
}

// ArgQuerier answers SQL with placeholder arguments, as a Store does.
type ArgQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (*Result, error)
}

// Plain is q as a Querier.
func Plain(q ArgQuerier) Querier { return plain{q} }

type plain struct{ q ArgQuerier }

// Internal is st as a Querier for the queries the recorder composes of
// its own values, every few seconds (its online analysis, its request
// accounting): run as any query, on a query connection within the
// store's limits, but not parsed by the sandbox first, whose check costs
// as much as a small query and, for texts that differ by their numbers,
// is never remembered. Their statement must still prepare to a SELECT.
// Never give it text from outside the process.
func Internal(st *Store) Querier { return internal{st} }

type internal struct{ st *Store }

func (i internal) Query(ctx context.Context, sql string) (*Result, error) {
	return i.st.query(ctx, sql, true, nil)
}

func (p plain) Query(ctx context.Context, sql string) (*Result, error) { return p.q.Query(ctx, sql) }
