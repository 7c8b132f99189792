package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/holter-dev/holter/internal/diagnose"
	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/incident/runs"
	"github.com/holter-dev/holter/internal/recorder"
	"github.com/holter-dev/holter/internal/store"
)

// paramFlags collects repeated --param NAME=VALUE.
type paramFlags map[string]string

func (p paramFlags) String() string { return fmt.Sprint(map[string]string(p)) }

func (p paramFlags) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return fmt.Errorf("%q is not NAME=VALUE", s)
	}
	if _, dup := p[name]; dup {
		return fmt.Errorf("parameter %q given twice", name)
	}
	p[name] = value
	return nil
}

// runRun runs a command while the recorder records and adds it to the run
// catalog. It needs a recorder to hold the store: the one recording into
// --data if it runs, else it starts one of its own (this binary's `record`
// on --data) for the duration and stops it afterwards. The run is added
// once an epoch ending after the command is committed, so its whole time
// range is recorded.
func runRun(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", stderr)
	af := addAgentFlags(fs)
	params := paramFlags{}
	fs.Var(params, "param", "execution condition NAME=VALUE (repeat)")
	id := fs.String("id", "", "run id (default: r<N>)")
	perfRegex := valueFlag(fs, "perf-regex", "", "regular expression whose first group, in the command's last matching output line, is the performance figure (higher is better)", regexWithGroup)
	perfMetric := valueFlag(fs, "perf-metric", "", `"rate": the performance figure is 1/elapsed seconds`, oneOf("", "rate"))
	epoch := valueFlag(fs, "epoch", "1s", "epoch length of the recorder started when none runs", durationIn(recorder.MinEpoch, maxEpoch, ""))
	if err := parse(fs, args); err != nil {
		return err
	}
	cmdArgs := fs.Args()
	if len(cmdArgs) == 0 {
		return usagef("missing command: holter run --param NAME=VALUE -- COMMAND ARGS")
	}
	if len(params) == 0 {
		return usagef("give the run's condition with at least one --param NAME=VALUE")
	}
	re := *perfRegex
	if re != nil && *perfMetric != "" {
		return usagef("give --perf-regex or --perf-metric, not both")
	}
	c, ok := af.agent()
	if !ok {
		if *af.api != "" {
			return fmt.Errorf("no recorder answers at %s", *af.api)
		}
		var stop func()
		var err error
		if c, stop, err = startOwnRecorder(*af.data, *epoch, stderr); err != nil {
			return err
		}
		defer stop()
	}
	ctx := context.Background()
	q := apiQuerier{c}
	if *id == "" {
		res, err := q.Query(ctx, `SELECT count(*) FROM runs`)
		if err != nil {
			return err
		}
		*id = fmt.Sprintf("r%d", findings.AsInt(res.Rows[0][0])+1)
	}

	// The command's block requests are sampled each rather than a few
	// per label and epoch (recorder.Boost): this process is boosted, and
	// the command and whatever it starts descend from it.
	unboost := boostSelf(ctx, c, *id, stderr)
	var out bytes.Buffer
	cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = io.MultiWriter(stdout, &out), stderr, os.Stdin
	start := time.Now()
	if err := cmd.Start(); err != nil {
		unboost()
		return fmt.Errorf("run %s: %w", cmdArgs[0], err)
	}
	tree := runs.Watch(cmd.Process.Pid)
	runErr := cmd.Wait()
	end := time.Now()
	unboost()
	pids := tree()
	exit := 0
	var ee *exec.ExitError
	if errors.As(runErr, &ee) {
		exit = ee.ExitCode()
	} else if runErr != nil {
		return fmt.Errorf("run %s: %w", cmdArgs[0], runErr)
	}
	run := store.Run{ID: *id, Params: params, StartNs: start.UnixNano(), EndNs: end.UnixNano(),
		Command: strings.Join(cmdArgs, " "), ExitCode: exit, PerfSource: "none", Pids: pids}
	switch {
	case re != nil:
		run.PerfSource = "regex " + re.String()
		var last []string
		for _, line := range strings.Split(out.String(), "\n") {
			if m := re.FindStringSubmatch(line); m != nil {
				last = m
			}
		}
		if last == nil {
			return fmt.Errorf("run %s: no output line matches --perf-regex %q; the run was not added", *id, re)
		}
		v, err := strconv.ParseFloat(last[1], 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("run %s: %q is not a positive number; the run was not added", *id, last[1])
		}
		run.Perf = &v
	case *perfMetric == "rate":
		v := 1 / end.Sub(start).Seconds()
		run.Perf, run.PerfSource = &v, "rate"
	}
	if err := waitCommitted(ctx, q, run.EndNs); err != nil {
		return err
	}
	b, _ := json.Marshal(run)
	var added store.Run
	if err := c.do(ctx, http.MethodPost, "/api/runs", bytes.NewReader(b), &added); err != nil {
		return fmt.Errorf("add run %s: %w", *id, err)
	}
	perf := "no performance figure"
	if run.Perf != nil {
		perf = fmt.Sprintf("performance %g", *run.Perf)
	}
	fmt.Fprintf(stderr, "run %s: %s, %v, exit %d, %s\n", *id, params, end.Sub(start).Round(time.Millisecond), exit, perf)
	if exit != 0 {
		return fmt.Errorf("run %s: the command exited with status %d (the run was added)", *id, exit)
	}
	return nil
}

// boostSelf asks the recorder to sample every block request of this process
// and its descendants (PUT /api/boost/{pid}) and returns what ends that.
// A recorder that cannot is no reason not to run: the run's requests are
// then sampled as usual, which it says.
func boostSelf(ctx context.Context, c *client, id string, stderr io.Writer) func() {
	path := fmt.Sprintf("/api/boost/%d", os.Getpid())
	var answer map[string]any
	if err := c.do(ctx, http.MethodPut, path, nil, &answer); err != nil {
		fmt.Fprintf(stderr, "run %s: the recorder does not sample this run's block requests each (%v): they are sampled as usual\n", id, err)
		return func() {}
	}
	return func() {
		if err := c.do(ctx, http.MethodDelete, path, nil, &answer); err != nil {
			fmt.Fprintf(stderr, "run %s: end the sampling of each block request: %v\n", id, err)
		}
	}
}

// waitCommitted waits until an epoch ending at or after ns is committed.
func waitCommitted(ctx context.Context, q findings.Querier, ns int64) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		res, err := q.Query(ctx, `SELECT coalesce(max(end_ns), 0) FROM epochs`)
		if err != nil {
			return err
		}
		if findings.AsInt(res.Rows[0][0]) >= ns {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("the recorder committed no epoch covering the run's end within 2 minutes")
}

// startOwnRecorder runs `holter record` on dir until stop is called.
func startOwnRecorder(dir string, epoch time.Duration, stderr io.Writer) (*client, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	var log bytes.Buffer
	cmd := exec.Command(self, "record", "--data", dir, "--epoch", epoch.String(), "--api", "")
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start a recorder: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	fmt.Fprintf(stderr, "no recorder runs for %s: recording for this run (pid %d)\n", dir, cmd.Process.Pid)
	deadline := time.After(60 * time.Second)
	for {
		select {
		case err := <-exited:
			return nil, nil, fmt.Errorf("the recorder started for this run exited (%v):\n%s", err, log.String())
		case <-deadline:
			stop()
			return nil, nil, fmt.Errorf("the recorder started for this run did not commit an epoch within a minute:\n%s", log.String())
		case <-time.After(200 * time.Millisecond):
		}
		info, ok := readAgentInfo(dir)
		if !ok || info.Pid != cmd.Process.Pid {
			continue
		}
		c, ok := socketClient(dir)
		if !ok {
			continue
		}
		if res, err := (apiQuerier{c}).Query(context.Background(), `SELECT count(*) FROM epochs`); err == nil && findings.AsInt(res.Rows[0][0]) > 0 {
			return c, stop, nil
		}
	}
}

// runRuns lists the run catalog and the reference-driven analysis of it.
func runRuns(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("runs", stderr)
	af := addAgentFlags(fs)
	threshold := valueFlag(fs, "threshold", strconv.FormatFloat(diagnose.DefaultThreshold, 'g', -1, 64), "p-value at or below which a target is anomalous against its best reference", probability)
	top := valueFlag(fs, "top", "5", "metrics to print per anomalous pair", countIn(0, maxCount))
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	src, err := openSource(af)
	if err != nil {
		return err
	}
	defer src.closer()
	rep, err := runs.Analyse(context.Background(), src.q, *threshold, *top)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPARAMS\tSTART\tSECONDS\tPERF\tEXIT\tCOMMAND")
	for _, r := range rep.Runs {
		perf := "-"
		if r.Perf != nil {
			perf = fmt.Sprintf("%.4g", *r.Perf)
		}
		var ps []string
		for k, v := range r.Params {
			ps = append(ps, k+"="+v)
		}
		sort.Strings(ps)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%d\t%s\n", r.ID, strings.Join(ps, " "), fmtNs(r.StartNs),
			float64(r.EndNs-r.StartNs)/1e9, perf, r.ExitCode, r.Command)
	}
	tw.Flush()
	if rep.CatalogError != "" {
		fmt.Fprintf(stdout, "\nthe catalog cannot be analysed: %s\n", rep.CatalogError)
	}
	fmt.Fprintf(stdout, "\n%d anomalous target/reference pairs at p <= %g\n", len(rep.Anomalies), *threshold)
	for _, p := range rep.Anomalies {
		var chs []string
		for _, c := range p.Changes {
			chs = append(chs, c.String())
		}
		fmt.Fprintf(stdout, "\ntarget %s against reference %s: deviation %.3f, p-value %.4f (%s; %s)\n",
			p.Target, p.Reference, p.Deviation, p.PValue, strings.Join(chs, ", "), p.Synthesis)
		if p.Error != "" {
			fmt.Fprintf(stdout, "  metrics: %s\n", p.Error)
		}
		for i, m := range p.Metrics {
			fmt.Fprintf(stdout, "  %d. %-40s EMD %.3f  target mean %.4g (n %d), reference mean %.4g (n %d)\n",
				i+1, m.Name, m.EMD, m.TargetMean, m.TargetN, m.ReferenceMean, m.ReferenceN)
		}
	}
	return nil
}
