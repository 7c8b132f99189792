package tracequery

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/holter-dev/holter/internal/store"
)

// Across hosts (Fay's third tier, seed 001 §4.2, Figure 11), each agent
// runs a plan's kernel part and hands back its partial rows
// (RunOptions.Partials) — per-group partial aggregates, or the filtered
// events of a streaming plan; a Merger combines one interval's partials
// from all hosts and runs the user-space part once. A sliding window
// (RunOptions.Window) merges the partials of its intervals the same way.

// Partial aggregates merge exactly: a fleet's answer is the one a single
// host would give over the union of the hosts' events. count, sum, min and
// max merge as themselves, hist and lhist by adding bucket counts, sample
// by concatenation. The others travel as their state, not their value
// (stateOf), as text so that no JSON number loses precision:
//
//	avg             "SUM COUNT"; the merged average is Σsum/Σcount
//	quantile, pNN   the log-linear buckets "B:COUNT,…"; the quantile is read
//	                from the merged buckets, as on one host
//	count_distinct  the 4096-bit linear-counting bitmap in hex; bitmaps
//	                merge by OR (a value seen on two hosts sets the same
//	                bit), and the estimate is taken from the merged bitmap:
//	                the same estimate, with the same error, as one host's
//	                over the union
//	kmeans          the group's histogram "V:COUNT,…"; groups are
//	                clustered once merged, over all hosts' groups
//	topk            its Space-Saving summary (JSON); summaries merge with
//	                the same error bound

// stateType is the partials' column type of an aggregate with a state.
const stateType = "VARCHAR"

func hasState(a *Agg) bool {
	switch a.Kind {
	case AggAvg, AggQuantile, AggDistinct, AggKMeans, AggTopK:
		return true
	}
	return false
}

// stateOf is the mergeable state of aggregate i of g.
func stateOf(a *Agg, g *group, i int) string {
	switch a.Kind {
	case AggAvg:
		n := g.count
		if g.avgN[i] > 0 {
			n = g.avgN[i]
		}
		if a.ArgType == TFloat {
			return fmt.Sprintf("%v %d", g.fsums[i], n)
		}
		return fmt.Sprintf("%d %d", g.sums[i], n)
	case AggQuantile, AggKMeans:
		bs := make([]int64, 0, len(g.hist[i]))
		for b := range g.hist[i] {
			bs = append(bs, b)
		}
		sort.Slice(bs, func(x, y int) bool { return bs[x] < bs[y] })
		parts := make([]string, len(bs))
		for j, b := range bs {
			parts[j] = fmt.Sprintf("%d:%d", b, g.hist[i][b])
		}
		return strings.Join(parts, ",")
	case AggDistinct:
		if g.bits[i] == nil {
			return ""
		}
		buf := make([]byte, 8*len(g.bits[i]))
		for w, x := range g.bits[i] {
			binary.LittleEndian.PutUint64(buf[8*w:], x)
		}
		return hex.EncodeToString(buf)
	case AggTopK:
		return g.top[i].state()
	}
	return ""
}

// addState merges a state given as text into aggregate i of g.
func addState(a *Agg, g *group, i int, v any) error {
	text, _ := v.(string)
	if text == "" {
		return nil
	}
	switch a.Kind {
	case AggAvg:
		var n uint64
		if a.ArgType == TFloat {
			var sum float64
			if _, err := fmt.Sscanf(text, "%g %d", &sum, &n); err != nil {
				return fmt.Errorf("%s: average state %q: %w", a.Col, text, err)
			}
			g.fsums[i] += sum
		} else {
			var sum int64
			if _, err := fmt.Sscanf(text, "%d %d", &sum, &n); err != nil {
				return fmt.Errorf("%s: average state %q: %w", a.Col, text, err)
			}
			g.sums[i] += sum
		}
		g.avgN[i] += n
	case AggQuantile, AggKMeans:
		if g.hist[i] == nil {
			g.hist[i] = map[int64]uint64{}
		}
		for _, part := range strings.Split(text, ",") {
			var b int64
			var c uint64
			if _, err := fmt.Sscanf(part, "%d:%d", &b, &c); err != nil {
				return fmt.Errorf("%s: bucket %q: %w", a.Col, part, err)
			}
			g.hist[i][b] += c
		}
	case AggDistinct:
		buf, err := hex.DecodeString(text)
		if err != nil || len(buf) != distinctBits/8 {
			return fmt.Errorf("%s: distinct bitmap of %d characters, want %d hex digits", a.Col, len(text), distinctBits/4)
		}
		if g.bits[i] == nil {
			g.bits[i] = make([]uint64, distinctBits/64)
		}
		for w := range g.bits[i] {
			g.bits[i][w] |= binary.LittleEndian.Uint64(buf[8*w:])
		}
	case AggTopK:
		t, err := parseTopState(text)
		if err != nil {
			return fmt.Errorf("%s: %w", a.Col, err)
		}
		if g.top[i] == nil {
			g.top[i] = newTopSummary(a.K)
		}
		g.top[i].merge(t)
	}
	return nil
}

// Merger merges partials and finishes a plan's query.
type Merger struct{ s *Session }

// NewMerger makes a merger for p; Close releases it.
func NewMerger(p *Plan) *Merger { return &Merger{s: &Session{plan: p}} }

// Close releases the merger's engine.
func (m *Merger) Close() { m.s.duck.close() }

// partialColumns are the columns and DuckDB types of p's partial rows.
func partialColumns(p *Plan) (cols, types []string) {
	if p.Mode == ModeStream {
		for _, e := range p.Emits {
			cols, types = append(cols, e.Col), append(types, duckTypeOf(emitUserType(e), nil))
		}
		return cols, types
	}
	for _, k := range p.Keys {
		if k.Bucket == nil {
			cols, types = append(cols, k.Col), append(types, duckTypeOf(k.userType(), nil))
		}
	}
	for _, a := range p.Aggs {
		t := duckTypeOf(aggResultType(a), a)
		if hasState(a) {
			t = stateType
		}
		cols, types = append(cols, a.Col), append(types, t)
	}
	return cols, types
}

// Merge combines partial results (as an agent's JSON gives them back, or
// a session in partials mode) and runs the user-space part over them.
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
		return m.mergeEvents(ctx, rows)
	}
	merged, err := m.mergeGroups(rows, len(cols)-len(p.Aggs))
	if err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	return m.s.userPart(ctx, merged)
}

// mergeEvents runs a streaming plan's user-space part over the events of
// all the partials.
func (m *Merger) mergeEvents(ctx context.Context, rows [][]any) (*store.Result, error) {
	p := m.s.plan
	u := p.user
	if u.duck != "" {
		table, cols, types := p.inputTable()
		return m.s.duckRun(ctx, table, cols, types, rows)
	}
	var kept [][]any
	for _, r := range rows {
		if u.where != nil {
			if ok, _ := truth(u.where(r, nil)); !ok {
				continue
			}
		}
		kept = append(kept, r)
	}
	if !u.aggregate {
		return m.s.userPart(ctx, kept)
	}
	gs := newGroups(len(p.Aggs), 0)
	m.s.agg = gs
	for _, r := range kept {
		m.s.aggregateEvent(r)
	}
	if len(gs.order) == 0 && len(u.keys) == 0 {
		gs.get([]any{})
	}
	res, _, err := m.s.finishGroups(ctx, gs, true)
	return res, err
}

// mergeGroups combines rows of the same group key, and turns the states
// of the aggregates that have one into their values.
func (m *Merger) mergeGroups(rows [][]any, nkeys int) ([][]any, error) {
	p := m.s.plan
	byKey := map[string][]any{}
	states := map[string]*group{}
	var order []string
	for _, r := range rows {
		kb, _ := json.Marshal(r[:nkeys])
		k := string(kb)
		g, ok := byKey[k]
		if !ok {
			byKey[k] = r
			states[k] = newGroup(len(p.Aggs))
			order = append(order, k)
		}
		for i, a := range p.Aggs {
			j := nkeys + i
			if hasState(a) {
				if err := addState(a, states[k], i, r[j]); err != nil {
					return nil, err
				}
				continue
			}
			if !ok {
				continue
			}
			switch a.Kind {
			case AggCount:
				g[j] = asI(g[j]) + asI(r[j])
			case AggSum:
				if f, isF := g[j].(float64); isF {
					rf, _ := r[j].(float64)
					g[j] = f + rf
				} else {
					g[j] = asI(g[j]) + asI(r[j])
				}
			case AggMin, AggMax:
				if c, ok := compareValues(r[j], g[j]); g[j] == nil || ok && (a.Kind == AggMin) == (c < 0) && c != 0 {
					if r[j] != nil {
						g[j] = r[j]
					}
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
	var gs []*group
	for _, k := range order {
		gs = append(gs, states[k])
	}
	for i, a := range p.Aggs {
		if a.Kind == AggKMeans {
			clusterGroups(a, i, gs)
		}
	}
	out := make([][]any, 0, len(order))
	for _, k := range order {
		r := byKey[k]
		for i, a := range p.Aggs {
			if hasState(a) {
				r[nkeys+i] = states[k].finish(a, i, nil)
			}
		}
		out = append(out, r)
	}
	return out, nil
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
// evaluator and the DuckDB appender take for the column type.
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
	case "BLOB":
		if s, ok := v.(string); ok {
			// encoding/json writes []byte as base64; hex as Cell prints.
			if b, err := hex.DecodeString(s); err == nil {
				return b
			}
		}
	}
	return v
}
