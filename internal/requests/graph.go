package requests

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/holter-dev/holter/internal/store"
)

// Workload selects the requests a latency graph aggregates: those entering
// Service through Operation, optionally from one Client, in [FromNs, ToNs)
// (zero: unbounded).
type Workload struct {
	Service   string `json:"service"`
	Operation string `json:"operation"`
	Client    string `json:"client,omitempty"`
	FromNs    int64  `json:"from_ns,omitempty"`
	ToNs      int64  `json:"to_ns,omitempty"`
}

// GraphNode is an instrumentation point: the start or end of a span of an
// operation of a service.
type GraphNode struct {
	ID        string `json:"id"`
	Service   string `json:"service"`
	Operation string `json:"operation"`
	Point     string `json:"point"` // start or end
}

// GraphEdge is the latency between two instrumentation points, as a
// distribution over the requests that passed both.
type GraphEdge struct {
	From   string  `json:"from"`
	To     string  `json:"to"`
	N      int64   `json:"n"`
	MeanNs float64 `json:"mean_ns"`
	MinNs  int64   `json:"min_ns"`
	P50Ns  float64 `json:"p50_ns"`
	P90Ns  float64 `json:"p90_ns"`
	P99Ns  float64 `json:"p99_ns"`
	MaxNs  int64   `json:"max_ns"`
	// Remote: the points are in different services (a dashed edge in
	// Stardust's Figure 9); Async: the work outlives its parent.
	Remote bool `json:"remote,omitempty"`
	Async  bool `json:"async,omitempty"`
}

// Graph is a workload's latency graph (Stardust §3.3, Figure 9).
type Graph struct {
	Workload Workload    `json:"workload"`
	Paths    int64       `json:"paths"`
	Nodes    []GraphNode `json:"nodes"`
	Edges    []GraphEdge `json:"edges"`
	// RolledUp counts the paths that came from rollups of pruned spans;
	// their percentiles are read from histograms (within 4.4%).
	RolledUp int64 `json:"rolled_up_paths"`
}

// dist is an edge's latencies: exact values and/or a merged histogram.
type dist struct {
	exact    []int64
	hist     map[int32]int64
	n, sum   int64
	min, max int64
	remote   bool
	async    bool
}

func (d *dist) add(v int64) {
	d.exact = append(d.exact, v)
	d.addStats(1, v, v, v)
}

func (d *dist) addStats(n, sum, lo, hi int64) {
	if d.n == 0 || lo < d.min {
		d.min = lo
	}
	if d.n == 0 || hi > d.max {
		d.max = hi
	}
	d.n += n
	d.sum += sum
}

func histBucket(v int64) int32 {
	return int32(math.Floor(math.Log2(float64(max(v, 1))) * store.HistPerOctave))
}

func bucketValue(b int32) float64 {
	return math.Pow(2, (float64(b)+0.5)/store.HistPerOctave)
}

// histogram turns the exact values into buckets (for rollups).
func (d *dist) histogram() ([]int32, []int64) {
	h := map[int32]int64{}
	for b, n := range d.hist {
		h[b] += n
	}
	for _, v := range d.exact {
		h[histBucket(v)]++
	}
	keys := make([]int32, 0, len(h))
	for b := range h {
		keys = append(keys, b)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	counts := make([]int64, len(keys))
	for i, b := range keys {
		counts[i] = h[b]
	}
	return keys, counts
}

func (d *dist) quantile(q float64) float64 {
	if len(d.hist) == 0 {
		s := append([]int64(nil), d.exact...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		if len(s) == 0 {
			return 0
		}
		pos := q * float64(len(s)-1)
		lo := int(math.Floor(pos))
		hi := min(lo+1, len(s)-1)
		return float64(s[lo]) + (pos-float64(lo))*float64(s[hi]-s[lo])
	}
	keys, counts := d.histogram()
	var total, below int64
	for _, c := range counts {
		total += c
	}
	for i, c := range counts {
		below += c
		if float64(below) >= q*float64(total) {
			return bucketValue(keys[i])
		}
	}
	return 0
}

// graphBuilder accumulates the edges of many paths.
type graphBuilder struct {
	edges map[[2]string]*dist
	nodes map[string]GraphNode
	paths int64
}

func newGraphBuilder() *graphBuilder {
	return &graphBuilder{edges: map[[2]string]*dist{}, nodes: map[string]GraphNode{}}
}

func (g *graphBuilder) node(n *Node, point string) string {
	id := n.Service + ":" + n.Operation + ":" + point
	g.nodes[id] = GraphNode{ID: id, Service: n.Service, Operation: n.Operation, Point: point}
	return id
}

func (g *graphBuilder) edge(from, to string, v int64, remote, async bool) {
	k := [2]string{from, to}
	d, ok := g.edges[k]
	if !ok {
		d = &dist{remote: remote, async: async}
		g.edges[k] = d
	}
	d.add(v)
}

// addPath adds the edges of one request's subtree: each span's start is
// reached from its parent's start, or from the end of the latest sibling
// that finished before it began (sequential calls); a span's end is
// reached from the end of its last child that finished before it, or from
// its own start. A child that ends after its parent is async: its end
// leads nowhere.
func (g *graphBuilder) addPath(root *Node) {
	g.paths++
	var visit func(n *Node)
	visit = func(n *Node) {
		start, end := g.node(n, "start"), g.node(n, "end")
		last := struct {
			id  string
			at  int64
			set bool
		}{start, n.StartNs, false}
		var finished []*Node
		for _, c := range n.Children {
			from, at, remote := start, n.StartNs, c.Remote
			for _, f := range finished {
				if f.EndNs <= c.StartNs && f.EndNs >= at {
					from, at, remote = g.node(f, "end"), f.EndNs, c.Remote || f.Service != c.Service
				}
			}
			g.edge(from, g.node(c, "start"), c.StartNs-at, remote, false)
			visit(c)
			if !c.Async {
				finished = append(finished, c)
				if c.EndNs >= last.at {
					last.id, last.at, last.set = g.node(c, "end"), c.EndNs, true
				}
			}
		}
		remote := false
		if last.set {
			remote = g.nodes[last.id].Service != n.Service
		}
		g.edge(last.id, end, n.EndNs-last.at, remote, n.Async)
	}
	visit(root)
}

func (g *graphBuilder) graph(w Workload, rolled int64) *Graph {
	out := &Graph{Workload: w, Paths: g.paths, RolledUp: rolled}
	for _, n := range g.nodes {
		out.Nodes = append(out.Nodes, n)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].ID < out.Nodes[j].ID })
	for k, d := range g.edges {
		out.Edges = append(out.Edges, GraphEdge{From: k[0], To: k[1], N: d.n, MeanNs: float64(d.sum) / float64(max(d.n, 1)),
			MinNs: d.min, P50Ns: d.quantile(0.5), P90Ns: d.quantile(0.9), P99Ns: d.quantile(0.99), MaxNs: d.max,
			Remote: d.remote, Async: d.async})
	}
	sort.Slice(out.Edges, func(i, j int) bool {
		if out.Edges[i].From != out.Edges[j].From {
			return out.Edges[i].From < out.Edges[j].From
		}
		return out.Edges[i].To < out.Edges[j].To
	})
	return out
}

// entrySpans are the spans where a request enters a service: no stored
// parent, or a parent in another service.
func entrySpans(spans []Span) []*Node {
	var out []*Node
	for _, r := range buildTree(spans) {
		walk(r, func(n *Node) {
			if n == r || n.Remote {
				out = append(out, n)
			}
		})
	}
	return out
}

// BuildGraph aggregates the latency graph of a workload over raw spans and
// the rollups of pruned ones (on a Fleet source, over raw spans only: the
// rollups stay on each host).
func BuildGraph(ctx context.Context, q Querier, w Workload) (*Graph, error) {
	if w.Service == "" || w.Operation == "" {
		return nil, fmt.Errorf("latency graph: a workload is a service and an operation")
	}
	timeCond := ""
	if w.FromNs != 0 {
		timeCond += fmt.Sprintf(" AND start_ns >= %d", w.FromNs)
	}
	if w.ToNs != 0 {
		timeCond += fmt.Sprintf(" AND start_ns < %d", w.ToNs)
	}
	// The client is a property of the whole trace: the walk below filters
	// by it, after loadSpans has found it.
	spans, err := loadSpans(ctx, q, fmt.Sprintf(`trace_id IN (SELECT trace_id FROM spans WHERE service = %s AND name = %s%s)`,
		sqlString(w.Service), sqlString(w.Operation), timeCond))
	if err != nil {
		return nil, fmt.Errorf("latency graph: %w", err)
	}
	g := newGraphBuilder()
	byTrace := map[string][]Span{}
	for _, s := range spans {
		byTrace[s.TraceID] = append(byTrace[s.TraceID], s)
	}
	for _, ss := range byTrace {
		for _, n := range buildTree(ss) {
			walk(n, func(x *Node) {
				if x.Service == w.Service && x.Operation == w.Operation && (w.Client == "" || x.Client == w.Client) &&
					(w.FromNs == 0 || x.StartNs >= w.FromNs) && (w.ToNs == 0 || x.StartNs < w.ToNs) {
					g.addPath(x)
				}
			})
		}
	}
	if _, ok := q.(fleet); ok {
		return g.graph(w, 0), nil
	}
	// Rollups of pruned spans: whole periods that overlap the range.
	cond := fmt.Sprintf("service = %s AND operation = %s", sqlString(w.Service), sqlString(w.Operation))
	if w.Client != "" {
		cond += " AND client = " + sqlString(w.Client)
	}
	rcond := strings.ReplaceAll(timeCond, "start_ns", "bucket_ns")
	res, err := q.Query(ctx, `SELECT from_node, to_node, remote, async, n, sum_ns, min_ns, max_ns, hist_bucket, hist_count, paths, bucket_ns, client
		FROM latency_edge_rollups WHERE `+cond+rcond)
	if err != nil {
		return nil, fmt.Errorf("latency graph: %w", err)
	}
	var rolled int64
	seen := map[[2]any]bool{}
	for _, r := range res.Rows {
		k := [2]string{str(r[0]), str(r[1])}
		d, ok := g.edges[k]
		if !ok {
			d = &dist{remote: r[2] == true, async: r[3] == true}
			g.edges[k] = d
		}
		if d.hist == nil {
			d.hist = map[int32]int64{}
		}
		d.addStats(i64(r[4]), i64(r[5]), i64(r[6]), i64(r[7]))
		bs, cs := r[8].([]any), r[9].([]any)
		for i := range bs {
			if i < len(cs) {
				d.hist[int32(i64(bs[i]))] += i64(cs[i])
			}
		}
		for _, id := range k {
			parts := strings.SplitN(id, ":", 3)
			if len(parts) == 3 {
				g.nodes[id] = GraphNode{ID: id, Service: parts[0], Operation: parts[1], Point: parts[2]}
			}
		}
		// paths is per (bucket, client) workload row, repeated on each edge.
		pk := [2]any{i64(r[11]), str(r[12])}
		if !seen[pk] {
			seen[pk] = true
			rolled += i64(r[10])
		}
	}
	g.paths += rolled
	return g.graph(w, rolled), nil
}

// WriteDOT writes the graph for Graphviz: nodes are instrumentation
// points grouped by service, edges carry the latency distribution; edges
// between services are dashed, asynchronous ones dotted.
func (g *Graph) WriteDOT(w io.Writer) {
	title := g.Workload.Service + " " + g.Workload.Operation
	if g.Workload.Client != "" {
		title += " from " + g.Workload.Client
	}
	fmt.Fprintf(w, "digraph latency {\n  label=%s;\n  labelloc=t;\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n  edge [fontsize=9];\n",
		dotQuote(fmt.Sprintf("%s (%d paths)", title, g.Paths)))
	services := map[string][]GraphNode{}
	var names []string
	for _, n := range g.Nodes {
		if _, ok := services[n.Service]; !ok {
			names = append(names, n.Service)
		}
		services[n.Service] = append(services[n.Service], n)
	}
	sort.Strings(names)
	for i, s := range names {
		fmt.Fprintf(w, "  subgraph cluster_%d {\n    label=%s;\n", i, dotQuote(s))
		for _, n := range services[s] {
			fmt.Fprintf(w, "    %s [label=%s];\n", dotQuote(n.ID), dotQuote(n.Operation+"\n"+n.Point))
		}
		fmt.Fprintln(w, "  }")
	}
	for _, e := range g.Edges {
		style := "solid"
		switch {
		case e.Async:
			style = "dotted"
		case e.Remote:
			style = "dashed"
		}
		label := fmt.Sprintf("p50 %s\np90 %s\nn=%d", fmtNs(int64(e.P50Ns)), fmtNs(int64(e.P90Ns)), e.N)
		fmt.Fprintf(w, "  %s -> %s [label=%s, style=%s];\n", dotQuote(e.From), dotQuote(e.To), dotQuote(label), style)
	}
	fmt.Fprintln(w, "}")
}

// WriteText writes the graph's edges as a table.
func (g *Graph) WriteText(w io.Writer) {
	fmt.Fprintf(w, "latency graph of %s %s", g.Workload.Service, g.Workload.Operation)
	if g.Workload.Client != "" {
		fmt.Fprintf(w, " from client %s", g.Workload.Client)
	}
	fmt.Fprintf(w, ": %d paths (%d from rollups)\n", g.Paths, g.RolledUp)
	for _, e := range g.Edges {
		kind := ""
		if e.Remote {
			kind = " (remote)"
		}
		if e.Async {
			kind = " (async)"
		}
		fmt.Fprintf(w, "  %s -> %s%s: n=%d mean %s p50 %s p90 %s p99 %s max %s\n", e.From, e.To, kind, e.N,
			fmtNs(int64(e.MeanNs)), fmtNs(int64(e.P50Ns)), fmtNs(int64(e.P90Ns)), fmtNs(int64(e.P99Ns)), fmtNs(e.MaxNs))
	}
}

func dotQuote(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	s = strings.ReplaceAll(s, "\n", `\n`)
	return `"` + s + `"`
}
