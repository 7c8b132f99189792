// Command incidents is the planted-incident suite: on a host with
// background work of its own (processes starting and stopping, a service
// answering requests, periodic disk writes), it records with holter and
// plants incidents of every class (internal/planted), each with a culprit
// function named anew, one after another in a shuffled order, RUNS times;
// after each it asks `holter findings --range` over the incident's time for
// the ranked incidents and prints the rank of the first naming the
// culprit and how many ranked above it. At the end, per class: the ranks,
// the share at rank 1 and the worst number of incidents above the
// culprit, against the bar (every class in the top 3, 90% of incidents at
// rank 1, at most one above the culprit). Last, on the recording the
// suite made, it times holter findings --since 1h (and -old's, against
// it) through the live recorder and from the store once it has stopped.
//
//	sudo go run ./bench/incidents -runs 10
//
// It needs root (the recorder), gcc, python3 and curl. The recorder runs
// with 5 s epochs and its CPU budget off: on a loaded host the budget sheds
// vitals, which the suite would measure instead of the findings. Its
// storage budget is the default, scaled to the epochs: each keeps what a
// default one-minute epoch would.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/holter-dev/holter/internal/incident"
	"github.com/holter-dev/holter/internal/planted"
	"github.com/holter-dev/holter/internal/recorder"
)

func main() {
	runs := flag.Int("runs", 5, "rounds of every class")
	seed := flag.Uint64("seed", 0, "random seed (0: from the clock)")
	epoch := flag.Duration("epoch", 5*time.Second, "the recorder's epoch")
	only := flag.String("classes", "", "comma-separated classes to plant (default: all)")
	keep := flag.String("keep", "", "copy the recording and logs to this directory at the end")
	holter := flag.String("holter", "", "holter binary (default: build this tree's)")
	old := flag.String("old", "", "another holter binary (say, main's) whose findings --since 1h is timed against this one's at the end")
	rounds := flag.Int("findings-rounds", 5, "times each binary's findings --since 1h is timed at the end, through the recorder and from the store")
	flag.Parse()
	if err := run(*runs, *seed, *epoch, *only, *keep, *holter, *old, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "incidents:", err)
		os.Exit(1)
	}
}

type result struct {
	class    planted.Class
	culprit  string
	params   string
	rank     int
	above    int
	severity float64
	took     time.Duration
	top      string
}

func run(runs int, seed uint64, epoch time.Duration, only, keep, holterBin, oldBin string, findingsRounds int) error {
	if os.Geteuid() != 0 {
		return errors.New("run as root: the recorder attaches BPF programs")
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	work, err := os.MkdirTemp("/var/tmp", "holter-incidents-")
	if err != nil {
		return err
	}
	defer func() {
		if keep != "" {
			exec.Command("cp", "-r", work, keep).Run()
		}
		os.RemoveAll(work)
	}()
	if holterBin == "" {
		holterBin = filepath.Join(work, "holter")
		if out, err := exec.Command("go", "build", "-o", holterBin, "./cmd/holter").CombinedOutput(); err != nil {
			return fmt.Errorf("build holter: %v\n%s", err, out)
		}
	}
	classes := planted.Classes
	if only != "" {
		classes = nil
		for _, c := range strings.Split(only, ",") {
			classes = append(classes, planted.Class(c))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	data := filepath.Join(work, "data")
	// The storage budget is the default's for 1-minute epochs, scaled to
	// these: an epoch may keep the samples a default one-minute epoch
	// keeps, not a twelfth of them.
	storage := int64(float64(recorder.DefaultStorageBudget) * float64(time.Minute) / float64(epoch))
	rec := exec.Command(holterBin, "record", "--data", data, "--epoch", epoch.String(), "--api", "127.0.0.1:0", "--budget", "off",
		"--storage-budget", fmt.Sprint(storage))
	recLog, err := os.Create(filepath.Join(work, "record.log"))
	if err != nil {
		return err
	}
	defer recLog.Close()
	rec.Stderr = recLog
	if err := rec.Start(); err != nil {
		return err
	}
	stopRecorder := sync.OnceFunc(func() { rec.Process.Signal(os.Interrupt); rec.Wait() })
	defer stopRecorder()
	bg, err := planted.Background(work)
	if err != nil {
		return err
	}
	defer bg()
	fmt.Printf("seed %d, %d CPUs, epochs of %s; background: a process a second, a shell job every 10 s, an HTTP service asked 5 times a second, 8 MiB written and synced every 5 s\n",
		seed, runtime.NumCPU(), epoch)
	warm := 60 * time.Second
	fmt.Printf("warming up for %s\n", warm)
	if !sleep(ctx, warm) {
		return ctx.Err()
	}
	var results []result
	defer func() {
		// The recording is now a busy host's: how long the last hour's
		// findings take to report through the recorder's API, and from
		// the store once the recorder has stopped.
		if ctx.Err() != nil {
			return
		}
		timeFindings(ctx, findingsRounds, data, "through the recorder", holterBin, oldBin)
		stopRecorder()
		timeFindings(ctx, findingsRounds, data, "from the store", holterBin, oldBin)
	}()
	for r := 1; r <= runs; r++ {
		order := append([]planted.Class(nil), classes...)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, c := range order {
			if ctx.Err() != nil {
				return report(results)
			}
			res, err := plant(ctx, c, rng, work, holterBin, data, epoch)
			if err != nil {
				fmt.Printf("round %d %s: %v\n", r, c, err)
				continue
			}
			results = append(results, res)
			fmt.Printf("round %d %-20s %-40s rank %d, %d above, severity %.2f, findings took %s (%s)\n   top: %s\n",
				r, c, res.culprit, res.rank, res.above, res.severity, res.took.Round(10*time.Millisecond), res.params, res.top)
		}
	}
	return report(results)
}

// timeFindings times holter findings --since 1h over the recording in
// data, rounds times with each binary (the other one, if any, asked in
// turn), and prints the median of each and their ratio.
func timeFindings(ctx context.Context, rounds int, data, how, holterBin, oldBin string) {
	bins := []string{holterBin}
	if oldBin != "" {
		bins = append(bins, oldBin)
	}
	took := make([][]time.Duration, len(bins))
	for range rounds {
		for k, b := range bins {
			began := time.Now()
			out, err := exec.CommandContext(ctx, b, "findings", "--data", data, "--since", "1h", "--json").CombinedOutput()
			if err != nil {
				fmt.Printf("%s findings --since 1h %s: %v\n%.500s\n", b, how, err, out)
				return
			}
			took[k] = append(took[k], time.Since(began))
		}
	}
	median := make([]time.Duration, len(bins))
	for k, b := range bins {
		slices.Sort(took[k])
		median[k] = took[k][len(took[k])/2]
		fmt.Printf("%s findings --since 1h %s: median %s of %d (%s to %s)\n", b, how, median[k].Round(time.Millisecond), len(took[k]),
			took[k][0].Round(time.Millisecond), took[k][len(took[k])-1].Round(time.Millisecond))
	}
	if len(bins) == 2 {
		fmt.Printf("findings --since 1h %s: the other binary takes %.1fx this one's time\n", how, float64(median[1])/float64(median[0]))
	}
}

// plant runs one incident and ranks its culprit in holter's findings over
// its time.
func plant(ctx context.Context, c planted.Class, rng *rand.Rand, work, holterBin, data string, epoch time.Duration) (result, error) {
	dir := filepath.Join(work, "planted")
	os.MkdirAll(dir, 0o755)
	in, err := planted.New(c, rng, planted.Options{Dir: dir, DataDir: work})
	if err != nil {
		return result{}, err
	}
	defer in.Close()
	if !sleep(ctx, time.Duration(5+rng.IntN(10))*time.Second) {
		return result{}, ctx.Err()
	}
	start := time.Now()
	if err := in.Run(); err != nil {
		return result{}, err
	}
	end := time.Now()
	// The epochs holding the incident are committed; findings reads what
	// the online analysis judged of them and evaluates the rest.
	if err := planted.WaitRecorded(ctx, holterBin, data, end, 5*time.Minute); err != nil {
		return result{}, err
	}
	began := time.Now()
	out, err := exec.CommandContext(ctx, holterBin, "findings", "--data", data, "--json", "--range",
		start.UTC().Format(time.RFC3339Nano)+"/"+end.UTC().Format(time.RFC3339Nano)).Output()
	took := time.Since(began)
	if err != nil {
		return result{}, fmt.Errorf("holter findings: %w", err)
	}
	var rep incident.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		return result{}, fmt.Errorf("holter findings: %w", err)
	}
	res := result{class: c, culprit: in.Culprit, params: in.Params, took: took}
	res.rank, res.above = planted.Rank(rep.Incidents, in.Culprit)
	if res.rank > 0 {
		res.severity = rep.Incidents[res.rank-1].Severity
	}
	if len(rep.Incidents) > 0 {
		top := rep.Incidents[0]
		res.top = fmt.Sprintf("[%.2f %s] %s", top.Severity, top.Resource, top.Summary)
	}
	if res.rank != 1 {
		name := filepath.Join(work, fmt.Sprintf("missed-%s-%s.json", c, in.Culprit))
		os.WriteFile(name, out, 0o644)
	}
	return res, nil
}

// report prints the per-class figures against the bar.
func report(results []result) error {
	byClass := map[planted.Class][]result{}
	for _, r := range results {
		byClass[r.class] = append(byClass[r.class], r)
	}
	var classes []string
	for c := range byClass {
		classes = append(classes, string(c))
	}
	sort.Strings(classes)
	fmt.Println("\nclass                 runs  ranks                 top-1  worst above  findings time (max)")
	top1, total, worstAbove := 0, 0, 0
	allTop3 := true
	for _, c := range classes {
		rs := byClass[planted.Class(c)]
		var ranks []string
		n1, worst := 0, 0
		var slowest time.Duration
		for _, r := range rs {
			ranks = append(ranks, fmt.Sprint(r.rank))
			if r.rank == 1 {
				n1++
			}
			if r.rank == 0 || r.rank > 3 {
				allTop3 = false
			}
			worst = max(worst, r.above)
			slowest = max(slowest, r.took)
		}
		top1 += n1
		total += len(rs)
		worstAbove = max(worstAbove, worst)
		fmt.Printf("%-21s %4d  %-21s %4d%%  %11d  %s\n", c, len(rs), strings.Join(ranks, ","), 100*n1/max(len(rs), 1), worst, slowest.Round(10*time.Millisecond))
	}
	if total == 0 {
		return errors.New("no incident was planted")
	}
	fmt.Printf("\nall: %d incidents, %.0f%% at rank 1, every class in the top 3: %v, at most %d above the culprit\n",
		total, 100*float64(top1)/float64(total), allTop3, worstAbove)
	fmt.Printf("bar (every class in the top 3, >= 90%% at rank 1, <= 1 above): %v\n", allTop3 && top1*10 >= 9*total && worstAbove <= 1)
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
