package engine

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestWALTruncationOnAReadOnlyFileSystem checks the ftruncate DuckDB
// binds to: it truncates as the system call does, and on a file system
// the kernel remounted read-only it reports the truncation of a
// write-ahead log as done (DuckDB would end the process otherwise) and
// that of any other file as failed.
func TestWALTruncationOnAReadOnlyFileSystem(t *testing.T) {
	testutil.RequireRoot(t)
	fs := testutil.NewExtFS(t, 16)
	open := func(name string) *os.File {
		f, err := os.OpenFile(filepath.Join(fs.Dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if _, err := f.Write(make([]byte, 8192)); err != nil {
			t.Fatal(err)
		}
		return f
	}
	wal, db := open("holter.duckdb.wal"), open("holter.duckdb")
	size := func(f *os.File) int64 {
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	if err := truncate(wal, 4096); err != nil || size(wal) != 4096 {
		t.Fatalf("truncate a log to 4096 bytes on a writable file system: %v, %d bytes", err, size(wal))
	}
	if err := truncate(db, 100_000); err != nil || size(db) != 100_000 {
		t.Fatalf("extend a file to 100000 bytes: %v, %d bytes", err, size(db))
	}

	fs.Break()
	before := localTruncationsSkipped()
	if err := truncate(wal, 0); err != nil {
		t.Errorf("truncate a log on a read-only file system: %v, want it reported done", err)
	}
	if got := localTruncationsSkipped() - before; got != 1 {
		t.Errorf("%d truncations counted as skipped, want 1", got)
	}
	if size(wal) != 4096 {
		t.Errorf("the log has %d bytes on the read-only file system, want its 4096 unchanged", size(wal))
	}
	if err := truncate(db, 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("truncate the database file on a read-only file system: %v, want EROFS", err)
	}
	if got := localTruncationsSkipped() - before; got != 1 {
		t.Errorf("%d truncations counted as skipped after the database file's, want 1", got)
	}
}
