package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sort"
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
	fs := newFlags("trace", stderr)
	af := addAgentFlags(fs)
	interval := fs.Duration("interval", time.Second, "print results every interval")
	dur := fs.Duration("for", 0, "stop after this long (default: until Ctrl-C)")
	asJSON := fs.Bool("json", false, "print each interval as a line of NDJSON")
	save := fs.String("save", "", "also keep results in the store as table trace_NAME (visible to holter query)")
	list := fs.Bool("list", false, "list sources (matching the argument, a glob or substring) with their fields, and the ready queries")
	explain := fs.Bool("explain", false, "show what runs in the kernel and what in user space, then exit")
	verbose := fs.Bool("verbose", false, "with --explain, the generated instructions; on a verifier rejection, its log")
	unsafeRead := fs.Bool("unsafe-read", false, "allow str() to read user memory at arbitrary addresses")
	mapSize := fs.Int("map-size", 0, "keys the aggregation map holds per interval (default 10240)")
	local := fs.Bool("local", false, "run here even if a recorder's API answers")
	hostList := fs.String("hosts", "", "run across these agents (HOST:PORT,…; --token is theirs), merging their partial aggregates")
	hostsFile := fs.String("hosts-file", "", "file listing agents (HOST:PORT, one a line) to run across")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: holter trace [flags] \"SELECT … FROM source …\" | @READY\n"+
			"       holter trace [flags] \"WITH live AS (SELECT … FROM source …) SELECT … FROM live JOIN samples …\"  (joined with the recording in --data or the recorder's)\n"+
			"\nready queries: %s\n\n", strings.Join(tracequery.LibraryNames(), " "))
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	arg := strings.TrimSpace(strings.Join(fs.Args(), " "))
	if *list {
		return listSources(stdout, arg, *asJSON)
	}
	if arg == "" {
		return usagef(`missing query, e.g. holter trace "SELECT comm, count() FROM syscall.read GROUP BY comm" (holter trace --list shows sources)`)
	}
	text, ok := tracequery.Resolve(arg)
	if !ok {
		return usagef("no ready query %s (ready: %s)", arg, strings.Join(tracequery.LibraryNames(), " "))
	}
	if *save != "" {
		if _, err := store.TraceTable(*save); err != nil {
			return usagef("--save: %v", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := &traceOutput{w: stdout, json: *asJSON, tty: isTerminal(stdout)}
	hosts, err := readHosts(*hostList, *hostsFile)
	if err != nil {
		return usagef("%v", err)
	}
	if len(hosts) > 0 {
		tracequery.EnsureTraceFS() // the coordinator compiles against its own catalog
		plan, err := tracequery.Compile(text, nil,
			&tracequery.Options{UnsafeRead: *unsafeRead, MapSize: *mapSize})
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
		return traceFanOut(ctx, hosts, *af.token, plan, req, *interval, out)
	}
	if !*local {
		if c, ok := af.agent(); ok {
			req := server.TraceRequest{Query: text, Interval: interval.String(), Save: *save, UnsafeRead: *unsafeRead,
				MapSize: *mapSize, Explain: *explain}
			if *dur > 0 {
				req.For = dur.String()
			}
			return traceViaAgent(ctx, c, req, out)
		}
	}
	if _, err := tracequery.EnsureTraceFS(); err != nil {
		fmt.Fprintf(stderr, "holter trace: %v\n", err)
	}
	plan, err := tracequery.Compile(text, nil, &tracequery.Options{UnsafeRead: *unsafeRead, MapSize: *mapSize})
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
	ro := tracequery.RunOptions{Interval: *interval, Duration: *dur}
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
	if *verbose {
		ro.Attached = func() { fmt.Fprintln(stderr, "holter trace: probes attached") }
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
		return out.write(iv.Start, iv.End, iv.Result, iv.Counters, plan.HistCols)
	})
	var ve *tracequery.VerifierError
	if errors.As(err, &ve) && *verbose {
		fmt.Fprintln(stderr, strings.Join(ve.Log, "\n"))
	}
	return err
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

func listSources(w io.Writer, pattern string, asJSON bool) error {
	tracequery.EnsureTraceFS()
	ls, err := (&tracequery.Catalog{}).List(pattern)
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
	fmt.Fprintln(w, "\nbuilt-in fields on every source: time, cpu, pid, tid, uid, comm, cgroup, kstack, ustack")
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

type traceOutput struct {
	w         io.Writer
	json, tty bool
	// hosts, across hosts, says per host whether it contributed, and
	// fanout what the interval cost.
	hosts  map[string]string
	fanout *fanoutTimes
}

func (o *traceOutput) write(start, end time.Time, res *store.Result, counters map[string]uint64, hist map[string]bool) error {
	if o.json {
		rows := make([]map[string]any, len(res.Rows))
		res.Sanitize()
		for i, r := range res.Rows {
			rows[i] = map[string]any{}
			for j, v := range r {
				rows[i][res.Columns[j]] = v
			}
		}
		line := map[string]any{"start": start.UTC(), "end": end.UTC(), "rows": rows, "counters": counters}
		if o.hosts != nil {
			line["hosts"] = o.hosts
		}
		if o.fanout != nil {
			line["fanout"] = o.fanout
		}
		return json.NewEncoder(o.w).Encode(line)
	}
	var b strings.Builder
	if o.tty {
		b.WriteString("\x1b[H\x1b[2J")
	}
	fmt.Fprintf(&b, "%s – %s\n", start.Format("15:04:05.000"), end.Format("15:04:05.000"))
	if o.hosts != nil {
		b.WriteString(hostsLine(o.hosts) + "\n")
	}
	// Histogram columns print as bars under the table.
	plain := &store.Result{Types: res.Types}
	var histIdx []int
	for i, c := range res.Columns {
		if hist[c] || isBuckets(res, i) {
			histIdx = append(histIdx, i)
			continue
		}
		plain.Columns = append(plain.Columns, c)
	}
	for _, r := range res.Rows {
		var row []any
		for i, v := range r {
			if !contains(histIdx, i) {
				row = append(row, v)
			}
		}
		plain.Rows = append(plain.Rows, row)
	}
	if len(plain.Columns) > 0 {
		plain.WriteTable(&b)
	}
	for ri, r := range res.Rows {
		for _, i := range histIdx {
			fmt.Fprintf(&b, "\n%s", res.Columns[i])
			if len(plain.Columns) > 0 {
				fmt.Fprintf(&b, " (row %d)", ri+1)
			}
			b.WriteString(":\n")
			writeBars(&b, r[i])
		}
	}
	if len(counters) == 0 {
		b.WriteString("(nothing lost or dropped)\n")
	} else {
		var parts []string
		for k, v := range counters {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v))
		}
		sort.Strings(parts)
		fmt.Fprintf(&b, "(lost or dropped: %s)\n", strings.Join(parts, " "))
	}
	_, err := io.WriteString(o.w, b.String())
	return err
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func isBuckets(res *store.Result, i int) bool {
	for _, r := range res.Rows {
		if l, ok := r[i].([]any); ok && len(l) > 0 {
			m, ok := l[0].(map[string]any)
			_, hasLo := m["lo"]
			return ok && hasLo
		}
	}
	return false
}

func writeBars(b *strings.Builder, v any) {
	l, _ := v.([]any)
	var maxc float64
	for _, e := range l {
		m, _ := e.(map[string]any)
		if c := num(m["count"]); c > maxc {
			maxc = c
		}
	}
	for _, e := range l {
		m, _ := e.(map[string]any)
		c := num(m["count"])
		n := 0
		if maxc > 0 {
			n = int(c / maxc * 40)
		}
		fmt.Fprintf(b, "  [%s, %s) %10.0f |%-40s|\n", human(num(m["lo"])), human(num(m["hi"])), c, strings.Repeat("@", n))
	}
}

func num(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case int32:
		return float64(x)
	case uint64:
		return float64(x)
	case float64:
		return x
	}
	return 0
}

func human(x float64) string {
	switch {
	case x <= -9e18:
		return "-inf"
	case x >= 9e18:
		return "inf"
	}
	v := int64(x)
	for _, u := range []struct {
		n int64
		s string
	}{{1 << 40, "T"}, {1 << 30, "G"}, {1 << 20, "M"}, {1 << 10, "K"}} {
		if v >= u.n && v%u.n == 0 {
			return fmt.Sprintf("%d%s", v/u.n, u.s)
		}
	}
	return fmt.Sprint(v)
}

// traceViaAgent runs the query in the recorder and prints its stream.
func traceViaAgent(ctx context.Context, c *client, req server.TraceRequest, out *traceOutput) error {
	err := c.trace(ctx, req, func(line *server.TraceLine) error {
		switch {
		case line.Error != "":
			return apiError{line.Error}
		case line.Explain != "":
			_, err := io.WriteString(out.w, line.Explain)
			return err
		case line.Result != nil:
			return out.write(*line.Start, *line.End, line.Result, line.Counters, nil)
		}
		return nil
	})
	if err != nil && !errors.As(err, new(apiError)) {
		return fmt.Errorf("trace through the recorder at %s: %w", c.base, err)
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
	resp, err := (&http.Client{}).Do(hr)
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
