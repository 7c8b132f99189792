package parquet

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/store"
)

// ArgumentError is Select's error for an argument or range it refuses,
// as opposed to the store's errors.
type ArgumentError string

func (e ArgumentError) Error() string { return string(e) }

// tableName is an argument that names a table; anything else is a query.
var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// IsTable says whether what, the command's argument, names a table.
func IsTable(what string) bool { return tableName.MatchString(what) }

// Select is the query that exports what: a table or view of the store,
// its rows restricted to r by their time (see the package doc), or a
// query, given as is. ranged says the range was given by the user: a
// query, or a table without a time, is then refused rather than exported
// whole.
func Select(ctx context.Context, q store.Querier, what string, r findings.Range, ranged bool) (string, error) {
	if !IsTable(what) {
		if ranged {
			return "", ArgumentError("--range: a query selects its own rows (say the range in its WHERE); --range restricts a table")
		}
		return what, nil
	}
	res, err := q.Query(ctx, `SELECT column_name FROM duckdb_columns() WHERE database_name = current_database()
		AND schema_name = 'main' AND table_name = '`+what+`' ORDER BY column_index`)
	if err != nil {
		return "", fmt.Errorf("columns of %s: %w", what, err)
	}
	cols := map[string]bool{}
	for _, row := range res.Rows {
		if name, ok := row[0].(string); ok {
			cols[name] = true
		}
	}
	if len(cols) == 0 {
		tables, err := Tables(ctx, q)
		if err != nil {
			return "", err
		}
		return "", ArgumentError(fmt.Sprintf("no table %q in the store (its tables: %s; or give a SELECT)", what, strings.Join(tables, ", ")))
	}
	from, to := fmt.Sprint(r.StartNs), fmt.Sprint(r.EndNs)
	sel := `SELECT * FROM "` + what + `"`
	switch {
	case cols["ts_ns"]:
		return sel + ` WHERE ts_ns >= ` + from + ` AND ts_ns < ` + to + ` ORDER BY ts_ns`, nil
	case cols["start_ns"] && cols["end_ns"]:
		return sel + ` WHERE start_ns < ` + to + ` AND end_ns > ` + from + ` ORDER BY start_ns`, nil
	case cols["bucket_ns"]:
		return sel + ` WHERE bucket_ns >= ` + from + ` AND bucket_ns < ` + to + ` ORDER BY bucket_ns`, nil
	case cols["epoch"] && cols["host"]:
		return sel + ` AS t WHERE EXISTS (SELECT 1 FROM epochs AS e WHERE e.host = t.host AND e.epoch = t.epoch
			AND e.start_ns < ` + to + ` AND e.end_ns > ` + from + `) ORDER BY t.epoch`, nil
	}
	if ranged {
		return "", ArgumentError("--range: table " + what + " has no time (ts_ns, bucket_ns, start_ns and end_ns, or epoch) and is exported whole: leave out --range, or give a SELECT")
	}
	return sel, nil
}

// Tables are the store's tables and views, by name.
func Tables(ctx context.Context, q store.Querier) ([]string, error) {
	res, err := q.Query(ctx, `SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'main'
		UNION ALL SELECT view_name FROM duckdb_views() WHERE NOT internal AND database_name = current_database() AND schema_name = 'main'`)
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	var out []string
	for _, row := range res.Rows {
		if name, ok := row[0].(string); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ExportDir makes a private directory for a store's export to out: beside
// it, so that the file is renamed into place, or the system's temporary
// directory for stdout ("-"). The caller removes it.
func ExportDir(out string) (string, error) {
	dir := ""
	if out != "-" {
		dir = filepath.Dir(out)
	}
	d, err := os.MkdirTemp(dir, ".holter-export-")
	if err != nil {
		return "", fmt.Errorf("--out: %w", err)
	}
	return d, nil
}

// Place puts the file a store exported (path) at out, or copies it to w
// when out is "-".
func Place(path, out string, w io.Writer) error {
	if out != "-" {
		if err := os.Rename(path, out); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// WriteFile writes out whole or not at all: write fills a temporary file
// beside it, which becomes out once written and closed; on an error it is
// removed and out is as it was.
func WriteFile(out string, write func(w io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(out), ".holter-export-*.parquet")
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	tmp := f.Name()
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// As the store's COPY writes its files.
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		if err = os.Rename(tmp, out); err != nil {
			err = fmt.Errorf("--out: %w", err)
		}
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
