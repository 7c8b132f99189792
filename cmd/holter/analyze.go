package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/store"
)

// apiQuerier answers SQL through a recorder's API, keeping numbers exact
// (nanosecond times do not fit a float64).
type apiQuerier struct{ c *client }

func (a apiQuerier) Query(ctx context.Context, q string) (*store.Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.c.base+"/api/query", strings.NewReader(q))
	if err != nil {
		return nil, err
	}
	if a.c.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.c.token)
	}
	resp, err := a.c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	if resp.StatusCode != http.StatusOK {
		var e server.Error
		if dec.Decode(&e) == nil && e.Error != "" {
			return nil, apiError{e.Error}
		}
		return nil, apiError{resp.Status}
	}
	var res store.Result
	return &res, dec.Decode(&res)
}

// source is where analysis commands read: the running recorder, or the store.
type source struct {
	q      findings.Querier
	agent  *client
	closer func()
}

func openSource(af agentFlags) (*source, error) {
	if c, ok := af.agent(); ok {
		return &source{q: apiQuerier{c}, agent: c, closer: func() {}}, nil
	}
	if *af.api != "" {
		return nil, fmt.Errorf("no recorder answers at %s", *af.api)
	}
	st, err := store.Open(*af.data, &store.Options{ReadOnly: true})
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			return nil, fmt.Errorf("the store in %s is held by a recorder whose API does not answer: %w", *af.data, err)
		}
		return nil, err
	}
	return &source{q: findings.FromStore(st), closer: func() { st.Close() }}, nil
}

// unavailable adds the recorder's reasons for vitals it cannot record.
func (s *source) unavailable(w *findings.Window) {
	if s.agent == nil {
		return
	}
	st, err := s.agent.status(context.Background())
	if err != nil {
		return
	}
	for _, v := range st.Vitals {
		if v.State != "recording" && v.Reason != "" {
			if _, missing := w.Unavailable[v.Name]; missing {
				w.Unavailable[v.Name] = v.State + ": " + v.Reason
			}
		}
	}
}

func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case json.Number:
		n, _ := x.Int64()
		return n
	case float64:
		return int64(x)
	}
	return 0
}

func runFindings(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("findings", stderr)
	af := addAgentFlags(fs)
	since := valueFlag(fs, "since", "1h", "report findings of the last DURATION", durationIn(time.Second, maxAge, ""))
	rng := fs.String("range", "", "report findings in START/END instead of --since (see holter diff)")
	timescale := valueFlag(fs, "timescale", findings.Epoch, "evaluate over epochs or the 5m, 1h, 1d rollups", oneOf(timescaleNames()...))
	history := valueFlag(fs, "history", "20", "intervals before the range read as the detectors' baseline", countIn(0, maxCount))
	asJSON := fs.Bool("json", false, "print JSON")
	host := fs.String("host", "", "host (default: the latest one recorded)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	src, err := openSource(af)
	if err != nil {
		return err
	}
	defer src.closer()
	ctx := context.Background()
	now := time.Now()
	r := findings.Range{StartNs: now.Add(-*since).UnixNano(), EndNs: now.UnixNano()}
	if *rng != "" {
		if r, err = findings.ParseRange(ctx, src.q, *rng, now); err != nil {
			return rangeUsage(err)
		}
	}
	width := time.Second
	for _, ts := range store.Timescales {
		if ts.Name == *timescale {
			width = ts.Width
		}
	}
	w, err := findings.Load(ctx, src.q, findings.LoadOptions{Host: *host, Timescale: *timescale, CPUs: runtime.NumCPU(),
		From: time.Unix(0, r.StartNs).Add(-time.Duration(*history) * max(width, epochGuess(ctx, src.q))),
		To:   time.Unix(0, r.EndNs), ReportFrom: time.Unix(0, r.StartNs)})
	if err != nil {
		if errors.Is(err, findings.ErrNoData) {
			return fmt.Errorf("findings: %w", err)
		}
		return err
	}
	src.unavailable(w)
	found, skipped := findings.Evaluate(w, findings.DefaultFilters(nil))
	if err := findings.Attribute(ctx, src.q, w.Host, found); err != nil {
		return err
	}
	stored, err := findings.Stored(ctx, src.q, w.Host, r)
	if err != nil {
		return err
	}
	type sourced struct {
		Source string `json:"source"`
		findings.Finding
	}
	var all []sourced
	for _, f := range stored {
		all = append(all, sourced{"recorder", f})
	}
	for _, f := range found {
		dup := false
		for _, s := range stored {
			dup = dup || s.Rule == f.Rule && s.Subject == f.Subject && s.Timescale == f.Timescale && s.StartNs < f.EndNs && f.StartNs < s.EndNs
		}
		if !dup {
			all = append(all, sourced{"evaluated", f})
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"host": w.Host, "start_ns": r.StartNs, "end_ns": r.EndNs, "timescale": w.Timescale,
			"findings": all, "unevaluated": skipped})
	}
	fmt.Fprintf(stdout, "host %s, %s to %s, timescale %s: %d findings\n", w.Host, fmtNs(r.StartNs), fmtNs(r.EndNs), w.Timescale, len(all))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "START\tEND\tRULE\tSUBJECT\tPROCESSES\tSUMMARY")
	for _, f := range all {
		var procs []string
		for _, p := range f.Processes {
			procs = append(procs, fmt.Sprintf("%d/%s", p.Pid, p.Comm))
		}
		site := ""
		if len(f.Sites) > 0 && len(f.Sites[0].Frames) > 0 {
			site = " [at " + strings.Join(f.Sites[0].Frames[:min(3, len(f.Sites[0].Frames))], " < ") + "]"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s%s\n", fmtNs(f.StartNs), fmtNs(f.EndNs), f.Rule, f.Subject, strings.Join(procs, ","), f.Summary, site)
	}
	tw.Flush()
	if len(skipped) > 0 {
		fmt.Fprintln(stdout, "\nnot evaluated:")
		for _, s := range skipped {
			fmt.Fprintf(stdout, "  %-26s %s\n", s.Rule, s.Reason)
		}
	}
	return nil
}

// epochGuess is the length of the latest epoch.
func epochGuess(ctx context.Context, q findings.Querier) time.Duration {
	res, err := q.Query(ctx, `SELECT end_ns - start_ns FROM epochs ORDER BY end_ns DESC LIMIT 1`)
	if err != nil || len(res.Rows) == 0 {
		return time.Second
	}
	return time.Duration(asInt(res.Rows[0][0]))
}

// timescaleNames are what --timescale takes: epochs or a rollup.
func timescaleNames() []string {
	names := []string{findings.Epoch}
	for _, ts := range store.Timescales {
		names = append(names, ts.Name)
	}
	return names
}

func fmtNs(ns int64) string { return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05") }

func runDiff(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("diff", stderr)
	af := addAgentFlags(fs)
	target := fs.String("target", "", "target range: START/END (2026-11-22T10:00/2026-11-22T10:05, -15m/-5m), the whole host's; or a run id, its own processes' and their devices'")
	reference := fs.String("reference", "", "reference range, as --target")
	top := valueFlag(fs, "top", "20", "metrics to print (0: all)", countIn(0, maxCount))
	minSamples := valueFlag(fs, "min-samples", "10", "fewest values a metric needs on each side", countIn(1, maxCount))
	asJSON := fs.Bool("json", false, "print JSON, with each metric's histograms")
	host := fs.String("host", "", "host (default: the latest one recorded)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *target == "" || *reference == "" {
		return usagef("give both --target and --reference")
	}
	src, err := openSource(af)
	if err != nil {
		return err
	}
	defer src.closer()
	ctx := context.Background()
	res, err := findings.RankRanges(ctx, src.q, *target, *reference, findings.DiffOptions{Host: *host, MinSamples: *minSamples})
	if err != nil {
		return rangeUsage(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printDiff(stdout, res, *top)
	return nil
}

// rangeUsage makes a range given wrongly a usage error, with the flag
// findings.RankRanges names ("target: ..." is --target).
func rangeUsage(err error) error {
	if !errors.Is(err, findings.ErrBadRange) {
		return err
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "target: ") || strings.HasPrefix(msg, "reference: ") {
		msg = "--" + msg
	}
	return usagef("%s", msg)
}

// printDiff prints a ranking as a table of its top metrics.
func printDiff(w io.Writer, r *findings.Diff, top int) {
	fmt.Fprintf(w, "host %s: target %s to %s against reference %s to %s\n", r.Host,
		fmtNs(r.Target.StartNs), fmtNs(r.Target.EndNs), fmtNs(r.Reference.StartNs), fmtNs(r.Reference.EndNs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tMETRIC\tEMD\tTARGET MEAN\tN\tREFERENCE MEAN\tN")
	for i, m := range r.Ranked {
		if top > 0 && i == top {
			break
		}
		fmt.Fprintf(tw, "%d\t%s\t%.3f\t%.4g\t%d\t%.4g\t%d\n", i+1, m.Name, m.EMD, m.TargetMean, m.TargetN, m.ReferenceMean, m.ReferenceN)
	}
	tw.Flush()
	if len(r.Skipped) > 0 {
		fmt.Fprintf(w, "%d metrics not ranked (too few samples on a side; --json lists them)\n", len(r.Skipped))
	}
}
