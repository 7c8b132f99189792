package tracequery

import (
	"fmt"
	"strings"
)

// Explain describes the split of the query: what runs in the probe (with
// its instruction count) and what runs in user space, and there, whether
// holter's evaluator or DuckDB computes it and why. With insns, the
// generated instructions follow.
func (p *Plan) Explain(insns bool) (string, error) {
	progs, err := p.Programs()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "source: %s — %s\n", p.Source.Name, p.Source.Desc)
	b.WriteString("kernel part:\n")
	for _, pr := range progs {
		fmt.Fprintf(&b, "  program %s on %s: %d instructions\n", pr.Name, pr.Probe, len(pr.Spec.Instructions))
	}
	if len(progs) == 2 {
		size, _, fields := p.stashLayout()
		var names []string
		for _, f := range fields {
			names = append(names, f.Name)
		}
		if j := p.Source.Join; j != nil {
			var key []string
			for i := range j.LeftKey {
				key = append(key, Format(j.LeftKey[i])+" = "+Format(j.RightKey[i]))
			}
			if p.Source.End.PairByTid {
				key = []string{j.Left + ".tid = " + j.Right + ".tid"}
			}
			how := "each " + j.Right + " event meets the latest " + j.Left + " event of its key, which stays for the next"
			if j.Kind == JoinFollowedBy {
				how = "each " + j.Left + " event meets the first " + j.Right + " event of its key after it, then is forgotten"
			}
			fmt.Fprintf(&b, "  join: %s; key %s\n", how, strings.Join(key, " AND "))
			fmt.Fprintf(&b, "  join state: %s keeps {time%s} (%d bytes) per key in an LRU hash of %d keys; keys evicted when full are counted (evicted)\n",
				j.Left, prefixJoin(names), size, p.Opts.StashSize)
		} else {
			fmt.Fprintf(&b, "  pairing: begin keeps {time%s} (%d bytes) per event in an LRU hash of %d entries until its end; begins evicted when full are counted (evicted)\n",
				prefixJoin(names), size, p.Opts.StashSize)
		}
	}
	if p.Filter != nil {
		fmt.Fprintf(&b, "  filter: %s\n", Format(p.Filter))
	} else {
		b.WriteString("  filter: none\n")
	}
	if p.Mode == ModeAggregate {
		var keys, aggs []string
		for _, k := range p.Keys {
			if k.Bucket != nil {
				keys = append(keys, fmt.Sprintf("%s=%s of %s", k.Col, bucketName(k.Bucket), Format(k.Bucket.Arg)))
				continue
			}
			keys = append(keys, fmt.Sprintf("%s=%s %s", k.Col, Format(k.Expr), keyTypeName(k)))
		}
		for _, a := range p.Aggs {
			aggs = append(aggs, fmt.Sprintf("%s=%s", a.Col, Format(a.Call)))
		}
		if len(keys) == 0 {
			keys = []string{"(one group)"}
		}
		if len(aggs) == 0 {
			aggs = []string{"none, the groups alone (a count kept)"}
		}
		fmt.Fprintf(&b, "  group by: %s (%d-byte key)\n", strings.Join(keys, ", "), p.KeySize)
		fmt.Fprintf(&b, "  aggregates: %s (%d-byte per-CPU value)\n", strings.Join(aggs, ", "), p.ValSize)
		fmt.Fprintf(&b, "  state: 2 per-CPU hash maps of %d keys, swapped each interval; keys that do not fit are counted (map_full)\n", p.Opts.MapSize)
		for _, a := range p.Aggs {
			if a.Kind == AggTopK {
				fmt.Fprintf(&b, "  %s: Space-Saving in %d slots per CPU and group; each count is at most N/%d above the true count (N: the group's events%s), never below\n",
					Format(a.Call), a.K, a.K, map[bool]string{true: "' weight", false: ""}[a.Weight != nil])
			}
		}
	} else {
		var cols []string
		for _, e := range p.Emits {
			cols = append(cols, fmt.Sprintf("%s %s", e.Col, e.Type))
		}
		fmt.Fprintf(&b, "  emit per event: %s (%d bytes) into a %d-byte ring buffer; events that do not fit are counted (ring_lost)\n",
			strings.Join(cols, ", "), p.KeySize, p.Opts.RingSize)
	}
	for _, name := range p.stackMaps() {
		fmt.Fprintf(&b, "  stacks: map %s of %d stacks (failures counted: stack_lost)\n", name, p.Opts.StackMapSize)
	}
	if p.divides() {
		b.WriteString("  division by zero: the event is skipped and counted (div_zero)\n")
	}
	b.WriteString("user-space part:\n")
	if p.Mode == ModeAggregate {
		b.WriteString("  merge per-CPU partials per group (sum counts and sums, min of mins, max of maxes, add buckets, OR bitmaps, union samples)\n")
	}
	u := p.user
	if u.whereNode != nil && u.duck == "" {
		fmt.Fprintf(&b, "  filter: %s\n", Format(u.whereNode))
	}
	if p.Mode == ModeStream && u.aggregate && u.duck == "" {
		var keys, aggs []string
		for i, g := range p.Query.GroupBy {
			keys = append(keys, fmt.Sprintf("k%d=%s", i, Format(g)))
		}
		for _, a := range p.Aggs {
			aggs = append(aggs, fmt.Sprintf("%s=%s", a.Col, Format(a.Call)))
		}
		if len(keys) == 0 {
			keys = []string{"(one group)"}
		}
		fmt.Fprintf(&b, "  group by: %s; aggregates: %s\n", strings.Join(keys, ", "), strings.Join(aggs, ", "))
	}
	switch {
	case p.PerEvent:
		b.WriteString("  rows: each as its event arrives\n")
	case p.Mode == ModeStream && u.aggregate:
		fmt.Fprintf(&b, "  aggregation of the events in user space, at most %d groups an interval (map_full)\n", p.Opts.MapSize)
	case p.Mode == ModeStream:
		fmt.Fprintf(&b, "  rows: each interval's, at most %d held (dropped)\n", maxHeldRows)
	}
	if u.duck != "" {
		fmt.Fprintf(&b, "  DuckDB (for %s): %s\n", u.duck, p.UserSQL)
	} else {
		fmt.Fprintf(&b, "  evaluator: %s\n", p.UserSQL)
	}
	if w := p.Query.With; w != nil {
		var names []string
		for _, t := range w.Tables {
			names = append(names, t.Name)
		}
		tables := "no recorded table"
		if len(names) > 0 {
			tables = "recorded tables " + strings.Join(names, ", ")
		}
		fmt.Fprintf(&b, "  then in the recording's store, joined with %s:\n    %s\n",
			tables, p.joinText("<each interval's rows of the part above>"))
	}
	for _, n := range p.sortedNotes() {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	if insns {
		for _, pr := range progs {
			fmt.Fprintf(&b, "\nprogram %s:\n%v", pr.Name, pr.Spec.Instructions)
		}
	}
	return b.String(), nil
}

// keyTypeName is how EXPLAIN names a key's type in the probe.
func keyTypeName(k *Key) string {
	if k.Type == TLabel {
		return "string (the probe keeps the CASE's branch)"
	}
	if c, ok := k.Expr.(*Call); ok {
		if _, dec := decoders[c.Name]; dec {
			return "string (the probe keeps its argument)"
		}
	}
	return k.Type.String()
}

// divides says whether the probe divides by something not constant.
func (p *Plan) divides() bool {
	found := false
	check := func(n Node) {
		walk(n, func(x Node) bool {
			if b, ok := x.(*Binary); ok && (b.Op == "/" || b.Op == "%") {
				if _, konst := b.R.(*Number); !konst {
					found = true
				}
			}
			return !found
		})
	}
	check(p.Filter)
	for _, k := range p.Keys {
		check(k.Expr)
	}
	for _, a := range p.Aggs {
		check(a.Arg)
		check(a.Weight)
	}
	for _, e := range p.Emits {
		check(e.Expr)
	}
	return found
}

func prefixJoin(ns []string) string {
	if len(ns) == 0 {
		return ""
	}
	return ", " + strings.Join(ns, ", ")
}

func bucketName(a *Agg) string {
	switch a.Kind {
	case AggHist:
		return "log2 bucket"
	case AggLHist:
		return fmt.Sprintf("linear(%d..%d step %d) bucket", a.Min, a.Min+a.Buckets*a.Step, a.Step)
	case AggKMeans:
		return "value (a histogram per group)"
	}
	return "log-linear bucket"
}
