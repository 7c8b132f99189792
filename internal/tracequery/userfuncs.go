package tracequery

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"

	duckdb "github.com/duckdb/duckdb-go/v2"
)

// When DuckDB runs a query's aggregation (the evaluator lacks a function
// it uses), it computes the aggregates the probe would have: hist, lhist
// and the quantiles by the very buckets the probe uses (the functions
// below, over list(value) of the group), so that an answer does not
// change with where it was computed; sample() keeps the values at counts
// 1, 2, 4, … 128; count_distinct() is exact there.

// bucketType is the DuckDB type of hist's and lhist's value.
const bucketType = "STRUCT(lo BIGINT, hi BIGINT, count BIGINT)[]"

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
		g := newGroup(1)
		l, _ := vals.([]any)
		for _, v := range l {
			if x, ok := v.(int64); ok {
				g.count++
				g.add(a, 0, x, 1)
			}
		}
		return g
	}
	funcs := map[string]*udf{
		"holter_hist": {in: []duckdb.TypeInfo{list}, out: buckets, fn: func(v []driver.Value) (any, error) {
			a := &Agg{Kind: AggHist}
			return histOf(a, v[0]).finish(a, 0, nil), nil
		}},
		"holter_lhist": {in: []duckdb.TypeInfo{list, bigint, bigint, bigint}, out: buckets, fn: func(v []driver.Value) (any, error) {
			lo, hi, step := v[1].(int64), v[2].(int64), v[3].(int64)
			if step <= 0 || hi <= lo {
				return nil, fmt.Errorf("lhist needs min < max and step > 0")
			}
			a := &Agg{Kind: AggLHist, Min: lo, Step: step, Buckets: (hi - lo + step - 1) / step}
			return histOf(a, v[0]).finish(a, 0, nil), nil
		}},
		"holter_quantile": {in: []duckdb.TypeInfo{list, double}, out: double, fn: func(v []driver.Value) (any, error) {
			a := &Agg{Kind: AggQuantile, Q: v[1].(float64)}
			return histOf(a, v[0]).finish(a, 0, nil), nil
		}},
	}
	for name, f := range funcs {
		if err := duckdb.RegisterScalarUDF(conn, name, f); err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("user-space function %s: %w", name, err)
		}
	}
	return nil
}
