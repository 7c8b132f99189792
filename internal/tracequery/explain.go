package tracequery

import (
	"fmt"
	"sort"
	"strings"
)

// Explain describes the split of the query: what runs in the probe (with
// its instruction count) and what runs in user space. With insns, the
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
		fmt.Fprintf(&b, "  pairing: begin keeps {time%s} (%d bytes) per event in a hash of %d entries until its end\n",
			prefixJoin(names), size, p.Opts.StashSize)
	}
	if p.Filter != nil {
		fmt.Fprintf(&b, "  filter: %s\n", p.text(p.Filter))
	} else {
		b.WriteString("  filter: none\n")
	}
	if p.Mode == ModeAggregate {
		var keys, aggs []string
		for _, k := range p.Keys {
			if k.Bucket != nil {
				keys = append(keys, fmt.Sprintf("%s=%s bucket of %s", k.Col, bucketName(k.Bucket), p.text(k.Bucket.Arg)))
			} else if k.Expr.(interface{ Span() (int, int) }) != nil {
				a, e := k.Expr.Span()
				txt := p.Query.Text[a:e]
				if a == e {
					txt = exprKey(k.Expr)
				}
				keys = append(keys, fmt.Sprintf("%s=%s %s", k.Col, txt, k.Type))
			}
		}
		for _, a := range p.Aggs {
			aggs = append(aggs, fmt.Sprintf("%s=%s", a.Col, p.text(a.Call)))
		}
		if len(keys) == 0 {
			keys = []string{"(one group)"}
		}
		fmt.Fprintf(&b, "  group by: %s (%d-byte key)\n", strings.Join(keys, ", "), p.KeySize)
		fmt.Fprintf(&b, "  aggregates: %s (%d-byte per-CPU value)\n", strings.Join(aggs, ", "), p.ValSize)
		fmt.Fprintf(&b, "  state: 2 per-CPU hash maps of %d keys, swapped each interval; keys that do not fit are counted (map_full)\n", p.Opts.MapSize)
	} else {
		var cols []string
		for _, e := range p.Emits {
			cols = append(cols, fmt.Sprintf("%s %s", e.Col, e.Type))
		}
		fmt.Fprintf(&b, "  emit per event: %s (%d bytes) into a %d-byte ring buffer; events that do not fit are counted (ring_lost)\n",
			strings.Join(cols, ", "), p.KeySize, p.Opts.RingSize)
	}
	if _, ok := p.Fields["kstack"]; ok {
		fmt.Fprintf(&b, "  stacks: a stack map of %d stacks (failures counted: stack_lost)\n", p.Opts.StackMapSize)
	} else if _, ok := p.Fields["ustack"]; ok {
		fmt.Fprintf(&b, "  stacks: a stack map of %d stacks (failures counted: stack_lost)\n", p.Opts.StackMapSize)
	}
	b.WriteString("user-space part:\n")
	if p.Mode == ModeAggregate {
		b.WriteString("  merge per-CPU partials per group (sum counts and sums, min of mins, max of maxes, add buckets, OR bitmaps, union samples)\n")
	}
	fmt.Fprintf(&b, "  DuckDB: %s\n", p.UserSQL)
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
			tables, p.joinText("<each interval's rows of the DuckDB part above>"))
	}
	notes := append([]string(nil), p.Notes...)
	sort.Strings(notes)
	for _, n := range notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	if insns {
		for _, pr := range progs {
			fmt.Fprintf(&b, "\nprogram %s:\n%v", pr.Name, pr.Spec.Instructions)
		}
	}
	return b.String(), nil
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
		return "log2"
	case AggLHist:
		return fmt.Sprintf("linear(%d..%d step %d)", a.Min, a.Min+a.Buckets*a.Step, a.Step)
	}
	return "log-linear"
}
