package tracequery

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/store"
)

// TestRecordedJoinIsSandboxed: the part of a WITH query joined with the
// recording runs through the store's read-only check, so SQL after the
// live part's WITH (a second statement, a function that writes) is
// refused before anything of it runs, and the recording is unchanged.
func TestRecordedJoinIsSandboxed(t *testing.T) {
	dir := t.TempDir()
	recordedCPU(t, dir, []string{"a", "b"})
	st, err := store.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	live := &store.Result{Columns: []string{"comm", "n"}, Types: []string{"VARCHAR", "BIGINT"}, Rows: [][]any{{"a", int64(1)}}}
	const with = `WITH live AS (SELECT comm, count() AS n FROM syscall.getppid GROUP BY comm) `
	tables := func() string {
		res, err := st.Query(context.Background(), `SELECT string_agg(table_name, ',' ORDER BY table_name) FROM duckdb_tables()`)
		if err != nil {
			t.Fatal(err)
		}
		return res.Rows[0][0].(string)
	}
	before := tables()
	for _, after := range []string{
		`SELECT * FROM live; CREATE TABLE pwned AS SELECT 42`,
		`SELECT * FROM live; CREATE TABLE pwned AS SELECT 42; SELECT 1`,
		`SELECT * FROM live; ATTACH ':memory:' AS sink`,
		`SELECT * FROM live, checkpoint()`,
		`SELECT * FROM live WHERE n = (SELECT count(*) FROM query('CREATE TABLE pwned AS SELECT 1'))`,
	} {
		p, err := Compile(with+after, nil, nil)
		if err != nil {
			t.Logf("%q: refused when compiled: %v", after, err)
			continue
		}
		res, err := p.joinRecorded(context.Background(), store.Plain(st), live)
		if !errors.Is(err, store.ErrNotReadOnly) {
			t.Errorf("%q: the recorded part gave %v, %v; want the read-only check's refusal", after, res, err)
		}
		if got := tables(); got != before {
			t.Fatalf("%q changed the recording's tables: %s, was %s", after, got, before)
		}
	}
	// What should pass does.
	p, err := Compile(with+`SELECT live.comm, n, (SELECT count(*) FROM samples) AS s FROM live`, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.joinRecorded(context.Background(), store.Plain(st), live)
	if err != nil || len(res.Rows) != 1 || !strings.Contains(strings.Join(res.Columns, ","), "comm") {
		t.Errorf("a read-only join: %v, %v", res, err)
	}
}
