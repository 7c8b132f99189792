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
	"github.com/holter-dev/holter/internal/incident"
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
	q     findings.Querier
	agent *client
	// st is the store when no recorder answers.
	st     *store.Store
	closer func()
}

func openSource(af agentFlags) (*source, error) {
	return openSourceWith(af, store.Options{})
}

// openSourceWith is openSource opening the store with opts, read-only.
func openSourceWith(af agentFlags, opts store.Options) (*source, error) {
	if c, ok := af.agent(); ok {
		return &source{q: apiQuerier{c}, agent: c, closer: func() {}}, nil
	}
	if *af.api != "" {
		return nil, fmt.Errorf("no recorder answers at %s", *af.api)
	}
	opts.ReadOnly = true
	st, err := store.Open(*af.data, &opts)
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			return nil, fmt.Errorf("the store in %s is held by a recorder whose API does not answer: %w", *af.data, err)
		}
		return nil, err
	}
	return &source{q: findings.FromStore(st), st: st, closer: func() { st.Close() }}, nil
}

// unavailable is the recorder's reasons for the vitals it cannot record,
// when a recorder answers.
func (s *source) unavailable() map[string]string {
	if s.agent == nil {
		return nil
	}
	st, err := s.agent.status(context.Background())
	if err != nil {
		return nil
	}
	return unavailableVitals(st.Status)
}

func runFindings(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("findings", stderr)
	af := addAgentFlags(fs)
	since := valueFlag(fs, "since", "1h", "report on the last DURATION", durationIn(time.Second, maxAge, ""))
	rng := fs.String("range", "", "report on START/END instead of --since (see holter diff)")
	timescale := valueFlag(fs, "timescale", findings.Epoch, "evaluate over epochs or the 5m, 1h, 1d rollups", oneOf(timescaleNames()...))
	history := valueFlag(fs, "history", "20", "intervals before the range read as the detectors' baseline", countIn(0, maxCount))
	asJSON := fs.Bool("json", false, "print JSON")
	host := fs.String("host", "", "host (default: the latest one recorded)")
	self := fs.Bool("include-self", false, "report on holter's own processes too")
	diff := fs.Bool("diff", true, fmt.Sprintf("rank the holter diff metrics of a range of at most %s against the stretch before it, as evidence", incident.DiffMax))
	top := valueFlag(fs, "top", "20", "incidents to print, the worst first (0: all; --json has all)", countIn(0, maxCount))
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
	rep, err := incident.Build(ctx, src.q, incident.Options{Host: *host, Range: r, Timescale: *timescale, History: *history,
		CPUs: runtime.NumCPU(), Unavailable: src.unavailable(), IncludeSelf: *self, Diff: *diff})
	if err != nil {
		if errors.Is(err, findings.ErrNoData) {
			return fmt.Errorf("findings: %w", err)
		}
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printReport(stdout, rep, *top)
	return nil
}

// printReport prints the top ranked incidents, each with its culprit, the
// rules that found it and, for the first few, the commands that show more.
func printReport(w io.Writer, r *incident.Report, top int) {
	fmt.Fprintf(w, "host %s, %s to %s, timescale %s: %d incidents\n", r.Host, fmtNs(r.StartNs), fmtNs(r.EndNs), r.Timescale, len(r.Incidents))
	for _, in := range r.Incidents {
		if top > 0 && in.Rank > top {
			fmt.Fprintf(w, "\n%d more (--top 0 prints them all)\n", len(r.Incidents)-top)
			break
		}
		sev := "no cost measured"
		if in.Severity > 0 {
			sev = fmt.Sprintf("severity %.0f%%", in.Severity*100)
		}
		fmt.Fprintf(w, "\n%d. [%s, %s] %s\n", in.Rank, sev, in.Resource, in.Summary)
		fmt.Fprintf(w, "   %s to %s (%s)", fmtNs(in.StartNs), fmtNs(in.EndNs), time.Duration(in.EndNs-in.StartNs).Round(time.Second))
		if c := in.Culprit; c != nil {
			fmt.Fprintf(w, ", pid %d (%s) %s", c.Pid, c.Comm, c.Exe)
		}
		fmt.Fprintln(w)
		if c := in.Culprit; c != nil && (len(c.User) > 0 || len(c.Kernel) > 0) {
			fmt.Fprintf(w, "   at %s", strings.Join(c.User, " < "))
			if len(c.Kernel) > 0 {
				fmt.Fprintf(w, " | kernel %s", strings.Join(c.Kernel, " < "))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "   found by %s\n", strings.Join(in.Rules, ", "))
		if in.Rank <= 3 {
			for _, d := range in.Drill {
				fmt.Fprintf(w, "   %s: %s\n", d.What, d.Command)
			}
		}
	}
	if len(r.Unevaluated) > 0 {
		fmt.Fprintln(w, "\nnot evaluated:")
		for _, u := range r.Unevaluated {
			fmt.Fprintf(w, "  %-26s %s\n", u.Rule, u.Reason)
		}
	}
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
