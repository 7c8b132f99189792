package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/chrometrace"
	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/parquet"
	"github.com/holter-dev/holter/internal/store"
)

// runExport writes a range's samples in other tools' formats: pprof
// (go tool pprof, Pyroscope, Parca) and folded stacks (flamegraph.pl,
// speedscope), from the recorder's flame graph (GET /api/flame); Perfetto
// trace events; and a table's rows or a query's as Parquet.
func runExport(args []string, stdout, stderr io.Writer) error {
	format := ""
	if len(args) > 0 && (args[0] == "pprof" || args[0] == "folded" || args[0] == "perfetto" || args[0] == "parquet") {
		format, args = args[0], args[1:]
	}
	fs := newFlags("export", stderr)
	af := addAgentFlags(fs)
	rng := fs.String("range", "-15m/now", "START/END: RFC 3339 or 2006-01-02T15:04 (UTC), -15m, now, nanoseconds, or a run id")
	vital := fs.String("vital", "cpu", "the vital whose samples are exported (cpu, sched, blck, blio, …; perfetto: also all)")
	pid := fs.Int64("pid", -1, "only this process's samples")
	comm := fs.String("comm", "", "only the samples of processes of this name")
	host := fs.String("host", "", "host (default: all the store holds)")
	out := fs.String("out", "", "file to write (- for stdout)")
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if format == "" {
		return usagef("give the format: holter export pprof|folded|perfetto --range START/END [--vital cpu] [--pid N] --out FILE, or holter export parquet [--range START/END] TABLE|SQL --out FILE")
	}
	if *out == "" {
		return usagef("--out: give the file to write (- for stdout)")
	}
	if format == "parquet" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		return exportParquet(af, set, positional, *rng, *out, stdout)
	}
	if len(positional) > 0 {
		return usagef("unexpected argument %q", positional[0])
	}
	if format == "perfetto" {
		return exportPerfetto(af, *rng, *vital, *pid, *out, stdout, stderr)
	}
	c, ok := af.agent()
	if !ok {
		return fmt.Errorf("no recorder answers for %s: export asks a running recorder, or `holter ui` over a stored recording (--api ADDR --token-file F)", *af.data)
	}
	ctx := context.Background()
	r, err := findings.ParseRange(ctx, apiQuerier{c}, *rng, time.Now())
	if err != nil {
		return rangeUsage(err)
	}
	q := url.Values{"format": {format}, "vital": {*vital},
		"from": {strconv.FormatInt(r.StartNs, 10)}, "to": {strconv.FormatInt(r.EndNs, 10)}}
	if *pid >= 0 {
		q.Set("pid", strconv.FormatInt(*pid, 10))
	}
	if *comm != "" {
		q.Set("comm", *comm)
	}
	if *host != "" {
		q.Set("host", *host)
	}
	w := stdout
	var f *os.File
	if *out != "-" {
		if f, err = os.Create(*out); err != nil {
			return err
		}
		w = f
	}
	err = c.do(ctx, "GET", "/api/flame?"+q.Encode(), nil, w)
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(*out)
		}
	}
	if err != nil {
		return fmt.Errorf("export %s: %w", format, err)
	}
	return nil
}

// exportPerfetto writes a range's samples as Chrome trace events, from the
// running recorder or the store.
func exportPerfetto(af agentFlags, rng, vital string, pid int64, out string, stdout, stderr io.Writer) error {
	if vital == "all" {
		vital = ""
	} else if !slices.Contains(vitalNames(), vital) {
		return usagef("--vital: unknown vital %q (one of %s, or all)", vital, strings.Join(vitalNames(), ", "))
	}
	src, r, err := openRange(af, store.Options{}, rng)
	if err != nil {
		return err
	}
	defer src.closer()
	ctx := context.Background()
	events, truncated, err := chrometrace.Samples(ctx, src.q, r.StartNs, r.EndNs, vital, pid)
	if err != nil {
		return err
	}
	if truncated {
		fmt.Fprintf(stderr, "holter export perfetto: the range has more than %d samples: the first %d written (narrow --range, --vital or --pid)\n", chrometrace.MaxSamples, chrometrace.MaxSamples)
	}
	if out == "-" {
		return chrometrace.Write(stdout, events)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := chrometrace.Write(f, events); err != nil {
		f.Close()
		os.Remove(out)
		return err
	}
	return f.Close()
}

// exportParquet writes a table's rows over a range, or a query's, as a
// Parquet file: through the running recorder's API, or from the store.
func exportParquet(af agentFlags, set map[string]bool, args []string, rng, out string, stdout io.Writer) error {
	for _, name := range []string{"vital", "pid", "comm", "host"} {
		if set[name] {
			return usagef("--%s: applies to pprof, folded and perfetto; a Parquet export selects with its table and --range, or its query", name)
		}
	}
	if len(args) != 1 {
		return usagef("give one table or query: holter export parquet [--range START/END] TABLE|SQL --out FILE")
	}
	what := args[0]
	if strings.TrimSpace(what) == "" {
		return usagef("give a table or a query, not an empty argument")
	}
	if out != "-" {
		if st, err := os.Stat(out); err == nil && st.IsDir() {
			return usagef("--out: %s is a directory; give the file to write", out)
		}
	}
	// Opened here, the store writes the file itself, into a private
	// directory beside out, which it is opened allowing; made first, it
	// shows an --out where nothing can be written before the query runs.
	dir, err := parquet.ExportDir(out)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src, r, err := openRange(af, store.Options{ExportDir: dir}, rng)
	if err != nil {
		return err
	}
	defer src.closer()
	ctx := context.Background()
	sel, err := parquet.Select(ctx, src.q, what, r, set["range"])
	var bad parquet.ArgumentError
	if errors.As(err, &bad) {
		return usagef("%s", bad)
	}
	if err != nil {
		return err
	}
	if src.st != nil {
		path, _, err := src.st.ExportParquet(ctx, sel)
		if err != nil {
			return err
		}
		return parquet.Place(path, out, stdout)
	}
	send := func(w io.Writer) error {
		if err := src.agent.do(ctx, "POST", "/api/export/parquet", strings.NewReader(sel), w); err != nil {
			return fmt.Errorf("export parquet: %w", err)
		}
		return nil
	}
	if out == "-" {
		return send(stdout)
	}
	return parquet.WriteFile(out, send)
}

// openRange opens the source (openSourceWith) and reads rng against it.
func openRange(af agentFlags, opts store.Options, rng string) (*source, findings.Range, error) {
	src, err := openSourceWith(af, opts)
	if err != nil {
		return nil, findings.Range{}, err
	}
	r, err := findings.ParseRange(context.Background(), src.q, rng, time.Now())
	if err != nil {
		src.closer()
		return nil, findings.Range{}, rangeUsage(err)
	}
	return src, r, nil
}
