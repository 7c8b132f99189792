package engine

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	duckdb "github.com/duckdb/duckdb-go/v2"

	"github.com/holter-dev/holter/internal/hist"
)

// The scalar functions an engine process registers, by set (Options.
// Functions). They run in the engine process, on DuckDB's thread.

// BudgetFunction is the function through which the store's budgeted
// queries pass the size of each row: true while the rows so far fit in
// the query's result budget (WithResultBudget), false after, which leaves
// the rows out of the answer DuckDB holds. Given the size rather than the
// values, it never meets a type the driver cannot read. Without a budget
// it is true.
const BudgetFunction = "holter_result_budget"

// RowOverhead is what the budget counts a row beyond its values' text.
const RowOverhead = 16

type resultBudgetKey struct{}

// resultBudget is what is left of one query's byte limit; DuckDB calls
// BudgetFunction on the query's own thread (threads = 1).
type resultBudget struct {
	left int64
	over bool
}

type udf struct {
	cfg duckdb.ScalarFuncConfig
	run duckdb.ScalarFuncExecutor
}

func (u udf) Config() duckdb.ScalarFuncConfig     { return u.cfg }
func (u udf) Executor() duckdb.ScalarFuncExecutor { return u.run }

func typeOf(t duckdb.Type) duckdb.TypeInfo {
	info, err := duckdb.NewTypeInfo(t)
	if err != nil {
		panic(err) // only for types that do not exist
	}
	return info
}

// storeFunctions is the store's set: BudgetFunction.
func storeFunctions() (map[string]udf, error) {
	return map[string]udf{BudgetFunction: {
		cfg: duckdb.ScalarFuncConfig{InputTypeInfos: []duckdb.TypeInfo{typeOf(duckdb.TYPE_BIGINT)},
			ResultTypeInfo: typeOf(duckdb.TYPE_BOOLEAN), Volatile: true, SpecialNullHandling: true},
		run: duckdb.ScalarFuncExecutor{RowContextExecutor: func(ctx context.Context, row []driver.Value) (any, error) {
			b, _ := ctx.Value(resultBudgetKey{}).(*resultBudget)
			if b == nil || b.over {
				return b == nil, nil
			}
			size, _ := row[0].(int64)
			b.left -= size + RowOverhead
			b.over = b.left < 0
			return !b.over, nil
		}},
	}}, nil
}

// traceFunctions is the set of holter trace's user-space part: when
// DuckDB runs a query's aggregation (the evaluator lacks a function it
// uses), it computes hist, lhist and the quantiles by the very buckets
// the probe uses, over list(value) of the group.
func traceFunctions() (map[string]udf, error) {
	bigint, double := typeOf(duckdb.TYPE_BIGINT), typeOf(duckdb.TYPE_DOUBLE)
	list, err := duckdb.NewListInfo(bigint)
	if err != nil {
		return nil, err
	}
	var entries []duckdb.StructEntry
	for _, n := range []string{"lo", "hi", "count"} {
		e, err := duckdb.NewStructEntry(bigint, n)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	st, err := duckdb.NewStructInfo(entries[0], entries[1:]...)
	if err != nil {
		return nil, err
	}
	buckets, err := duckdb.NewListInfo(st)
	if err != nil {
		return nil, err
	}
	histOf := func(s hist.Spec, vals any) map[int64]uint64 {
		h := map[int64]uint64{}
		l, _ := vals.([]any)
		for _, v := range l {
			if x, ok := v.(int64); ok {
				h[s.Bucket(x)]++
			}
		}
		return h
	}
	row := func(fn func([]driver.Value) (any, error)) duckdb.ScalarFuncExecutor {
		return duckdb.ScalarFuncExecutor{RowExecutor: fn}
	}
	return map[string]udf{
		"holter_hist": {cfg: duckdb.ScalarFuncConfig{InputTypeInfos: []duckdb.TypeInfo{list}, ResultTypeInfo: buckets},
			run: row(func(v []driver.Value) (any, error) {
				s := hist.Spec{Kind: hist.Log2}
				return s.Rows(histOf(s, v[0])), nil
			})},
		"holter_lhist": {cfg: duckdb.ScalarFuncConfig{InputTypeInfos: []duckdb.TypeInfo{list, bigint, bigint, bigint}, ResultTypeInfo: buckets},
			run: row(func(v []driver.Value) (any, error) {
				lo, hi, step := v[1].(int64), v[2].(int64), v[3].(int64)
				if step <= 0 || hi <= lo {
					return nil, fmt.Errorf("lhist needs min < max and step > 0")
				}
				s := hist.Spec{Kind: hist.Linear, Min: lo, Step: step, Buckets: (hi - lo + step - 1) / step}
				return s.Rows(histOf(s, v[0])), nil
			})},
		"holter_quantile": {cfg: duckdb.ScalarFuncConfig{InputTypeInfos: []duckdb.TypeInfo{list, double}, ResultTypeInfo: double},
			run: row(func(v []driver.Value) (any, error) {
				return hist.Quantile(histOf(hist.Spec{Kind: hist.LogLinear}, v[0]), v[1].(float64)), nil
			})},
	}, nil
}

// registerFunctions adds the functions of set to the catalog.
func registerFunctions(conn *sql.Conn, set string) error {
	var fns map[string]udf
	var err error
	switch set {
	case "store":
		fns, err = storeFunctions()
	case "trace":
		fns, err = traceFunctions()
	default:
		return fmt.Errorf("engine: no function set %q", set)
	}
	if err != nil {
		return fmt.Errorf("engine: functions %s: %w", set, err)
	}
	for name, f := range fns {
		if err := duckdb.RegisterScalarUDF(conn, name, f); err != nil {
			return fmt.Errorf("engine: register %s: %w", name, err)
		}
	}
	return nil
}
