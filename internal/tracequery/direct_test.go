package tracequery

import (
	"context"
	"reflect"
	"testing"
)

// TestDirectUserPartMatchesDuckDB checks that the user-space part done
// without DuckDB (Plan.Direct) gives what DuckDB gives for the same
// partial rows, names, types and values, and that a query needing more
// than a projection is left to DuckDB.
func TestDirectUserPartMatchesDuckDB(t *testing.T) {
	direct := []string{
		"SELECT comm, count() FROM syscall.getppid GROUP BY comm",
		"SELECT count() AS n, comm AS c, pid FROM syscall.getppid GROUP BY pid, comm",
		"SELECT hist(fd) FROM syscall.read",
		"SELECT comm, hist(ret) AS sizes, sum(ret), min(ret), max(ret), avg(ret), p99(ret) FROM syscall.read GROUP BY comm",
		"SELECT lhist(count, 0, 4096, 512), count_distinct(fd), sample(count) FROM syscall.read",
		"SELECT kstack, sample(ustack), count() FROM tracepoint.sched.sched_switch GROUP BY kstack",
		"SELECT str(filename) AS file, count() FROM syscall.openat GROUP BY file",
	}
	duck := []string{
		"SELECT comm, count() AS n FROM syscall.getppid GROUP BY comm ORDER BY n DESC",
		"SELECT comm, count() FROM syscall.getppid GROUP BY comm LIMIT 5",
		"SELECT fd, count() FROM syscall.read GROUP BY fd HAVING count() > 10",
		"SELECT comm, count() + 1 FROM syscall.getppid GROUP BY comm",
		"SELECT lower(comm) AS c, count() FROM syscall.read GROUP BY c",
		"SELECT pid, ret FROM syscall.read",
	}
	for _, q := range duck {
		p, err := Compile(q, fixture, nil)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if p.Direct != nil {
			t.Errorf("%s: the user-space part (%s) needs DuckDB, but it is planned as a projection %v", q, p.UserSQL, p.Direct)
		}
	}
	for _, q := range direct {
		p, err := Compile(q, fixture, nil)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if p.Direct == nil {
			t.Errorf("%s: the user-space part (%s) is a projection, but it is left to DuckDB", q, p.UserSQL)
			continue
		}
		cols, types, rows := partialRows(p)
		s := &Session{plan: p}
		got, err := s.userPart(context.Background(), "partials", cols, types, rows)
		if err != nil {
			t.Fatal(err)
		}
		p.Direct = nil
		want, err := s.userPart(context.Background(), "partials", cols, types, rows)
		s.Close()
		if err != nil {
			t.Fatalf("%s: DuckDB: %v", q, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: without DuckDB\n%#v\nwith DuckDB (%s)\n%#v", q, got, p.UserSQL, want)
		}
	}
}

// partialRows makes three rows of partials for plan p, of every value
// shape flushAggregate gives, with NULLs where it can give them.
func partialRows(p *Plan) (cols, types []string, rows [][]any) {
	for _, k := range p.Keys {
		if k.Bucket == nil {
			cols, types = append(cols, k.Col), append(types, duckType(k.Type))
		}
	}
	for _, a := range p.Aggs {
		cols, types = append(cols, a.Col), append(types, aggDuckType(a))
	}
	for r := 0; r < 3; r++ {
		var row []any
		for _, ty := range types {
			var v any
			switch ty {
			case "BIGINT":
				v = int64(r*1000 - 7)
			case "VARCHAR":
				v = []string{"bash", "", "a;b;c"}[r]
			case "DOUBLE":
				v = []any{1.5, nil, -2.25e10}[r]
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
			row = append(row, v)
		}
		rows = append(rows, row)
	}
	return cols, types, rows
}
