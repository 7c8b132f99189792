package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/holter-dev/holter/internal/chrometrace"
	"github.com/holter-dev/holter/internal/requests"
)

func runTracePath(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("trace-path", stderr)
	af := addAgentFlags(fs)
	sf := addSourceFlags(fs)
	asJSON := fs.Bool("json", false, "print the path as JSON")
	perfetto := fs.Bool("perfetto", false, "print the path as Chrome trace event JSON (ui.perfetto.dev, chrome://tracing)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("give one trace id (32 hex digits), e.g. holter trace-path 4bf92f3577b34da6a3ce929d0e0e4736")
	}
	q, closer, err := spanSource(af, sf)
	if err != nil {
		return err
	}
	defer closer()
	p, err := requests.BuildPath(context.Background(), q, fs.Arg(0))
	if errors.Is(err, requests.ErrBadTraceID) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	if *perfetto {
		return chrometrace.Write(stdout, chrometrace.Path(p))
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
	p.WriteText(stdout)
	return nil
}

func runLatencyGraph(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("latency-graph", stderr)
	af := addAgentFlags(fs)
	sf := addSourceFlags(fs)
	service := fs.String("service", "", "service the workload enters (required)")
	operation := fs.String("operation", "", "operation (span name) it enters by (required)")
	client := fs.String("client", "", "only requests of this client")
	since := valueFlag(fs, "since", "0", "only requests of the last DURATION (0: all retained)", durationIn(time.Second, maxAge, "all retained"))
	dot := fs.Bool("dot", false, "print Graphviz DOT")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *service == "" || *operation == "" {
		return usagef("give the workload: --service NAME --operation NAME")
	}
	q, closer, err := spanSource(af, sf)
	if err != nil {
		return err
	}
	defer closer()
	w := requests.Workload{Service: *service, Operation: *operation, Client: *client}
	if *since > 0 {
		w.FromNs = time.Now().Add(-*since).UnixNano()
	}
	g, err := requests.BuildGraph(context.Background(), q, w)
	if err != nil {
		return err
	}
	if g.Paths == 0 {
		return fmt.Errorf("no request of %s %s is stored (check holter query \"SELECT DISTINCT service, operation FROM span_costs\")", *service, *operation)
	}
	switch {
	case *dot:
		g.WriteDOT(stdout)
	case *asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(g)
	default:
		g.WriteText(stdout)
	}
	return nil
}

// spanSource is where trace-path and latency-graph read spans: the fleet's
// ClickHouse with --source (a trace's spans from every host), else the
// recorder or its store.
func spanSource(af agentFlags, sf sourceFlags) (requests.Querier, func(), error) {
	ch, ok, err := sf.client()
	if err != nil {
		return nil, nil, err
	}
	if ok {
		return requests.Fleet(ch), func() {}, nil
	}
	src, err := openSource(af)
	if err != nil {
		return nil, nil, err
	}
	return src.q, src.closer, nil
}
