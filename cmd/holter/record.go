package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/engine"
	"github.com/holter-dev/holter/internal/export"
	"github.com/holter-dev/holter/internal/incident"
	"github.com/holter-dev/holter/internal/metrics"
	"github.com/holter-dev/holter/internal/recorder"
	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/store"
)

func runRecord(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("record", stderr)
	data := valueFlag(fs, "data", defaultDataDir(), dataHelp, nonEmpty)
	epoch := valueFlag(fs, "epoch", formatDuration(recorder.DefaultEpoch), "epoch length", durationIn(recorder.MinEpoch, maxEpoch, ""))
	vitals := valueFlag(fs, "vitals", "all", "comma-separated vitals to record: "+strings.Join(vitalNames(), ", "), vitalList(""))
	analyse := fs.Bool("online", true, "analyse while recording: store findings and reference drift (see holter findings)")
	budget := valueFlag(fs, "budget", "1%", "share of the machine the monitor may use; the threshold adapts to it (\"off\" to disable)", percentOrOff)
	threshold := valueFlag(fs, "threshold", "0", "sampling threshold t, a power of 2 (0: 2^sketch.DefaultShift)", powerOfTwoIn(2, 1<<16))
	cpuHz := valueFlag(fs, "cpu-hz", strconv.Itoa(recorder.DefaultCPUHz), "cpu vital sampling frequency per CPU", countIn(1, 10000))
	storageBudget := valueFlag(fs, "storage-budget", formatSize(recorder.DefaultStorageBudget),
		"bytes a day the samples and their stacks may take in the store (e.g. 10MB, 1GiB); over it half goes to labels' first samples and half to the heaviest labels' others, what is dropped counted as capped (\"off\": every sample)",
		sizeOrOff(1<<20, 1<<50))
	schedMin := valueFlag(fs, "sched-min", formatDuration(recorder.DefaultSchedMin), "scheduling delay that counts as an event", durationIn(time.Microsecond, time.Minute, ""))
	blckMin := valueFlag(fs, "blck-min", formatDuration(recorder.DefaultBlckMin), "blocking time that counts as an event", durationIn(time.Microsecond, time.Minute, ""))
	sf := addServeFlags(fs, "address of the web UI and its API (empty: neither; the CLI uses the socket in --data)")
	queryTimeout := addQueryTimeout(fs)
	cpuProfile := fs.String("cpuprofile", "", "write the recorder's own CPU profile (pprof) to this file")
	memProfile := fs.String("memprofile", "", "write the recorder's live heap (pprof) to this file after each epoch's commit and when it stops")
	retainRaw := valueFlag(fs, "retain-raw", "7d", "keep raw epochs (vitals, samples) this long; 0 keeps them all", ageIn(maxAge))
	retainRollups := valueFlag(fs, "retain-rollups", "400d", "keep the 5m/1h/1d rollups this long; 0 keeps them all", ageIn(maxAge))
	retainSize := valueFlag(fs, "retain-size", "10GiB", "bound the store's data (e.g. 500MB, 10GiB); over it the oldest raw epochs go first; 0: no bound", sizeIn(1<<20, 1<<50, "no bound"))
	tf := addTracingFlags(fs)
	hostName := fs.String("host", "", "name this host's rows carry (default: the hostname)")
	exportURL := valueFlag(fs, "export", "", "ship every committed epoch to this ClickHouse HTTP URL (e.g. http://ch:8123)", httpURL)
	exportDB := valueFlag(fs, "export-db", "holter", "ClickHouse database to ship into (created if missing)", identifier)
	exportUser := fs.String("export-user", "", "ClickHouse user")
	exportPassword := fs.String("export-password", "", "ClickHouse password (or $HOLTER_EXPORT_PASSWORD, kept out of ps)")
	exportSpool := valueFlag(fs, "export-spool", "256MB", "size limit of the on-disk spool of unshipped batches; beyond it the oldest are dropped and counted", sizeIn(1<<20, 1<<50, ""))
	exportRate := valueFlag(fs, "export-rate", "2MB", "bytes per second shipping may use", rateIn(1<<10, 1<<40))
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
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
		exportOpts = &export.Options{Client: ch, SpoolLimit: *exportSpool, Rate: *exportRate}
	}
	var shift uint
	for 1<<shift < *threshold {
		shift++
	}
	retention := store.Retention{RawAge: *retainRaw, RollupAge: *retainRollups, MaxBytes: *retainSize}
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
	if err := recorder.CheckPrivileges(); err != nil {
		return err
	}
	// The recorder is a guest for days beside the host's own work: the
	// heap may grow to half again what it holds live (GOGC 50), and the
	// memory limit is only a backstop far above that. A limit at or below
	// the live heap makes the collector run back to back (it did at
	// 128 MiB, with ~140 MB live on a host with churn).
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(goGC)
	}
	if _, ok := os.LookupEnv("GOMEMLIMIT"); !ok {
		debug.SetMemoryLimit(goMemoryLimit)
	}

	if info, ok := readAgentInfo(*data); ok && info.Pid != os.Getpid() {
		return fmt.Errorf("a recorder (pid %d, API %s) is already recording into %s", info.Pid, info.API, *data)
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	// What the recorder makes in the data directory is not for others:
	// the groups of the socket reach what is theirs (access.ShareDir).
	syscall.Umask(0o027)
	st, err := store.Open(*data, &store.Options{Logf: logf, QueryTimeout: *queryTimeout, ExportDir: filepath.Join(*data, "exports")})
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			return fmt.Errorf("another process is already recording into %s: %w", *data, err)
		}
		return err
	}
	defer st.Close()
	srvOpts, err := sf.options(*data, logf)
	if err != nil {
		return err
	}
	if srvOpts.Sockets, err = sf.sockets(*data); err != nil {
		return err
	}
	cfg := recorder.Config{Epoch: *epoch, Vitals: *vitals, Shift: shift, CPUHz: *cpuHz, Budget: *budget, StorageBudget: *storageBudget,
		SchedMin: *schedMin, BlckMin: *blckMin, Logf: logf, Host: *hostName}
	if cfg.Host == "" {
		cfg.Host = hostname()
	}
	if cfg.FirstEpoch, err = st.NextEpoch(context.Background(), cfg.Host); err != nil {
		return err
	}
	if bytes, at, ok, err := st.StorageBank(context.Background(), cfg.Host); err != nil {
		return err
	} else if ok {
		cfg.StorageBank = &recorder.Bank{Bytes: bytes, At: at}
	}
	rec, err := recorder.New(cfg)
	if err != nil {
		return err
	}
	defer rec.Close()
	// The engine processes' commits and queries are the recorder's work,
	// counted in its own CPU, not the host's activity.
	engine.WatchPids(rec.SetOwnProcesses)
	defer engine.WatchPids(nil)

	// Request tracing starts after the API does; its state joins the
	// status once it runs.
	var tracingNow atomic.Pointer[tracing]
	var exporter *export.Exporter
	status := func() any {
		h := st.Health()
		s := agentStatus{Status: rec.Status(), Storage: &h}
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

	var lastPrune, lastFree time.Time
	var online *incident.Online
	if *analyse {
		online = incident.NewOnline(st, *epoch, func() map[string]string { return unavailableVitals(rec.Status()) }, logf)
		defer online.Close()
	}
	err = rec.Run(ctx, func(e *store.Epoch) error {
		began := time.Now()
		if err := st.WriteEpoch(context.Background(), e); err != nil {
			return err
		}
		wrote := time.Since(began)
		vitalMetrics.Add(e)
		if online != nil {
			online.Committed(e)
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
		tr.pruneSpans(context.Background(), time.Now())
		var parts []string
		for _, v := range e.Vitals {
			part := fmt.Sprintf("%s %d/%d", v.Name, v.Samples, v.Events)
			if v.Lost() > 0 {
				part += fmt.Sprintf(" (lost %d)", v.Lost())
			}
			if v.Capped > 0 {
				part += fmt.Sprintf(" (capped %d)", v.Capped)
			}
			parts = append(parts, part)
		}
		logf("epoch %d committed in %v: samples/events %s", e.Epoch, wrote.Round(time.Millisecond), strings.Join(parts, ", "))
		// Between epochs the recorder holds a fraction of what reading,
		// symbolizing and committing one allocated: the rest goes back to
		// the host now (a collection, off this thread) instead of over the
		// runtime's scavenging minutes, so that what is resident is what
		// the recorder holds.
		if time.Since(lastFree) >= freeEvery {
			lastFree = time.Now()
			go debug.FreeOSMemory()
		}
		if *memProfile != "" {
			if err := writeHeapProfile(*memProfile); err != nil {
				logf("%v", err)
			}
		}
		return nil
	})
	if *memProfile != "" {
		// The heap the recorder held while it ran: the store, the
		// symbol caches and the recorder are not closed yet.
		err = errors.Join(err, writeHeapProfile(*memProfile))
	}
	return err
}

// goGC and goMemoryLimit are the Go heap's settings unless GOGC or
// GOMEMLIMIT in the environment give others.
const (
	goGC          = 50
	goMemoryLimit = 512 << 20
	// freeEvery is how often, at most, the recorder returns its free heap
	// to the host after a commit.
	freeEvery = 30 * time.Second
)

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("memory profile: %w", err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return fmt.Errorf("memory profile: %w", err)
	}
	return nil
}

// unavailableVitals are the recorder's reasons for the vitals it does not
// record, by name.
func unavailableVitals(s recorder.Status) map[string]string {
	m := map[string]string{}
	for _, v := range s.Vitals {
		if v.State != "recording" && v.Reason != "" {
			m[v.Name] = v.State + ": " + v.Reason
		}
	}
	return m
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

// maxEpoch is the longest epoch: a day's samples in one transaction.
const maxEpoch = 24 * time.Hour

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
