package main

import (
	"context"
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
)

// runExport writes a range's samples in other tools' formats: pprof
// (go tool pprof, Pyroscope, Parca) and folded stacks (flamegraph.pl,
// speedscope), from the recorder's flame graph (GET /api/flame).
func runExport(args []string, stdout, stderr io.Writer) error {
	format := ""
	if len(args) > 0 && (args[0] == "pprof" || args[0] == "folded" || args[0] == "perfetto") {
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
	if err := parse(fs, args); err != nil {
		return err
	}
	if format == "" {
		return usagef("give the format: holter export pprof|folded|perfetto --range START/END [--vital cpu] [--pid N] --out FILE")
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *out == "" {
		return usagef("--out: give the file to write (- for stdout)")
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
	src, err := openSource(af)
	if err != nil {
		return err
	}
	defer src.closer()
	ctx := context.Background()
	r, err := findings.ParseRange(ctx, src.q, rng, time.Now())
	if err != nil {
		return rangeUsage(err)
	}
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
