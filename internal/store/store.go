package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/duckdb/duckdb-go/v2"
)

// FileName is the database file inside the data directory.
const FileName = "holter.duckdb"

// ErrLocked is returned when another process holds the store for writing.
var ErrLocked = errors.New("store is locked by another process")

// Options tunes Open; nil means defaults (read-write).
type Options struct {
	// ReadOnly opens an existing store without taking the writer's lock.
	ReadOnly bool
	// Logf is told when a storage fault starts and when it clears
	// (fault.go); nil discards it.
	Logf func(format string, args ...any)
}

// Store is an open holter database.
type Store struct {
	db       *handle
	path     string
	readOnly bool
	health   health

	mu          sync.Mutex
	knownStacks map[uint64]struct{}
	knownExes   map[string]struct{}
	// open holds the buckets being filled, one per timescale (rollup.go).
	open []*openBucket
	// spanSeq is the last span commit sequence number (requests.go); 0
	// until the first span commit reads it.
	spanSeq int64
}

// Open opens (creating if needed and not read-only) the store in dir.
// An existing file is never overwritten, and not written at all unless it
// passed the checks of verify.go: if it cannot be opened the error says so
// and the file is left as it was.
func Open(dir string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	path := filepath.Join(dir, FileName)
	if opts.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("open store: no recording in %s: %w", dir, err)
		}
	} else if err := checkWritableDir(dir); err != nil {
		return nil, err
	}
	existed := fileHasData(path)
	if existed {
		if err := checkWAL(path); err != nil {
			return nil, err
		}
		if !opts.ReadOnly {
			if err := verifyExisting(path); err != nil {
				return nil, err
			}
		}
	}
	// A new store cut short by a full disk would be a file no later
	// start could open.
	if !opts.ReadOnly {
		if err := checkSpace(path); err != nil {
			return nil, err
		}
	}
	db, err := openInstance(path, opts.ReadOnly)
	if err != nil {
		return nil, openError(path, existed, err)
	}
	s := &Store{db: newHandle(db), path: path, readOnly: opts.ReadOnly,
		knownStacks: map[uint64]struct{}{}, knownExes: map[string]struct{}{}}
	s.health.h.State = "ok"
	s.health.logf = opts.Logf
	if s.health.logf == nil {
		s.health.logf = func(string, ...any) {}
	}
	if !opts.ReadOnly {
		if err := s.migrate(existed); err != nil {
			db.Close()
			return nil, err
		}
		if err := s.loadKnown(); err != nil {
			db.Close()
			return nil, err
		}
		s.noteIdentity()
	} else if err := s.checkVersion(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// openInstance opens a DuckDB instance of the file at path, configured.
func openInstance(path string, readOnly bool) (*sql.DB, error) {
	dsn := path
	if readOnly {
		dsn += "?access_mode=READ_ONLY"
	}
	connector, err := duckdb.NewConnector(dsn, nil)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	// A few connections, so a long user query does not hold up a commit.
	db.SetMaxOpenConns(4)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, err
	}
	// Queries that users send must not reach files or the network; and the
	// recorder is a guest on the host it watches: DuckDB may cache this much
	// and runs its work on the calling thread, where the recorder can
	// measure it (see recorder's budget) rather than on a pool of its own.
	// Closing does not checkpoint: an instance closed for a storage fault
	// (fault.go) must write nothing more; Close checkpoints a healthy one.
	for _, stmt := range []string{
		"SET memory_limit = '256MB'",
		"SET threads = 1",
		"SET enable_external_access = false",
		"PRAGMA disable_checkpoint_on_shutdown",
		"SET lock_configuration = true",
	} {
		if _, err := db.Exec(stmt); err != nil {
			db.Close()
			return nil, fmt.Errorf("open store: %s: %w", stmt, err)
		}
	}
	return db, nil
}

func fileHasData(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Size() > 0
}

func checkWritableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("data directory %s cannot be created: %w", dir, err)
	}
	probe, err := os.CreateTemp(dir, ".write-probe-*")
	if err != nil {
		return fmt.Errorf("data directory %s is not writable: %w", dir, err)
	}
	name := probe.Name()
	probe.Close()
	return os.Remove(name)
}

func openError(path string, existed bool, err error) error {
	if isLockConflict(err) {
		return fmt.Errorf("open store %s: %w: %v", path, ErrLocked, err)
	}
	if existed {
		return fmt.Errorf("open store %s: the file exists but cannot be opened as a holter store; it was left untouched (move it away to start a new recording): %w", path, err)
	}
	return fmt.Errorf("open store %s: %w", path, err)
}

// isLockConflict tells DuckDB's "file is locked" failure from others. DuckDB
// reports it only as text (a corrupt block's error says "block", which
// has "lock" in it).
func isLockConflict(err error) bool {
	return strings.Contains(err.Error(), "Could not set lock on file")
}

// migrate brings the schema up to date. A store whose schema is this
// holter's already (its version and the digest of the statements that
// made it) is not written to: opening a store writes nothing until an
// epoch commits.
func (s *Store) migrate(existed bool) error {
	ddl := append(append(append(append(slices.Clone(schema), fieldColumnDDL()...), rollupSchema...), requestsDDL...), requestViews...)
	digest := fmt.Sprintf("%x", sha256.Sum256([]byte(strings.Join(ddl, ";\n"))))
	if existed {
		if err := s.checkVersion(); err != nil {
			return err
		}
		var version, made sql.NullString
		err := s.db.QueryRow(`SELECT max(value) FILTER (key = 'schema_version'), max(value) FILTER (key = 'schema_ddl') FROM meta`).Scan(&version, &made)
		if err == nil && version.String == fmt.Sprint(schemaVersion) && made.String == digest {
			return nil
		}
	}
	tx, err := s.db.Begin()
	if err != nil {
		return fmt.Errorf("migrate store: %w", err)
	}
	defer tx.Rollback()
	for _, stmt := range ddl {
		if _, err := tx.Exec(stmt); err != nil {
			return fmt.Errorf("migrate store: %w", err)
		}
	}
	if _, err := tx.Exec(`INSERT OR REPLACE INTO meta VALUES ('schema_version', ?), ('schema_ddl', ?)`, fmt.Sprint(schemaVersion), digest); err != nil {
		return fmt.Errorf("migrate store: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate store: %w", err)
	}
	// The schema goes into the database file now, not only the WAL: a
	// WAL holding the views' CREATE OR REPLACE (a drop and a create) that
	// a recorder killed before DuckDB's next checkpoint leaves is one
	// DuckDB cannot replay ("GetDefaultDatabase with no default database
	// set", duckdb/duckdb#22044), and the store would not open again. So
	// a killed recorder's WAL holds data only.
	if _, err := s.db.Exec("CHECKPOINT"); err != nil {
		return fmt.Errorf("migrate store: checkpoint: %w", err)
	}
	return nil
}

// loadKnown remembers which stacks and executables the store holds, so an
// epoch writes only new ones.
func (s *Store) loadKnown() error {
	rows, err := s.db.Query(`SELECT stack_id FROM stacks`)
	if err != nil {
		return fmt.Errorf("open store: read stacks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("open store: read stacks: %w", err)
		}
		s.knownStacks[id] = struct{}{}
	}
	xs, err := s.db.Query(`SELECT path FROM executables`)
	if err != nil {
		return fmt.Errorf("open store: read executables: %w", err)
	}
	defer xs.Close()
	for xs.Next() {
		var p string
		if err := xs.Scan(&p); err != nil {
			return fmt.Errorf("open store: read executables: %w", err)
		}
		s.knownExes[p] = struct{}{}
	}
	return errors.Join(rows.Err(), xs.Err())
}

func (s *Store) checkVersion() error {
	var v string
	err := s.db.QueryRow(`SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&v)
	if err != nil {
		return fmt.Errorf("open store %s: not a holter store (no schema version): %w", s.path, err)
	}
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil || n > schemaVersion {
		return fmt.Errorf("open store %s: schema version %s is newer than this holter's (%d)", s.path, v, schemaVersion)
	}
	return nil
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database; committed epochs are durable already.
// A healthy writer's log is checkpointed into the file first, as DuckDB
// would on closing; an instance a fault closed writes nothing more.
func (s *Store) Close() error {
	if !s.readOnly && s.failing() == nil {
		s.db.Exec("CHECKPOINT")
	}
	return s.db.Close()
}

// NextEpoch returns the number the next epoch of host should get: one past
// the last committed, so a restarted recorder continues the sequence.
func (s *Store) NextEpoch(ctx context.Context, host string) (int64, error) {
	var last sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT max(epoch) FROM epochs WHERE host = ?`, host).Scan(&last); err != nil {
		return 0, fmt.Errorf("next epoch: %w", err)
	}
	return last.Int64 + 1, nil
}

// Epoch is everything one epoch adds to the store.
type Epoch struct {
	Host          string
	Epoch         int64
	StartNs       int64
	EndNs         int64
	MonitorBPFNs  int64
	MonitorUserNs int64
	Vitals        []Vital
	Samples       []Sample
	Stacks        []Stack
	Executables   []Executable
}

// Vital is one vital sign's summary for one epoch.
type Vital struct {
	Name           string
	Events         uint64
	WeightSum      uint64
	Samples        uint64
	DistinctLabels float64
	Threshold      uint64
	LostRingbuf    uint64
	LostState      uint64
	NoStack        uint64
	// Secondary is a vital-specific total: pages freed for kmem, bytes
	// received for sock.
	Secondary uint64
}

// Lost is what this vital missed in the epoch.
func (v Vital) Lost() uint64 { return v.LostRingbuf + v.LostState }

// Sample is one sampled event. Fields holds the vital-specific columns of
// the samples table by name (see SampleFields); absent ones are NULL.
type Sample struct {
	TsNs      int64
	Vital     string
	LabelHash uint64
	Weight    uint64
	EstCount  uint64
	Pid       uint32
	Tid       uint32
	Uid       uint32
	Comm      string
	Exe       string
	KStackID  uint64 // 0: none
	UStackID  uint64 // 0: none
	Fields    map[string]any
}

// Stack is a symbolized stack, deduplicated by ID across the store.
type Stack struct {
	ID      uint64
	Kind    string // "kernel" or "user"
	Frames  []string
	Modules []string
}

// Executable maps a path to its build id.
type Executable struct {
	Path    string
	BuildID string
}

func nullID(id uint64) driver.Value {
	if id == 0 {
		return nil
	}
	return id
}

// WriteEpoch commits one epoch in a single transaction. In a storage
// fault it fails with ErrUnavailable, and may be given the epoch again
// once the fault clears.
func (s *Store) WriteEpoch(ctx context.Context, e *Epoch) (err error) {
	if s.readOnly {
		return errors.New("write epoch: store is open read-only")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return fmt.Errorf("write epoch %d: %w", e.Epoch, err)
	}
	defer func() { err = s.wrote(err) }()
	if s.hadFault() {
		// An epoch whose commit failed in a fault may be in the store (its
		// log was written, its checkpoint was not): then it is given again
		// for nothing.
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM epochs WHERE host = ? AND epoch = ?`, e.Host, e.Epoch).Scan(&n); err != nil {
			return fmt.Errorf("write epoch %d: %w", e.Epoch, err)
		}
		if n > 0 {
			return nil
		}
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("write epoch %d: %w", e.Epoch, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		return fmt.Errorf("write epoch %d: %w", e.Epoch, err)
	}
	newStacks, newExes, err := s.writeEpoch(ctx, conn, e)
	if err != nil {
		s.open = nil // the open buckets may hold the failed epoch: read them back
		if _, rbErr := conn.ExecContext(context.Background(), "ROLLBACK"); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
		}
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		s.open = nil
		return fmt.Errorf("commit epoch %d: %w", e.Epoch, err)
	}
	for _, id := range newStacks {
		s.knownStacks[id] = struct{}{}
	}
	for _, p := range newExes {
		s.knownExes[p] = struct{}{}
	}
	return nil
}

// writeEpoch does the writes of WriteEpoch inside its transaction. Bulk
// rows go through DuckDB's appender, which is two orders of magnitude
// faster than INSERT statements and joins the connection's transaction.
func (s *Store) writeEpoch(ctx context.Context, conn *sql.Conn, e *Epoch) (newStacks []uint64, newExes []string, err error) {
	var lost int64
	for _, v := range e.Vitals {
		lost += int64(v.Lost())
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO epochs VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		e.Host, e.Epoch, e.StartNs, e.EndNs, int64(len(e.Samples)), lost, e.MonitorBPFNs, e.MonitorUserNs); err != nil {
		return nil, nil, fmt.Errorf("write epoch %d: %w", e.Epoch, err)
	}
	for _, x := range e.Executables {
		if _, ok := s.knownExes[x.Path]; ok {
			continue
		}
		if _, err := conn.ExecContext(ctx, `INSERT OR REPLACE INTO executables VALUES (?, ?)`, x.Path, x.BuildID); err != nil {
			return nil, nil, fmt.Errorf("write epoch %d executables: %w", e.Epoch, err)
		}
		newExes = append(newExes, x.Path)
	}
	err = conn.Raw(func(dc any) error {
		dconn, ok := dc.(driver.Conn)
		if !ok {
			return errors.New("unexpected driver connection")
		}
		err := appendRows(dconn, "vitals", len(e.Vitals), func(i int) []driver.Value {
			v := e.Vitals[i]
			return []driver.Value{e.Host, e.Epoch, v.Name, v.Events, v.WeightSum, v.Samples, v.DistinctLabels,
				v.Threshold, v.LostRingbuf, v.LostState, v.NoStack, v.Secondary}
		})
		if err != nil {
			return err
		}
		var fresh []Stack
		inEpoch := map[uint64]bool{}
		for _, st := range e.Stacks {
			if _, ok := s.knownStacks[st.ID]; !ok && !inEpoch[st.ID] {
				inEpoch[st.ID] = true
				fresh = append(fresh, st)
				newStacks = append(newStacks, st.ID)
			}
		}
		err = appendRows(dconn, "stacks", len(fresh), func(i int) []driver.Value {
			st := fresh[i]
			return []driver.Value{st.ID, st.Kind, st.Frames, st.Modules}
		})
		if err != nil {
			return err
		}
		return appendRows(dconn, "samples", len(e.Samples), func(i int) []driver.Value {
			sm := e.Samples[i]
			row := make([]driver.Value, 0, 14+len(SampleFields))
			row = append(row, e.Host, e.Epoch, sm.TsNs, sm.Vital, sm.LabelHash, sm.Weight, sm.EstCount,
				sm.Pid, sm.Tid, sm.Uid, sm.Comm, sm.Exe, nullID(sm.KStackID), nullID(sm.UStackID))
			for _, f := range SampleFields {
				row = append(row, sm.Fields[f.Name])
			}
			return row
		})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("write epoch %d: %w", e.Epoch, err)
	}
	if err := s.updateRollups(ctx, conn, e); err != nil {
		return nil, nil, fmt.Errorf("write epoch %d: %w", e.Epoch, err)
	}
	return newStacks, newExes, nil
}

func appendRows(conn driver.Conn, table string, n int, row func(int) []driver.Value) error {
	if n == 0 {
		return nil
	}
	a, err := duckdb.NewAppenderFromConn(conn, "", table)
	if err != nil {
		return fmt.Errorf("append to %s: %w", table, err)
	}
	for i := 0; i < n; i++ {
		if err := a.AppendRow(row(i)...); err != nil {
			a.Close()
			return fmt.Errorf("append to %s: %w", table, err)
		}
	}
	if err := a.Close(); err != nil {
		return fmt.Errorf("append to %s: %w", table, err)
	}
	return nil
}

// Result is the answer to a query.
type Result struct {
	Columns   []string `json:"columns"`
	Types     []string `json:"types"`
	Rows      [][]any  `json:"rows"`
	Truncated bool     `json:"truncated,omitempty"`
}

// MaxRows bounds what one query returns; the result says when it was cut.
const MaxRows = 100_000

// ErrNotReadOnly is returned for a statement that is not a query.
var ErrNotReadOnly = errors.New("only read-only queries (SELECT, WITH, SHOW, DESCRIBE, EXPLAIN, SUMMARIZE) are allowed")

// Query runs one read-only statement; args fill its placeholders ($1 or ?).
func (s *Store) Query(ctx context.Context, query string, args ...any) (*Result, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	defer conn.Close()
	var res *Result
	err = conn.Raw(func(dc any) error {
		res, err = queryReadOnly(ctx, dc, query, args)
		return err
	})
	return res, err
}

var readOnlyTypes = map[duckdb.StmtType]bool{
	duckdb.STATEMENT_TYPE_SELECT:  true,
	duckdb.STATEMENT_TYPE_EXPLAIN: true,
}

// queryReadOnly prepares query on the driver's connection dc, refuses it
// unless it only reads (one statement: DuckDB prepares no more), and runs
// that prepared statement: planning a query is most of what a small one
// costs, and it is planned once.
func queryReadOnly(ctx context.Context, dc any, query string, args []any) (*Result, error) {
	conn, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, errors.New("query: driver cannot prepare statements")
	}
	stmt, err := conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	defer stmt.Close()
	ds, ok := stmt.(*duckdb.Stmt)
	if !ok {
		return nil, errors.New("query: unexpected statement type")
	}
	t, err := ds.StatementType()
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	if !readOnlyTypes[t] {
		return nil, fmt.Errorf("query: %w", ErrNotReadOnly)
	}
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	rows, err := ds.QueryContext(ctx, named)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	defer rows.Close()
	res := &Result{Columns: rows.Columns(), Rows: [][]any{}}
	typed, _ := rows.(driver.RowsColumnTypeDatabaseTypeName)
	for i := range res.Columns {
		name := ""
		if typed != nil {
			name = typed.ColumnTypeDatabaseTypeName(i)
		}
		res.Types = append(res.Types, name)
	}
	dest := make([]driver.Value, len(res.Columns))
	for {
		err := rows.Next(dest)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("query: %w", err)
		}
		if len(res.Rows) == MaxRows {
			res.Truncated = true
			break
		}
		vals := make([]any, len(dest))
		for i, v := range dest {
			if b, ok := v.([]byte); ok { // the driver may reuse it
				v = bytes.Clone(b)
			}
			vals[i] = v
		}
		res.Rows = append(res.Rows, vals)
	}
	return res, nil
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

func (p plain) Query(ctx context.Context, sql string) (*Result, error) { return p.q.Query(ctx, sql) }
