package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/export"
	"github.com/holter-dev/holter/internal/metrics"
	"github.com/holter-dev/holter/internal/recorder"
	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/store"
)

func runRecord(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("record", stderr)
	data := fs.String("data", defaultDataDir(), dataHelp)
	epoch := fs.Duration("epoch", recorder.DefaultEpoch, "epoch length (at least 1s)")
	vitals := fs.String("vitals", "all", "comma-separated vitals to record: "+strings.Join(vitalNames(), ", "))
	analyse := fs.Bool("online", true, "analyse while recording: store findings and reference drift (see holter findings)")
	budget := fs.String("budget", "1%", "share of the machine the monitor may use; the threshold adapts to it (\"off\" to disable)")
	threshold := fs.Uint("threshold", 0, "sampling threshold t, a power of 2 (default 2^sketch.DefaultShift)")
	cpuHz := fs.Int("cpu-hz", recorder.DefaultCPUHz, "cpu vital sampling frequency per CPU")
	schedMin := fs.Duration("sched-min", recorder.DefaultSchedMin, "scheduling delay that counts as an event")
	blckMin := fs.Duration("blck-min", recorder.DefaultBlckMin, "blocking time that counts as an event")
	sf := addServeFlags(fs, "address of the web UI and its API (empty: neither; the CLI uses the socket in --data)")
	queryTimeout := addQueryTimeout(fs)
	cpuProfile := fs.String("cpuprofile", "", "write the recorder's own CPU profile (pprof) to this file")
	retainRaw := fs.String("retain-raw", "7d", "keep raw epochs (vitals, samples) this long; 0 keeps them all")
	retainRollups := fs.String("retain-rollups", "400d", "keep the 5m/1h/1d rollups this long; 0 keeps them all")
	retainSize := fs.String("retain-size", "10GiB", "bound the store's data (e.g. 500MB, 10GiB); over it the oldest raw epochs go first; 0: no bound")
	tf := addTracingFlags(fs)
	hostName := fs.String("host", "", "name this host's rows carry (default: the hostname)")
	exportURL := fs.String("export", "", "ship every committed epoch to this ClickHouse HTTP URL (e.g. http://ch:8123)")
	exportDB := fs.String("export-db", "holter", "ClickHouse database to ship into (created if missing)")
	exportUser := fs.String("export-user", "", "ClickHouse user")
	exportPassword := fs.String("export-password", "", "ClickHouse password (or $HOLTER_EXPORT_PASSWORD, kept out of ps)")
	exportSpool := fs.String("export-spool", "256MB", "size limit of the on-disk spool of unshipped batches; beyond it the oldest are dropped and counted")
	exportRate := fs.String("export-rate", "2MB", "bytes per second shipping may use")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := sf.check(); err != nil {
		return err
	}
	if err := checkSockets(*data); err != nil {
		return err
	}
	// Catch the signals before the long set-up: an interrupt while programs
	// are loading stops the recorder once it starts, rather than being lost
	// (a background process starts with SIGINT ignored until Notify).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var exportOpts *export.Options
	if *exportURL != "" {
		pw := *exportPassword
		if pw == "" {
			pw = os.Getenv("HOLTER_EXPORT_PASSWORD")
		}
		ch, err := clickhouse.New(*exportURL, &clickhouse.Options{Database: *exportDB, User: *exportUser, Password: pw})
		if err != nil {
			return usagef("--export: %v", err)
		}
		exportOpts = &export.Options{Client: ch}
		if exportOpts.SpoolLimit, err = parseBytes(*exportSpool); err != nil {
			return usagef("--export-spool: %v", err)
		}
		if exportOpts.Rate, err = parseBytes(*exportRate); err != nil || exportOpts.Rate == 0 {
			return usagef("--export-rate: %q is not a positive size per second", *exportRate)
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	vs, err := recorder.ParseVitals(*vitals)
	if err != nil {
		return usagef("%v", err)
	}
	var shift uint
	if *threshold != 0 {
		if *threshold < 2 || *threshold&(*threshold-1) != 0 {
			return usagef("threshold %d is not a power of 2 (2, 4, 8, …)", *threshold)
		}
		for 1<<shift < *threshold {
			shift++
		}
	}
	budgetFrac, err := parseBudget(*budget)
	if err != nil {
		return usagef("--budget: %v", err)
	}
	var retention store.Retention
	if retention.RawAge, err = parseAge(*retainRaw); err != nil {
		return usagef("--retain-raw: %v", err)
	}
	if retention.RollupAge, err = parseAge(*retainRollups); err != nil {
		return usagef("--retain-rollups: %v", err)
	}
	if retention.MaxBytes, err = parseBytes(*retainSize); err != nil {
		return usagef("--retain-size: %v", err)
	}
	if *epoch < recorder.MinEpoch {
		return usagef("epoch %v is shorter than the minimum %v", *epoch, recorder.MinEpoch)
	}
	if err := checkQueryTimeout(*queryTimeout); err != nil {
		return err
	}
	if err := recorder.CheckPrivileges(); err != nil {
		return err
	}
	// Keep the Go heap near what it holds live: the recorder runs for days
	// beside the host's own work.
	debug.SetMemoryLimit(128 << 20)

	if info, ok := readAgentInfo(*data); ok && info.Pid != os.Getpid() {
		return fmt.Errorf("a recorder (pid %d, API %s) is already recording into %s", info.Pid, info.API, *data)
	}
	// What the recorder makes in the data directory is not for others:
	// the groups of the socket reach what is theirs (access.ShareDir).
	syscall.Umask(0o027)
	st, err := store.Open(*data, &store.Options{QueryTimeout: *queryTimeout})
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			return fmt.Errorf("another process is already recording into %s: %w", *data, err)
		}
		return err
	}
	defer st.Close()
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	srvOpts, err := sf.options(*data, logf)
	if err != nil {
		return err
	}
	if srvOpts.Sockets, err = sf.sockets(*data); err != nil {
		return err
	}
	cfg := recorder.Config{Epoch: *epoch, Vitals: vs, Shift: shift, CPUHz: *cpuHz, Budget: budgetFrac,
		SchedMin: *schedMin, BlckMin: *blckMin, Logf: logf, Host: *hostName}
	if cfg.Host == "" {
		cfg.Host = hostname()
	}
	if cfg.FirstEpoch, err = st.NextEpoch(context.Background(), cfg.Host); err != nil {
		return err
	}
	rec, err := recorder.New(cfg)
	if err != nil {
		return err
	}
	defer rec.Close()

	// Request tracing starts after the API does; its state joins the
	// status once it runs.
	var tracingNow atomic.Pointer[tracing]
	var exporter *export.Exporter
	status := func() any {
		s := agentStatus{Status: rec.Status()}
		if exporter != nil {
			es := exporter.Status()
			s.Export = &es
		}
		if t := tracingNow.Load(); t != nil {
			s.Requests = t.status()
		}
		return s
	}
	if exportOpts != nil {
		exportOpts.Store, exportOpts.Host, exportOpts.Logf = st, cfg.Host, logf
		exportOpts.SpoolDir = filepath.Join(*data, "export-spool")
		if exporter, err = export.New(*exportOpts); err != nil {
			return err
		}
		shipCtx, stopShipping := context.WithCancel(context.Background())
		shipped := make(chan struct{})
		go func() {
			defer close(shipped)
			exporter.Run(shipCtx)
		}()
		defer func() { stopShipping(); <-shipped }()
		logf("exporting to %s (database %s), spool in %s", exportOpts.Client.URL(), exportOpts.Client.Database(), exportOpts.SpoolDir)
	}

	setVital := func(name string, on bool) error {
		vs, err := recorder.ParseVitals(name)
		if err != nil {
			return err
		}
		for _, v := range vs {
			if err := rec.SetEnabled(v, on); err != nil {
				return fmt.Errorf("%s: %w", v, err)
			}
			logf("%s %s", v, map[bool]string{true: "enabled", false: "disabled"}[on])
		}
		return nil
	}
	srvOpts.Store, srvOpts.Status, srvOpts.SetVital = st, status, setVital
	vitalMetrics := metrics.NewVitals()
	srvOpts.Metrics = func(w io.Writer) {
		vitalMetrics.Write(w, recorderMetrics(rec.Status()))
		if t := tracingNow.Load(); t != nil {
			if s := t.status(); s != nil {
				s.writeMetrics(w)
			}
		}
	}
	srvOpts.AddRun = func(ctx context.Context, r store.Run) error {
		// A run happened on the host this recorder records: its
		// metrics are that host's samples over the run's range.
		if r.Host == "" {
			r.Host = cfg.Host
		}
		return st.AddRun(ctx, r)
	}
	srvOpts.Boost = func(pid uint32, on bool) error {
		if on {
			return rec.Boost(pid)
		}
		return rec.Unboost(pid)
	}
	srv, err := server.Listen(srvOpts)
	if err != nil {
		return err
	}
	go srv.Serve()
	defer srv.Shutdown(context.Background())
	if err := writeAgentInfo(*data, agentInfo{API: srv.Addr(), OwnToken: sf.token.get() != ""}); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(*data, agentFile))
	if srv.Addr() != "" {
		logf("UI and API at %s", server.LoginURL(srv.Addr(), srvOpts.Token))
	}
	tr, err := startTracing(st, tf, cfg.Host, rec.Kernel(), logf)
	if err != nil {
		return err
	}
	defer tr.stop()
	tracingNow.Store(tr)
	printRecording(stderr, rec.Status(), st.Path())

	var lastPrune time.Time
	var online *online
	if *analyse {
		online = newOnline(st, *epoch, rec.Status, logf)
		defer online.close()
	}
	return rec.Run(ctx, func(e *store.Epoch) error {
		began := time.Now()
		if err := st.WriteEpoch(context.Background(), e); err != nil {
			return err
		}
		wrote := time.Since(began)
		vitalMetrics.Add(e)
		if online != nil {
			online.afterEpoch(e)
		}
		if exporter != nil {
			if err := exporter.Committed(context.Background(), e.Epoch); err != nil {
				logf("export: %v", err)
			}
		}
		if time.Since(lastPrune) >= pruneEvery {
			lastPrune = time.Now()
			rep, err := st.Prune(context.Background(), retention, lastPrune)
			if err != nil {
				logf("retention: %v", err)
			} else if rep.Epochs > 0 || rep.RollupRows > 0 {
				logf("retention: pruned %d raw epochs, %d rollup rows, %d stacks", rep.Epochs, rep.RollupRows, rep.Stacks)
			}
		}
		var parts []string
		for _, v := range e.Vitals {
			part := fmt.Sprintf("%s %d/%d", v.Name, v.Samples, v.Events)
			if v.Lost() > 0 {
				part += fmt.Sprintf(" (lost %d)", v.Lost())
			}
			parts = append(parts, part)
		}
		logf("epoch %d committed in %v: samples/events %s", e.Epoch, wrote.Round(time.Millisecond), strings.Join(parts, ", "))
		return nil
	})
}

// recorderMetrics is what /metrics shows of the recorder's own state.
func recorderMetrics(s recorder.Status) metrics.Recorder {
	m := metrics.Recorder{MonitorCPU: s.MonitorCPU, BudgetPercent: s.BudgetPercent, LateSamples: s.LateSamples, SkippedEpochs: s.SkippedEpochs}
	for _, v := range s.Vitals {
		m.Vitals = append(m.Vitals, metrics.State{Name: v.Name, State: v.State, Threshold: v.Threshold})
	}
	return m
}

func printRecording(w io.Writer, s recorder.Status, path string) {
	fmt.Fprintf(w, "recording host %s into %s, epochs of %s\n", s.Host, path, s.Epoch)
	for _, v := range s.Vitals {
		switch v.State {
		case "recording":
			fmt.Fprintf(w, "  %-8s recording (t=%d): %s\n", v.Name, v.Threshold, v.Trigger)
		case "disabled":
		default:
			fmt.Fprintf(w, "  %-8s %s: %s\n", v.Name, v.State, v.Reason)
		}
	}
}

// pruneEvery is how often the recorder applies the retention limits.
const pruneEvery = 10 * time.Minute

// parseBudget reads "1%", "0.5%" or "off".
func parseBudget(s string) (float64, error) {
	if s == "off" {
		return -1, nil
	}
	pct, ok := strings.CutSuffix(s, "%")
	var v float64
	if _, err := fmt.Sscanf(pct, "%g", &v); !ok || err != nil || v <= 0 || v > 100 {
		return 0, fmt.Errorf("%q is not a percentage like 1%% (or off)", s)
	}
	return v / 100, nil
}

// parseBytes reads a size like 256MB, 64KiB or 1000.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}, {"", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || n < 0 || n*u.mult > 1<<62 {
				return 0, fmt.Errorf("%q is not a size like 256MB", s)
			}
			return int64(n * u.mult), nil
		}
	}
	return 0, fmt.Errorf("%q is not a size like 256MB", s)
}

// parseAge reads a duration that may also be given in days ("7d").
func parseAge(s string) (time.Duration, error) {
	if s == "0" || s == "" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n float64
		if _, err := fmt.Sscanf(days, "%g", &n); err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a number of days", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration like 7d or 36h", s)
	}
	return d, nil
}

func vitalNames() []string {
	var names []string
	for _, v := range recorder.AllVitals() {
		names = append(names, v.String())
	}
	return names
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	return h
}
