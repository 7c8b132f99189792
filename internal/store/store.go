package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/engine"
)

// FileName is the database file inside the data directory.
const FileName = "holter.duckdb"

// ErrLocked is returned when another process holds the store for writing.
var ErrLocked = errors.New("store is locked by another process")

// Options tunes Open; nil means defaults (read-write). Zero fields take
// their defaults.
type Options struct {
	// ReadOnly opens an existing store without taking the writer's lock.
	ReadOnly bool
	// Logf is told when a storage fault starts and when it clears
	// (fault.go); nil discards it.
	Logf func(format string, args ...any)
	// QueryTimeout bounds one query, from its start to its last row read
	// (DefaultQueryTimeout).
	QueryTimeout time.Duration
	// MaxQueries is how many queries may run at once (DefaultMaxQueries);
	// one more waits QueueWait for a slot, then fails with ErrBusy.
	MaxQueries int
	// MaxResultRows and MaxResultBytes bound one query's answer
	// (DefaultMaxResultRows, DefaultMaxResultBytes); what is cut is marked
	// Truncated.
	MaxResultRows  int
	MaxResultBytes int64
	// MaxTempBytes bounds what DuckDB spills into the temp directory
	// under the data directory (DefaultMaxTempBytes).
	MaxTempBytes int64
	// ExportDir is the one directory the store may write files into:
	// ExportParquet's (parquet.go). Open makes it; empty: none.
	ExportDir string

	// memoryLimit and checkpointThreshold replace DuckDB's settings, for
	// tests that need a fault where a commit's checkpoint runs.
	memoryLimit, checkpointThreshold string
}

// Defaults of Options.
const (
	DefaultQueryTimeout   = 30 * time.Second
	DefaultMaxQueries     = 4
	DefaultMaxResultRows  = 100_000
	DefaultMaxResultBytes = 64 << 20
	DefaultMaxTempBytes   = 1 << 30
	// QueueWait is how long a query waits for one of MaxQueries to end.
	QueueWait = 2 * time.Second
	// memoryLimit bounds DuckDB's buffers: the recorder is a guest on the
	// host it watches. An epoch's commit needs a few MB; a query that needs
	// more spills to the temp directory (MaxTempBytes) or fails.
	memoryLimit = "128MB"
)

func (o *Options) withDefaults() Options {
	out := *o
	if out.QueryTimeout <= 0 {
		out.QueryTimeout = DefaultQueryTimeout
	}
	if out.MaxQueries <= 0 {
		out.MaxQueries = DefaultMaxQueries
	}
	if out.MaxResultRows <= 0 {
		out.MaxResultRows = DefaultMaxResultRows
	}
	if out.MaxResultBytes <= 0 {
		out.MaxResultBytes = DefaultMaxResultBytes
	}
	if out.MaxTempBytes <= 0 {
		out.MaxTempBytes = DefaultMaxTempBytes
	}
	if out.memoryLimit == "" {
		out.memoryLimit = memoryLimit
	}
	return out
}

// Store is an open holter database. Two kinds of connection reach its one
// DuckDB instance: the writer's pool (db), for the recorder's commits and
// its own reads, and a fresh connection per query (Query, QueryRows), made
// from the same connector and closed after it, so no query waits for,
// holds or leaves state on a connection the recorder commits through.
type Store struct {
	db *handle
	// lock is the data directory, locked while the store is open: its
	// engine process, and with it DuckDB's own lock on the file, comes
	// and goes.
	lock     *os.File
	path     string
	readOnly bool
	opts     Options
	health   health

	// queries holds a token per running query (MaxQueries).
	queries chan struct{}
	// sideEffects are the scalar functions a query may not call
	// (sandbox.go).
	sideEffects map[string]bool
	passedMu    sync.Mutex
	passed      map[string]passed
	// closing is cancelled by Close, which waits for running to end.
	// qmu orders starting a query (running.Add) and Close.
	qmu     sync.Mutex
	closing context.Context
	close   context.CancelFunc
	running sync.WaitGroup

	mu          sync.Mutex
	knownStacks map[uint64]struct{}
	knownExes   map[string]struct{}
	// failedCommitsStored counts the COMMITs that failed with their
	// epoch stored (WriteEpoch).
	failedCommitsStored int
	// knownStale says the caches above may disagree with the database:
	// a commit failed in a way that leaves unsaid what it stored. The next
	// epoch reads them back first.
	knownStale bool
	// spanSeq is the last span commit sequence number (requests.go); 0
	// until the first span commit reads it.
	spanSeq int64
	// kept is the last commit of each kind that can be written again
	// (fault.go), by kind.
	kept map[string]*lastCommit
}

// Open opens (creating if needed and not read-only) the store in dir.
// An existing file is never overwritten, and not written at all unless it
// passed the checks of verify.go: if it cannot be opened the error says so
// and the file is left as it was.
func Open(dir string, opts *Options) (st *Store, err error) {
	if opts == nil {
		opts = &Options{}
	}
	o := opts.withDefaults()
	if o.ExportDir != "" {
		abs, err := filepath.Abs(o.ExportDir)
		if err != nil {
			return nil, fmt.Errorf("export directory: %w", err)
		}
		o.ExportDir = abs
	}
	path := filepath.Join(dir, FileName)
	if o.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("open store: no recording in %s: %w", dir, err)
		}
	} else if err := checkWritableDir(dir); err != nil {
		return nil, err
	}
	lock, err := lockStore(dir, !o.ReadOnly)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	existed := fileHasData(path)
	if existed {
		if err := checkWAL(path); err != nil {
			return nil, err
		}
		if !o.ReadOnly {
			if err := verifyExisting(path); err != nil {
				return nil, err
			}
		}
	}
	// A new store cut short by a full disk would be a file no later
	// start could open.
	if !o.ReadOnly {
		if err := checkSpace(path); err != nil {
			return nil, err
		}
	}
	if o.ExportDir != "" {
		if err := prepareExportDir(o.ExportDir); err != nil {
			return nil, err
		}
	}
	inst, err := openInstance(path, &o)
	if err != nil {
		return nil, openError(path, existed, err)
	}
	db := inst.db
	s := &Store{db: newHandle(inst), lock: lock, path: path, readOnly: o.ReadOnly, opts: o,
		queries: make(chan struct{}, o.MaxQueries), passed: map[string]passed{},
		knownStacks: map[uint64]struct{}{}, knownExes: map[string]struct{}{}, kept: map[string]*lastCommit{}}
	s.closing, s.close = context.WithCancel(context.Background())
	s.health.h.State = "ok"
	s.health.logf = o.Logf
	if s.health.logf == nil {
		s.health.logf = func(string, ...any) {}
	}
	if s.sideEffects, err = sideEffectFunctions(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	if !o.ReadOnly {
		if err := s.migrate(existed); err != nil {
			db.Close()
			return nil, err
		}
		if err := s.loadKnown(); err != nil {
			db.Close()
			return nil, fmt.Errorf("open store: %w", err)
		}
		s.noteIdentity()
	} else if err := s.checkVersion(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// openInstance starts a DuckDB engine process (internal/engine) on the
// file at path, configured (dsnConfig), with the function budgeted
// queries call registered. Closing it does not checkpoint: an instance
// closed for a storage fault (fault.go) must write nothing more; Close
// checkpoints a healthy one.
//
// A writer's engine process ends once no connection has been open for
// engineLinger, checkpointing its log if it grew past checkpointAbove, and
// the next connection starts another: between the recorder's epochs
// neither DuckDB's code nor its memory is in the host's RAM. A read-only
// store keeps its process until it is closed.
func openInstance(path string, o *Options) (*instance, error) {
	// Queries must not reach files or the network, and nothing may change
	// the settings after this (lock_configuration); DuckDB refuses the
	// first at open with a temp_directory set, so both come once it is
	// open. The export directory alone stays open, for the store's own
	// COPY (parquet.go).
	var init []string
	if o.ExportDir != "" {
		init = append(init, "SET allowed_directories = ['"+strings.ReplaceAll(filepath.Clean(o.ExportDir)+"/", "'", "''")+"']")
	}
	init = append(init,
		"SET enable_external_access = false",
		"PRAGMA disable_checkpoint_on_shutdown",
		"SET lock_configuration = true",
	)
	eo := engine.Options{Path: path, Config: dsnConfig(filepath.Dir(path), o), Init: init,
		Functions: []string{"store"}, CheckpointAbove: -1, Logf: o.Logf}
	if !o.ReadOnly {
		eo.Linger, eo.CheckpointAbove = engineLinger, checkpointAbove
	}
	connector, err := engine.NewConnector(eo)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	// The recorder's commits, its retention and analysis share these;
	// users' queries never do. An idle one is closed within a couple of
	// seconds, so that the engine process can end.
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(2)
	db.SetConnMaxIdleTime(time.Second)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, err
	}
	return &instance{db: db, connector: connector}, nil
}

// engineLinger is how long a writer's engine process outlives its last
// connection; checkpointAbove the log it leaves unwritten into the file
// when it ends, which the next process reads again at its start.
const (
	engineLinger    = 2 * time.Second
	checkpointAbove = 1 << 20
)

// dsnConfig is DuckDB's configuration, given at open so that it holds
// before DuckDB reads the file (a file with another database's header
// makes it load that database's extension). Extensions are never
// installed or loaded on demand, and the only directory for them is one
// under the data directory that holter never creates, so nothing is
// fetched from the network or written under HOME. DuckDB may cache
// memoryLimit and spill up to MaxTempBytes into the temp directory under
// the data directory; it runs its work on the calling thread rather than
// on a pool of its own.
func dsnConfig(dir string, o *Options) map[string]string {
	v := map[string]string{
		"autoinstall_known_extensions": "false",
		"autoload_known_extensions":    "false",
		"allow_community_extensions":   "false",
		"extension_directory":          filepath.Join(dir, "duckdb-extensions"),
		"temp_directory":               filepath.Join(dir, FileName+".tmp"),
		"max_temp_directory_size":      fmt.Sprintf("%dB", o.MaxTempBytes),
		"memory_limit":                 o.memoryLimit,
		"threads":                      "1",
		// DuckDB's jemalloc keeps what a task freed until its peak passes
		// the flush threshold (128 MB by default): flushed past 4 MB and
		// purged by jemalloc's background thread, a long-lived engine's
		// commits and analysis do not leave their few MB each resident.
		"allocator_flush_threshold":    "4MB",
		"allocator_background_threads": "true",
	}
	if o.checkpointThreshold != "" {
		v["checkpoint_threshold"] = o.checkpointThreshold
	}
	if o.ReadOnly {
		v["access_mode"] = "READ_ONLY"
	}
	return v
}

// lockStore locks the data directory dir for the store in it: exclusive
// for a writer, shared for readers. Another process holding it is
// ErrLocked.
func lockStore(dir string, exclusive bool) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open store: lock %s: %w", dir, err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("open store in %s: %w (another process has it open)", dir, ErrLocked)
		}
		return nil, fmt.Errorf("open store: lock %s: %w", dir, err)
	}
	return f, nil
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
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadKnownNow()
}

// reloadKnownNow is loadKnown with s.mu held.
func (s *Store) reloadKnownNow() error {
	conn, err := s.db.Conn(context.Background())
	if err != nil {
		return err
	}
	defer conn.Close()
	return s.reloadKnown(context.Background(), conn)
}

// reloadKnown reads the stacks and executables stored into the caches;
// s.mu is held.
func (s *Store) reloadKnown(ctx context.Context, conn *sql.Conn) error {
	stacks := map[uint64]struct{}{}
	exes := map[string]struct{}{}
	rows, err := conn.QueryContext(ctx, `SELECT stack_id FROM stacks`)
	if err != nil {
		return fmt.Errorf("read stacks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("read stacks: %w", err)
		}
		stacks[id] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read stacks: %w", err)
	}
	xs, err := conn.QueryContext(ctx, `SELECT path FROM executables`)
	if err != nil {
		return fmt.Errorf("read executables: %w", err)
	}
	defer xs.Close()
	for xs.Next() {
		var p string
		if err := xs.Scan(&p); err != nil {
			return fmt.Errorf("read executables: %w", err)
		}
		exes[p] = struct{}{}
	}
	if err := xs.Err(); err != nil {
		return fmt.Errorf("read executables: %w", err)
	}
	s.knownStacks, s.knownExes, s.knownStale = stacks, exes, false
	return nil
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

// Close stops the queries running, waits for them to end and closes the
// database; committed epochs are durable already. A healthy writer's log
// is checkpointed into the file first, as DuckDB would on closing; an
// instance a fault closed writes nothing more.
func (s *Store) Close() error {
	s.qmu.Lock()
	s.close()
	s.qmu.Unlock()
	s.running.Wait()
	if !s.readOnly && s.failing() == nil {
		s.db.Exec("CHECKPOINT")
	}
	err := s.db.Close()
	s.lock.Close()
	return err
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

func bankKey(host string) string { return "storage_bank " + host }

// StorageBank is what host's recorder had left of its storage budget
// (bytes) when it closed its last committed epoch, and when that was;
// ok is false when no epoch carried one.
func (s *Store) StorageBank(ctx context.Context, host string) (bytes int64, at time.Time, ok bool, err error) {
	var v sql.NullString
	if err := s.db.QueryRowContext(ctx, `SELECT max(value) FROM meta WHERE key = ?`, bankKey(host)).Scan(&v); err != nil {
		return 0, time.Time{}, false, fmt.Errorf("storage bank: %w", err)
	}
	var endNs int64
	if !v.Valid {
		return 0, time.Time{}, false, nil
	}
	if _, err := fmt.Sscanf(v.String, "%d %d", &bytes, &endNs); err != nil {
		return 0, time.Time{}, false, fmt.Errorf("storage bank %q in meta: %w", v.String, err)
	}
	return bytes, time.Unix(0, endNs), true, nil
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
	// StorageBank is what the recorder's storage budget had left when the
	// epoch closed (bytes), kept with the epoch so that a recorder
	// started again goes on from it rather than from a full bank; nil
	// when the recorder has no budget.
	StorageBank *int64
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
	// Capped is the samples taken that were not stored: over the
	// recorder's cap on samples per epoch, they were dropped coarsest
	// first (Samples counts them too).
	Capped uint64
	// LostRecursion is the events the kernel did not run the vital's
	// programs for, as one of them was running on the CPU already (an
	// interrupt's event within the program's own run): not counted, not
	// sketched, not sampled.
	LostRecursion uint64
}

// Lost is what this vital missed in the epoch.
func (v Vital) Lost() uint64 { return v.LostRingbuf + v.LostState + v.LostRecursion }

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

// WriteEpoch commits one epoch in a single transaction.
//
// A COMMIT that reports an error may have stored the epoch: DuckDB
// checkpoints in the commit that takes its log past checkpoint_threshold,
// writing the transaction to the database file instead of the log, and a
// checkpoint that fails there (out of memory, a full disk) fails the
// COMMIT of a transaction the database then holds, in memory only. So the
// epochs table is asked: an epoch not there was not committed; one there
// is made durable by a checkpoint, and counts as committed once that
// succeeds (ErrNotDurable while it fails). Either way the caches of stacks
// and executables stored follow the table, and are read back when even
// that cannot be asked, so that no later epoch fails on a stack stored
// twice. In a storage fault it fails with ErrUnavailable, and may be given
// the epoch again once the fault clears.
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
		in, err := s.epochStored(e.Host, e.Epoch)
		if err != nil || in {
			return err
		}
	}
	return s.commitEpoch(ctx, e)
}

// commitEpoch is WriteEpoch's transaction, with s.mu held and the store
// writable. The epoch it commits is kept (fault.go) until the next one.
func (s *Store) commitEpoch(ctx context.Context, e *Epoch) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("write epoch %d: %w", e.Epoch, err)
	}
	defer conn.Close()
	if s.knownStale {
		if err := s.reloadKnown(ctx, conn); err != nil {
			return fmt.Errorf("write epoch %d: %w", e.Epoch, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		return fmt.Errorf("write epoch %d: %w", e.Epoch, err)
	}
	newStacks, newExes, err := s.writeEpoch(ctx, conn, e)
	if err != nil {
		if _, rbErr := conn.ExecContext(context.Background(), "ROLLBACK"); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
		}
		return err
	}
	var notDurable error
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		err = fmt.Errorf("commit epoch %d: %w", e.Epoch, err)
		in, verr := s.epochStored(e.Host, e.Epoch)
		if verr != nil {
			s.knownStale = true
			return errors.Join(err, fmt.Errorf("and whether it is stored is unknown: %w", verr))
		}
		if !in {
			return err
		}
		s.failedCommitsStored++
		if _, cerr := s.db.ExecContext(context.Background(), "CHECKPOINT"); cerr != nil {
			notDurable = fmt.Errorf("epoch %d is stored but %w: %v; checkpoint: %v", e.Epoch, ErrNotDurable, err, cerr)
		}
	}
	for _, id := range newStacks {
		s.knownStacks[id] = struct{}{}
	}
	for _, p := range newExes {
		s.knownExes[p] = struct{}{}
	}
	if notDurable == nil {
		s.keep("epoch", &lastCommit{
			what:   fmt.Sprintf("epoch %d", e.Epoch),
			stored: func(context.Context) (bool, error) { return s.epochStored(e.Host, e.Epoch) },
			again:  func(ctx context.Context) error { return s.commitEpoch(ctx, e) },
		})
	}
	return notDurable
}

// ErrNotDurable is returned for an epoch the store holds but has not
// written to disk: the checkpoint that would failed. It is lost if the
// recorder stops before a later checkpoint succeeds; a later epoch's
// commit, or Close, checkpoints again.
var ErrNotDurable = errors.New("not yet durable (DuckDB's checkpoint failed)")

// epochStored says whether epoch n of host is in the epochs table, asked
// on a connection of its own: the one whose COMMIT failed may be unusable.
func (s *Store) epochStored(host string, n int64) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var in bool
	err := s.db.QueryRowContext(ctx, `SELECT count(*) > 0 FROM epochs WHERE host = ? AND epoch = ?`, host, n).Scan(&in)
	return in, err
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
	if e.StorageBank != nil {
		if _, err := conn.ExecContext(ctx, `INSERT OR REPLACE INTO meta VALUES (?, ?)`,
			bankKey(e.Host), fmt.Sprintf("%d %d", *e.StorageBank, e.EndNs)); err != nil {
			return nil, nil, fmt.Errorf("write epoch %d: storage bank: %w", e.Epoch, err)
		}
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
				v.Threshold, v.LostRingbuf, v.LostState, v.NoStack, v.Secondary, v.Capped, v.LostRecursion}
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
		order := storageOrder(e.Samples)
		return appendRows(dconn, "samples", len(e.Samples), func(i int) []driver.Value {
			sm := e.Samples[order[i]]
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

// storageOrder is the order an epoch's samples are stored in: by vital,
// then label, then time. A run of one vital's rows shares its NULL field
// columns and a label's its comm, exe, pid and stacks, which DuckDB's
// column compression (RLE, dictionary, constant) then stores once per
// run rather than once per row.
func storageOrder(samples []Sample) []int {
	order := make([]int, len(samples))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := &samples[a], &samples[b]
		return cmp.Or(strings.Compare(x.Vital, y.Vital), cmp.Compare(x.LabelHash, y.LabelHash), cmp.Compare(x.TsNs, y.TsNs))
	})
	return order
}

func appendRows(conn driver.Conn, table string, n int, row func(int) []driver.Value) error {
	if n == 0 {
		return nil
	}
	a, err := engine.NewAppender(conn, "", table)
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
