package engine

import (
	"bufio"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"
	"golang.org/x/sys/unix"
)

// ErrorType is the kind of a DuckDB error, as DuckDB numbers them.
type ErrorType int

// The error types callers tell apart; the others keep DuckDB's numbers.
const (
	ErrorTypeIO        = ErrorType(duckdb.ErrorTypeIO)
	ErrorTypeFatal     = ErrorType(duckdb.ErrorTypeFatal)
	ErrorTypeInterrupt = ErrorType(duckdb.ErrorTypeInterrupt)

	// Errors that are not DuckDB's.
	errOther    ErrorType = -1
	errCanceled ErrorType = -2
	errDeadline ErrorType = -3
)

// Error is an error DuckDB reported in the engine process.
type Error struct {
	Type ErrorType
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// StmtType is a prepared statement's type, as DuckDB numbers them.
type StmtType int

// The statement types callers check for.
const (
	StatementSelect  = StmtType(duckdb.STATEMENT_TYPE_SELECT)
	StatementExplain = StmtType(duckdb.STATEMENT_TYPE_EXPLAIN)
	StatementCopy    = StmtType(duckdb.STATEMENT_TYPE_COPY)
)

// decodeError reads an error as encodeError wrote it; nil when its type
// is 0 and its message empty (no error).
func decodeError(d *decoder) error {
	t := ErrorType(d.varint())
	msg := d.string()
	if d.err != nil {
		return d.err
	}
	switch t {
	case errCanceled:
		return context.Canceled
	case errDeadline:
		return context.DeadlineExceeded
	case errOther:
		return errors.New(msg)
	}
	if t == 0 && msg == "" {
		return nil
	}
	return &Error{Type: t, Msg: msg}
}

// cancelWait is how long a cancelled request may take to end before its
// connection is given up.
const cancelWait = 10 * time.Second

// conn is a connection to an engine process: one DuckDB connection there,
// reached over a socket of its own. Like any driver.Conn it is used by one
// goroutine at a time; a cancellation may come from another.
type conn struct {
	c   *Connector
	p   *proc
	f   *os.File
	r   *bufio.Reader
	enc encoder

	wmu sync.Mutex // the socket's writer: requests and cancellations
	w   *bufio.Writer

	seq uint64
	// inflight is the request whose answer is being read, 0 none: a
	// cancellation's timer reads it from another goroutine.
	inflight atomic.Uint64
	broken   error
	// rows is the result being read, which must end before the next
	// request.
	rows *rows
	once sync.Once
}

func newConn(c *Connector, p *proc, f *os.File) *conn {
	return &conn{c: c, p: p, f: f, r: bufio.NewReaderSize(f, 64<<10), w: bufio.NewWriterSize(f, 64<<10)}
}

// start begins a request of kind: its body follows in cn.enc.
func (cn *conn) start(kind byte) uint64 {
	cn.seq++
	cn.enc.reset(kind)
	cn.enc.uvarint(cn.seq)
	return cn.seq
}

// send writes the request built in cn.enc.
func (cn *conn) send() error {
	if cn.broken != nil {
		return cn.broken
	}
	cn.inflight.Store(cn.seq)
	cn.wmu.Lock()
	_, err := cn.w.Write(cn.enc.frame())
	if err == nil {
		err = cn.w.Flush()
	}
	cn.wmu.Unlock()
	if err != nil {
		return cn.fail(err)
	}
	return nil
}

// answered says the current request's answer has been read whole.
func (cn *conn) answered() { cn.inflight.Store(0) }

// fail breaks the connection: its process ended or the socket failed.
func (cn *conn) fail(err error) error {
	if cn.broken == nil {
		cn.broken = cn.c.gone(cn.p, err)
	}
	return cn.broken
}

// watch sends a cancellation of seq when ctx ends before stop is called.
func (cn *conn) watch(ctx context.Context, seq uint64) (stop func() bool) {
	if ctx.Done() == nil {
		return func() bool { return true }
	}
	return context.AfterFunc(ctx, func() { cn.cancel(seq) })
}

func (cn *conn) cancel(seq uint64) {
	var e encoder
	e.reset(kCancel)
	e.uvarint(seq)
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	if _, err := cn.w.Write(e.frame()); err == nil {
		cn.w.Flush()
	}
	// Should the request not end in time, the socket goes: the engine
	// then stops it and drops its connection.
	time.AfterFunc(cancelWait, func() {
		if cn.inflight.Load() == seq {
			cn.f.SetReadDeadline(time.Now())
		}
	})
}

// read reads the next frame of the current request's answer.
func (cn *conn) read() (byte, *decoder, error) {
	if cn.broken != nil {
		return 0, nil, cn.broken
	}
	kind, body, err := readFrame(cn.r)
	if err != nil {
		return 0, nil, cn.fail(err)
	}
	return kind, &decoder{b: body}, nil
}

// answer reads a request's one-frame answer: want, or kErr.
func (cn *conn) answer(ctx context.Context, seq uint64, want byte) (*decoder, error) {
	stop := cn.watch(ctx, seq)
	defer stop()
	kind, d, err := cn.read()
	if err != nil {
		return nil, err
	}
	if kind != kCols {
		cn.answered()
	}
	switch kind {
	case want:
		return d, nil
	case kErr:
		return nil, cn.errorIn(ctx, d)
	}
	return nil, cn.fail(fmt.Errorf("engine: answer %d to a request that wants %d", kind, want))
}

// errorIn is the error an answer carries; a cancellation is ctx's own
// error, as the caller's context ended it.
func (cn *conn) errorIn(ctx context.Context, d *decoder) error {
	err := decodeError(d)
	cn.p.noteTruncations(d.uvarint())
	if d.err != nil {
		return cn.fail(d.err)
	}
	if (errors.Is(err, context.Canceled) || interrupted(err)) && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func interrupted(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Type == ErrorTypeInterrupt
}

// idle ends the result still being read, before another request.
func (cn *conn) idle() error {
	if cn.rows != nil {
		return cn.rows.Close()
	}
	return cn.broken
}

func encodeArgs(e *encoder, args []driver.NamedValue) error {
	e.uvarint(uint64(len(args)))
	for i, a := range args {
		if a.Name != "" {
			return fmt.Errorf("engine: named parameter %s: only positional ones are passed", a.Name)
		}
		if a.Ordinal != i+1 {
			return fmt.Errorf("engine: parameter %d given as the %dth", a.Ordinal, i+1)
		}
		if err := e.value(a.Value); err != nil {
			return err
		}
	}
	return nil
}

// ExecContext runs query (one or several statements) for its effect.
func (cn *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := cn.idle(); err != nil {
		return nil, err
	}
	seq := cn.start(kExec)
	cn.enc.string(query)
	if err := encodeArgs(&cn.enc, args); err != nil {
		return nil, err
	}
	return cn.exec(ctx, seq)
}

func (cn *conn) exec(ctx context.Context, seq uint64) (driver.Result, error) {
	if err := cn.send(); err != nil {
		return nil, err
	}
	d, err := cn.answer(ctx, seq, kOK)
	if err != nil {
		return nil, err
	}
	return result(d.varint()), d.err
}

type result int64

func (r result) LastInsertId() (int64, error) {
	return 0, errors.New("engine: no last insert id (use RETURNING)")
}
func (r result) RowsAffected() (int64, error) { return int64(r), nil }

// QueryContext runs query and returns its rows. A result budget or nice
// value in ctx (WithResultBudget, WithNice) applies to it.
func (cn *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := cn.idle(); err != nil {
		return nil, err
	}
	seq := cn.start(kQuery)
	cn.enc.string(query)
	queryOptions(ctx, &cn.enc)
	if err := encodeArgs(&cn.enc, args); err != nil {
		return nil, err
	}
	return cn.query(ctx, seq)
}

type budgetKey struct{}
type niceKey struct{}

// WithResultBudget is ctx for a query whose rows DuckDB stops making once
// their size passes bytes: the store's budgeted queries call its
// holter_result_budget function (functions.go), which counts it down.
// The Rows then report Over.
func WithResultBudget(ctx context.Context, bytes int64) context.Context {
	return context.WithValue(ctx, budgetKey{}, bytes)
}

// WithNice is ctx for a query the engine runs at nice value n: it then
// competes for the CPU with the writes at a lower weight.
func WithNice(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, niceKey{}, n)
}

func queryOptions(ctx context.Context, e *encoder) {
	budget, ok := ctx.Value(budgetKey{}).(int64)
	if !ok {
		budget = -1
	}
	nice, _ := ctx.Value(niceKey{}).(int)
	e.varint(budget)
	e.varint(int64(nice))
}

func (cn *conn) query(ctx context.Context, seq uint64) (driver.Rows, error) {
	if err := cn.send(); err != nil {
		return nil, err
	}
	d, err := cn.answer(ctx, seq, kCols)
	if err != nil {
		return nil, err
	}
	names := d.strings()
	types := make([]string, len(names))
	for i := range types {
		types[i] = d.string()
	}
	if d.err != nil {
		return nil, cn.fail(d.err)
	}
	r := &rows{cn: cn, ctx: ctx, seq: seq, names: names, types: types}
	r.stop = cn.watch(ctx, seq)
	cn.rows = r
	return r, nil
}

// Prepare prepares one statement: a text of several is refused, none of
// it run.
func (cn *conn) Prepare(query string) (driver.Stmt, error) {
	return cn.PrepareContext(context.Background(), query)
}

func (cn *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := cn.idle(); err != nil {
		return nil, err
	}
	seq := cn.start(kPrepare)
	cn.enc.string(query)
	if err := cn.send(); err != nil {
		return nil, err
	}
	d, err := cn.answer(ctx, seq, kPrepared)
	if err != nil {
		return nil, err
	}
	st := &Stmt{cn: cn, id: d.uvarint(), inputs: int(d.varint()), typ: StmtType(d.varint())}
	if d.err != nil {
		return nil, cn.fail(d.err)
	}
	return st, nil
}

func (cn *conn) Begin() (driver.Tx, error) {
	return cn.BeginTx(context.Background(), driver.TxOptions{})
}

func (cn *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if opts.ReadOnly || opts.Isolation != driver.IsolationLevel(0) {
		return nil, errors.New("engine: DuckDB has one kind of transaction")
	}
	if _, err := cn.ExecContext(ctx, "BEGIN TRANSACTION", nil); err != nil {
		return nil, err
	}
	return tx{cn}, nil
}

type tx struct{ cn *conn }

func (t tx) Commit() error {
	_, err := t.cn.ExecContext(context.Background(), "COMMIT", nil)
	return err
}

func (t tx) Rollback() error {
	_, err := t.cn.ExecContext(context.Background(), "ROLLBACK", nil)
	return err
}

func (cn *conn) Ping(ctx context.Context) error {
	if err := cn.idle(); err != nil {
		return err
	}
	seq := cn.start(kPing)
	_, err := cn.exec(ctx, seq)
	return err
}

// IsValid says the connection may be used again: database/sql drops one
// whose process ended.
func (cn *conn) IsValid() bool { return cn.broken == nil && !cn.p.ended() }

func (cn *conn) ResetSession(context.Context) error {
	if !cn.IsValid() {
		return driver.ErrBadConn
	}
	return nil
}

// CheckNamedValue takes every value the wire carries as it is.
func (cn *conn) CheckNamedValue(*driver.NamedValue) error { return nil }

// Close closes the connection, once the engine has closed its DuckDB
// connection (the end of the socket says so), so that what the
// connection held is released when Close returns.
func (cn *conn) Close() error {
	cn.once.Do(func() {
		if cn.rows != nil {
			cn.rows.Close()
		}
		if rc, err := cn.f.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_WR) })
			cn.f.SetReadDeadline(time.Now().Add(cancelWait))
			io.Copy(io.Discard, cn.r)
		}
		cn.f.Close()
		cn.c.release(cn.p)
	})
	return nil
}

// Stmt is a statement prepared in the engine process.
type Stmt struct {
	cn     *conn
	id     uint64
	inputs int
	typ    StmtType
	closed bool
}

// StatementType is the type DuckDB gave the prepared statement.
func (s *Stmt) StatementType() (StmtType, error) { return s.typ, nil }

func (s *Stmt) NumInput() int { return s.inputs }

func (s *Stmt) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.cn.idle(); err != nil {
		return err
	}
	seq := s.cn.start(kStmtClose)
	s.cn.enc.uvarint(s.id)
	_, err := s.cn.exec(context.Background(), seq)
	return err
}

func (s *Stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), named(args))
}

func (s *Stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), named(args))
}

func named(args []driver.Value) []driver.NamedValue {
	out := make([]driver.NamedValue, len(args))
	for i, a := range args {
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return out
}

func (s *Stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if err := s.cn.idle(); err != nil {
		return nil, err
	}
	seq := s.cn.start(kStmtExec)
	s.cn.enc.uvarint(s.id)
	if err := encodeArgs(&s.cn.enc, args); err != nil {
		return nil, err
	}
	return s.cn.exec(ctx, seq)
}

func (s *Stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if err := s.cn.idle(); err != nil {
		return nil, err
	}
	seq := s.cn.start(kStmtQuery)
	s.cn.enc.uvarint(s.id)
	queryOptions(ctx, &s.cn.enc)
	if err := encodeArgs(&s.cn.enc, args); err != nil {
		return nil, err
	}
	return s.cn.query(ctx, seq)
}

// rows is a query's answer, read a batch of rows at a time.
type rows struct {
	cn    *conn
	ctx   context.Context
	seq   uint64
	names []string
	types []string
	stop  func() bool

	batch *decoder
	left  uint64
	done  bool
	over  bool
	err   error
}

func (r *rows) Columns() []string { return r.names }

// ColumnTypeDatabaseTypeName is the column's DuckDB type.
func (r *rows) ColumnTypeDatabaseTypeName(i int) string { return r.types[i] }

// Over says the rows were cut at the query's result budget
// (WithResultBudget); known once Next has returned io.EOF.
func (r *rows) Over() bool { return r.over }

func (r *rows) Next(dest []driver.Value) error {
	for r.left == 0 {
		if r.done {
			if r.err != nil {
				return r.err
			}
			return io.EOF
		}
		r.readFrame()
	}
	for i := range dest {
		dest[i] = r.batch.value()
	}
	r.left--
	if r.batch.err != nil {
		r.finish(r.cn.fail(r.batch.err))
		return r.err
	}
	return nil
}

// readFrame reads the next frame of the answer.
func (r *rows) readFrame() {
	kind, d, err := r.cn.read()
	switch {
	case err != nil:
		r.finish(err)
	case kind == kRows:
		r.batch, r.left = d, d.uvarint()
	case kind == kEnd:
		r.over = d.bool()
		r.finish(nil)
	case kind == kErr:
		r.finish(r.cn.errorIn(r.ctx, d))
	default:
		r.finish(r.cn.fail(fmt.Errorf("engine: frame %d in a query's rows", kind)))
	}
}

func (r *rows) finish(err error) {
	r.done, r.err, r.left = true, err, 0
	r.cn.answered()
	r.stop()
	if r.cn.rows == r {
		r.cn.rows = nil
	}
}

// Close ends the answer: a query still sending rows is cancelled and its
// rest read past.
func (r *rows) Close() error {
	if r.done {
		return nil
	}
	r.cn.cancel(r.seq)
	for !r.done {
		r.left = 0
		r.readFrame()
	}
	return nil
}

// Appender appends rows to a table in the connection's transaction, as
// DuckDB's appender does, sending them in batches and the end once.
type Appender struct {
	cn   *conn
	seq  uint64
	rows encoder
	n    int
	cols int
	err  error
}

// NewAppender starts an append to schema.table ("" the default schema) on
// c, a connection of a Connector (what sql.Conn.Raw gives).
func NewAppender(c driver.Conn, schema, table string) (*Appender, error) {
	cn, ok := c.(*conn)
	if !ok {
		return nil, fmt.Errorf("engine: an appender on a %T", c)
	}
	if err := cn.idle(); err != nil {
		return nil, err
	}
	a := &Appender{cn: cn, cols: -1}
	a.seq = cn.start(kAppendBegin)
	cn.enc.string(schema)
	cn.enc.string(table)
	if err := cn.send(); err != nil {
		return nil, err
	}
	return a, nil
}

// AppendRow adds a row; every row has as many values as the first.
func (a *Appender) AppendRow(vals ...driver.Value) error {
	if a.err != nil {
		return a.err
	}
	if a.cols < 0 {
		a.cols = len(vals)
	} else if len(vals) != a.cols {
		return fmt.Errorf("engine: a row of %d values after rows of %d", len(vals), a.cols)
	}
	mark := len(a.rows.b)
	for _, v := range vals {
		if err := a.rows.value(v); err != nil {
			a.rows.b = a.rows.b[:mark]
			a.err = err
			return err
		}
	}
	a.n++
	if len(a.rows.b) >= rowBatchBytes {
		return a.flush()
	}
	return nil
}

func (a *Appender) flush() error {
	if a.n == 0 {
		return nil
	}
	cn := a.cn
	cn.enc.reset(kAppendRows)
	cn.enc.uvarint(a.seq)
	cn.enc.uvarint(uint64(a.n))
	cn.enc.uvarint(uint64(max(a.cols, 0)))
	cn.enc.b = append(cn.enc.b, a.rows.b...)
	a.rows.b, a.n = a.rows.b[:0], 0
	if err := cn.send(); err != nil {
		a.err = err
	}
	return a.err
}

// Close sends the rows left and ends the append: its error is the first
// the engine met appending, if any.
func (a *Appender) Close() error {
	ferr := a.flush()
	cn := a.cn
	if cn.broken != nil {
		return cn.broken
	}
	cn.enc.reset(kAppendEnd)
	cn.enc.uvarint(a.seq)
	if err := cn.send(); err != nil {
		return err
	}
	_, err := cn.answer(context.Background(), a.seq, kOK)
	return errors.Join(ferr, err)
}
