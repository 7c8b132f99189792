package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/store"
)

// The API reads one of two stores: a host's own DuckDB store, or the
// fleet's ClickHouse database the agents ship to (holter ui --source).
// Their tables are the same; their SQL is not. The handlers in api.go
// keep to what both dialects share — single-table SELECTs with WHERE,
// GROUP BY, ORDER BY, LIMIT/OFFSET, IN lists and subqueries, $N
// parameters — and join, fold and rank in Go, so one piece of code serves
// both. What still differs is the few expressions of a dialect.
type dialect interface {
	// median is the median of an integer expression, as an integer:
	// the interpolated median rounded down, the same in both.
	median(expr string) string
	// contains is true when needle (a placeholder) is in the string hay.
	contains(hay, needle string) string
	// anyFrameContains is true when some frame of the array frames
	// contains needle.
	anyFrameContains(frames, needle string) string
}

// duckDB is the dialect of a host's own store.
type duckDB struct{}

func (duckDB) median(expr string) string          { return "floor(median(" + expr + "))::BIGINT" }
func (duckDB) contains(hay, needle string) string { return "contains(" + hay + ", " + needle + ")" }
func (duckDB) anyFrameContains(frames, needle string) string {
	return "contains(array_to_string(" + frames + ", chr(10)), " + needle + ")"
}

// clickHouse is the dialect of the fleet store, as old as the Debian
// server (18.16).
type clickHouse struct{}

func (clickHouse) median(expr string) string { return "toInt64(floor(median(" + expr + ")))" }
func (clickHouse) contains(hay, needle string) string {
	return "position(" + hay + ", " + needle + ") > 0"
}
func (clickHouse) anyFrameContains(frames, needle string) string {
	return "arrayExists(f -> position(f, " + needle + ") > 0, " + frames + ")"
}

// dialected is a Querier that says its dialect; one that does not is a
// DuckDB store.
type dialected interface {
	sqlDialect() dialect
}

// isFleet says whether q is the fleet's ClickHouse.
func isFleet(q Querier) bool {
	_, ok := dialectOf(q).(clickHouse)
	return ok
}

func dialectOf(q Querier) dialect {
	if d, ok := q.(dialected); ok {
		return d.sqlDialect()
	}
	return duckDB{}
}

// Fleet is the fleet's ClickHouse database as the API's store: its
// queries run read-only, with $N placeholders bound to literals here (the
// HTTP interface of 18.16 takes no parameters), and a server that cannot
// be reached is a 502 that says so rather than a 500.
type Fleet struct {
	Client *clickhouse.Client
}

func (Fleet) sqlDialect() dialect { return clickHouse{} }

// Query runs sql, args filling its $1, $2, … placeholders.
func (f Fleet) Query(ctx context.Context, sql string, args ...any) (*store.Result, error) {
	bound, err := bind(sql, args)
	if err != nil {
		return nil, err
	}
	res, err := f.Client.QueryReadOnly(ctx, bound)
	if err != nil {
		var se *clickhouse.ServerError
		if errors.As(err, &se) {
			if strings.Contains(se.Msg, "Code: 81,") { // UNKNOWN_DATABASE
				return nil, httpError{http.StatusBadGateway, fmt.Sprintf("fleet store: ClickHouse at %s has no database %s (nothing shipped there yet, or --source-db misspelt): %v",
					f.Client.URL(), f.Client.Database(), err)}
			}
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, httpError{http.StatusBadGateway, fmt.Sprintf("fleet store: ClickHouse at %s (database %s) does not answer: %v",
			f.Client.URL(), f.Client.Database(), err)}
	}
	return res, nil
}

var placeholderRE = regexp.MustCompile(`\$([0-9]+)`)

// bind replaces $N by the literal of args[N-1]. The SQL is the API's own:
// it has no $ inside string literals.
func bind(sql string, args []any) (string, error) {
	if len(args) == 0 {
		return sql, nil
	}
	var err error
	out := placeholderRE.ReplaceAllStringFunc(sql, func(m string) string {
		n, _ := strconv.Atoi(m[1:])
		if n < 1 || n > len(args) {
			err = fmt.Errorf("bind: %s but %d arguments", m, len(args))
			return m
		}
		lit, lerr := literal(args[n-1])
		if lerr != nil {
			err = fmt.Errorf("bind %s: %w", m, lerr)
		}
		return lit
	})
	return out, err
}

// literal is v as a ClickHouse literal.
func literal(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return clickhouse.Quote(x), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case int32:
		return strconv.FormatInt(int64(x), 10), nil
	case uint32:
		return strconv.FormatUint(uint64(x), 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "", fmt.Errorf("%v is not a number ClickHouse reads", x)
		}
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case bool:
		if x {
			return "1", nil
		}
		return "0", nil
	}
	return "", fmt.Errorf("no literal for a %T", v)
}

// registerNotInFleet answers the endpoints that need a host's own store or
// recorder with a 404 that says why, in fleet mode.
func registerNotInFleet(mux *http.ServeMux) {
	for route, what := range map[string]string{
		"POST /api/runs":          "runs are added to a host's own store by its recorder",
		"PUT /api/boost/{pid}":    "a host's own recorder samples its processes",
		"DELETE /api/boost/{pid}": "a host's own recorder samples its processes",
		"POST /api/trace":         "live queries run on a host's own agent (holter trace --hosts fans out over agents)",
		"GET /metrics":            "the virtual performance counters are a host's own",
		"GET /api/diff":           "the metric diff is derived from a host's own samples",
	} {
		mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotFound, "not in fleet mode: "+what+"; ask that host's agent (its --api address)")
		})
	}
}
