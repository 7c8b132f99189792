package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/diagnose"
	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/symbol"
)

// MinSamples is the fewest values a metric needs in each run of a pair to
// be ranked. A run's own processes make few samples of what they do rarely
// — the signal-mask calls of starting a thread, say — and between a
// handful of values on each side the distance is their sampling noise,
// which the halves of a run of a handful cannot measure (Denoise).
const MinSamples = 10

// Pair is an anomalous target run against its best reference, with the
// metrics of its processes that differ most.
type Pair struct {
	diagnose.Score
	Metrics []diagnose.Ranked `json:"metrics"`
	Error   string            `json:"error,omitempty"`
}

// Report is the catalog and its anomalous pairs.
type Report struct {
	Runs      []store.Run `json:"runs"`
	Anomalies []Pair      `json:"anomalies"`
	Threshold float64     `json:"threshold"`
	// CatalogError says why the catalog could not be analysed, if so.
	CatalogError string `json:"catalog_error"`
}

// Analyse reads the catalog and reports the targets anomalous against
// their best reference at p-value threshold or below, each with its top
// metrics.
func Analyse(ctx context.Context, q findings.Querier, threshold float64, top int) (*Report, error) {
	res, err := q.Query(ctx, `SELECT id, host, params, start_ns, end_ns, perf, perf_source, command, exit_code FROM runs ORDER BY start_ns`)
	if err != nil {
		return nil, err
	}
	rep := &Report{Threshold: threshold, Runs: []store.Run{}, Anomalies: []Pair{}}
	for _, r := range res.Rows {
		run := store.Run{ID: fmt.Sprint(r[0]), Host: fmt.Sprint(r[1]), StartNs: findings.AsInt(r[3]), EndNs: findings.AsInt(r[4]),
			PerfSource: fmt.Sprint(r[6]), Command: fmt.Sprint(r[7]), ExitCode: int(findings.AsInt(r[8]))}
		if err := json.Unmarshal([]byte(fmt.Sprint(r[2])), &run.Params); err != nil {
			return nil, fmt.Errorf("run %s: bad params: %w", run.ID, err)
		}
		if r[5] != nil {
			v := findings.AsFloat(r[5])
			run.Perf = &v
		}
		rep.Runs = append(rep.Runs, run)
	}
	// The catalog: runs with a figure and the most common set of
	// parameter names (a condition space has one set of dimensions).
	groups := map[string][]diagnose.Run{}
	for _, r := range rep.Runs {
		if r.Perf == nil || r.ExitCode != 0 {
			continue
		}
		k := strings.Join(slices.Sorted(maps.Keys(r.Params)), ",")
		groups[k] = append(groups[k], diagnose.Run{ID: r.ID, Params: r.Params, Perf: *r.Perf})
	}
	var catalog []diagnose.Run
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		if len(groups[k]) > len(catalog) {
			catalog = groups[k]
		}
	}
	if len(catalog) < 2 {
		return rep, nil
	}
	cat, err := diagnose.NewCatalog(catalog, nil)
	var scores []diagnose.Score
	if err == nil {
		scores, err = cat.Anomalies(&diagnose.AnomalyOptions{Threshold: threshold})
	}
	if err != nil {
		rep.CatalogError = err.Error()
		return rep, nil
	}
	byID := map[string]store.Run{}
	for _, r := range rep.Runs {
		byID[r.ID] = r
	}
	// Runs added before recorders named their host ran on the host
	// recorded last.
	latest, _ := findings.LatestHost(ctx, q)
	for _, s := range scores {
		p := Pair{Score: s}
		host := byID[s.Target].Host
		if host == "" {
			host = latest
		}
		ranked, err := compare(ctx, q, host, s.Target, s.Reference)
		if err != nil {
			p.Error = err.Error()
		}
		if len(ranked) > top {
			ranked = ranked[:top]
		}
		p.Metrics = ranked
		rep.Anomalies = append(rep.Anomalies, p)
	}
	return rep, nil
}

// compare ranks the metrics of a target run's processes against its
// reference's (see findings.Metrics), by their difference beyond the
// reference run's own variation (diagnose.RankOptions.Denoise): runs are
// short, and a metric of a few dozen values — a heavy-tailed latency, a
// rate that ramps up as the run starts — differs as much between the
// halves of one run as between two.
func compare(ctx context.Context, q findings.Querier, host, target, reference string) ([]diagnose.Ranked, error) {
	t, err := findings.ParseRange(ctx, q, target, time.Now())
	if err != nil {
		return nil, err
	}
	ref, err := findings.ParseRange(ctx, q, reference, time.Now())
	if err != nil {
		return nil, err
	}
	ranked, skipped, err := findings.CompareRanges(ctx, q, host, t, ref, &diagnose.RankOptions{MinSamples: MinSamples, Denoise: true})
	if err == nil && len(ranked) == 0 {
		err = fmt.Errorf("no metric has %d values in both runs (%d left out): a run too short for its processes to be sampled enough",
			MinSamples, len(skipped))
	}
	return ranked, err
}

// TreePoll is how often Watch looks for the processes a run started.
const TreePoll = 50 * time.Millisecond

// Watch follows the processes descending from pid until the returned
// function is called, which gives them, pid first. It reads the parent of
// every process in /proc every TreePoll: a process that lives shorter than
// that, or whose parent exits before it is seen, is missed. Threads share
// their process's id and need no watching.
func Watch(pid int) func() []uint32 {
	seen := map[uint32]bool{uint32(pid): true}
	scan := func() {
		parents := map[uint32]uint32{}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			p, err := strconv.ParseUint(e.Name(), 10, 32)
			if err != nil {
				continue
			}
			if pp, ok := parentOf(e.Name()); ok {
				parents[uint32(p)] = pp
			}
		}
		// Until no process is added: a grandchild may be listed before
		// its parent.
		for added := true; added; {
			added = false
			for p, pp := range parents {
				if seen[pp] && !seen[p] {
					seen[p], added = true, true
				}
			}
		}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(TreePoll)
		defer tick.Stop()
		for {
			scan()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() []uint32 {
		close(done)
		<-finished
		delete(seen, uint32(pid))
		rest := slices.Sorted(maps.Keys(seen))
		return append([]uint32{uint32(pid)}, rest...)
	}
}

// parentOf reads the parent process id from /proc/PID/stat; false if the
// process is gone.
func parentOf(pid string) (uint32, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, false
	}
	pp, err := symbol.StatField(b, 4)
	return uint32(pp), err == nil
}
