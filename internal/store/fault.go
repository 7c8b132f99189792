package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/engine"
)

// Storage faults. A write that fails because the file system cannot take
// it (full, read-only, failing) puts the store in a fault, and so does its
// file going away (deleted, replaced, or its file system unmounted): the
// DuckDB instance is closed at once, without a checkpoint, since one whose
// commit failed midway is not fit to go on (with DuckDB 1.4.3 the next
// transaction on it can crash its process). While the fault lasts every write fails at once with
// ErrUnavailable, and queries with it too. At most every faultRetry a
// write first checks that the store's own file is in place, and its file
// system writable with room, and then opens the store again: the fault has
// cleared. A deleted store is not recreated: what was committed went with
// it, and a new recording is the operator's call (restart the recorder).
//
// A commit the kernel said was on disk may not be: when ext4 remounts
// itself read-only on an error (errors=remount-ro), the fsync of the
// write just before can return success for data the aborted journal never
// holds (Linux 6.18: the last fsynced append to a file was gone after
// e2fsck in 4 of 40 trials, each time the next write failed with EROFS).
// Every write after it fails, so no commit but the last can be lost this
// way: the store keeps the last commit of each kind it can write again (epochs,
// numbered span commits), and once a fault clears it looks each up in the
// store, and writes again any that is missing, before other writes.

// ErrUnavailable is returned for writes (and queries) while a storage
// fault lasts: nothing was written, and a later write may succeed.
var ErrUnavailable = errors.New("store unavailable")

// Health is the state of the store's storage.
type Health struct {
	// State is "ok", or "failing": writes fail, and are retried.
	State string `json:"state"`
	// Fault says what failed ("disk full", "read-only file system", "I/O
	// error", "deleted": the store's file is gone or another took its
	// place), since when, and the last error.
	Fault     string    `json:"fault,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	// Faults counts the faults since the store opened, FailedWrites the
	// writes refused or failed in them.
	Faults       uint64 `json:"faults"`
	FailedWrites uint64 `json:"failed_writes"`
}

// lastCommit is a commit kept to be written again should a fault have
// lost it.
type lastCommit struct {
	what string
	// stored says whether it is in the store; again commits it anew
	// (s.mu held), which keeps the new commit in its place.
	stored func(ctx context.Context) (bool, error)
	again  func(ctx context.Context) error
}

// keep keeps c as the last commit of its kind; s.mu is held.
func (s *Store) keep(kind string, c *lastCommit) { s.kept[kind] = c }

// recommit writes again the kept commits the store does not hold, as it
// opens again after a fault; s.mu is held.
func (s *Store) recommit() error {
	ctx := context.Background()
	for _, kind := range slices.Sorted(maps.Keys(s.kept)) {
		c := s.kept[kind]
		in, err := c.stored(ctx)
		if err != nil {
			return fmt.Errorf("whether %s, the last committed, is stored: %w", c.what, err)
		}
		if in {
			continue
		}
		if err := c.again(ctx); err != nil {
			return fmt.Errorf("write %s again: %w", c.what, err)
		}
		s.health.logf("%s was committed as the storage fault began, but the file system lost it: written again", c.what)
	}
	return nil
}

// faultRetry is how often a failing store checks whether the fault cleared.
const faultRetry = time.Second

// recoverFree is the room a failing store wants before it takes writes
// again, besides its write-ahead log's size.
const recoverFree = 4 << 20

// health is a store's fault state; it has a lock of its own, as Prune and
// queries read it without the writer's.
type health struct {
	mu      sync.Mutex
	h       Health
	lastTry time.Time
	// ino and fsid are the store file's identity when it was opened: the
	// file system's id rather than its device, so that one checked and
	// mounted again through another device (a loop device attached again)
	// holds the same file.
	ino  uint64
	fsid unix.Fsid
	logf func(format string, args ...any)
	// walSkipped is engine.WALTruncationsSkipped as the last fault was
	// logged.
	walSkipped uint64
}

// instance is one DuckDB instance of the store's file, in an engine
// process: the writer's pool and the connector each query makes a
// connection of its own from.
type instance struct {
	db        *sql.DB
	connector *engine.Connector
	// queryConns counts the queries' connections open on it: they keep
	// the instance, and its lock on the file, alive after db is closed.
	queryConns atomic.Int64
}

// handle is the store's DuckDB instance, which a fault closes and its
// clearing opens again; callers use it as the *sql.DB it holds.
type handle struct {
	p atomic.Pointer[instance]
	// down is why there is no instance, nil while there is one.
	down atomic.Pointer[error]
}

func newHandle(inst *instance) *handle {
	h := &handle{}
	h.p.Store(inst)
	return h
}

func (h *handle) get() (*sql.DB, error) {
	if e := h.down.Load(); e != nil {
		return nil, *e
	}
	return h.p.Load().db, nil
}

// connect makes a query's connection to the instance; done is called
// when it is closed.
func (h *handle) connect(ctx context.Context) (c driver.Conn, done func(), err error) {
	if e := h.down.Load(); e != nil {
		return nil, nil, *e
	}
	inst := h.p.Load()
	inst.queryConns.Add(1)
	if c, err = inst.connector.Connect(ctx); err != nil {
		inst.queryConns.Add(-1)
		return nil, nil, err
	}
	return c, func() { inst.queryConns.Add(-1) }, nil
}

// busy is how many connections of the current instance are open.
func (h *handle) busy() int64 {
	inst := h.p.Load()
	return int64(inst.db.Stats().OpenConnections) + inst.queryConns.Load()
}

func (h *handle) Conn(ctx context.Context) (*sql.Conn, error) {
	db, err := h.get()
	if err != nil {
		return nil, err
	}
	return db.Conn(ctx)
}

func (h *handle) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	db, err := h.get()
	if err != nil {
		return nil, err
	}
	return db.ExecContext(ctx, q, args...)
}

func (h *handle) Exec(q string, args ...any) (sql.Result, error) {
	return h.ExecContext(context.Background(), q, args...)
}

func (h *handle) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	db, err := h.get()
	if err != nil {
		return nil, err
	}
	return db.QueryContext(ctx, q, args...)
}

func (h *handle) Query(q string, args ...any) (*sql.Rows, error) {
	return h.QueryContext(context.Background(), q, args...)
}

// QueryRowContext on a closed instance answers "database is closed": a
// *sql.Row cannot carry another error.
func (h *handle) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return h.p.Load().db.QueryRowContext(ctx, q, args...)
}

func (h *handle) QueryRow(q string, args ...any) *sql.Row {
	return h.QueryRowContext(context.Background(), q, args...)
}

func (h *handle) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	db, err := h.get()
	if err != nil {
		return nil, err
	}
	return db.BeginTx(ctx, opts)
}

func (h *handle) Begin() (*sql.Tx, error) { return h.BeginTx(context.Background(), nil) }

// Close closes the instance, if it is open.
func (h *handle) Close() error {
	if h.down.Load() != nil {
		return nil
	}
	return h.p.Load().db.Close()
}

// shut closes the instance for a fault; calls fail with why from now on.
func (h *handle) shut(why error) {
	if h.down.Swap(&why) != nil {
		return
	}
	h.p.Load().db.Close()
}

// reopened puts a new instance in place of the one a fault closed.
func (h *handle) reopened(inst *instance) {
	h.p.Store(inst)
	h.down.Store(nil)
}

// Health is the state of the store's storage now. It also looks for the
// store's file, so a deletion shows before the next write.
func (s *Store) Health() Health {
	s.checkFile()
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.h
}

// noteIdentity remembers which file the store is, to tell when it is
// deleted or replaced.
func (s *Store) noteIdentity() {
	if ino, fsid, err := fileIdentity(s.path); err == nil {
		s.health.mu.Lock()
		s.health.ino, s.health.fsid = ino, fsid
		s.health.mu.Unlock()
	}
}

// fileIdentity is the inode of the file at path and the id of its file
// system.
func fileIdentity(path string) (uint64, unix.Fsid, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, unix.Fsid{}, err
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return 0, unix.Fsid{}, err
	}
	return st.Ino, fs.Fsid, nil
}

// checkFile puts the store in a "deleted" fault when its file is gone or
// another file took its place: what DuckDB writes to an unlinked file is
// lost when it closes.
func (s *Store) checkFile() {
	if s.readOnly {
		return
	}
	s.health.mu.Lock()
	seen := s.health.h.Fault == "deleted"
	s.health.mu.Unlock()
	if err := s.sameFile(); err != nil && !seen {
		s.fault("deleted", err)
	}
}

// sameFile says how the store's file is not the one it opened, if it is not.
func (s *Store) sameFile() error {
	nowIno, nowFsid, err := fileIdentity(s.path)
	s.health.mu.Lock()
	ino, fsid := s.health.ino, s.health.fsid
	s.health.mu.Unlock()
	switch {
	case ino == 0:
		return nil
	case err == nil && nowIno == ino && nowFsid == fsid:
		return nil
	case err == nil:
		return fmt.Errorf("the store's file %s was replaced by another file: nothing more is stored in it; restart the recorder to record into the new one", s.path)
	}
	what := "deleted"
	if _, derr := os.Stat(filepath.Dir(s.path)); derr != nil {
		what = "deleted with its data directory (or its file system unmounted)"
	}
	return fmt.Errorf("the store's file %s was %s: what it held is gone unless it comes back, and nothing more is stored; restart the recorder to start a new recording", s.path, what)
}

// writable says whether a write may go ahead; while a fault lasts it
// first tries, at most every faultRetry, to clear it. The writer's lock
// is held.
func (s *Store) writable() error {
	s.checkFile()
	s.health.mu.Lock()
	ok, due := s.health.h.State == "ok", time.Since(s.health.lastTry) >= faultRetry
	if !ok && due {
		s.health.lastTry = time.Now()
	}
	s.health.mu.Unlock()
	if ok {
		return nil
	}
	if due {
		err := s.recover()
		if err == nil {
			return nil
		}
		s.health.mu.Lock()
		s.health.h.LastError = err.Error()
		s.health.mu.Unlock()
	}
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	s.health.h.FailedWrites++
	return s.unavailable()
}

// unavailable is the error of a write refused in a fault; health.mu held.
func (s *Store) unavailable() error {
	h := s.health.h
	return fmt.Errorf("%w: %s since %s (%s)", ErrUnavailable, h.Fault, h.Since.UTC().Format("15:04:05"), h.LastError)
}

// wrote takes note of how a write went: a storage failure starts a fault,
// and the error returned says the write may be retried once it clears.
// The writer's lock is held, or the write (Prune's) takes none.
func (s *Store) wrote(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	if outOfMemory(err) {
		// DuckDB's memory limit, reached while queries hold much of it:
		// the transaction is rolled back and the write may be given
		// again (the recorder holds the epoch), no fault of the storage.
		return fmt.Errorf("%w: out of memory: %w", ErrUnavailable, err)
	}
	if kind := storageFault(err); kind != "" {
		if kind == "I/O error" && s.onReadOnlyFS() {
			// A failed fsync says no more than "fsync failed!": the
			// file system went read-only under it.
			kind = "read-only file system"
		}
		s.fault(kind, err)
	} else if s.failing() == nil {
		return err
	}
	// A fault found by another (a status request found the file gone)
	// closed the instance under this write: it may be given again too.
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// fault starts a fault of this kind, closing the DuckDB instance. In a
// fault already on, a deletion is what it is about from then on.
func (s *Store) fault(kind string, err error) {
	s.health.mu.Lock()
	h := &s.health.h
	h.LastError = err.Error()
	if h.State == "failing" {
		if kind == "deleted" && h.Fault != "deleted" {
			h.Fault = kind
			s.health.mu.Unlock()
			s.health.logf("storage fault (%s): %v", kind, err)
			return
		}
		s.health.mu.Unlock()
		return
	}
	h.State, h.Fault, h.Since = "failing", kind, time.Now().UTC()
	h.Faults++
	h.FailedWrites++
	s.health.lastTry = time.Now()
	wal := ""
	if n := engine.WALTruncationsSkipped(); n != s.health.walSkipped {
		s.health.walSkipped = n
		wal = " (the failed commit's log could not be cut off the write-ahead log: it is read again, and checked, when the store opens)"
	}
	s.health.mu.Unlock()
	if kind == "deleted" {
		s.health.logf("storage fault (%s): %v%s", kind, err, wal)
	} else {
		s.health.logf("storage fault (%s): %v%s; writes are refused, and retried every %v until it clears", kind, err, wal, faultRetry)
	}
	s.db.shut(fmt.Errorf("%w: %s: %v", ErrUnavailable, kind, err))
}

// onReadOnlyFS says whether the store's file system is read-only now.
func (s *Store) onReadOnlyFS() bool {
	dir := filepath.Dir(s.path)
	var fs unix.Statfs_t
	return unix.Statfs(dir, &fs) == nil && readOnly(&fs, checkWritableDir(dir))
}

// readOnly says whether a file system is read-only by its statfs flags,
// or by probe, the result of a write into it: as ext4 does on an error
// since Linux 6.6, it may refuse writes with EROFS while its flags still
// say read-write.
func readOnly(fs *unix.Statfs_t, probe error) bool {
	return fs.Flags&unix.ST_RDONLY != 0 || errors.Is(probe, syscall.EROFS)
}

// hadFault says whether the store has been through a fault.
func (s *Store) hadFault() bool {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.h.Faults > 0
}

// failing is ErrUnavailable while a fault lasts, for writes that do not
// try to clear it (Prune's).
func (s *Store) failing() error {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	if s.health.h.State == "ok" {
		return nil
	}
	return s.unavailable()
}

// recover opens the store again once its file is in place and its file
// system takes writes with room to spare. The writer's lock is held.
func (s *Store) recover() error {
	if err := s.sameFile(); err != nil {
		return err
	}
	dir := filepath.Dir(s.path)
	var wal int64
	if st, err := os.Stat(s.path + ".wal"); err == nil {
		wal = st.Size()
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("file system of %s: %w", dir, err)
	}
	probe := checkWritableDir(dir)
	if readOnly(&fs, probe) {
		s.refault("read-only file system")
		return fmt.Errorf("%s is on a read-only file system", dir)
	}
	if free := int64(fs.Bavail) * fs.Bsize; free < recoverFree+wal {
		s.refault("disk full")
		return fmt.Errorf("%d KiB free in %s, waiting for %d KiB", free>>10, dir, (recoverFree+wal)>>10)
	}
	if probe != nil {
		return probe
	}
	// DuckDB would replay the log, or drop one it does not recognise.
	if err := checkWAL(s.path); err != nil {
		return err
	}
	// The closed instance's queries end first: they would otherwise fail
	// on the new one's process midway.
	if n := s.db.busy(); n > 0 {
		return fmt.Errorf("waiting for %d connections of the closed store to end", n)
	}
	inst, err := openInstance(s.path, &s.opts)
	if err != nil {
		return fmt.Errorf("open again: %w", err)
	}
	s.db.reopened(inst)
	// What the failed commit wrote may be in the store after all (its
	// checkpoint failed, not its log): the store says what it holds, and
	// the commit sequence is read from it again.
	s.spanSeq = 0
	if err := s.reloadKnownNow(); err != nil {
		s.db.shut(fmt.Errorf("%w: %v", ErrUnavailable, err))
		return err
	}
	if err := s.recommit(); err != nil {
		s.db.shut(fmt.Errorf("%w: %v", ErrUnavailable, err))
		return err
	}
	s.health.mu.Lock()
	h := s.health.h
	s.health.h = Health{State: "ok", Faults: h.Faults, FailedWrites: h.FailedWrites}
	s.health.mu.Unlock()
	s.health.logf("storage fault (%s) cleared after %v: the store takes writes again (%d writes failed in the fault)",
		h.Fault, time.Since(h.Since).Round(time.Second), h.FailedWrites)
	return nil
}

// refault says what a fault is about now, when the file system shows it
// (a store that failed for want of space, then remounted read-only).
func (s *Store) refault(kind string) {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	if s.health.h.Fault != "deleted" {
		s.health.h.Fault = kind
	}
}

// outOfMemory tells DuckDB's errors of its memory limit, which its
// appender returns as plain text and a commit wraps in a TransactionContext
// Error ("Failed to commit: failed to pin block of size 256.0 KiB (121.8
// MiB/122.0 MiB used)").
func outOfMemory(err error) bool {
	msg := err.Error()
	for _, s := range []string{"could not allocate block", "failed to pin block", "Out of Memory Error"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// storageFault says what kind of storage failure err is, or "" when it is
// not one (a constraint violation, a cancelled context). DuckDB reports
// I/O failures as text within its error types. An engine process that
// ended under a write is a fault too: what it wrote is read back from the
// file, and checked, once a new one opens it.
func storageFault(err error) string {
	var ee *engine.ExitedError
	if errors.As(err, &ee) {
		return "database process ended"
	}
	var de *engine.Error
	if !errors.As(err, &de) {
		switch {
		case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
			return "disk full"
		case errors.Is(err, syscall.EROFS):
			return "read-only file system"
		case errors.Is(err, syscall.EIO):
			return "I/O error"
		}
		return ""
	}
	msg := de.Msg
	switch {
	case strings.Contains(msg, "No space left on device"), strings.Contains(msg, "Disk quota exceeded"):
		return "disk full"
	case strings.Contains(msg, "Read-only file system"):
		return "read-only file system"
	case de.Type == engine.ErrorTypeIO, de.Type == engine.ErrorTypeFatal, strings.Contains(msg, "Failed to commit"),
		strings.Contains(msg, "invalidated"):
		return "I/O error"
	}
	return ""
}
