package store

import (
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/holter-dev/holter/internal/engine"
	"golang.org/x/sys/unix"
)

// Before the recorder opens an existing store for writing (which may run
// a migration and a checkpoint), the store is checked without writing
// anything: its write-ahead log must be one DuckDB wrote, the file must
// open read-only with that log replayed in memory, hold a schema this
// holter knows, and every row of every table must read back (DuckDB
// checks each block's checksum as it reads it); and the file system must
// have room for the log's checkpoint. A store that fails any of these is
// refused and left as it was.

// ErrNotVerified is returned by Open for an existing store it refused to
// open for writing; the files were left untouched.
var ErrNotVerified = errors.New("the store was left untouched")

// walHeader is how DuckDB (1.x) begins a write-ahead log: the WAL_VERSION
// entry, field 100 (the entry type, 98) and field 101 (the version),
// unframed. Version 2 frames every later entry as a little-endian size
// and checksum followed by the entry.
var walHeader = []byte{0x64, 0x00, 98, 0x65, 0x00}

const (
	walFramedVersion = 2
	walEntryHeader   = 16
	// maxWALEntry is larger than any entry DuckDB writes (a commit's rows
	// are logged a row group at a time): an entry declaring more is not
	// DuckDB's.
	maxWALEntry = 1 << 30
)

// checkWAL refuses a write-ahead log DuckDB would discard without a word:
// one that does not start with DuckDB's header, or whose entries declare
// sizes no entry has. A log cut short in its last entry (a recorder
// killed while committing) is DuckDB's to roll back, and passes; one whose
// entry checksums do not match DuckDB itself refuses.
func checkWAL(dbPath string) error {
	path := dbPath + ".wal"
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open store %s: read its write-ahead log: %w", dbPath, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("open store %s: read its write-ahead log: %w", dbPath, err)
	}
	size := st.Size()
	if size == 0 {
		return nil
	}
	garbage := func(format string, a ...any) error {
		return fmt.Errorf("open store %s: its write-ahead log %s is not one DuckDB wrote (%s): opening would discard it and what it holds, so %w. If the log is damaged beyond use, move it away and the store opens without it; if it is another file, put the right log back",
			dbPath, path, fmt.Sprintf(format, a...), ErrNotVerified)
	}
	head := make([]byte, len(walHeader)+3)
	if n, _ := io.ReadFull(f, head); n < len(head) || string(head[:len(walHeader)]) != string(walHeader) {
		return garbage("no log header at byte 0")
	}
	if head[len(walHeader)] != walFramedVersion || head[len(walHeader)+1] != 0xff || head[len(walHeader)+2] != 0xff {
		return nil // a version this check does not frame: DuckDB's to judge
	}
	var hdr [walEntryHeader]byte
	for pos := int64(len(head)); pos+walEntryHeader <= size; {
		if _, err := f.ReadAt(hdr[:], pos); err != nil {
			return fmt.Errorf("open store %s: read its write-ahead log: %w", dbPath, err)
		}
		n := binary.LittleEndian.Uint64(hdr[:8])
		if n == 0 || n > maxWALEntry {
			return garbage("an entry at byte %d declares %d bytes", pos, n)
		}
		pos += walEntryHeader + int64(n)
	}
	return nil
}

// verifyExisting opens the store at path read-only, replaying its log in
// memory, and reads it whole: its schema version, and every column of
// every row of every table.
func verifyExisting(path string) error {
	o := (&Options{ReadOnly: true}).withDefaults()
	connector, err := engine.NewConnector(engine.Options{Path: path, Config: dsnConfig(filepath.Dir(path), &o), CheckpointAbove: -1})
	if err != nil {
		return verifyError(path, err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	if err := db.Ping(); err != nil {
		return verifyError(path, err)
	}
	s := &Store{db: newHandle(&instance{db: db, connector: connector}), path: path, readOnly: true}
	if err := s.checkVersion(); err != nil {
		return fmt.Errorf("%w; %w", err, ErrNotVerified)
	}
	tables, err := db.Query(`SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND NOT internal ORDER BY table_name`)
	if err != nil {
		return verifyError(path, err)
	}
	var names []string
	for tables.Next() {
		var n string
		if err := tables.Scan(&n); err != nil {
			tables.Close()
			return verifyError(path, err)
		}
		names = append(names, n)
	}
	tables.Close()
	for _, t := range names {
		// hash of the row reads every column of it.
		var rows int64
		q := fmt.Sprintf(`SELECT count(*) FROM %s AS t WHERE hash(t) IS NOT NULL`, quoteIdent(t))
		if err := db.QueryRow(q).Scan(&rows); err != nil {
			return verifyError(path, fmt.Errorf("read table %s: %w", t, err))
		}
	}
	return nil
}

func verifyError(path string, err error) error {
	if isLockConflict(err) {
		return fmt.Errorf("open store %s: %w: %v", path, ErrLocked, err)
	}
	// DuckDB reports a log it cannot replay only as text.
	if strings.Contains(err.Error(), "Failure while replaying WAL") {
		return fmt.Errorf("open store %s: its write-ahead log %s.wal is damaged: %v; %w. Move the log away to open the store without the transactions from the damaged entry on",
			path, path, err, ErrNotVerified)
	}
	return fmt.Errorf("open store %s: the file exists but does not read back as a holter store: %v; %w (move it away to start a new recording)",
		path, err, ErrNotVerified)
}

// startFree is the room a store needs to open for writing, besides what
// checkpointing its log takes: a migration, and the first epochs.
const startFree = 16 << 20

// checkSpace refuses to open a store for writing on a file system without
// room to checkpoint its log: a checkpoint that runs out of space midway
// has written into the file already.
func checkSpace(path string) error {
	var wal int64
	if st, err := os.Stat(path + ".wal"); err == nil {
		wal = st.Size()
	}
	free, err := freeBytes(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("open store %s: %w", path, err)
	}
	if need := startFree + 2*wal; free < need {
		return fmt.Errorf("open store %s: %d MiB free in %s, and opening the store for writing needs %d MiB (its write-ahead log is %d MiB); %w: free some space and start again",
			path, free>>20, filepath.Dir(path), need>>20, wal>>20, ErrNotVerified)
	}
	return nil
}

// freeBytes is the space an unprivileged writer may use in dir's file
// system; a read-only file system has none.
func freeBytes(dir string) (int64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return 0, fmt.Errorf("free space of %s: %w", dir, err)
	}
	if fs.Flags&unix.ST_RDONLY != 0 {
		return 0, nil
	}
	return int64(fs.Bavail) * fs.Bsize, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
