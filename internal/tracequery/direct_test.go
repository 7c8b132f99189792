package tracequery

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/store"
)

// TestEvaluatorMatchesDuckDB runs the user-space part of queries both in
// holter's evaluator and in DuckDB (the SQL the evaluator writes for it),
// over the same input rows: the answers, and the types reported, must be
// the same. The queries cover what the evaluator computes: expressions
// over aggregates, HAVING, ORDER BY, LIMIT, DISTINCT, CASE, IN, BETWEEN,
// IS NULL, coalesce and the string functions, integer division by zero,
// and an aggregation over events.
func TestEvaluatorMatchesDuckDB(t *testing.T) {
	queries := []string{
		"SELECT comm, count() FROM syscall.getppid GROUP BY comm",
		"SELECT count() AS n, comm AS c, pid FROM syscall.getppid GROUP BY pid, comm",
		"SELECT comm, count() AS n FROM syscall.getppid GROUP BY comm ORDER BY n DESC LIMIT 2",
		"SELECT fd, count() FROM syscall.read GROUP BY fd HAVING count() > 10",
		"SELECT fd, count() AS n FROM syscall.read GROUP BY fd HAVING n > 10 ORDER BY fd DESC",
		"SELECT comm, count() + 1, sum(ret) / count(), sum(ret) % 7, avg(ret) * 2, CASE WHEN count() > 500 THEN 'many' ELSE 'few' END FROM syscall.read GROUP BY comm",
		"SELECT comm, coalesce(min(ret), -1), max(ret) BETWEEN 0 AND 1000, count() IN (993, 7), count() NOT IN (1, 2), upper(comm) || '!' FROM syscall.read GROUP BY comm",
		"SELECT comm, length(comm), substr(comm, 2, 3), substring(comm, 0, 2), lower(comm) LIKE 'b%', round(avg(ret), 1), abs(min(ret)), starts_with(comm, 'a'), contains(comm, ';') FROM syscall.read GROUP BY comm ORDER BY comm",
		"SELECT comm, count() / 0, count() % 0, NULL IS NULL, max(ret) IS NOT NULL, least(count(), 5), greatest(comm, 'b'), nullif(count(), 993), CAST(avg(ret) AS BIGINT), CAST(count() AS VARCHAR) FROM syscall.read GROUP BY comm",
		"SELECT comm, hist(ret) AS sizes, sum(ret), min(ret), max(ret), avg(ret), p99(ret) FROM syscall.read GROUP BY comm",
		"SELECT lhist(count, 0, 4096, 512), count_distinct(fd), sample(count) FROM syscall.read",
		"SELECT kstack, sample(ustack), count() FROM tracepoint.sched.sched_switch GROUP BY kstack",
		"SELECT str(filename) AS file, count() FROM syscall.openat GROUP BY file",
		"SELECT DISTINCT comm FROM syscall.read",
		"SELECT comm, CASE count() WHEN 993 THEN 1 WHEN 7 THEN 2 ELSE 0 END, -count(), ~count(), count() & 3, count() | 8, abs(count()) << 2, count() >> 1, count() ^ 5, NOT count() > 3 FROM syscall.read GROUP BY comm",
		// Stream mode: the probe sends events; the evaluator does the rest.
		"SELECT time, pid, ret FROM syscall.read WHERE ret < 0",
		"SELECT comm, ret / 3, ret % 3, CASE ret WHEN 1 THEN 'one' WHEN 2 THEN 'two' END, ret > 100 AND comm <> 'bash' FROM syscall.read WHERE lower(comm) = 'bash' OR ret = 993",
		"SELECT comm, ret FROM syscall.read WHERE upper(comm) LIKE 'B%' ORDER BY ret DESC, comm LIMIT 3",
		"SELECT lower(comm) AS c, count(), sum(ret), min(comm), max(ret), avg(ret) FROM syscall.read GROUP BY c ORDER BY c",
		"SELECT lower(comm) AS c, hist(ret) AS h, lhist(ret, 0, 100, 10), p99(latency), sample(fd) FROM syscall.read GROUP BY c HAVING p99(latency) > 1000",
	}
	for _, q := range queries {
		t.Run(q, func(t *testing.T) {
			p, err := Compile(q, fixture, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.user.duck != "" {
				t.Fatalf("the evaluator leaves this to DuckDB: %s", p.user.duck)
			}
			table, cols, types := p.inputTable()
			if p.Mode == ModeStream {
				table, cols, types = "events", nil, nil
				cols, types = partialColumns(p)
			}
			rows := sampleRows(p, types)
			m := NewMerger(p)
			defer m.Close()
			var got *store.Result
			if p.Mode == ModeStream {
				got, err = m.mergeEvents(context.Background(), rows)
			} else {
				got, err = m.s.userPart(context.Background(), rows)
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Mode == ModeStream && p.user.aggregate {
				// DuckDB aggregates the events in one statement: the
				// one the plan would run if the evaluator could not.
				p.UserSQL = duckStreamSQL(t, q)
			}
			want, err := m.s.duckRun(context.Background(), table, cols, types, rows)
			if err != nil {
				t.Fatalf("DuckDB: %v\n%s", err, p.UserSQL)
			}
			if !sameResult(got, want) {
				t.Errorf("evaluator\n%v %v\nDuckDB (%s)\n%v %v", got.Types, got.Rows, p.UserSQL, want.Types, want.Rows)
			}
		})
	}
}

// duckStreamSQL is the statement DuckDB runs for a stream-mode query
// with aggregation: the plan's, as if a function only DuckDB has were in it.
func duckStreamSQL(t *testing.T, q string) string {
	t.Helper()
	forced := strings.Replace(q, "GROUP BY", "AND 1 = 1 GROUP BY", 1)
	if !strings.Contains(q, "WHERE") {
		forced = strings.Replace(q, " GROUP BY", " WHERE md5(comm) <> '' GROUP BY", 1)
	}
	p, err := Compile(forced, fixture, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.user.duck == "" {
		t.Fatalf("%s does not go to DuckDB", forced)
	}
	return strings.Replace(p.UserSQL, ` WHERE (md5("comm") <> '')`, "", 1)
}

// sameResult compares answers as a user would see them: DuckDB's DECIMAL
// and HUGEINT differences aside, values and types alike.
func sameResult(a, b *store.Result) bool {
	if !reflect.DeepEqual(a.Columns, b.Columns) || len(a.Rows) != len(b.Rows) {
		return false
	}
	for i := range a.Types {
		// DuckDB types an integer constant INTEGER, the evaluator all
		// integers BIGINT: both print alike.
		if strings.ReplaceAll(a.Types[i], "INTEGER", "BIGINT") != strings.ReplaceAll(b.Types[i], "INTEGER", "BIGINT") {
			return false
		}
	}
	for i := range a.Rows {
		for j := range a.Rows[i] {
			if !sameValue2(a.Rows[i][j], b.Rows[i][j]) {
				return false
			}
		}
	}
	return true
}

func sameValue2(a, b any) bool {
	if af, ok := a.(float64); ok {
		bf, ok := b.(float64)
		return ok && (af == bf || math.Abs(af-bf) <= 1e-9*math.Max(1, math.Abs(af)) || math.IsNaN(af) && math.IsNaN(bf))
	}
	if bi, ok := b.(int32); ok {
		b = int64(bi)
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// sampleRows makes rows of the plan's input, of every value shape the
// probe gives, with NULLs where a partial can be NULL.
func sampleRows(p *Plan, types []string) [][]any {
	var rows [][]any
	comms := []string{"bash", "", "a;b;c", "Zsh", "bash"}
	for r := 0; r < 5; r++ {
		var row []any
		for i, ty := range types {
			var v any
			switch ty {
			case "BIGINT":
				v = []int64{993, -7, 1993, 7, 993}[r] + int64(i)
			case "VARCHAR":
				v = comms[r]
			case "DOUBLE":
				v = []any{1.5, nil, -2.25e10, 3.0, 0.5}[r]
			case bucketType:
				v = []any{}
				if r > 0 {
					v = []any{map[string]any{"lo": int64(-9223372036854775808), "hi": int64(1), "count": int64(3)},
						map[string]any{"lo": int64(1 << 20), "hi": int64(1 << 21), "count": int64(r)}}
				}
			case "BIGINT[]":
				v = []any{int64(r), int64(-1)}
			case "VARCHAR[]":
				v = []any{"main;f", "[lost]"}
			default:
				panic("no sample value of " + ty)
			}
			if p.Mode == ModeAggregate && r == 1 && i >= len(types)-len(p.Aggs) {
				if k := p.Aggs[i-(len(types)-len(p.Aggs))].Kind; k == AggMin || k == AggMax || k == AggAvg || k == AggQuantile {
					v = nil
				}
			}
			row = append(row, v)
		}
		rows = append(rows, row)
	}
	return rows
}
