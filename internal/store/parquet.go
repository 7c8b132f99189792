package store

import (
	"context"
	"crypto/rand"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/holter-dev/holter/internal/engine"
)

// Parquet exports. A query's rows are written to a Parquet file by
// DuckDB's own writer, COPY (query) TO 'file' (FORMAT parquet), issued by
// the store around a query the sandbox's gate passed as one SELECT. The
// store's file access is off for every connection, so the one directory a
// COPY may write to, Options.ExportDir, is allowed when the instance
// opens (allowed_directories, fixed by lock_configuration); the gate
// refuses a table reference that names a file (a replacement scan), so no
// query reads what an export wrote there. The COPY streams: the rows are
// never held whole, in Go or in DuckDB, and the result limits of Query do
// not apply; the time limit does.

// ErrNoRows is returned by ExportParquet for a query without rows: no
// file is left.
var ErrNoRows = errors.New("no rows to export")

// exportPrefix names the files ExportParquet writes in the export
// directory; Open removes those a killed process left.
const exportPrefix = "holter-export-"

// ExportParquet writes the rows of query, one read-only SELECT the
// sandbox passes (not EXPLAIN), as a new Parquet file in the export
// directory (Options.ExportDir), and returns its path and row count. The
// caller moves or removes the file. On an error no file is left.
func (s *Store) ExportParquet(ctx context.Context, query string) (path string, rows int64, err error) {
	if s.opts.ExportDir == "" {
		return "", 0, errors.New("export: the store was opened without an export directory")
	}
	release, err := s.startQuery(ctx)
	if err != nil {
		return "", 0, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, s.opts.QueryTimeout)
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)()
	dc, done, err := s.db.connect(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("export: %w", err)
	}
	defer done()
	defer dc.Close()
	conn, ok := dc.(queryConn)
	if !ok {
		return "", 0, fmt.Errorf("export: unexpected driver connection %T", dc)
	}
	if explain, _, err := cutExplain(query); err != nil {
		return "", 0, err
	} else if explain != "" {
		return "", 0, fmt.Errorf("query: EXPLAIN has no rows to export: %w", ErrNotReadOnly)
	}
	if err := s.checkSelect(ctx, conn, query, false); err != nil {
		return "", 0, err
	}
	// The COPY holds the query as a parenthesized subquery; that text, as
	// a SELECT of its own, is checked as the query was, so the
	// parentheses enclose exactly the statement checked (a newline ends a
	// trailing comment first).
	sub := "(\n" + trimSemicolons(query) + "\n)"
	if err := s.checkSelect(ctx, conn, "SELECT * FROM "+sub, false); err != nil {
		return "", 0, fmt.Errorf("%w (in the query as exported)", err)
	}
	file := filepath.Join(s.opts.ExportDir, exportPrefix+rand.Text()+".parquet")
	copyText := "COPY " + sub + " TO '" + strings.ReplaceAll(file, "'", "''") + "' (FORMAT parquet)"
	// Prepare runs nothing of a text of several statements: it refuses
	// it. What prepared must be one COPY.
	stmt, err := conn.Prepare(copyText)
	if err != nil {
		return "", 0, s.exportFailed(ctx, fmt.Errorf("query: %w", err))
	}
	t, err := statementType(stmt)
	stmt.Close()
	if err != nil {
		return "", 0, fmt.Errorf("export: %w", err)
	}
	if t != engine.StatementCopy {
		return "", 0, fmt.Errorf("export: the statement prepared is not a COPY: %w", ErrNotReadOnly)
	}
	defer func() {
		if err != nil {
			os.Remove(file)
		}
	}()
	res, err := conn.QueryContext(s.atQueryPriority(ctx), copyText, nil)
	if err != nil {
		return "", 0, s.exportFailed(ctx, fmt.Errorf("export: %w", err))
	}
	defer res.Close()
	dest := make([]driver.Value, len(res.Columns()))
	if err := res.Next(dest); err != nil {
		if err == io.EOF {
			err = errors.New("COPY returned no count")
		}
		return "", 0, fmt.Errorf("export: %w", err)
	}
	n, ok := dest[0].(int64)
	if !ok {
		return "", 0, fmt.Errorf("export: COPY returned %T for its count", dest[0])
	}
	if n == 0 {
		return "", 0, fmt.Errorf("export: %w", ErrNoRows)
	}
	return file, n, nil
}

// exportFailed says an export stopped at its time limit as such.
func (s *Store) exportFailed(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("export: stopped after %v, the time one query may take (--query-timeout): %w", s.opts.QueryTimeout, ErrQueryTimeout)
	}
	return err
}

// prepareExportDir makes the export directory, private to its owner, and
// removes the files a killed export left in it.
func prepareExportDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("export directory: %w", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, exportPrefix+"*.parquet"))
	for _, f := range left {
		os.Remove(f)
	}
	return nil
}
