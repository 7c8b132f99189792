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
		_, err := fmt.Fprintf(w, "(result cut after %d rows, at the limit of rows or bytes one answer carries)\n", len(r.Rows))
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

// EncodeResult writes the rows as a Result's JSON, one row at a time, so
// that an answer is never held whole: {"columns", "types", "rows",
// "truncated"}. An error met after the first byte is written ends the
// object as "error", and is returned.
func (r *Rows) EncodeResult(w io.Writer) error {
	enc := json.NewEncoder(w)
	head := struct {
		Columns []string `json:"columns"`
		Types   []string `json:"types"`
	}{r.Columns, r.Types}
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	if _, err := w.Write(append(b[:len(b)-1], `,"rows":[`...)); err != nil {
		return err
	}
	row := make([]any, len(r.Columns))
	for n := 0; r.Next(); n++ {
		if n > 0 {
			if _, err := io.WriteString(w, ","); err != nil {
				return err
			}
		}
		for i, v := range r.Row() {
			row[i] = jsonValue(v)
		}
		// Encode ends the row with a newline, which JSON allows.
		if err := enc.Encode(row); err != nil {
			return err
		}
	}
	tail := "]"
	if r.Truncated() {
		tail += `,"truncated":true`
	}
	if err := r.Err(); err != nil {
		msg, _ := json.Marshal(err.Error())
		io.WriteString(w, tail+`,"error":`+string(msg)+"}\n")
		return err
	}
	_, err = io.WriteString(w, tail+"}\n")
	return err
}
