package store

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

var traceNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,62}$`)

// TraceTable is the table holding the saved results of `holter trace --save NAME`.
func TraceTable(name string) (string, error) {
	if !traceNameRE.MatchString(name) {
		return "", fmt.Errorf("save name %q: use letters, digits and _ (starting with a letter)", name)
	}
	return "trace_" + name, nil
}

// SaveTrace appends one interval of a live query's result to its table
// (created on first use): the interval's bounds, then the result's
// columns. Numbers and strings keep their type; anything nested
// (histograms, samples) is kept as JSON text.
func (s *Store) SaveTrace(ctx context.Context, name string, start, end time.Time, res *Result) (err error) {
	if s.readOnly {
		return errors.New("save trace: store is open read-only")
	}
	table, err := TraceTable(name)
	if err != nil {
		return err
	}
	types := make([]string, len(res.Columns))
	for i := range res.Columns {
		types[i] = "VARCHAR"
		if i < len(res.Types) {
			switch t := res.Types[i]; t {
			case "BIGINT", "INTEGER", "DOUBLE", "BOOLEAN", "HUGEINT", "UBIGINT":
				types[i] = t
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return fmt.Errorf("save trace: %w", err)
	}
	defer func() { err = s.wrote(err) }()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("save trace: %w", err)
	}
	defer conn.Close()
	defs := []string{"interval_start TIMESTAMP", "interval_end TIMESTAMP"}
	for i, c := range res.Columns {
		defs = append(defs, `"`+strings.ReplaceAll(c, `"`, `""`)+`" `+types[i])
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+table+" ("+strings.Join(defs, ", ")+")"); err != nil {
		return fmt.Errorf("save trace: %w", err)
	}
	err = conn.Raw(func(dc any) error {
		return appendRows(dc.(driver.Conn), table, len(res.Rows), func(i int) []driver.Value {
			row := []driver.Value{start.UTC(), end.UTC()}
			for j, v := range res.Rows[i] {
				if types[j] == "VARCHAR" {
					if _, ok := v.(string); !ok && v != nil {
						b, _ := json.Marshal(jsonValue(v))
						v = string(b)
					}
				}
				row = append(row, v)
			}
			return row
		})
	})
	if err != nil {
		return fmt.Errorf("save trace (does %s have other columns from an earlier query?): %w", table, err)
	}
	return nil
}
