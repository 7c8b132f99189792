package tracequery

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"math/bits"
	"strings"

	duckdb "github.com/duckdb/duckdb-go/v2"
)

// When a query's aggregation runs in user space (stream mode), DuckDB
// computes the aggregates the probe would have: hist, lhist and the
// quantiles by the very buckets the probe uses (the functions below, over
// list(value) of the group), so that an answer does not change with where
// it was computed; sample() keeps the values at counts 1, 2, 4, … 128;
// count_distinct() is exact there.

// bucketOf is the bucket the probe's code (gen.bucket) gives v.
func (a *Agg) bucketOf(v int64) int64 {
	switch a.Kind {
	case AggHist:
		if v <= 0 {
			return 0
		}
		return int64(bits.Len64(uint64(v)))
	case AggLHist:
		if v < a.Min {
			return 0
		}
		b := int64(uint64(v-a.Min)/uint64(a.Step)) + 1
		if b > a.Buckets {
			return a.Buckets + 1
		}
		return b
	}
	switch {
	case v < 0:
		return 0
	case v < 4:
		return v
	}
	m := int64(bits.Len64(uint64(v))) - 1
	return 4*(m-1) + (v>>(m-2))&3
}

// streamAggSQL is DuckDB's text for an aggregate of a stream-mode plan, or
// false for the aggregates DuckDB has under the same name (count, sum,
// min, max, avg).
func streamAggSQL(c *Call, a *Agg, arg func(Node) string) (string, bool) {
	if a == nil {
		return "", false
	}
	values := "coalesce(list(CAST(" + arg(a.Arg) + " AS BIGINT)), [])"
	switch a.Kind {
	case AggHist:
		return "holter_hist(" + values + ")", true
	case AggLHist:
		return fmt.Sprintf("holter_lhist(%s, %d, %d, %d)", values, a.Min, a.Min+a.Buckets*a.Step, a.Step), true
	case AggQuantile:
		return fmt.Sprintf("holter_quantile(%s, %v)", values, a.Q), true
	case AggDistinct:
		return "count(DISTINCT " + arg(a.Arg) + ")", true
	case AggSample:
		return "list_filter(list_select(list(" + arg(a.Arg) + "), [1, 2, 4, 8, 16, 32, 64, 128]), v -> v IS NOT NULL)", true
	}
	return "", false
}

// udf is a DuckDB scalar function implemented in Go.
type udf struct {
	in  []duckdb.TypeInfo
	out duckdb.TypeInfo
	fn  func([]driver.Value) (any, error)
}

func (u *udf) Config() duckdb.ScalarFuncConfig {
	return duckdb.ScalarFuncConfig{InputTypeInfos: u.in, ResultTypeInfo: u.out}
}

func (u *udf) Executor() duckdb.ScalarFuncExecutor {
	return duckdb.ScalarFuncExecutor{RowExecutor: u.fn}
}

// registerUserFuncs adds holter_hist, holter_lhist and holter_quantile to
// the user-space engine.
func registerUserFuncs(conn *sql.Conn) error {
	ti := func(t duckdb.Type) duckdb.TypeInfo {
		info, err := duckdb.NewTypeInfo(t)
		if err != nil {
			panic(err) // only for types that do not exist
		}
		return info
	}
	bigint, double := ti(duckdb.TYPE_BIGINT), ti(duckdb.TYPE_DOUBLE)
	list, err := duckdb.NewListInfo(bigint)
	if err != nil {
		return err
	}
	var entries []duckdb.StructEntry
	for _, n := range []string{"lo", "hi", "count"} {
		e, err := duckdb.NewStructEntry(bigint, n)
		if err != nil {
			return err
		}
		entries = append(entries, e)
	}
	st, err := duckdb.NewStructInfo(entries[0], entries[1:]...)
	if err != nil {
		return err
	}
	buckets, err := duckdb.NewListInfo(st)
	if err != nil {
		return err
	}
	histOf := func(a *Agg, vals any) *group {
		g := &group{hist: []map[int64]uint64{{}}}
		l, _ := vals.([]any)
		for _, v := range l {
			if x, ok := v.(int64); ok {
				g.hist[0][a.bucketOf(x)]++
				g.count++
			}
		}
		return g
	}
	s := &Session{}
	funcs := map[string]*udf{
		"holter_hist": {in: []duckdb.TypeInfo{list}, out: buckets, fn: func(v []driver.Value) (any, error) {
			a := &Agg{Kind: AggHist}
			return s.finish(a, histOf(a, v[0]), 0, 0), nil
		}},
		"holter_lhist": {in: []duckdb.TypeInfo{list, bigint, bigint, bigint}, out: buckets, fn: func(v []driver.Value) (any, error) {
			lo, hi, step := v[1].(int64), v[2].(int64), v[3].(int64)
			if step <= 0 || hi <= lo {
				return nil, fmt.Errorf("lhist needs min < max and step > 0")
			}
			a := &Agg{Kind: AggLHist, Min: lo, Step: step, Buckets: (hi - lo + step - 1) / step}
			return s.finish(a, histOf(a, v[0]), 0, 0), nil
		}},
		"holter_quantile": {in: []duckdb.TypeInfo{list, double}, out: double, fn: func(v []driver.Value) (any, error) {
			a := &Agg{Kind: AggQuantile, Q: v[1].(float64)}
			return s.finish(a, histOf(a, v[0]), 0, 0), nil
		}},
	}
	for name, f := range funcs {
		if err := duckdb.RegisterScalarUDF(conn, name, f); err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("user-space function %s: %w", name, err)
		}
	}
	return nil
}
