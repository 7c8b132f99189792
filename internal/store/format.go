package store

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/holter-dev/holter/internal/engine"
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

// jsonValue makes values JSON can carry: NaN and infinities become
// strings, a DECIMAL its exact number.
func jsonValue(v any) any {
	switch x := v.(type) {
	case engine.Decimal:
		return json.Number(x.String())
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
// object as "error", which Result's UnmarshalJSON returns, and is returned.
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

// UnmarshalJSON reads a Result's JSON keeping numbers exact: an integer is
// an int64, or a uint64 or *big.Int when it does not fit; a number of a
// floating-point column a float64, of a DECIMAL one its json.Number; any
// other number a float64. An "error" (see EncodeResult) is returned.
func (r *Result) UnmarshalJSON(b []byte) error {
	var raw struct {
		Columns   []string `json:"columns"`
		Types     []string `json:"types"`
		Rows      [][]any  `json:"rows"`
		Truncated bool     `json:"truncated"`
		Error     string   `json:"error"`
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&raw); err != nil {
		return err
	}
	if raw.Error != "" {
		return errors.New(raw.Error)
	}
	for _, row := range raw.Rows {
		for i, v := range row {
			typ := ""
			if i < len(raw.Types) {
				typ = raw.Types[i]
			}
			row[i] = exactNumbers(v, typ)
		}
	}
	*r = Result{Columns: raw.Columns, Types: raw.Types, Rows: raw.Rows, Truncated: raw.Truncated}
	if r.Rows == nil {
		r.Rows = [][]any{}
	}
	return nil
}

// exactNumbers turns the json.Numbers in v, of column type typ ("" inside
// lists and structs), into Go numbers as UnmarshalJSON says.
func exactNumbers(v any, typ string) any {
	switch x := v.(type) {
	case json.Number:
		up := strings.ToUpper(typ)
		switch {
		case up == "DOUBLE" || up == "FLOAT" || up == "REAL" || strings.HasPrefix(up, "FLOAT"):
			f, _ := x.Float64()
			return f
		case strings.HasPrefix(up, "DECIMAL"):
			return x
		}
		if i, err := x.Int64(); err == nil {
			return i
		}
		if n, ok := new(big.Int).SetString(string(x), 10); ok {
			if n.IsUint64() {
				return n.Uint64()
			}
			return n
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i, e := range x {
			x[i] = exactNumbers(e, "")
		}
	case map[string]any:
		for k, e := range x {
			x[k] = exactNumbers(e, "")
		}
	}
	return v
}
