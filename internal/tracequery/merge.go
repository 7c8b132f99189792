package tracequery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// Across hosts (Fay's third tier, seed 001 §4.2, Figure 11), each agent
// runs a plan's kernel part and hands back its partial rows
// (RunOptions.Partials) — per-group partial aggregates, or the filtered
// events of a streaming plan; a Merger combines one interval's partials
// from all hosts and runs the user-space SQL once.

// ErrNotMergeable is returned for a plan whose partial aggregates cannot
// be combined across hosts from what the agents return.
var ErrNotMergeable = errors.New("not mergeable across hosts")

// CheckMergeable says whether p can run across hosts.
func CheckMergeable(p *Plan) error {
	if p.Mode != ModeAggregate {
		return nil
	}
	for _, a := range p.Aggs {
		switch a.Kind {
		case AggAvg, AggQuantile, AggDistinct:
			return fmt.Errorf("%s: %w (use sum and count, or hist, instead)", a.Col, ErrNotMergeable)
		}
	}
	return nil
}

// Merger merges partials and finishes a plan's query.
type Merger struct{ s *Session }

// NewMerger makes a merger for p; Close releases it.
func NewMerger(p *Plan) *Merger { return &Merger{s: &Session{plan: p}} }

// Close releases the merger's engine.
func (m *Merger) Close() {
	if m.s.db != nil {
		m.s.db.Close()
	}
}

// partialColumns are the columns and DuckDB types of p's partial rows.
func partialColumns(p *Plan) (cols, types []string) {
	if p.Mode == ModeStream {
		for _, e := range p.Emits {
			t := duckType(e.Type)
			if e.Col == "time" {
				t = "TIMESTAMP_NS"
			}
			cols, types = append(cols, e.Col), append(types, t)
		}
		return cols, types
	}
	for _, k := range p.Keys {
		if k.Bucket == nil {
			cols, types = append(cols, k.Col), append(types, duckType(k.Type))
		}
	}
	for _, a := range p.Aggs {
		cols, types = append(cols, a.Col), append(types, aggDuckType(a))
	}
	return cols, types
}

// Merge combines partial results (as an agent's JSON gives them back) and
// runs the user-space part over them.
func (m *Merger) Merge(ctx context.Context, parts []*store.Result) (*store.Result, error) {
	p := m.s.plan
	cols, types := partialColumns(p)
	var rows [][]any
	for _, part := range parts {
		if len(part.Columns) != len(cols) {
			return nil, fmt.Errorf("merge: partials have %d columns, the plan %d", len(part.Columns), len(cols))
		}
		for _, r := range part.Rows {
			row := make([]any, len(r))
			for i, v := range r {
				row[i] = fromJSON(v, types[i])
			}
			rows = append(rows, row)
		}
	}
	if p.Mode == ModeStream {
		return m.s.userPart(ctx, "events", cols, types, rows)
	}
	rows = mergeGroups(p, rows, len(cols)-len(p.Aggs))
	return m.s.userPart(ctx, "partials", cols, types, rows)
}

// mergeGroups combines rows of the same group key.
func mergeGroups(p *Plan, rows [][]any, nkeys int) [][]any {
	byKey := map[string][]any{}
	var order []string
	for _, r := range rows {
		kb, _ := json.Marshal(r[:nkeys])
		k := string(kb)
		g, ok := byKey[k]
		if !ok {
			byKey[k] = r
			order = append(order, k)
			continue
		}
		for i, a := range p.Aggs {
			j := nkeys + i
			switch a.Kind {
			case AggCount, AggSum:
				g[j] = asI(g[j]) + asI(r[j])
			case AggMin, AggMax:
				if g[j] == nil || (r[j] != nil && (a.Kind == AggMin) == (asI(r[j]) < asI(g[j]))) {
					g[j] = r[j]
				}
			case AggHist, AggLHist:
				g[j] = mergeBuckets(g[j], r[j])
			case AggSample:
				a, _ := g[j].([]any)
				b, _ := r[j].([]any)
				g[j] = append(a, b...)
			}
		}
	}
	out := make([][]any, 0, len(order))
	for _, k := range order {
		out = append(out, byKey[k])
	}
	return out
}

func asI(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case float64:
		return int64(x)
	case json.Number:
		n, _ := x.Int64()
		return n
	}
	return 0
}

func mergeBuckets(a, b any) any {
	counts := map[int64]map[string]any{}
	for _, l := range []any{a, b} {
		list, _ := l.([]any)
		for _, e := range list {
			m, ok := e.(map[string]any)
			if !ok {
				continue
			}
			lo := asI(m["lo"])
			if c, ok := counts[lo]; ok {
				c["count"] = asI(c["count"]) + asI(m["count"])
			} else {
				counts[lo] = map[string]any{"lo": lo, "hi": asI(m["hi"]), "count": asI(m["count"])}
			}
		}
	}
	los := make([]int64, 0, len(counts))
	for lo := range counts {
		los = append(los, lo)
	}
	sort.Slice(los, func(i, j int) bool { return los[i] < los[j] })
	out := make([]any, 0, len(los))
	for _, lo := range los {
		out = append(out, counts[lo])
	}
	return out
}

// fromJSON turns a value decoded from an agent's JSON back into what the
// DuckDB appender takes for the column type.
func fromJSON(v any, typ string) any {
	if v == nil {
		return nil
	}
	switch typ {
	case "BIGINT":
		return asI(v)
	case "DOUBLE":
		if f, ok := v.(float64); ok {
			return f
		}
		return float64(asI(v))
	case "BIGINT[]", bucketType:
		list, _ := v.([]any)
		out := make([]any, len(list))
		for i, e := range list {
			if m, ok := e.(map[string]any); ok {
				out[i] = map[string]any{"lo": asI(m["lo"]), "hi": asI(m["hi"]), "count": asI(m["count"])}
			} else {
				out[i] = asI(e)
			}
		}
		return out
	case "VARCHAR[]":
		list, _ := v.([]any)
		return list
	case "TIMESTAMP_NS":
		// Event times travel as RFC 3339 text.
		if s, ok := v.(string); ok {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				return t
			}
		}
	}
	return v
}
