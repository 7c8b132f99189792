package store

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExportParquet writes a query's rows with the store's COPY and reads
// the file back with a DuckDB of its own: the rows and their values are
// the store's. What the gate refuses, EXPLAIN, and a query without rows
// leave no file; the export directory's files are out of a query's reach.
func TestExportParquet(t *testing.T) {
	exportDir := filepath.Join(t.TempDir(), "exports")
	s, _ := sandboxStore(t, &Options{ExportDir: exportDir})
	ctx := context.Background()
	for n := int64(2); n <= 5; n++ {
		if err := s.WriteEpoch(ctx, testEpoch(n)); err != nil {
			t.Fatal(err)
		}
	}
	path, n, err := s.ExportParquet(ctx, "SELECT epoch, start_ns, host FROM epochs WHERE epoch >= 2 ORDER BY epoch; -- four\n")
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 || filepath.Dir(path) != exportDir {
		t.Fatalf("exported %d rows to %s, want 4 in %s", n, path, exportDir)
	}
	reader, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	var count, sum int64
	var hosts string
	if err := reader.QueryRow(`SELECT count(*), sum(start_ns), string_agg(DISTINCT host, ',') FROM read_parquet($1)`, path).Scan(&count, &sum, &hosts); err != nil {
		t.Fatal(err)
	}
	if count != 4 || sum != (2+3+4+5)*1e9 || hosts != "h1" {
		t.Errorf("the file holds %d rows, start_ns summing to %d, hosts %q; want 4, %d, h1", count, sum, hosts, int64(14e9))
	}
	// A file of the export directory is not a table a query may name.
	if _, err := s.Query(ctx, "SELECT count(*) FROM '"+path+"'"); !errors.Is(err, ErrNotReadOnly) {
		t.Errorf("a query read the exported file: %v", err)
	}
	os.Remove(path)

	for _, c := range []struct{ name, query string }{
		{"write", "CREATE TABLE pwned AS SELECT 1"},
		{"copy", "COPY epochs TO '" + exportDir + "/x.csv'"},
		{"two statements", "SELECT 1; SELECT 2"},
		{"closing the subquery", "SELECT 1) TO '/tmp/holter-pwned.csv' (FORMAT csv); SELECT (1"},
		{"comment over the wrapper", "SELECT 1 /*"},
		{"side effect", "SELECT nextval('x')"},
		{"read a file", "SELECT * FROM read_parquet('" + exportDir + "/*.parquet')"},
		{"explain", "EXPLAIN SELECT * FROM epochs"},
		{"syntax", "SELEC 1"},
		{"unknown table", "SELECT * FROM nope"},
		{"no rows", "SELECT * FROM epochs WHERE epoch < 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, _, err := s.ExportParquet(ctx, c.query)
			if err == nil {
				t.Fatalf("%q exported to %s", c.query, path)
			}
			if !strings.HasPrefix(err.Error(), "query: ") && !strings.HasPrefix(err.Error(), "export: ") {
				t.Errorf("%q: unclear error %q", c.query, err)
			}
			t.Log(err)
			if c.name == "no rows" && !errors.Is(err, ErrNoRows) {
				t.Errorf("%q: %v, want ErrNoRows", c.query, err)
			}
			if left, _ := os.ReadDir(exportDir); len(left) > 0 {
				t.Errorf("%q left %v", c.query, left)
			}
		})
	}
	if _, err := os.Stat("/tmp/holter-pwned.csv"); err == nil {
		t.Error("an export wrote /tmp/holter-pwned.csv")
	}
	if _, err := s.Query(ctx, "SELECT * FROM pwned"); err == nil {
		t.Error("an export created a table")
	}
}
