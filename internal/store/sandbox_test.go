package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// refused is what the sandbox must turn away. gate marks the statements
// the read-only check itself refuses (ErrNotReadOnly); the others may fail
// later, at DuckDB (a file it may not read, a table that does not exist),
// as long as they fail and change nothing.
var refused = []struct {
	name, sql string
	gate      bool
}{
	// Stacked statements, in every position, and the tricks that hide a ';'.
	{"create then select", `CREATE TABLE pwned AS SELECT 42; SELECT 1`, true},
	{"select then create", `SELECT 1; CREATE TABLE pwned AS SELECT 42`, true},
	{"select between", `SELECT 1; CREATE TABLE pwned (a INT); SELECT 2`, true},
	{"select select", `SELECT 1; SELECT 2`, true},
	{"comment then drop", "SELECT 1; -- x\nDROP TABLE meta", true},
	{"semicolon in string", `SELECT ';'; DROP TABLE meta`, true},
	{"semicolon in block comment", `SELECT 1 /* ; */; DROP TABLE meta`, true},
	{"dollar quoted", `SELECT $$;$$; DROP TABLE meta`, true},
	{"dollar tag", `SELECT $x$ ; $x$; DELETE FROM meta`, true},
	{"unicode", `SELECT 'é' AS "ünï"; DELETE FROM meta`, true},
	{"newlines", "SELECT 1\n;\nDROP TABLE meta", true},
	{"leading comment", "-- hello\nDROP TABLE meta", true},
	{"quoted identifier", `SELECT 1 AS "a;b"; DROP TABLE meta`, true},
	// EXPLAIN ANALYZE runs its statement.
	{"explain analyze insert", `EXPLAIN ANALYZE INSERT INTO meta VALUES ('k','v')`, true},
	{"explain analyze delete", `EXPLAIN ANALYZE DELETE FROM meta`, true},
	{"explain analyze update", `EXPLAIN ANALYZE UPDATE meta SET value = 'x'`, true},
	{"explain analyze create", `EXPLAIN ANALYZE CREATE TABLE pwned AS SELECT 1`, true},
	{"explain (analyze) insert", `EXPLAIN (ANALYZE) INSERT INTO meta VALUES ('k','v')`, true},
	{"explain comment analyze", `explain /* x */ analyse insert into meta values ('k','v')`, true},
	{"explain analyze checkpoint", `EXPLAIN ANALYZE SELECT * FROM checkpoint()`, true},
	{"explain insert", `EXPLAIN INSERT INTO meta VALUES ('k','v')`, true},
	{"explain stacked", `EXPLAIN SELECT 1; DROP TABLE meta`, true},
	{"explain unknown option", `EXPLAIN (ANALYZE, SETTINGS) SELECT 1`, true},
	// Transactions.
	{"begin then select", `BEGIN TRANSACTION; SELECT 1`, true},
	{"begin", `BEGIN TRANSACTION`, true},
	{"commit", `COMMIT`, true},
	{"rollback", `ROLLBACK`, true},
	{"abort", `ABORT`, true},
	// Databases: what diverted the recorder's writes.
	{"attach use create", `ATTACH ':memory:' AS sink; USE sink; CREATE TABLE epochs (a INT); SELECT 1`, true},
	{"attach", `ATTACH ':memory:' AS sink`, true},
	{"attach file", `ATTACH '/tmp/holter-pwned.db' AS other`, true},
	{"detach", `DETACH DATABASE IF EXISTS sink`, true},
	{"use", `USE system`, true},
	// PRAGMA, CALL, SET.
	{"pragma show_tables", `PRAGMA show_tables`, true},
	{"pragma profiling", `PRAGMA enable_profiling`, true},
	{"pragma checkpoint", `PRAGMA force_checkpoint`, true},
	{"pragma import", `PRAGMA import_database('/tmp')`, true},
	{"call checkpoint", `CALL checkpoint()`, true},
	{"call force_checkpoint", `CALL force_checkpoint()`, true},
	{"call enable_logging", `CALL enable_logging()`, true},
	{"set memory", `SET memory_limit = '10GB'`, true},
	{"set external", `SET enable_external_access = true`, true},
	{"reset", `RESET memory_limit`, true},
	{"set variable", `SET VARIABLE x = 1`, true},
	// Files and extensions.
	{"copy to", `COPY meta TO '/tmp/holter-pwned.csv'`, true},
	{"copy select to", `COPY (SELECT 1) TO '/tmp/holter-pwned.csv'`, true},
	{"copy from", `COPY meta FROM '/etc/passwd'`, true},
	{"export", `EXPORT DATABASE '/tmp/holter-pwned'`, true},
	{"import", `IMPORT DATABASE '/tmp/holter-pwned'`, true},
	{"install", `INSTALL excel`, true},
	{"force install", `FORCE INSTALL httpfs`, true},
	{"load", `LOAD excel`, true},
	{"load path", `LOAD '/tmp/evil.duckdb_extension'`, true},
	// DDL and DML.
	{"create macro", `CREATE MACRO m(x) AS x + 1`, true},
	{"create secret", `CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')`, true},
	{"create temp table", `CREATE TEMP TABLE t AS SELECT 1`, true},
	{"create view", `CREATE OR REPLACE VIEW span_costs AS SELECT 1`, true},
	{"create sequence", `CREATE SEQUENCE s`, true},
	{"create type", `CREATE TYPE e AS ENUM ('a')`, true},
	{"drop", `DROP TABLE meta`, true},
	{"alter", `ALTER TABLE meta ADD COLUMN x INT`, true},
	{"insert", `INSERT INTO meta VALUES ('k','v')`, true},
	{"insert returning", `INSERT INTO meta VALUES ('k','v') RETURNING *`, true},
	{"update", `UPDATE meta SET value = 'x'`, true},
	{"delete", `DELETE FROM meta`, true},
	{"truncate", `TRUNCATE meta`, true},
	{"vacuum", `VACUUM`, true},
	{"vacuum analyze", `VACUUM ANALYZE`, true},
	{"analyze", `ANALYZE`, true},
	{"checkpoint", `CHECKPOINT`, true},
	{"force checkpoint", `FORCE CHECKPOINT`, true},
	{"dynamic pivot", `PIVOT meta ON key USING first(value)`, true},
	// Side effects reachable from a SELECT.
	{"checkpoint()", `SELECT * FROM checkpoint()`, true},
	{"force_checkpoint()", `SELECT * FROM force_checkpoint()`, true},
	{"qualified checkpoint", `SELECT * FROM system.main.checkpoint()`, true},
	{"upper case checkpoint", `SELECT * FROM CHECKPOINT()`, true},
	{"quoted checkpoint", `SELECT * FROM "Checkpoint"()`, true},
	{"nested checkpoint", `SELECT * FROM (SELECT * FROM (SELECT * FROM checkpoint()))`, true},
	{"checkpoint in exists", `SELECT 1 WHERE EXISTS (SELECT * FROM force_checkpoint())`, true},
	{"checkpoint in cte", `WITH c AS (SELECT * FROM checkpoint()) SELECT * FROM c`, true},
	{"checkpoint in lateral", `SELECT * FROM range(1) r, LATERAL (SELECT * FROM checkpoint())`, true},
	{"describe checkpoint", `DESCRIBE SELECT * FROM checkpoint()`, true},
	{"summarize checkpoint", `SUMMARIZE SELECT * FROM force_checkpoint()`, true},
	{"query()", `SELECT * FROM query('CREATE TABLE pwned AS SELECT 1')`, true},
	{"query() select", `SELECT * FROM query('SELECT 1')`, true},
	{"query_table()", `SELECT * FROM query_table('meta')`, true},
	{"json_execute_serialized_sql", `SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT 1'))`, true},
	{"json_serialize_plan", `SELECT json_serialize_plan('SELECT * FROM checkpoint()')`, true},
	{"nextval", `SELECT nextval('s')`, true},
	{"setseed", `SELECT setseed(0.5)`, true},
	{"write_log", `SELECT write_log('x')`, true},
	{"enable_logging()", `SELECT * FROM enable_logging()`, true},
	{"truncate logs", `SELECT * FROM truncate_duckdb_logs()`, true},
	{"arrow_scan", `SELECT * FROM arrow_scan(0, 0, 0)`, true},
	{"secrets", `SELECT * FROM duckdb_secrets()`, true},
	{"read_xlsx", `SELECT * FROM read_xlsx('x.xlsx')`, true},
	{"read_csv", `SELECT * FROM read_csv('/etc/passwd')`, true},
	{"read_text", `SELECT * FROM read_text('/etc/passwd')`, true},
	{"read_blob", `SELECT * FROM read_blob('/etc/shadow')`, true},
	{"read_parquet url", `SELECT * FROM read_parquet('http://example.com/x.parquet')`, true},
	{"read_json", `SELECT * FROM read_json('x.json')`, true},
	{"glob", `SELECT * FROM glob('/etc/*')`, true},
	{"sniff_csv", `SELECT * FROM sniff_csv('/etc/passwd')`, true},
	{"parquet_metadata", `SELECT * FROM parquet_metadata('/x.parquet')`, true},
	{"histogram_values", `SELECT * FROM histogram_values('meta', key)`, true},
	{"read_csv in subquery", `SELECT (SELECT count(*) FROM read_csv('/etc/passwd'))`, true},
	{"replacement scan", `SELECT * FROM '/etc/passwd'`, true},
	{"replacement scan csv", `SELECT * FROM 'x.csv'`, true},
	{"replacement scan glob", `FROM 'holter-export-*'`, true},
	{"replacement scan in a join", `SELECT * FROM meta JOIN 'x.parquet' USING (key)`, true},
	// Not queries at all.
	{"empty", ``, false},
	{"only comment", `-- nothing`, false},
	{"syntax error", `SELEC 1`, false},
	{"fullwidth semicolon", `SELECT 1；DROP TABLE meta`, false},
	{"unknown table", `SELECT * FROM nope`, false},
}

// allowed is what users need and must keep working; each is checked for
// one row at least, or the error it gives.
var allowed = []string{
	`SELECT 1`,
	`SELECT 1;`,
	`SELECT 1; -- x`,
	`SELECT ';'`,
	`SELECT 1 /* ; */`,
	`SELECT $$;$$`,
	`SELECT 'é' AS "ünï"`,
	`select count(*) from samples`,
	`WITH x AS (SELECT 1 AS a) SELECT a FROM x`,
	`FROM epochs`,
	`FROM meta SELECT key`,
	`TABLE meta`,
	`VALUES (1), (2)`,
	`DESCRIBE samples`,
	`DESCRIBE SELECT 1 AS a`,
	`SHOW TABLES`,
	`SHOW ALL TABLES`,
	`SHOW samples`,
	`SUMMARIZE meta`,
	`EXPLAIN SELECT * FROM samples`,
	`EXPLAIN ANALYZE SELECT count(*) FROM samples`,
	`explain analyse select 1`,
	`EXPLAIN (ANALYZE) SELECT 1`,
	`EXPLAIN (ANALYZE, FORMAT JSON) SELECT 1`,
	`EXPLAIN (FORMAT json) SELECT 1`,
	`EXPLAIN (SELECT 1)`,
	`/* a comment */ EXPLAIN SELECT 1`,
	`PIVOT meta ON key IN ('schema_version') USING first(value)`,
	`UNPIVOT (SELECT 1 AS a, 2 AS b) ON a, b INTO NAME k VALUE v`,
	`SELECT * FROM range(3)`,
	`SELECT * FROM generate_series(1, 3)`,
	`SELECT unnest([1, 2, 3])`,
	`SELECT * FROM duckdb_tables()`,
	`SELECT * FROM duckdb_settings() WHERE name = 'memory_limit'`,
	`SELECT * FROM pragma_table_info('meta')`,
	`SELECT * FROM pragma_database_size()`,
	`SELECT count(*) FROM information_schema.tables`,
	`SELECT * FROM span_costs`,
	`SELECT sum(weight) OVER (ORDER BY epoch) FROM samples`,
	`SELECT random() < 2, uuid() IS NOT NULL`,
	`SELECT 1 UNION ALL SELECT 2`,
}

// sandboxStore opens a store with HOME pointing at an empty directory, so
// that DuckDB's use of HOME shows.
func sandboxStore(t testing.TB, opts *Options) (*Store, string) {
	t.Helper()
	home := t.TempDir()
	if tt, ok := t.(*testing.T); ok {
		tt.Setenv("HOME", home)
	} else {
		os.Setenv("HOME", home)
	}
	s, err := Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.WriteEpoch(context.Background(), testEpoch(1)); err != nil {
		t.Fatal(err)
	}
	return s, home
}

// catalogState is what a query must not change: the databases attached,
// the tables, views, sequences, the meta table, the settings, the secrets;
// with all, also the functions and types (slower to list). The writer's
// connection reads it, as the recorder would see it.
func catalogState(t testing.TB, s *Store, all bool) string {
	t.Helper()
	parts := []string{
		`(SELECT string_agg(database_name || ':' || readonly, ',' ORDER BY database_name) FROM duckdb_databases())`,
		`(SELECT string_agg(schema_name || '.' || table_name, ',' ORDER BY schema_name, table_name) FROM duckdb_tables())`,
		`(SELECT string_agg(view_name, ',' ORDER BY view_name) FROM duckdb_views() WHERE NOT internal)`,
		`(SELECT string_agg(sequence_name, ',' ORDER BY sequence_name) FROM duckdb_sequences())`,
		`(SELECT string_agg(key || '=' || value, ',' ORDER BY key) FROM meta)`,
		`(SELECT string_agg(name || '=' || value, ',' ORDER BY name) FROM duckdb_settings()
			WHERE name IN ('memory_limit', 'threads', 'enable_external_access', 'lock_configuration',
				'autoload_known_extensions', 'autoinstall_known_extensions', 'extension_directory', 'max_temp_directory_size'))`,
		`(SELECT count(*)::VARCHAR FROM duckdb_secrets())`,
	}
	if all {
		parts = append(parts,
			`(SELECT string_agg(function_name, ',' ORDER BY function_name) FROM duckdb_functions() WHERE NOT internal)`,
			`(SELECT string_agg(type_name, ',' ORDER BY type_name) FROM duckdb_types() WHERE NOT internal)`)
	}
	var out string
	if err := s.db.QueryRowContext(context.Background(), `SELECT concat_ws(' | ', `+strings.Join(parts, ", ")+`)`).Scan(&out); err != nil {
		t.Fatalf("read the catalog: %v", err)
	}
	return out
}

// recorderCommit commits epoch n and a batch of one span, as the recorder
// and its OTLP receiver do.
func recorderCommit(ctx context.Context, s *Store, n int64) error {
	if err := s.WriteEpoch(ctx, testEpoch(n)); err != nil {
		return err
	}
	sp := Span{Host: "h1", TraceID: fmt.Sprintf("%032x", n), SpanID: fmt.Sprintf("%016x", n), Service: "s", Name: "op",
		Kind: "server", StartNs: n, EndNs: n + 1, StatusCode: "unset", Scope: "t", Resource: "{}", Attributes: "{}"}
	return s.WriteSpans(ctx, &SpanBatch{Spans: []Span{sp}})
}

// writer commits epochs and spans the way the recorder does, until stop;
// it returns what failed.
func writer(s *Store, first int64, stop <-chan struct{}) (done func() (epochs int64, errs []error)) {
	var wg sync.WaitGroup
	var errs []error
	n := first
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := context.Background()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n++
			if err := recorderCommit(ctx, s, n); err != nil {
				errs = append(errs, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() (int64, []error) { wg.Wait(); return n, errs }
}

// TestSandboxCatalogue runs every statement of the catalogue while the
// recorder's writes go on: each is refused with an error that says why,
// and afterwards the catalog is as it was, no connection is left open,
// nothing was written under HOME, and epochs and spans still commit.
func TestSandboxCatalogue(t *testing.T) {
	s, home := sandboxStore(t, nil)
	ctx := context.Background()
	before := catalogState(t, s, false)
	all := catalogState(t, s, true)
	stop := make(chan struct{})
	done := writer(s, 1, stop)
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			res, err := s.Query(ctx, c.sql)
			if err == nil {
				t.Fatalf("%q was allowed: %v", c.sql, res.Rows)
			}
			if c.gate && !errors.Is(err, ErrNotReadOnly) {
				t.Errorf("%q: refused, but not by the read-only check: %v", c.sql, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "query: ") || len(msg) < 20 {
				t.Errorf("%q: unclear error %q", c.sql, msg)
			}
			t.Logf("%s", err)
			if after := catalogState(t, s, false); after != before {
				t.Fatalf("%q changed the database:\nbefore %s\nafter  %s", c.sql, before, after)
			}
		})
	}
	for _, q := range allowed {
		res, err := s.Query(ctx, q)
		if err != nil {
			t.Errorf("read-only query %q refused: %v", q, err)
		} else if len(res.Rows) == 0 && !strings.HasPrefix(q, "FROM meta") {
			t.Errorf("read-only query %q: no rows", q)
		}
	}
	close(stop)
	last, errs := done()
	if len(errs) > 0 {
		t.Fatalf("the recorder's writes failed during the catalogue: %v", errors.Join(errs...))
	}
	if after := catalogState(t, s, true); after != all {
		t.Fatalf("the catalogue changed the database:\nbefore %s\nafter  %s", all, after)
	}
	if err := s.WriteEpoch(ctx, testEpoch(last+1)); err != nil {
		t.Fatalf("an epoch after the catalogue: %v", err)
	}
	res, err := s.Query(ctx, `SELECT count(*), max(epoch) FROM epochs`)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(res.Rows[0]); got != fmt.Sprintf("[%d %d]", last+1, last+1) {
		t.Errorf("epochs after the catalogue: count, max = %s, want %d of them", got, last+1)
	}
	entries, _ := os.ReadDir(home)
	if len(entries) > 0 {
		t.Errorf("DuckDB wrote under HOME (%s): %v", home, entries)
	}
	for _, p := range []string{"/tmp/holter-pwned.csv", "/tmp/holter-pwned.db", "/tmp/holter-pwned"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a refused statement created %s", p)
		}
	}
}

// TestSandboxDatabaseUnchangedByAllowed: what the sandbox lets through
// leaves the database as it was too.
func TestSandboxDatabaseUnchangedByAllowed(t *testing.T) {
	s, _ := sandboxStore(t, nil)
	before, all := catalogState(t, s, false), catalogState(t, s, true)
	for _, q := range allowed {
		s.Query(context.Background(), q)
		if after := catalogState(t, s, false); after != before {
			t.Fatalf("%q changed the database:\nbefore %s\nafter  %s", q, before, after)
		}
	}
	if after := catalogState(t, s, true); after != all {
		t.Fatalf("the read-only queries changed the database:\nbefore %s\nafter  %s", all, after)
	}
}

// FuzzReadOnlyGate: whatever text is sent, the database is as it was
// after and no query connection is left open, with whatever session state
// it had. Each input is checked against a fingerprint of the database (one
// query: what is attached, the number of tables, views and sequences, meta,
// the settings, the connections beside the writer's), every 256th against
// the whole catalog. Seeded with the catalogue; one store per fuzzing
// process, whose state nothing changes if the property holds. Run long:
// go test -run XXX -fuzz FuzzReadOnlyGate -fuzztime 1000000x ./internal/store/
func FuzzReadOnlyGate(f *testing.F) {
	for _, c := range refused {
		f.Add(c.sql)
	}
	for _, q := range allowed {
		f.Add(q)
	}
	// What passes the gate runs; 20 ms of it shows what it does, and more
	// would spend the run on the inputs that count a long range.
	s, _ := sandboxStore(f, &Options{QueryTimeout: 20 * time.Millisecond})
	ctx := context.Background()
	print, all := fingerprint(f, s), catalogState(f, s, true)
	// A change stays: the database is looked at every 16 inputs, which
	// are named when it changed, and its whole catalog every 1024 (the
	// looks cost 17 and 670 ms, a refused input 1 ms).
	var mu sync.Mutex
	var n int
	var since []string
	f.Cleanup(func() {
		if after := fingerprint(f, s); after != print && len(since) > 0 {
			f.Errorf("one of these changed the database:\n%s\nbefore %s\nafter  %s", strings.Join(since, "\n"), print, after)
		}
	})
	f.Fuzz(func(t *testing.T, q string) {
		res, err := s.Query(ctx, q)
		mu.Lock()
		defer mu.Unlock()
		n++
		since = append(since, fmt.Sprintf("%q (answer %v, %v)", q, res, err))
		if n%16 == 0 {
			if after := fingerprint(t, s); after != print {
				t.Fatalf("one of these changed the database:\n%s\nbefore %s\nafter  %s", strings.Join(since, "\n"), print, after)
			}
			since = since[:0]
		}
		if n%1024 == 0 {
			if after := catalogState(t, s, true); after != all {
				t.Fatalf("an input up to %q changed the catalog:\nbefore %s\nafter  %s", q, all, after)
			}
		}
	})
}

// fingerprint is what catalogState tells at a glance, and how many
// connections DuckDB has open besides the writer's (a query's own must be
// closed, and with it any transaction or USE), in one query.
func fingerprint(t testing.TB, s *Store) string {
	t.Helper()
	var out string
	var conns int
	err := s.db.QueryRowContext(context.Background(), `SELECT concat_ws(',',
		(SELECT string_agg(database_name, ',' ORDER BY database_name) FROM duckdb_databases()),
		(SELECT count(*) FROM duckdb_tables()), (SELECT count(*) FROM duckdb_views()), (SELECT count(*) FROM duckdb_sequences()),
		(SELECT string_agg(key || '=' || value, ',' ORDER BY key) FROM meta),
		current_setting('memory_limit'), current_setting('threads'), current_setting('enable_external_access'),
		current_setting('lock_configuration'), current_setting('autoload_known_extensions'),
		current_setting('autoinstall_known_extensions')), (SELECT count FROM duckdb_connection_count())`).Scan(&out, &conns)
	if err != nil {
		t.Fatalf("read the catalog: %v", err)
	}
	return fmt.Sprintf("%s; %d query connections", out, conns-s.db.p.Load().db.Stats().OpenConnections)
}

// TestQueryPlaceholders: internal callers pass arguments to $N and ?.
func TestQueryPlaceholders(t *testing.T) {
	s, _ := sandboxStore(t, nil)
	res, err := s.Query(context.Background(), `SELECT $1::BIGINT + 1, $2::VARCHAR`, int64(41), "x")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(res.Rows); got != "[[42 x]]" {
		t.Errorf("placeholders: %s", got)
	}
	res, err = s.Query(context.Background(), `EXPLAIN SELECT * FROM epochs WHERE epoch = ?`, int64(1))
	if err != nil || len(res.Rows) == 0 {
		t.Errorf("EXPLAIN with a placeholder: %v, %v", res, err)
	}
}

// TestNoExtensionFetched: a file with a SQLite header would make DuckDB
// load (and download) its sqlite extension; both opens refuse it without
// writing under HOME or reaching the network, and leave the file as it was.
func TestNoExtensionFetched(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	dir := t.TempDir()
	header := append([]byte("SQLite format 3\x00"), make([]byte, 4080)...)
	if err := os.WriteFile(filepath.Join(dir, FileName), header, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{true, false} {
		_, err := Open(dir, &Options{ReadOnly: ro})
		if err == nil {
			t.Fatalf("read-only %v: opened a SQLite file as a store", ro)
		}
		t.Logf("read-only %v: %v", ro, err)
		if strings.Contains(err.Error(), "download") || strings.Contains(err.Error(), "http") {
			t.Errorf("read-only %v: DuckDB tried to fetch an extension: %v", ro, err)
		}
	}
	if entries, _ := os.ReadDir(home); len(entries) > 0 {
		t.Errorf("DuckDB wrote under HOME (%s): %v", home, entries)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("DuckDB wrote into the data directory: %v", entries)
	}
	got, _ := os.ReadFile(filepath.Join(dir, FileName))
	if !reflect.DeepEqual(got, header) {
		t.Error("the SQLite file was changed")
	}
}

// TestEveryTableFunctionIsClassified lists DuckDB's table functions and
// table macros: each is one a query may call (readTableFunctions) or one
// refused for a reason below, so that a newer DuckDB's new ones are
// looked at before a query can reach them. The built-in macros call none
// of the functions refused.
func TestEveryTableFunctionIsClassified(t *testing.T) {
	s, _ := sandboxStore(t, nil)
	refusedTable := map[string]string{
		"arrow_scan": "reads memory at a pointer", "arrow_scan_dumb": "reads memory at a pointer",
		"checkpoint": "writes the file", "force_checkpoint": "writes the file, aborts transactions",
		"enable_logging": "changes settings", "disable_logging": "changes settings", "truncate_duckdb_logs": "deletes logs",
		"duckdb_logs": "other sessions' logs", "duckdb_log_contexts": "other sessions' logs", "duckdb_logs_parsed": "other sessions' logs",
		"duckdb_secrets": "secrets", "duckdb_secret_types": "secrets", "which_secret": "secrets",
		"duckdb_extensions": "reads the extension directory", "duckdb_external_file_cache": "files",
		"glob": "files", "read_blob": "files", "read_text": "files", "read_csv": "files", "read_csv_auto": "files",
		"read_json": "files", "read_json_auto": "files", "read_json_objects": "files", "read_json_objects_auto": "files",
		"read_ndjson": "files", "read_ndjson_auto": "files", "read_ndjson_objects": "files", "read_parquet": "files",
		"parquet_scan": "files", "parquet_metadata": "files", "parquet_schema": "files", "parquet_file_metadata": "files",
		"parquet_kv_metadata": "files", "parquet_bloom_probe": "files", "sniff_csv": "files",
		"query": "runs SQL text", "query_table": "runs SQL text", "json_execute_serialized_sql": "runs SQL",
		"seq_scan": "internal", "check_peg_parser": "internal",
		"histogram_values": "query_table() of its argument", "histogram": "query_table() of its argument",
	}
	res, err := s.Query(context.Background(), `SELECT DISTINCT function_name FROM duckdb_functions()
		WHERE function_type IN ('table', 'table_macro') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Rows {
		name := r[0].(string)
		if _, ok := refusedTable[name]; !ok && !readTableFunctions[name] {
			t.Errorf("table function %s is neither allowed nor refused: decide (sandbox.go's readTableFunctions, or this test's list)", name)
		}
		if _, ok := refusedTable[name]; ok && readTableFunctions[name] {
			t.Errorf("table function %s is both allowed and refused", name)
		}
	}
	res, err = s.Query(context.Background(), `SELECT function_name, macro_definition FROM duckdb_functions()
		WHERE function_type IN ('macro', 'table_macro') AND macro_definition IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	calls := func(def, name string) bool {
		return regexp.MustCompile(`(^|[^a-z0-9_])` + name + `\(`).MatchString(def)
	}
	for _, r := range res.Rows {
		macro, def := r[0].(string), strings.ToLower(r[1].(string))
		if _, ok := refusedTable[macro]; ok {
			continue
		}
		for name := range refusedTable {
			if calls(def, name) {
				t.Errorf("built-in macro %s calls %s: %s", macro, name, def)
			}
		}
		for name := range s.sideEffects {
			if calls(def, name) {
				t.Errorf("built-in macro %s calls %s: %s", macro, name, def)
			}
		}
	}
	for _, want := range []string{"nextval", "currval", "setseed", "write_log", "json_serialize_plan"} {
		if !s.sideEffects[want] {
			t.Errorf("%s is not among the functions refused: %v", want, s.sideEffects)
		}
	}
}
