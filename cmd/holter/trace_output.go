package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// traceOutput prints holter trace's answers: each interval as a table
// (histograms, topk and kmeans beside their keys) or a line of NDJSON;
// each row of a per-event query as it comes.
type traceOutput struct {
	w         io.Writer
	json, tty bool
	// hosts, across hosts, says per host whether it contributed, and
	// fanout what the interval cost.
	hosts  map[string]string
	fanout *fanoutTimes

	mu     sync.Mutex // rows come from the probes' reader, intervals from the run
	widths []int      // of a per-event query's columns so far
	header bool
}

func (o *traceOutput) write(start, end time.Time, res *store.Result, counters map[string]uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.json {
		rows := make([]map[string]any, len(res.Rows))
		res.Sanitize()
		for i, r := range res.Rows {
			rows[i] = map[string]any{}
			for j, v := range r {
				rows[i][res.Columns[j]] = v
			}
		}
		line := map[string]any{"start": start.UTC(), "end": end.UTC(), "rows": rows, "counters": counters}
		if o.hosts != nil {
			line["hosts"] = o.hosts
		}
		if o.fanout != nil {
			line["fanout"] = o.fanout
		}
		return json.NewEncoder(o.w).Encode(line)
	}
	var b strings.Builder
	if o.tty {
		b.WriteString("\x1b[H\x1b[2J")
	}
	fmt.Fprintf(&b, "%s – %s\n", start.Format("15:04:05.000"), end.Format("15:04:05.000"))
	if o.hosts != nil {
		b.WriteString(hostsLine(o.hosts) + "\n")
	}
	writeTable(&b, res)
	b.WriteString(countersLine(counters))
	_, err := io.WriteString(o.w, b.String())
	return err
}

// writeTable writes rows as an aligned table; a cell of several lines
// (a histogram, a topk list) stands beside its row's keys, the row's
// other cells on its first line.
func writeTable(w io.Writer, res *store.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(res.Columns, "\t"))
	for _, r := range res.Rows {
		cells := make([][]string, len(r))
		lines := 1
		for i, v := range r {
			cells[i] = cellLines(v)
			lines = max(lines, len(cells[i]))
		}
		for l := 0; l < lines; l++ {
			parts := make([]string, len(cells))
			for i, c := range cells {
				if l < len(c) {
					parts[i] = strings.ReplaceAll(c[l], "\t", " ")
				}
			}
			fmt.Fprintln(tw, strings.Join(parts, "\t"))
		}
	}
	tw.Flush()
	if res.Truncated {
		fmt.Fprintf(w, "(result cut after %d rows, at the limit of rows or bytes one answer carries)\n", len(res.Rows))
	}
}

// cellLines writes a value as the lines of its cell.
func cellLines(v any) []string {
	l, ok := v.([]any)
	if !ok {
		if m, ok := v.(map[string]any); ok {
			if _, isCluster := m["cluster"]; isCluster {
				return []string{fmt.Sprintf("cluster %v (%v members, distance %s)", m["cluster"], m["members"], formatFloat(num(m["distance"])))}
			}
		}
		return []string{cell(v)}
	}
	if len(l) == 0 {
		return []string{""}
	}
	first, _ := l[0].(map[string]any)
	switch {
	case first != nil && first["lo"] != nil:
		return histLines(l)
	case first != nil && first["value"] != nil:
		return topLines(l)
	}
	return []string{cell(v)}
}

// cell writes one value: floats rounded, the rest as the store writes them.
func cell(v any) string {
	switch x := v.(type) {
	case float64:
		return formatFloat(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = cell(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return store.Cell(v)
}

// formatFloat rounds for reading: two decimals, or three significant
// digits below 1.
func formatFloat(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return strconv.FormatFloat(x, 'g', -1, 64)
	case x == math.Trunc(x) && math.Abs(x) < 1e15:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case math.Abs(x) >= 1:
		return strconv.FormatFloat(math.Round(x*100)/100, 'f', -1, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

// histLines writes a histogram as bpftrace does: [lo, hi) count |@@@|.
func histLines(l []any) []string {
	var maxc float64
	labels := make([]string, len(l))
	width := 0
	for i, e := range l {
		m, _ := e.(map[string]any)
		maxc = max(maxc, num(m["count"]))
		labels[i] = fmt.Sprintf("[%s, %s)", human(num(m["lo"])), human(num(m["hi"])))
		width = max(width, len(labels[i]))
	}
	out := make([]string, len(l))
	for i, e := range l {
		m, _ := e.(map[string]any)
		c := num(m["count"])
		n := 0
		if maxc > 0 {
			n = int(c / maxc * 40)
		}
		out[i] = fmt.Sprintf("%-*s %8.0f |%-40s|", width, labels[i], c, strings.Repeat("@", n))
	}
	return out
}

// topLines writes topk's heavy hitters: value, count and its error bound.
func topLines(l []any) []string {
	width := 0
	for _, e := range l {
		m, _ := e.(map[string]any)
		width = max(width, len(cell(m["value"])))
	}
	out := make([]string, len(l))
	for i, e := range l {
		m, _ := e.(map[string]any)
		out[i] = fmt.Sprintf("%-*s %8.0f ±%.0f", width, cell(m["value"]), num(m["count"]), num(m["error"]))
	}
	return out
}

func countersLine(counters map[string]uint64) string {
	if len(counters) == 0 {
		return "(nothing lost or dropped)\n"
	}
	var parts []string
	for k, v := range counters {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return fmt.Sprintf("(lost or dropped: %s)\n", strings.Join(parts, " "))
}

// writeRow prints one row of a per-event query as it comes: a header the
// first time, columns as wide as their widest value so far.
func (o *traceOutput) writeRow(columns []string, row []any) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.json {
		m := make(map[string]any, len(row))
		for i, v := range row {
			if i < len(columns) {
				m[columns[i]] = jsonSafe(v)
			}
		}
		return json.NewEncoder(o.w).Encode(m)
	}
	cells := make([]string, len(row))
	for i, v := range row {
		cells[i] = strings.Join(cellLines(v), " ")
	}
	var b strings.Builder
	if !o.header {
		o.header = true
		o.widths = make([]int, len(columns))
		for i, c := range columns {
			o.widths[i] = max(len(c), 6)
		}
		for i := range cells {
			o.widths[i] = max(o.widths[i], len(cells[i]))
		}
		writeFixed(&b, columns, o.widths)
	}
	for i := range cells {
		if i < len(o.widths) {
			o.widths[i] = max(o.widths[i], len(cells[i]))
		}
	}
	writeFixed(&b, cells, o.widths)
	_, err := io.WriteString(o.w, b.String())
	return err
}

func writeFixed(b *strings.Builder, cells []string, widths []int) {
	for i, c := range cells {
		if i == len(cells)-1 {
			b.WriteString(c)
			break
		}
		fmt.Fprintf(b, "%-*s  ", widths[i], c)
	}
	b.WriteByte('\n')
}

// writeCounters reports a per-event query's losses of an interval, when
// there are any.
func (o *traceOutput) writeCounters(start, end time.Time, counters map[string]uint64) error {
	if len(counters) == 0 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.json {
		return json.NewEncoder(o.w).Encode(map[string]any{"start": start.UTC(), "end": end.UTC(), "counters": counters})
	}
	_, err := io.WriteString(o.w, countersLine(counters))
	return err
}

// jsonSafe is a value JSON can carry.
func jsonSafe(v any) any {
	r := &store.Result{Rows: [][]any{{v}}}
	r.Sanitize()
	return r.Rows[0][0]
}

func num(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case int32:
		return float64(x)
	case uint64:
		return float64(x)
	case float64:
		return x
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return 0
}

func human(x float64) string {
	switch {
	case x <= -9e18:
		return "-inf"
	case x >= 9e18:
		return "inf"
	}
	v := int64(x)
	for _, u := range []struct {
		n int64
		s string
	}{{1 << 40, "T"}, {1 << 30, "G"}, {1 << 20, "M"}, {1 << 10, "K"}} {
		if v >= u.n && v%u.n == 0 {
			return fmt.Sprintf("%d%s", v/u.n, u.s)
		}
	}
	return fmt.Sprint(v)
}
