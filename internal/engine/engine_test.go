package engine

import (
	"bufio"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"
	"golang.org/x/sys/unix"
)

func open(t *testing.T, o Options) (*Connector, *sql.DB) {
	t.Helper()
	c, err := NewConnector(o)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return c, db
}

// allTypes is a row of every kind of value the driver gives.
const allTypes = `SELECT NULL AS n, true AS b, 7::TINYINT AS i8, -300::SMALLINT AS i16, 70000::INTEGER AS i32,
	-5000000000::BIGINT AS i64, 200::UTINYINT AS u8, 60000::USMALLINT AS u16, 4000000000::UINTEGER AS u32,
	18446744073709551615::UBIGINT AS u64, 1.5::FLOAT AS f32, -2.25::DOUBLE AS f64,
	170141183460469231731687303715884105727::HUGEINT AS huge, 'text' AS s, '\xAA\x00'::BLOB AS blob,
	TIMESTAMP '2026-12-02 07:01:27.123456' AS ts, DATE '1999-12-31' AS d, TIME '23:59:59.5' AS tm,
	123.4500::DECIMAL(9, 4) AS dec, -0.001::DECIMAL(18, 3) AS dec2, INTERVAL '1 month 2 days 3 seconds' AS iv,
	[1, 2, NULL] AS l, ['a', 'b'] AS ls, {'x': 1, 'y': 'z'} AS st, MAP {'k': 1.5::DECIMAL(3, 1)} AS m,
	'3f3c3a36-2a3f-4a37-9ea7-5c2ac4d2a6a1'::UUID AS u, [[1], [2, 3]] AS nested, [1, 2]::INTEGER[2] AS arr,
	'b'::ENUM('a', 'b') AS e, union_value(num := 2) AS un`

// TestValuesCrossUnchanged checks that every kind of value DuckDB gives
// reaches the client as the driver gives it in process (in this package's
// types for DECIMAL, INTERVAL, MAP and UNION), with the column types.
func TestValuesCrossUnchanged(t *testing.T) {
	_, db := open(t, Options{})
	got, gotTypes := row(t, db, allTypes)

	local, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	want, wantTypes := row(t, local, allTypes)
	for i := range want {
		want[i] = fromDuck(want[i])
	}
	if !reflect.DeepEqual(gotTypes, wantTypes) {
		t.Errorf("column types %v, want %v", gotTypes, wantTypes)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("column %d (%s): %#v, want %#v", i, wantTypes[i], got[i], want[i])
		}
	}
	if d, ok := got[18].(Decimal); !ok || d.String() != "123.45" {
		t.Errorf("DECIMAL(9, 4) 123.4500 reads %v, want 123.45", got[18])
	}
	if d, ok := got[19].(Decimal); !ok || d.String() != "-0.001" {
		t.Errorf("DECIMAL(18, 3) -0.001 reads %v, want -0.001", got[19])
	}
}

func row(t *testing.T, db *sql.DB, q string) ([]any, []string) {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ct := range cts {
		types = append(types, ct.DatabaseTypeName())
	}
	if !rows.Next() {
		t.Fatalf("no row: %v", rows.Err())
	}
	vals := make([]any, len(cts))
	ptrs := make([]any, len(cts))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	return vals, types
}

// TestArgumentsBind checks the values a caller binds, slices too.
func TestArgumentsBind(t *testing.T) {
	_, db := open(t, Options{})
	ts := time.Date(2026, 12, 2, 7, 0, 0, 123456000, time.UTC)
	var s string
	err := db.QueryRow(`SELECT concat_ws('|', $1::BIGINT, $2::UBIGINT, $3::DOUBLE, $4, $5::TIMESTAMP, $6::VARCHAR[], $7 IS NULL, $8::BLOB)`,
		int64(-3), uint64(1<<63), 0.5, "x'y", ts, []string{"a", "b"}, nil, []byte{1, 2}).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	if want := `-3|9223372036854775808|0.5|x'y|2026-12-02 07:00:00.123456|[a, b]|true|\x01\x02`; s != want {
		t.Errorf("bound %q, want %q", s, want)
	}
}

// TestWritesAndAppender checks transactions and the appender on a file
// that a new process reads back.
func TestWritesAndAppender(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.duckdb")
	_, db := open(t, Options{Path: path})
	if _, err := db.Exec(`CREATE TABLE t (id UBIGINT, name VARCHAR, frames VARCHAR[], ts TIMESTAMP)`); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN TRANSACTION"); err != nil {
		t.Fatal(err)
	}
	const n = 20_000 // several batches
	err = conn.Raw(func(dc any) error {
		a, err := NewAppender(dc.(driver.Conn), "", "t")
		if err != nil {
			return err
		}
		for i := range n {
			if err := a.AppendRow(uint64(i), fmt.Sprint("row ", i), []string{"f", fmt.Sprint(i)}, time.Unix(int64(i), 0)); err != nil {
				return err
			}
		}
		return a.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	// A failing append reports its error at its end and leaves the
	// transaction to roll back.
	err = conn.Raw(func(dc any) error {
		a, err := NewAppender(dc.(driver.Conn), "", "no_such_table")
		if err != nil {
			return err
		}
		a.AppendRow(uint64(1))
		return a.Close()
	})
	if err == nil || !strings.Contains(err.Error(), "no_such_table") {
		t.Errorf("appending to a missing table: %v, want its error", err)
	}
	if _, err := conn.ExecContext(context.Background(), "COMMIT"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	db.Close()

	_, db2 := open(t, Options{Path: path})
	var count int64
	var last string
	if err := db2.QueryRow(`SELECT count(*), max(frames[2]::BIGINT)::VARCHAR FROM t`).Scan(&count, &last); err != nil {
		t.Fatal(err)
	}
	if count != n || last != fmt.Sprint(n-1) {
		t.Errorf("%d rows, last frame %s; want %d and %d", count, last, n, n-1)
	}
}

// TestCancelledQueryEnds checks that a query's context ends it in the
// engine, promptly, and that its connection serves the next.
func TestCancelledQueryEnds(t *testing.T) {
	_, db := open(t, Options{})
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	var n int64
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM range(100000000000) t(x) WHERE x % 7 = 3`).Scan(&n)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a query past its deadline: %v, want the deadline's error", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the query ended %v after it started, want soon after its 200ms deadline", took)
	}
	if err := db.QueryRow(`SELECT 42`).Scan(&n); err != nil || n != 42 {
		t.Errorf("the next query: %v, %d", err, n)
	}
	// Rows closed before their end stop the query's stream.
	rows, err := db.Query(`SELECT x FROM range(10000000) t(x)`)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3 && rows.Next(); i++ {
	}
	rows.Close()
	if err := db.QueryRow(`SELECT 43`).Scan(&n); err != nil || n != 43 {
		t.Errorf("the query after rows closed early: %v, %d", err, n)
	}
}

// TestResultBudget checks that BudgetFunction counts a budgeted query's
// rows down and the rows report it.
func TestResultBudget(t *testing.T) {
	c, _ := open(t, Options{Functions: []string{"store"}})
	dc, err := c.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	q := `SELECT x FROM range(1000) t(x) WHERE ` + BudgetFunction + `(strlen(x::VARCHAR))`
	count := func(ctx context.Context) (int, bool) {
		rows, err := dc.(driver.QueryerContext).QueryContext(ctx, q, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		n := 0
		dest := make([]driver.Value, 1)
		for rows.Next(dest) == nil {
			n++
		}
		return n, rows.(interface{ Over() bool }).Over()
	}
	if n, over := count(context.Background()); n != 1000 || over {
		t.Errorf("without a budget: %d rows, over %v; want 1000, false", n, over)
	}
	// 10 rows of one digit, 90 of two: (1+16)*10 + (2+16)*90 = 1790.
	if n, over := count(WithResultBudget(context.Background(), 1790)); n != 100 || !over {
		t.Errorf("with a budget of 100 rows: %d rows, over %v; want 100, true", n, over)
	}
}

// TestPrepareRefusesSeveralStatements checks that a text of two
// statements prepares to an error with neither run.
func TestPrepareRefusesSeveralStatements(t *testing.T) {
	c, db := open(t, Options{})
	if _, err := db.Exec(`CREATE TABLE t (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	dc, err := c.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if st, err := dc.Prepare(`INSERT INTO t VALUES (1); SELECT 1`); err == nil {
		st.Close()
		t.Error("two statements prepared")
	}
	st, err := dc.Prepare(`SELECT * FROM t WHERE x > ?`)
	if err != nil {
		t.Fatal(err)
	}
	if typ, _ := st.(*Stmt).StatementType(); typ != StatementSelect || st.NumInput() != 1 {
		t.Errorf("a SELECT prepared as type %d with %d inputs", typ, st.NumInput())
	}
	st.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows in t (%v), want none", n, err)
	}
}

// TestLingerEndsTheProcess checks that an idle engine process ends after
// its linger, checkpointing its log, and that the next connection starts
// another on the same file.
func TestLingerEndsTheProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.duckdb")
	_, db := open(t, Options{Path: path, Linger: 100 * time.Millisecond, CheckpointAbove: 0,
		Init: []string{"PRAGMA disable_checkpoint_on_shutdown"}})
	db.SetMaxIdleConns(0)
	if _, err := db.Exec(`CREATE TABLE t AS SELECT range AS x FROM range(1000)`); err != nil {
		t.Fatal(err)
	}
	first := Pids()
	if len(first) != 1 {
		t.Fatalf("%d engine processes, want 1", len(first))
	}
	waitFor(t, func() bool { return len(Pids()) == 0 }, "the idle engine process to end")
	if st, err := os.Stat(path + ".wal"); err == nil && st.Size() > 0 {
		t.Errorf("a %d-byte log after the idle exit, want it checkpointed", st.Size())
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil || n != 1000 {
		t.Fatalf("after the restart: %d rows, %v", n, err)
	}
	if now := Pids(); len(now) != 1 || now[0] == first[0] {
		t.Errorf("engine processes %v after %v ended, want a new one", now, first)
	}
	if CPUTime() <= 0 {
		t.Error("no CPU time counted for the engine processes")
	}
}

// TestProcessDeathIsAnError checks that a connection whose process died
// fails with ExitedError and that the next connection starts anew.
func TestProcessDeathIsAnError(t *testing.T) {
	c, db := open(t, Options{})
	db.SetMaxOpenConns(1)
	dc, err := c.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pids := Pids()
	if len(pids) != 1 {
		t.Fatalf("engine processes %v, want one", pids)
	}
	syscall.Kill(pids[0], syscall.SIGKILL)
	_, err = dc.(driver.ExecerContext).ExecContext(context.Background(), "SELECT 1", nil)
	var ee *ExitedError
	if !errors.As(err, &ee) {
		t.Errorf("exec on a killed engine: %v, want an ExitedError", err)
	}
	dc.Close()
	var n int
	if err := db.QueryRow(`SELECT 5`).Scan(&n); err != nil || n != 5 {
		t.Errorf("a query after the death: %d, %v", n, err)
	}
}

// TestOpenFailsWithDuckDBsError checks that a file DuckDB cannot open
// gives its error at NewConnector.
func TestOpenFailsWithDuckDBsError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.duckdb")
	if err := os.WriteFile(path, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := NewConnector(Options{Path: path})
	if err == nil {
		t.Fatal("a garbage file opened")
	}
	if !strings.Contains(err.Error(), "database") {
		t.Errorf("error %v, want DuckDB's", err)
	}
	if n := len(Pids()); n != 0 {
		t.Errorf("%d engine processes left", n)
	}
}

// TestTypesMatchDuckDB checks that this package's numbers for DuckDB's
// error and statement types are DuckDB's.
func TestTypesMatchDuckDB(t *testing.T) {
	if ErrorTypeIO != ErrorType(duckdb.ErrorTypeIO) || StatementCopy != StmtType(duckdb.STATEMENT_TYPE_COPY) {
		t.Error("types differ")
	}
	var e encoder
	if err := e.value(struct{}{}); err == nil {
		t.Error("a struct value encoded")
	}
	d := decoder{b: []byte{tList, 200}}
	if d.value(); d.err == nil {
		t.Error("a list longer than its frame decoded")
	}
	var big1 = new(big.Int).Lsh(big.NewInt(1), 100)
	e.reset(0)
	e.value(big1)
	d = decoder{b: e.b[5:]}
	if v := d.value(); v.(*big.Int).Cmp(big1) != 0 {
		t.Errorf("2^100 decoded %v", v)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEngineEndsWithItsProgram checks that a program killed does not
// leave its engine process behind holding the database: a child of the
// test opens a file database and is killed, and the file then opens
// again at once, with what the child committed.
func TestEngineEndsWithItsProgram(t *testing.T) {
	path := os.Getenv("ENGINE_TEST_PARENT")
	if path != "" {
		c, err := NewConnector(Options{Path: path})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		db := sql.OpenDB(c)
		if _, err := db.Exec(`CREATE TABLE t AS SELECT 42 AS x`); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("engine", Pids()[0])
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	path = filepath.Join(t.TempDir(), "db.duckdb")
	cmd := exec.Command(os.Args[0], "-test.run=^TestEngineEndsWithItsProgram$")
	cmd.Env = append(os.Environ(), "ENGINE_TEST_PARENT="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	var pid int
	if _, serr := fmt.Sscanf(line, "engine %d", &pid); err != nil || serr != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child said %q (%v)", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	waitFor(t, func() bool { return syscall.Kill(pid, 0) != nil }, "the engine of a killed program to end")
	_, db := open(t, Options{Path: path})
	var x int
	if err := db.QueryRow(`SELECT x FROM t`).Scan(&x); err != nil || x != 42 {
		t.Errorf("after the kill: %d, %v; want 42", x, err)
	}
}

// TestEngineHoldsNoInheritedDescriptor checks that a descriptor the
// program left open across exec (a pipe made without O_CLOEXEC) is not
// held by its engine: the pipe's reader sees its end once the program
// closes the write end, while the engine runs.
func TestEngineHoldsNoInheritedDescriptor(t *testing.T) {
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	_, db := open(t, Options{})
	if err := db.Ping(); err != nil {
		unix.Close(p[1])
		t.Fatal(err)
	}
	unix.Close(p[1])
	unix.SetNonblock(p[0], true)
	n, err := unix.Read(p[0], make([]byte, 1))
	if n != 0 || err != nil {
		t.Errorf("reading the pipe with its write end closed here: %d bytes, %v; want its end (the engine holds a copy)", n, err)
	}
}
