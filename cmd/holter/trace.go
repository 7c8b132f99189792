package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/tracequery"
)

func runTrace(args []string, stdout, stderr io.Writer) error {
	tm := newStartTiming(stderr)
	tm.phase("main")
	// A per-event query makes garbage at the rate of its events: collect
	// it before the heap doubles, so the process stays small (a soft
	// limit: a query that needs more still gets it).
	debug.SetMemoryLimit(32 << 20)
	fs := newFlags("trace", stderr)
	af := addAgentFlags(fs)
	interval := valueFlag(fs, "interval", "1s", "print results every interval", durationIn(10*time.Millisecond, 24*time.Hour, ""))
	dur := valueFlag(fs, "for", "0", "stop after this long (0: until Ctrl-C)", durationIn(time.Millisecond, maxAge, "until Ctrl-C"))
	window := valueFlag(fs, "window", "0", "answer over the last WINDOW, sliding by --slide (a sliding window of intervals)", durationIn(10*time.Millisecond, maxAge, "none"))
	slide := valueFlag(fs, "slide", "0", "with --window, how often the window moves (0: --interval)", durationIn(10*time.Millisecond, 24*time.Hour, "--interval"))
	asJSON := fs.Bool("json", false, "print each interval (or each row of a per-event query) as a line of NDJSON")
	save := valueFlag(fs, "save", "", "also keep results in the store as table trace_NAME (visible to holter query)", traceName)
	list := fs.Bool("list", false, "list sources (matching the argument, a glob or substring) with their fields, and the ready queries; uprobe.LIB.PATTERN lists a binary's functions")
	explain := fs.Bool("explain", false, "show what runs in the kernel and what in user space, then exit")
	verbose := fs.Bool("verbose", false, "with --explain, the generated instructions; on a verifier rejection, its log")
	unsafeRead := fs.Bool("unsafe-read", false, "allow str() to read user memory at arbitrary addresses")
	mapSize := valueFlag(fs, "map-size", "0", "keys the aggregation map holds per interval (0: 10240)", countIn(0, 1<<20))
	local := fs.Bool("local", false, "run here even if a recorder's API answers")
	hostList := valueFlag(fs, "hosts", "", "run across these agents (HOST:PORT,…; the token given is theirs), merging their partial aggregates", addressList)
	hostsFile := fs.String("hosts-file", "", "file listing agents (HOST:PORT, one a line) to run across")
	pid := valueFlag(fs, "p", "0", "trace process PID only (its events; ends when it exits)", countIn(0, 1<<22))
	command := fs.String("c", "", "run COMMAND (through /bin/sh) and trace it only, from its exec to its exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: holter trace [flags] \"SELECT … FROM source …\" | @READY  (flags may come before or after)\n"+
			"       holter trace [flags] \"WITH live AS (SELECT … FROM source …) SELECT … FROM live JOIN samples …\"  (joined with the recording in --data or the recorder's)\n"+
			"\nready queries: %s\n\n", strings.Join(tracequery.LibraryNames(), " "))
		fs.PrintDefaults()
	}
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	arg := strings.TrimSpace(strings.Join(positional, " "))
	if *list {
		return listSources(stdout, arg, *asJSON, *pid)
	}
	if arg == "" {
		return usagef(`missing query, e.g. holter trace "SELECT comm, count() FROM syscall.read GROUP BY comm" (holter trace --list shows sources)`)
	}
	text, ok := tracequery.Resolve(arg)
	if !ok {
		return usagef("no ready query %s (ready: %s)", arg, strings.Join(tracequery.LibraryNames(), " "))
	}
	if *pid != 0 && *command != "" {
		return usagef("-p and -c: trace a running process or a command, not both")
	}
	if *slide > 0 {
		if *window == 0 {
			return usagef("--slide moves a --window: give both")
		}
		*interval = *slide
	}
	if *window > 0 && (*window < *interval || *window%*interval != 0) {
		return usagef("--window %v must be a whole number of slides (%v)", *window, *interval)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := &traceOutput{w: stdout, json: *asJSON, tty: isTerminal(stdout)}
	hosts, err := readHosts(*hostList, *hostsFile)
	if err != nil {
		return usagef("%v", err)
	}
	opts := &tracequery.Options{UnsafeRead: *unsafeRead, MapSize: *mapSize, PID: *pid}
	var proc *tracedProcess
	switch {
	case *command != "":
		if proc, err = startGated(*command, stdout, stderr); err != nil {
			return err
		}
		defer proc.kill()
		opts.PID = proc.pid
	case *pid != 0:
		if proc, err = watchProcess(*pid); err != nil {
			return usagef("-p %d: %v", *pid, err)
		}
	}
	if proc != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			<-proc.exited
			cancel()
		}()
	}
	if len(hosts) > 0 {
		if proc != nil || *window > 0 {
			return usagef("--hosts runs the same query on every agent: not with -p, -c or --window")
		}
		tracequery.EnsureTraceFS() // the coordinator compiles against its own catalog
		plan, err := tracequery.Compile(text, nil, opts)
		if err != nil {
			return err
		}
		if plan.Query.With != nil {
			return usagef("%v: run it with --api on one agent", tracequery.ErrJoinAcrossHosts)
		}
		req := server.TraceRequest{Query: text, Interval: interval.String(), UnsafeRead: *unsafeRead, MapSize: *mapSize}
		if *dur > 0 {
			req.For = dur.String()
		}
		return traceFanOut(ctx, hosts, af.token.get(), plan, req, *interval, out)
	}
	if !*local {
		if c, ok := af.agent(); ok {
			req := server.TraceRequest{Query: text, Interval: interval.String(), Save: *save, UnsafeRead: *unsafeRead,
				MapSize: *mapSize, Explain: *explain, PID: opts.PID}
			if *dur > 0 {
				req.For = dur.String()
			}
			if *window > 0 {
				req.Window = window.String()
			}
			attached := func() {
				if proc != nil {
					// The command waits until the agent's probes are attached.
					proc.release()
				}
			}
			return traceViaAgent(ctx, c, req, out, attached)
		}
	}
	if _, err := tracequery.EnsureTraceFS(); err != nil {
		fmt.Fprintf(stderr, "holter trace: %v\n", err)
	}
	plan, err := tracequery.Compile(text, &tracequery.Catalog{PID: opts.PID}, opts)
	if err != nil {
		return err
	}
	tm.phase("compiled")
	if *explain || plan.Query.Explain {
		s, err := plan.Explain(*verbose)
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, s)
		return err
	}
	var st *store.Store
	if *save != "" {
		if st, err = store.Open(*af.data, nil); err != nil {
			if errors.Is(err, store.ErrLocked) {
				return fmt.Errorf("--save: the store in %s is held by a recorder whose API does not answer: %w", *af.data, err)
			}
			return fmt.Errorf("--save: %w", err)
		}
		defer st.Close()
	}
	ro := tracequery.RunOptions{Interval: *interval, Duration: *dur, Window: *window}
	if plan.Query.With != nil {
		// No recorder answered (or --local): the recording is attached
		// here, read-only, for the part joined with recorded tables.
		if st == nil {
			rst, err := store.Open(*af.data, &store.Options{ReadOnly: true})
			if errors.Is(err, store.ErrLocked) {
				return fmt.Errorf("the query joins recorded tables, but the store in %s is held by a recorder whose API does not answer (without --local the query runs through a recorder's API; --api names it): %w", *af.data, err)
			} else if err != nil {
				return fmt.Errorf("the query joins recorded tables: %w", err)
			}
			defer rst.Close()
			ro.Recorded = store.Plain(rst)
		} else {
			ro.Recorded = store.Plain(st)
		}
	}
	if tm != nil {
		ro.Phase = tm.phase
	}
	ro.Attached = func() {
		if *verbose {
			fmt.Fprintln(stderr, "holter trace: probes attached")
		}
		if proc != nil {
			proc.release()
		}
	}
	if plan.PerEvent && st == nil {
		ro.Row = func(row []any) error { return out.writeRow(plan.Columns, row) }
	}
	first := true
	err = tracequery.Run(ctx, plan, ro, func(iv *tracequery.Interval) error {
		if first {
			tm.phase("first result")
			first = false
		}
		if st != nil {
			if err := st.SaveTrace(context.WithoutCancel(ctx), *save, iv.Start, iv.End, iv.Result); err != nil {
				return err
			}
		}
		if ro.Row != nil {
			return out.writeCounters(iv.Start, iv.End, iv.Counters)
		}
		return out.write(iv.Start, iv.End, iv.Result, iv.Counters)
	})
	var ve *tracequery.VerifierError
	if errors.As(err, &ve) && *verbose {
		fmt.Fprintln(stderr, strings.Join(ve.Log, "\n"))
	}
	if err == nil && proc != nil {
		err = proc.wait()
	}
	return err
}

// parseInterspersed parses flags wherever they are among the arguments
// (holter trace @runqlat --for 2s), and returns the others; after "--"
// all are arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// startTiming, when the environment has HOLTER_TRACE_TIMING, prints to
// stderr when each step of holter trace's start ended and the peak RSS and
// Go heap then. HOLTER_TRACE_TIMING=1 counts from the entry into the trace
// command; a number of Unix nanoseconds (the time of the exec, e.g.
// $(date +%s%N)) counts from then, which includes loading the binary.
type startTiming struct {
	w    io.Writer
	t0   time.Time
	last time.Time
}

func newStartTiming(w io.Writer) *startTiming {
	v, ok := os.LookupEnv("HOLTER_TRACE_TIMING")
	if !ok || v == "" || v == "0" {
		return nil
	}
	now := time.Now()
	t := &startTiming{w: w, t0: now, last: now}
	if ns, err := strconv.ParseInt(v, 10, 64); err == nil && ns > 1e18 {
		t.t0, t.last = time.Unix(0, ns), time.Unix(0, ns)
	}
	return t
}

func (t *startTiming) phase(name string) {
	if t == nil {
		return
	}
	now := time.Now()
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(t.w, "holter trace: timing: %-12s at %7.2f ms (+%6.2f ms)  peak RSS %5.1f MB  Go heap %5.1f MB\n", name,
		float64(now.Sub(t.t0).Microseconds())/1000, float64(now.Sub(t.last).Microseconds())/1000, float64(ru.Maxrss)/1024, float64(ms.HeapAlloc)/(1<<20))
	t.last = now
}

func listSources(w io.Writer, pattern string, asJSON bool, pid int) error {
	tracequery.EnsureTraceFS()
	ls, err := (&tracequery.Catalog{PID: pid}).List(pattern)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		for _, l := range ls {
			enc.Encode(l)
		}
		return nil
	}
	for _, l := range ls {
		fmt.Fprintf(w, "%s", l.Source)
		if l.Desc != "" {
			fmt.Fprintf(w, "  — %s", l.Desc)
		}
		fmt.Fprintln(w)
		if len(l.Fields) > 0 {
			fmt.Fprintf(w, "    fields: %s\n", strings.Join(l.Fields, ", "))
		}
	}
	if len(ls) > 20 {
		fmt.Fprintf(w, "(%d sources; give a pattern, e.g. holter trace --list 'syscall.read', to see fields)\n", len(ls))
	}
	fmt.Fprintln(w, "\nbuilt-in fields on every source: time, cpu, pid, tid, uid, comm, cgroup, kstack, ustack (also as task.NAME)")
	fmt.Fprintln(w, "\nready queries (holter trace @NAME):")
	for _, r := range tracequery.Library {
		if pattern == "" || strings.Contains(r.Name, pattern) {
			fmt.Fprintf(w, "  @%-20s %s\n      %s\n", r.Name, r.Desc, r.Query)
		}
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// traceViaAgent runs the query in the recorder and prints its stream.
func traceViaAgent(ctx context.Context, c *client, req server.TraceRequest, out *traceOutput, attached func()) error {
	var columns []string
	err := c.trace(ctx, req, func(line *server.TraceLine) error {
		switch {
		case line.Error != "":
			return apiError{line.Error}
		case line.Attached:
			attached()
		case line.Explain != "":
			_, err := io.WriteString(out.w, line.Explain)
			return err
		case line.Columns != nil:
			columns = line.Columns
		case line.Row != nil:
			return out.writeRow(columns, line.Row)
		case line.Result != nil:
			return out.write(*line.Start, *line.End, line.Result, line.Counters)
		case line.Start != nil:
			return out.writeCounters(*line.Start, *line.End, line.Counters)
		}
		return nil
	})
	if err != nil && !errors.As(err, new(apiError)) {
		return fmt.Errorf("trace through the recorder at %s: %w", c.where, err)
	}
	return err
}

// trace posts a live query to the recorder and hands each NDJSON line of
// its answer to each; the end of ctx ends it without an error.
func (c *client) trace(ctx context.Context, req server.TraceRequest, each func(*server.TraceLine) error) error {
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/api/trace", bytes.NewReader(body))
	if err != nil {
		return err
	}
	if c.token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.stream.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e server.Error
		if json.NewDecoder(resp.Body).Decode(&e) == nil && e.Error != "" {
			return apiError{e.Error}
		}
		return apiError{resp.Status}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var line server.TraceLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return fmt.Errorf("bad answer: %w", err)
		}
		if err := each(&line); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("stream broke: %w", err)
	}
	return nil
}
