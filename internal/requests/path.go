package requests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// ErrNoTrace is returned for a trace the store has no span of.
var ErrNoTrace = errors.New("no span of this trace is stored (pruned, or never received)")

// Node is one span in a causal path.
type Node struct {
	Span
	DurationNs int64 `json:"duration_ns"`
	// SelfNs is the time in this component not covered by its children.
	SelfNs int64 `json:"self_ns"`
	// BeforeNs and AfterNs are the time between this span and its parent:
	// from the parent's start to this span's start, and from this span's
	// end to the parent's end (negative when it outlives the parent).
	BeforeNs int64 `json:"before_ns"`
	AfterNs  int64 `json:"after_ns"`
	// Remote: the parent ran in another service or host (an RPC hop).
	Remote bool `json:"remote,omitempty"`
	// Async: it ended after its parent did (work such as a write-back
	// that outlives the request that caused it).
	Async    bool    `json:"async,omitempty"`
	Children []*Node `json:"children,omitempty"`
}

// Coalesced is work that merged this request with others (a span linking
// to one of this request's spans, §3.2.1): its cost is billed to each
// linked request in proportion to the link weights.
type Coalesced struct {
	// Via is this request's span the batch links to.
	Via   string  `json:"via_span_id"`
	Share float64 `json:"share"`
	// Requests is how many requests the batch coalesced.
	Requests int   `json:"requests"`
	Batch    *Node `json:"batch"`
	// Billed is Share times the batch subtree's kernel cost.
	Billed Cost `json:"billed"`
}

// Path is a request's causal path: its spans as a tree across services and
// hosts, and the coalesced work billed to it.
type Path struct {
	TraceID    string `json:"trace_id"`
	Client     string `json:"client"`
	Spans      int    `json:"spans"`
	StartNs    int64  `json:"start_ns"`
	DurationNs int64  `json:"duration_ns"`
	// Roots are the spans without a stored parent: normally one.
	Roots     []*Node     `json:"roots"`
	Coalesced []Coalesced `json:"coalesced,omitempty"`
	// Coalesces lists the requests this trace's spans link to, when the
	// trace is itself a batch.
	Coalesces []string `json:"coalesces,omitempty"`
	// Own is the sum of the own (self) kernel costs of the trace's spans;
	// Total adds the billed shares of coalesced work.
	Own   Cost `json:"own"`
	Total Cost `json:"total"`
	// Queries and BuildNs are what reconstructing the path took.
	Queries int   `json:"queries"`
	BuildNs int64 `json:"build_ns"`
}

// BuildPath reconstructs the causal path of a trace.
func BuildPath(ctx context.Context, q Querier, traceID string) (*Path, error) {
	began := time.Now()
	traceID = strings.ToLower(traceID)
	if err := checkTraceID(traceID); err != nil {
		return nil, err
	}
	spans, err := loadSpans(ctx, q, "trace_id = "+sqlString(traceID))
	if err != nil {
		return nil, fmt.Errorf("trace path: %w", err)
	}
	if len(spans) == 0 {
		return nil, fmt.Errorf("trace %s: %w", traceID, ErrNoTrace)
	}
	p := &Path{TraceID: traceID, Spans: len(spans), Queries: 2}
	p.Roots = buildTree(spans)
	lo, hi := spans[0].StartNs, spans[0].EndNs
	for _, s := range spans {
		lo, hi = min(lo, s.StartNs), max(hi, s.EndNs)
		p.Client = s.Client
		addOwn(&p.Own, s.Kernel)
	}
	p.StartNs, p.DurationNs = lo, hi-lo

	// Stitch records: links into this trace (coalesced into a batch) and
	// out of it (this trace is a batch).
	// The shares are over all the links of the batch span, so the totals
	// are taken over every link of the batches this trace touches.
	// The shares are summed here rather than with window functions, so
	// the same query serves ClickHouse 18.16.
	id := sqlString(traceID)
	links, err := q.Query(ctx, `SELECT trace_id, span_id, linked_span_id, weight, linked_trace_id
		FROM span_links WHERE (trace_id, span_id) IN (
			SELECT trace_id, span_id FROM span_links WHERE linked_trace_id = `+id+` OR trace_id = `+id+`)
		ORDER BY trace_id, span_id, linked_trace_id`)
	p.Queries++
	if err != nil {
		return nil, fmt.Errorf("trace path: %w", err)
	}
	type linkKey struct{ trace, span string }
	weights, counts := map[linkKey]float64{}, map[linkKey]int{}
	for _, r := range links.Rows {
		k := linkKey{str(r[0]), str(r[1])}
		weights[k] += f64(r[3])
		counts[k]++
	}
	batches := map[string][]Span{}
	for _, r := range links.Rows {
		batchTrace, batchSpan, via := str(r[0]), str(r[1]), str(r[2])
		if batchTrace == traceID {
			if linked := str(r[4]); linked != traceID {
				p.Coalesces = append(p.Coalesces, linked)
			}
			continue
		}
		if str(r[4]) != traceID {
			continue
		}
		bs, ok := batches[batchTrace]
		if !ok {
			if bs, err = loadSpans(ctx, q, "trace_id = "+sqlString(batchTrace)); err != nil {
				return nil, fmt.Errorf("trace path: %w", err)
			}
			p.Queries += 2
			batches[batchTrace] = bs
		}
		root := subtree(bs, batchSpan)
		if root == nil {
			continue
		}
		k := linkKey{batchTrace, batchSpan}
		share := 0.0
		if total := weights[k]; total > 0 {
			share = f64(r[3]) / total
		}
		c := Coalesced{Via: via, Share: share, Requests: counts[k], Batch: root}
		walk(root, func(n *Node) {
			if n.Kernel != nil {
				c.Billed.Accounted = n.Kernel.Accounted || c.Billed.Accounted
				c.Billed.CPUNs += share * n.Kernel.SelfCPUNs
				c.Billed.BlockedNs += share * n.Kernel.SelfBlockedNs
				c.Billed.RunnableNs += share * n.Kernel.RunnableNs
				c.Billed.IOBytes += share * n.Kernel.IOBytes
				c.Billed.IONs += share * n.Kernel.IONs
				c.Billed.IOCount += share * n.Kernel.IOCount
				c.Billed.DirtiedBytes += share * n.Kernel.DirtiedBytes
				c.Billed.WritebackBytes += share * n.Kernel.WritebackBytes
			}
		})
		p.Coalesced = append(p.Coalesced, c)
	}
	p.Total = p.Own
	for _, c := range p.Coalesced {
		p.Total.CPUNs += c.Billed.CPUNs
		p.Total.BlockedNs += c.Billed.BlockedNs
		p.Total.RunnableNs += c.Billed.RunnableNs
		p.Total.IOBytes += c.Billed.IOBytes
		p.Total.IONs += c.Billed.IONs
		p.Total.IOCount += c.Billed.IOCount
		p.Total.DirtiedBytes += c.Billed.DirtiedBytes
		p.Total.WritebackBytes += c.Billed.WritebackBytes
	}
	p.BuildNs = time.Since(began).Nanoseconds()
	return p, nil
}

func addOwn(c *Cost, k *Cost) {
	if k == nil {
		return
	}
	c.Accounted = c.Accounted || k.Accounted
	c.CPUNs += k.SelfCPUNs
	c.SelfCPUNs += k.SelfCPUNs
	c.BlockedNs += k.SelfBlockedNs
	c.SelfBlockedNs += k.SelfBlockedNs
	c.RunnableNs += k.RunnableNs
	c.IOBytes += k.IOBytes
	c.IONs += k.IONs
	c.IOCount += k.IOCount
	c.DirtiedBytes += k.DirtiedBytes
	c.WritebackBytes += k.WritebackBytes
}

// buildTree links spans to their parents; spans whose parent is not
// stored are roots.
func buildTree(spans []Span) []*Node {
	nodes := make(map[string]*Node, len(spans))
	for i := range spans {
		s := spans[i]
		nodes[s.SpanID] = &Node{Span: s, DurationNs: s.EndNs - s.StartNs}
	}
	var roots []*Node
	for i := range spans {
		n := nodes[spans[i].SpanID]
		parent, ok := nodes[n.ParentID]
		if !ok || parent == n {
			roots = append(roots, n)
			continue
		}
		parent.Children = append(parent.Children, n)
	}
	for _, n := range nodes {
		finish(n)
	}
	return roots
}

// finish fills in what a node's place in the tree tells.
func finish(n *Node) {
	sort.Slice(n.Children, func(i, j int) bool { return n.Children[i].StartNs < n.Children[j].StartNs })
	var covered []interval
	for _, c := range n.Children {
		c.BeforeNs = c.StartNs - n.StartNs
		c.AfterNs = n.EndNs - c.EndNs
		c.Remote = c.Service != n.Service || c.Host != n.Host
		c.Async = c.EndNs > n.EndNs
		covered = append(covered, interval{c.StartNs, c.EndNs})
	}
	n.SelfNs = n.DurationNs
	for _, c := range mergeIntervals(covered) {
		n.SelfNs -= overlap(c, interval{n.StartNs, n.EndNs})
	}
}

func subtree(spans []Span, spanID string) *Node {
	for _, r := range buildTree(spans) {
		var found *Node
		walk(r, func(n *Node) {
			if n.SpanID == spanID {
				found = n
			}
		})
		if found != nil {
			return found
		}
	}
	return nil
}

func walk(n *Node, f func(*Node)) {
	f(n)
	for _, c := range n.Children {
		walk(c, f)
	}
}

// WriteText prints the path as an indented tree.
func (p *Path) WriteText(w io.Writer) {
	fmt.Fprintf(w, "trace %s  client %s  %s  %d spans\n", p.TraceID, p.Client, fmtNs(p.DurationNs), p.Spans)
	fmt.Fprintf(w, "  own:   %s\n", costText(p.Own))
	if len(p.Coalesced) > 0 {
		fmt.Fprintf(w, "  total: %s (with billed shares of coalesced work)\n", costText(p.Total))
	}
	for _, r := range p.Roots {
		writeNode(w, r, "  ", true)
	}
	for _, c := range p.Coalesced {
		fmt.Fprintf(w, "  coalesced via span %s into trace %s with %d requests, share %.3f, billed %s\n",
			c.Via, c.Batch.TraceID, c.Requests, c.Share, costText(c.Billed))
		writeNode(w, c.Batch, "    ", true)
	}
	if len(p.Coalesces) > 0 {
		fmt.Fprintf(w, "  this trace coalesces %d requests: %s\n", len(p.Coalesces), strings.Join(p.Coalesces, ", "))
	}
	fmt.Fprintf(w, "  (reconstructed with %d queries in %s)\n", p.Queries, fmtNs(p.BuildNs))
}

func writeNode(w io.Writer, n *Node, indent string, last bool) {
	var marks []string
	if n.Remote {
		marks = append(marks, "remote")
	}
	if n.Async {
		marks = append(marks, "async: outlives parent by "+fmtNs(-n.AfterNs))
	}
	if n.Error {
		marks = append(marks, "error")
	}
	mark := ""
	if len(marks) > 0 {
		mark = " [" + strings.Join(marks, ", ") + "]"
	}
	fmt.Fprintf(w, "%s+%s %s %s: %s (self %s)%s", indent, fmtNs(n.BeforeNs), n.Service, n.Operation, fmtNs(n.DurationNs), fmtNs(n.SelfNs), mark)
	if n.Kernel != nil {
		fmt.Fprintf(w, "  kernel: %s", costText(*n.Kernel))
	} else if n.Pid == 0 || n.Tid == 0 {
		fmt.Fprint(w, "  kernel: not accounted: the span has no thread.id or process.pid (holter status says how to add them)")
	}
	fmt.Fprintln(w)
	for i, c := range n.Children {
		writeNode(w, c, indent+"  ", i == len(n.Children)-1)
	}
}

func costText(c Cost) string {
	if !c.Accounted {
		return "not accounted"
	}
	s := fmt.Sprintf("cpu %s, blocked %s, runnable %s", fmtNs(int64(c.CPUNs)), fmtNs(int64(c.BlockedNs)), fmtNs(int64(c.RunnableNs)))
	if c.IOCount > 0 {
		s += fmt.Sprintf(", block I/O %.0f bytes in %.0f requests (%s)", c.IOBytes, c.IOCount, fmtNs(int64(c.IONs)))
	}
	if c.DirtiedBytes > 0 || c.WritebackBytes > 0 {
		s += fmt.Sprintf(", dirtied %.0f bytes of page cache, %.0f bytes written back for it", c.DirtiedBytes, c.WritebackBytes)
	}
	if c.BlockedSites != "" && c.BlockedSites != "[]" {
		s += ", blocked at " + c.BlockedSites
	}
	return s
}

func fmtNs(ns int64) string {
	return time.Duration(ns).Round(time.Microsecond).String()
}
