package tracequery

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// topk(key, k [, weight]) finds the heaviest keys of a group with bounded
// memory, after Space-Saving (Metwally, Agrawal and El Abbadi, 2005): k
// slots of (key, count, error). An event whose key has a slot adds its
// weight to the count; another takes the slot of the least count c, with
// count c + weight and error c. A slot's count is never below its key's
// true count and at most error above it, and a key with no slot has a true
// count of at most the least count. The least count is at most N/k (N the
// group's total weight), so every error is at most N/k, and a key heavier
// than N/k always has a slot.
//
// The probe keeps the slots per CPU in the group's map value (a scan of
// the k slots each event, no loop); user space merges the CPUs'
// summaries, and intervals' or hosts' (mergeable: a key missing from a
// full summary is counted at its least count, as an upper bound), and
// reports for each of the k heaviest: value, count (upper bound) and
// error (count minus the lower bound), the bound above for every one.

// topkType is the DuckDB type of topk's value.
const topkType = `STRUCT("value" VARCHAR, "count" BIGINT, "error" BIGINT)[]`

// topSummary is a Space-Saving summary.
type topSummary struct {
	k       int
	entries []topEntry
	n       uint64 // the weight seen
}

type topEntry struct {
	val        any
	count, err uint64
}

func newTopSummary(k int) *topSummary { return &topSummary{k: k} }

func sameValue(a, b any) bool {
	if ab, ok := a.([]byte); ok {
		bb, ok := b.([]byte)
		return ok && bytes.Equal(ab, bb)
	}
	return a == b
}

func (t *topSummary) find(v any) int {
	for i, e := range t.entries {
		if sameValue(e.val, v) {
			return i
		}
	}
	return -1
}

// least is the least count of a full summary (a missing key's bound), 0
// when it has a free slot.
func (t *topSummary) least() uint64 {
	if len(t.entries) < t.k {
		return 0
	}
	m := t.entries[0].count
	for _, e := range t.entries[1:] {
		m = min(m, e.count)
	}
	return m
}

func (t *topSummary) add(v any, w uint64) {
	t.n += w
	if i := t.find(v); i >= 0 {
		t.entries[i].count += w
		return
	}
	if len(t.entries) < t.k {
		t.entries = append(t.entries, topEntry{v, w, 0})
		return
	}
	mi := 0
	for i, e := range t.entries {
		if e.count < t.entries[mi].count {
			mi = i
		}
	}
	c := t.entries[mi].count
	t.entries[mi] = topEntry{v, c + w, c}
}

// merge adds o's summary to t's.
func (t *topSummary) merge(o *topSummary) {
	if o == nil {
		return
	}
	tl, ol := t.least(), o.least()
	var all []topEntry
	for _, e := range t.entries {
		if j := o.find(e.val); j >= 0 {
			all = append(all, topEntry{e.val, e.count + o.entries[j].count, e.err + o.entries[j].err})
		} else {
			all = append(all, topEntry{e.val, e.count + ol, e.err + ol})
		}
	}
	for _, e := range o.entries {
		if t.find(e.val) < 0 {
			all = append(all, topEntry{e.val, e.count + tl, e.err + tl})
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].count > all[j].count })
	if len(all) > t.k {
		all = all[:t.k]
	}
	t.entries, t.n = all, t.n+o.n
}

// result is the summary, heaviest first: value, count and error.
func (t *topSummary) result() any {
	out := []any{}
	if t == nil {
		return out
	}
	es := append([]topEntry(nil), t.entries...)
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].count != es[j].count {
			return es[i].count > es[j].count
		}
		return keyID([]any{es[i].val}) < keyID([]any{es[j].val})
	})
	for _, e := range es {
		out = append(out, map[string]any{"value": textOf(e.val), "count": int64(e.count), "error": int64(e.err)})
	}
	return out
}

// topState is a summary as partials carry it (merge.go).
type topState struct {
	K int      `json:"k"`
	N uint64   `json:"n"`
	E [][3]any `json:"e"` // value, count, error
}

func (t *topSummary) state() string {
	if t == nil {
		return ""
	}
	st := topState{K: t.k, N: t.n}
	for _, e := range t.entries {
		st.E = append(st.E, [3]any{e.val, e.count, e.err})
	}
	b, _ := json.Marshal(st)
	return string(b)
}

func parseTopState(text string) (*topSummary, error) {
	var st topState
	d := json.NewDecoder(bytes.NewReader([]byte(text)))
	d.UseNumber()
	if err := d.Decode(&st); err != nil {
		return nil, fmt.Errorf("topk state: %w", err)
	}
	t := &topSummary{k: st.K, n: st.N}
	for _, e := range st.E {
		v := e[0]
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				v = i
			}
		}
		c, _ := e[1].(json.Number).Int64()
		r, _ := e[2].(json.Number).Int64()
		t.entries = append(t.entries, topEntry{v, uint64(c), uint64(r)})
	}
	return t, nil
}
