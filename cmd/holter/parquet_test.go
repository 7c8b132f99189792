package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// parquetCase is an export holter export parquet refuses: its exit code
// and what its error says; no file is left at --out, and one there before
// is as it was.
type parquetCase struct {
	name string
	args []string
	code int
	want string
}

// TestExportParquet records a short real recording and exports a table
// over a range and a query with holter export parquet, through the
// recorder's API while it records and from the store after it stopped:
// DuckDB reads each file back with the rows the store holds for the same
// range, the two ways give the same rows, and pandas (pyarrow) reads them
// too. Bad input is refused with a clear error and leaves no file.
func TestExportParquet(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	bin := testutil.BuildHolter(t)
	py := pythonVenv(t, "pandas-python", "import pandas, pyarrow", "pandas==2.2.3", "pyarrow==19.0.1")
	dir := t.TempDir()
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--vitals", "cpu", "--budget", "off", "--online=false")
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	r.waitEpochs(t, 1)
	from := time.Now().UnixNano()
	if out, err := exec.Command("timeout", "1", "sh", "-c", "while :; do :; done").CombinedOutput(); err != nil && !strings.Contains(err.Error(), "exit status 124") {
		t.Fatalf("spin: %v %s", err, out)
	}
	to := time.Now().UnixNano()
	// The epochs holding samples before to have committed.
	r.waitEpochs(t, 2)
	rng := fmt.Sprintf("%d/%d", from, to)
	epochsSQL := fmt.Sprintf("SELECT epoch, start_ns, samples FROM epochs WHERE end_ns <= %d ORDER BY epoch", to)

	out := t.TempDir()
	export := func(args ...string) {
		t.Helper()
		if _, errOut, code := runHolter(t, bin, append([]string{"export", "parquet", "--data", dir}, args...)...); code != 0 {
			t.Fatalf("export parquet %q: exit %d: %s", args, code, errOut)
		}
	}
	export("--range", rng, "samples", "--out", filepath.Join(out, "api-samples.parquet"))
	export(epochsSQL, "--out", filepath.Join(out, "api-epochs.parquet"))
	apiCases := []parquetCase{
		{"write statement", []string{"CREATE TABLE pwned AS SELECT 1"}, 1, "not allowed"},
		{"empty range", []string{"--range", "2001-01-01T00:00/2001-01-01T00:01", "samples"}, 1, "no rows to export"},
		{"unknown table", []string{"nope"}, 2, `no table "nope" in the store`},
	}
	checkParquetRefused(t, bin, dir, "api ", apiCases)

	r.cmd.Process.Signal(syscall.SIGINT)
	r.cmd.Wait()
	<-r.done

	export("samples", "--range", rng, "--out", filepath.Join(out, "store-samples.parquet"))
	stdout, errOut, code := runHolter(t, bin, "export", "parquet", "--data", dir, epochsSQL, "--out", "-")
	if code != 0 {
		t.Fatalf("export parquet --out -: exit %d: %s", code, errOut)
	}
	if err := os.WriteFile(filepath.Join(out, "stdout-epochs.parquet"), []byte(stdout), 0o644); err != nil {
		t.Fatal(err)
	}

	// What the store holds for the same range.
	st, err := store.Open(dir, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	want := func(q string) string {
		t.Helper()
		res, err := st.Query(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(res.Rows)
	}
	wantSamples := want(fmt.Sprintf("SELECT count(*), sum(weight)::BIGINT, count(DISTINCT epoch) FROM samples WHERE ts_ns >= %d AND ts_ns < %d", from, to))
	wantEpochs := want("SELECT list(epoch ORDER BY epoch), sum(samples)::BIGINT FROM (" + epochsSQL + ")")
	st.Close()

	reader, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	got := func(q, file string) string {
		t.Helper()
		path := "'" + filepath.Join(out, file) + "'"
		rows, err := reader.Query(strings.ReplaceAll(strings.ReplaceAll(q, "FILE", "read_parquet("+path+")"), "PATH", path))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		rows.Next()
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for i, v := range vals {
			if l, ok := v.([]any); ok {
				vals[i] = l
			}
		}
		return fmt.Sprint([][]any{vals})
	}
	if wantSamples == "[[0 <nil> 0]]" {
		t.Fatalf("no samples recorded in the range; log:\n%s", r.log)
	}
	for _, f := range []string{"api-samples.parquet", "store-samples.parquet"} {
		if g := got("SELECT count(*), sum(weight)::BIGINT, count(DISTINCT epoch) FROM FILE", f); g != wantSamples {
			t.Errorf("%s: count, weight, epochs %s; the store holds %s", f, g, wantSamples)
		}
	}
	for _, f := range []string{"api-epochs.parquet", "stdout-epochs.parquet"} {
		if g := got("SELECT list(epoch ORDER BY epoch), sum(samples)::BIGINT FROM FILE", f); g != wantEpochs {
			t.Errorf("%s: epochs, samples %s; the store holds %s", f, g, wantEpochs)
		}
	}
	// The table keeps its columns and types.
	if g := got("SELECT string_agg(name || ' ' || type, ', ' ORDER BY name) FROM parquet_schema(PATH) WHERE name IN ('ts_ns', 'weight', 'comm')", "store-samples.parquet"); g != "[[comm BYTE_ARRAY, ts_ns INT64, weight INT64]]" {
		t.Errorf("samples' Parquet schema: %s", g)
	}

	// pandas reads the files with pyarrow. The script leaves with
	// os._exit once it has printed: pyarrow 19 aborts in the
	// interpreter's teardown in about one exit in twelve on a loaded
	// machine ("terminate called without an active exception"), after
	// the reading, with any files.
	script := `
import json, os, sys, pandas
s = pandas.read_parquet(sys.argv[1], engine="pyarrow")
e = pandas.read_parquet(sys.argv[2], engine="pyarrow")
print(json.dumps({"rows": len(s), "weight": int(s["weight"].sum()), "epochs": [int(x) for x in e["epoch"]], "columns": list(e.columns)}), flush=True)
os._exit(0)
`
	pout, err := exec.Command(py, "-c", script, filepath.Join(out, "store-samples.parquet"), filepath.Join(out, "api-epochs.parquet")).CombinedOutput()
	if err != nil {
		t.Fatalf("pandas: %v\n%s", err, pout)
	}
	var pd struct {
		Rows    int64
		Weight  int64
		Epochs  []int64
		Columns []string
	}
	if err := json.Unmarshal(pout, &pd); err != nil {
		t.Fatalf("pandas: %v: %s", err, pout)
	}
	if g := fmt.Sprintf("[[%d %d", pd.Rows, pd.Weight); !strings.HasPrefix(wantSamples, g+" ") {
		t.Errorf("pandas: %d rows weighing %d; the store holds %s", pd.Rows, pd.Weight, wantSamples)
	}
	if g := fmt.Sprint(pd.Epochs); !strings.HasPrefix(wantEpochs, "[["+g+" ") || !slices.Equal(pd.Columns, []string{"epoch", "start_ns", "samples"}) {
		t.Errorf("pandas: epochs %s, columns %v; the store holds %s", g, pd.Columns, wantEpochs)
	}
	t.Logf("exported %s (samples: count, weight, epochs) and %s (epochs)", wantSamples, wantEpochs)

	checkParquetRefused(t, bin, dir, "", []parquetCase{
		{"unknown table", []string{"nope"}, 2, `no table "nope" in the store (its tables: `},
		{"bad sql", []string{"SELEC 1 FROM samples"}, 1, "syntax error"},
		{"write statement", []string{"DROP TABLE samples"}, 1, "not allowed"},
		{"copy", []string{"COPY samples TO '/tmp/holter-pwned.csv'"}, 1, "not allowed"},
		{"two statements", []string{"SELECT 1; SELECT 2"}, 1, "2 statements"},
		{"empty range", []string{"--range", "2001-01-01T00:00/2001-01-01T00:01", "samples"}, 1, "no rows to export"},
		{"empty query", []string{"SELECT * FROM epochs WHERE epoch < 0"}, 1, "no rows to export"},
		{"range with a query", []string{"--range", rng, epochsSQL}, 2, "--range: a query selects its own rows"},
		{"range without a time", []string{"--range", rng, "stacks"}, 2, "--range: table stacks has no time"},
		{"vital", []string{"--vital", "cpu", "samples"}, 2, "--vital: applies to pprof"},
		{"no argument", nil, 2, "give one table or query"},
		{"bad range", []string{"--range", "soon/later", "samples"}, 2, `range "soon/later": start: "soon" is not a time`},
		{"unwritable out", []string{"samples", "--out", filepath.Join(t.TempDir(), "no-such-dir", "x.parquet")}, 1, "--out: "},
	})
	if _, err := os.Stat("/tmp/holter-pwned.csv"); err == nil {
		t.Error("an export wrote /tmp/holter-pwned.csv")
	}
}

// checkParquetRefused runs each case against the store in dir with an
// --out file holding "keep" (unless the case gives its own).
func checkParquetRefused(t *testing.T, bin, dir, prefix string, cases []parquetCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(prefix+c.name, func(t *testing.T) {
			outDir := t.TempDir()
			out := filepath.Join(outDir, "x.parquet")
			if err := os.WriteFile(out, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"export", "parquet", "--data", dir}, c.args...)
			if !slices.Contains(c.args, "--out") {
				args = append(args, "--out", out)
			}
			_, errOut, code := runHolter(t, bin, args...)
			if code != c.code || !strings.Contains(errOut, c.want) {
				t.Errorf("export parquet %q: exit %d, %q; want exit %d saying %q", c.args, code, errOut, c.code, c.want)
			}
			t.Logf("%s", strings.TrimSpace(errOut))
			if b, _ := os.ReadFile(out); string(b) != "keep" {
				t.Errorf("the file at --out was changed: %.40q", b)
			}
			if left, _ := os.ReadDir(outDir); len(left) != 1 {
				t.Errorf("left in --out's directory: %v", left)
			}
		})
	}
}
