package store

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Cell renders one value the way the table and CSV outputs show it.
func Cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return x
	case []byte:
		return fmt.Sprintf("%x", x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case float64:
		return fmt.Sprint(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = Cell(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v)
}

// WriteTable writes an aligned text table.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(r.Columns, "\t"))
	for _, row := range r.Rows {
		cells := make([]string, len(row))
		for i, v := range row {
			cells[i] = strings.ReplaceAll(Cell(v), "\t", " ")
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return r.writeFooter(w)
}

func (r *Result) writeFooter(w io.Writer) error {
	if r.Truncated {
		_, err := fmt.Fprintf(w, "(result cut at %d rows)\n", MaxRows)
		return err
	}
	return nil
}

// WriteCSV writes RFC 4180 CSV with a header row.
func (r *Result) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(r.Columns)
	for _, row := range r.Rows {
		cells := make([]string, len(row))
		for i, v := range row {
			cells[i] = Cell(v)
			if v == nil {
				cells[i] = ""
			}
		}
		cw.Write(cells)
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes the rows as a JSON array of objects keyed by column.
func (r *Result) WriteJSON(w io.Writer) error {
	out := make([]map[string]any, len(r.Rows))
	for i, row := range r.Rows {
		m := make(map[string]any, len(row))
		for j, v := range row {
			m[r.Columns[j]] = jsonValue(v)
		}
		out[i] = m
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// jsonValue makes values JSON can carry: NaN and infinities become strings.
func jsonValue(v any) any {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprint(x)
		}
	case float32:
		return jsonValue(float64(x))
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	}
	return v
}

// Sanitize makes the result encodable as JSON (see jsonValue).
func (r *Result) Sanitize() {
	for _, row := range r.Rows {
		for j, v := range row {
			row[j] = jsonValue(v)
		}
	}
}
