package engine

import (
	"bufio"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	duckdb "github.com/duckdb/duckdb-go/v2"
	"golang.org/x/sys/unix"
)

// childEnv marks the engine process: a binary started with it set serves
// its control socket (fd 3) from this package's init and exits, before any
// package that imports this one is initialised.
const childEnv = "HOLTER_ENGINE_PROCESS"

func init() {
	if os.Getenv(childEnv) == "" {
		return
	}
	// Named as in ps and top, not "exe" from /proc/self/exe: init runs
	// on the main thread, whose name is the process's, and the threads
	// made after it take it.
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte("holter-engine\x00")[0])), 0, 0, 0)
	closeInherited()
	unix.SetNonblock(3, true)
	os.Exit(serve(os.NewFile(3, "engine control")))
}

// closeInherited closes the descriptors past the control socket that the
// program starting the engine left open across exec (one made without
// O_CLOEXEC, such as the write end of a pipe that its reader waits to see
// closed): the engine must not hold them. Those this process opened
// since, the runtime's own, are close-on-exec.
func closeInherited() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 3 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// serve is the engine process: it opens the database the first control
// message describes, then serves each connection socket the client sends,
// until told to exit or the client goes away.
func serve(ctl *os.File) int {
	msg, _, err := recvControl(ctl)
	if err != nil || len(msg) == 0 || msg[0] != cOpen {
		fmt.Fprintf(os.Stderr, "engine: no open request: %v\n", err)
		return 2
	}
	d := decoder{b: msg[1:]}
	o := decodeOptions(&d)
	if d.err != nil {
		fmt.Fprintf(os.Stderr, "engine: open request: %v\n", d.err)
		return 2
	}
	e := &engineProc{opts: o}
	var reply encoder
	reply.b = []byte{cOpened}
	if err := e.open(); err != nil {
		encodeError(&reply, err)
		sendControl(ctl, reply.b, -1)
		return 1
	}
	reply.varint(0)
	reply.uvarint(localTruncationsSkipped())
	if err := sendControl(ctl, reply.b, -1); err != nil {
		return 1
	}
	for {
		msg, fd, err := recvControl(ctl)
		if err != nil || len(msg) == 0 {
			// The client is gone: what was committed is in the log
			// already, so leave as a crash would, without waiting on a
			// query that may be running.
			return 0
		}
		switch msg[0] {
		case cConn:
			if fd < 0 {
				continue
			}
			unix.SetNonblock(fd, true)
			e.sessions.Add(1)
			go func() {
				defer e.sessions.Done()
				e.serveConn(os.NewFile(uintptr(fd), "engine connection"))
			}()
		case cExit:
			d := decoder{b: msg[1:]}
			above := d.varint()
			var done encoder
			done.b = []byte{cExited}
			if err := e.exit(above); err != nil {
				done.string(err.Error())
			} else {
				done.string("")
			}
			sendControl(ctl, done.b, -1)
			return 0
		}
	}
}

// engineProc is the engine process's open database.
type engineProc struct {
	opts      Options
	connector *duckdb.Connector
	db        *sql.DB
	sessions  sync.WaitGroup
}

func (e *engineProc) open() error {
	dsn := e.opts.Path
	v := url.Values{}
	for k, val := range e.opts.Config {
		v.Set(k, val)
	}
	// DuckDB runs each query on the thread that asks and starts no
	// workers of its own: the process serves from its package's init,
	// and a call into Go (the registered functions) from a thread Go did
	// not start waits for the process's initialisation to finish, which
	// it never does.
	v.Set("threads", "1")
	v.Set("external_threads", "1")
	dsn += "?" + v.Encode()
	c, err := duckdb.NewConnector(dsn, nil)
	// The caller holds the file (the store locks its directory): a lock
	// another process holds is an engine whose program ended and which is
	// ending too, or another program's for a while.
	for wait := time.Now().Add(lockWait); err != nil && strings.Contains(err.Error(), "Could not set lock on file") &&
		time.Now().Before(wait); {
		time.Sleep(50 * time.Millisecond)
		c, err = duckdb.NewConnector(dsn, nil)
	}
	if err != nil {
		return err
	}
	e.connector = c
	e.db = sql.OpenDB(c)
	// None of its own stays open: the engine's connections are its
	// clients'.
	e.db.SetMaxOpenConns(1)
	e.db.SetMaxIdleConns(0)
	conn, err := e.db.Conn(context.Background())
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, set := range e.opts.Functions {
		if err := registerFunctions(conn, set); err != nil {
			return err
		}
	}
	for _, stmt := range e.opts.Init {
		if _, err := conn.ExecContext(context.Background(), stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// lockWait is how long opening waits for another process's lock on the
// database file to go.
const lockWait = 10 * time.Second

// exit ends the process's work: once the connections are closed, the log
// is checkpointed if it grew past above bytes (never if negative), and the
// database closed.
func (e *engineProc) exit(above int64) error {
	done := make(chan struct{})
	go func() { e.sessions.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	var err error
	if above >= 0 && e.opts.Path != "" {
		if st, serr := os.Stat(e.opts.Path + ".wal"); serr == nil && st.Size() > above {
			_, err = e.db.Exec("CHECKPOINT")
		}
	}
	return errors.Join(err, e.db.Close())
}

// session is one client connection: a DuckDB connection, its prepared
// statements and the append under way.
type session struct {
	e     *engineProc
	conn  driver.Conn
	w     *bufio.Writer
	enc   encoder
	stmts map[uint64]driver.Stmt
	next  uint64

	appender  *duckdb.Appender
	appendErr error

	mu            sync.Mutex
	running       uint64 // seq of the request running, 0 none
	cancel        context.CancelFunc
	cancelPending uint64 // seq of a request cancelled before it started
}

type request struct {
	kind byte
	body []byte
}

func (e *engineProc) serveConn(f *os.File) {
	defer f.Close()
	conn, err := e.connector.Connect(context.Background())
	s := &session{e: e, conn: conn, w: bufio.NewWriterSize(f, 64<<10), stmts: map[uint64]driver.Stmt{}}
	reqs := make(chan request, 16)
	go s.read(bufio.NewReaderSize(f, 64<<10), reqs)
	if err != nil {
		// Every request is answered with the failure to connect.
		for r := range reqs {
			if answered(r.kind) {
				s.fail(err)
			}
		}
		return
	}
	defer conn.Close()
	defer func() {
		for _, st := range s.stmts {
			st.Close()
		}
		if s.appender != nil {
			s.appender.Close()
		}
	}()
	for r := range reqs {
		s.handle(r)
	}
}

// answered says whether a request kind gets an answer of its own.
func answered(kind byte) bool { return kind != kAppendBegin && kind != kAppendRows }

// read passes requests to the session and acts on cancellations at once,
// ending the running request's context; at the connection's end it
// cancels what runs.
func (s *session) read(r *bufio.Reader, reqs chan<- request) {
	defer close(reqs)
	for {
		kind, body, err := readFrame(r)
		if err != nil {
			s.mu.Lock()
			if s.cancel != nil {
				s.cancel()
			}
			s.mu.Unlock()
			return
		}
		if kind == kCancel {
			d := decoder{b: body}
			seq := d.uvarint()
			s.mu.Lock()
			if s.running == seq && s.cancel != nil {
				s.cancel()
			} else if seq > s.running {
				s.cancelPending = seq
			}
			s.mu.Unlock()
			continue
		}
		reqs <- request{kind, body}
	}
}

// begin makes the context of request seq.
func (s *session) begin(seq uint64) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.running, s.cancel = seq, cancel
	if s.cancelPending == seq {
		cancel()
	}
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
		cancel()
	}
}

func (s *session) handle(r request) {
	// A mistake here ends this request, not the engine's other
	// connections.
	defer func() {
		if p := recover(); p != nil {
			s.fail(fmt.Errorf("engine: %v", p))
		}
	}()
	d := decoder{b: r.body}
	seq := d.uvarint()
	ctx, end := s.begin(seq)
	defer end()
	switch r.kind {
	case kExec:
		q := d.string()
		args := decodeArgs(&d)
		if d.err != nil {
			s.fail(d.err)
			return
		}
		res, err := s.conn.(driver.ExecerContext).ExecContext(ctx, q, args)
		s.result(res, err)
	case kQuery:
		q := d.string()
		budget, nice := d.varint(), int(d.varint())
		args := decodeArgs(&d)
		if d.err != nil {
			s.fail(d.err)
			return
		}
		s.query(ctx, budget, nice, func(ctx context.Context) (driver.Rows, error) {
			return s.conn.(driver.QueryerContext).QueryContext(ctx, q, args)
		})
	case kPrepare:
		q := d.string()
		if d.err != nil {
			s.fail(d.err)
			return
		}
		// The one-statement Prepare: it refuses a text of several
		// statements without running any.
		st, err := s.conn.Prepare(q)
		if err != nil {
			s.fail(err)
			return
		}
		t, err := st.(*duckdb.Stmt).StatementType()
		if err != nil {
			st.Close()
			s.fail(err)
			return
		}
		s.next++
		s.stmts[s.next] = st
		s.enc.reset(kPrepared)
		s.enc.uvarint(s.next)
		s.enc.varint(int64(st.NumInput()))
		s.enc.varint(int64(t))
		s.send()
	case kStmtExec, kStmtQuery:
		id := d.uvarint()
		var budget int64
		var nice int
		if r.kind == kStmtQuery {
			budget, nice = d.varint(), int(d.varint())
		}
		args := decodeArgs(&d)
		st := s.stmts[id]
		switch {
		case d.err != nil:
			s.fail(d.err)
		case st == nil:
			s.fail(fmt.Errorf("engine: no prepared statement %d", id))
		case r.kind == kStmtExec:
			res, err := st.(driver.StmtExecContext).ExecContext(ctx, args)
			s.result(res, err)
		default:
			s.query(ctx, budget, nice, func(ctx context.Context) (driver.Rows, error) {
				return st.(driver.StmtQueryContext).QueryContext(ctx, args)
			})
		}
	case kStmtClose:
		id := d.uvarint()
		if st := s.stmts[id]; st != nil {
			st.Close()
			delete(s.stmts, id)
		}
		s.result(nil, nil)
	case kAppendBegin:
		schema, table := d.string(), d.string()
		s.appendErr = d.err
		if s.appendErr == nil {
			s.appender, s.appendErr = duckdb.NewAppenderFromConn(s.conn, schema, table)
		}
	case kAppendRows:
		if s.appendErr != nil || s.appender == nil {
			return
		}
		n, cols := d.count(), d.count()
		row := make([]driver.Value, cols)
		for range n {
			for i := range row {
				row[i] = toDuck(d.value())
			}
			if d.err != nil {
				s.appendErr = d.err
				return
			}
			if err := s.appender.AppendRow(row...); err != nil {
				s.appendErr = err
				return
			}
		}
	case kAppendEnd:
		// The first error the append met is its error: closing an
		// appender that failed fails too, for that reason.
		err := s.appendErr
		if s.appender != nil {
			if cerr := s.appender.Close(); err == nil {
				err = cerr
			}
		} else if err == nil {
			err = errors.New("engine: an append without its beginning")
		}
		s.appender, s.appendErr = nil, nil
		s.result(nil, err)
	case kPing:
		res, err := s.conn.(driver.ExecerContext).ExecContext(ctx, "SELECT 1", nil)
		s.result(res, err)
	default:
		s.fail(fmt.Errorf("engine: unknown request %d", r.kind))
	}
}

// result answers an Exec.
func (s *session) result(res driver.Result, err error) {
	if err != nil {
		s.fail(err)
		return
	}
	var n int64
	if res != nil {
		n, _ = res.RowsAffected()
	}
	s.enc.reset(kOK)
	s.enc.varint(n)
	s.send()
}

// query runs a query, at the nice value asked for, and streams its rows:
// its columns, batches of rows, and its end. budget, when not negative,
// is the bytes the rows may take, which budgetFunction counts down.
func (s *session) query(ctx context.Context, budget int64, nice int, run func(context.Context) (driver.Rows, error)) {
	var rb *resultBudget
	if budget >= 0 {
		rb = &resultBudget{left: budget}
		ctx = context.WithValue(ctx, resultBudgetKey{}, rb)
	}
	atNice(nice, func() {
		rows, err := run(ctx)
		if err != nil {
			s.fail(err)
			return
		}
		defer rows.Close()
		cols := rows.Columns()
		s.enc.reset(kCols)
		s.enc.strings(cols)
		typed, _ := rows.(driver.RowsColumnTypeDatabaseTypeName)
		for i := range cols {
			t := ""
			if typed != nil {
				t = typed.ColumnTypeDatabaseTypeName(i)
			}
			s.enc.string(t)
		}
		if !s.send() {
			return
		}
		dest := make([]driver.Value, len(cols))
		var batch encoder
		n := 0
		flush := func() bool {
			if n == 0 {
				return true
			}
			s.enc.reset(kRows)
			s.enc.uvarint(uint64(n))
			s.enc.b = append(s.enc.b, batch.b...)
			batch.b, n = batch.b[:0], 0
			return s.send()
		}
		for {
			if err := ctx.Err(); err != nil {
				s.fail(err)
				return
			}
			err := rows.Next(dest)
			if err == io.EOF {
				break
			}
			if err != nil {
				s.fail(err)
				return
			}
			for _, v := range dest {
				if err := batch.value(fromDuck(v)); err != nil {
					s.fail(err)
					return
				}
			}
			n++
			if len(batch.b) >= rowBatchBytes && !flush() {
				return
			}
		}
		if !flush() {
			return
		}
		s.enc.reset(kEnd)
		s.enc.bool(rb != nil && rb.over)
		s.send()
	})
}

// fail answers a request with err.
func (s *session) fail(err error) {
	s.enc.reset(kErr)
	encodeError(&s.enc, err)
	s.send()
}

// send writes the frame in s.enc; false when the client is gone.
func (s *session) send() bool {
	if _, err := s.w.Write(s.enc.frame()); err != nil {
		return false
	}
	return s.w.Flush() == nil
}

// encodeError appends err as an error type, its message and the log
// truncations skipped so far.
func encodeError(e *encoder, err error) {
	var de *duckdb.Error
	switch {
	case errors.As(err, &de):
		e.varint(int64(de.Type))
		e.string(de.Msg)
	case errors.Is(err, context.DeadlineExceeded):
		e.varint(int64(errDeadline))
		e.string(err.Error())
	case errors.Is(err, context.Canceled):
		e.varint(int64(errCanceled))
		e.string(err.Error())
	default:
		e.varint(int64(errOther))
		e.string(err.Error())
	}
	e.uvarint(localTruncationsSkipped())
}

func decodeArgs(d *decoder) []driver.NamedValue {
	n := d.count()
	args := make([]driver.NamedValue, n)
	for i := range args {
		args[i] = driver.NamedValue{Ordinal: i + 1, Value: toDuck(d.value())}
	}
	return args
}

// fromDuck is a value the DuckDB driver gave, in this package's types.
func fromDuck(v any) any {
	switch x := v.(type) {
	case duckdb.Decimal:
		return Decimal{Width: x.Width, Scale: x.Scale, Value: x.Value}
	case duckdb.Interval:
		return Interval{Days: x.Days, Months: x.Months, Micros: x.Micros}
	case duckdb.Union:
		return Union{Tag: x.Tag, Value: fromDuck(x.Value)}
	case duckdb.Map:
		out := make(Map, len(x))
		for k, e := range x {
			out[fromDuck(k)] = fromDuck(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = fromDuck(e)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = fromDuck(e)
		}
	}
	return v
}

// toDuck is a value in this package's types as the DuckDB driver takes it.
func toDuck(v any) any {
	switch x := v.(type) {
	case Decimal:
		return duckdb.Decimal{Width: x.Width, Scale: x.Scale, Value: x.Value}
	case Interval:
		return duckdb.Interval{Days: x.Days, Months: x.Months, Micros: x.Micros}
	case Union:
		return duckdb.Union{Tag: x.Tag, Value: toDuck(x.Value)}
	case Map:
		out := make(duckdb.Map, len(x))
		for k, e := range x {
			out[toDuck(k)] = toDuck(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = toDuck(e)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = toDuck(e)
		}
	}
	return v
}

// atNice runs fn on an OS thread of its own at nice value nice (0: on the
// caller's). The thread ends with fn (its goroutine exits locked to it),
// so the lower priority stays with it: raising it back would need
// CAP_SYS_NICE. DuckDB runs a query on the thread that calls it
// (threads = 1), so the whole query runs at that priority.
func atNice(nice int, fn func()) {
	if nice == 0 {
		fn()
		return
	}
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		// Lowering one's priority is always allowed; should it fail, the
		// query runs at the engine's.
		unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice)
		fn()
	}()
	<-done
}

// encodeOptions appends the options an engine process opens with.
func encodeOptions(e *encoder, o *Options) {
	e.string(o.Path)
	keys := make([]string, 0, len(o.Config))
	for k := range o.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e.uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.string(k)
		e.string(o.Config[k])
	}
	e.strings(o.Init)
	e.strings(o.Functions)
}

func decodeOptions(d *decoder) Options {
	var o Options
	o.Path = d.string()
	n := d.count()
	o.Config = make(map[string]string, n)
	for range n {
		k := d.string()
		o.Config[k] = d.string()
	}
	o.Init = d.strings()
	o.Functions = d.strings()
	return o
}

// sendControl sends one control message, with fd passed along when not
// negative.
func sendControl(ctl *os.File, msg []byte, fd int) error {
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	rc, err := ctl.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(s uintptr) bool {
		serr = unix.Sendmsg(int(s), msg, oob, nil, 0)
		return serr != unix.EAGAIN
	})
	return errors.Join(err, serr)
}

// recvControl receives one control message and the fd passed with it (-1
// none); an empty message is the end of the socket.
func recvControl(ctl *os.File) (msg []byte, fd int, err error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4))
	rc, err := ctl.SyscallConn()
	if err != nil {
		return nil, -1, err
	}
	var n, oobn int
	var rerr error
	err = rc.Read(func(s uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(s), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err = errors.Join(err, rerr); err != nil {
		return nil, -1, err
	}
	fd = -1
	if oobn > 0 {
		if cmsgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil && len(cmsgs) > 0 {
			if fds, perr := unix.ParseUnixRights(&cmsgs[0]); perr == nil && len(fds) > 0 {
				fd = fds[0]
			}
		}
	}
	return buf[:n], fd, nil
}
