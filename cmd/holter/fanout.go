package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/tracequery"
)

// A live query across hosts (Fay's probe → machine → cluster tiers): every
// agent runs the kernel part and streams its partial rows per interval;
// the coordinator merges, each of its own intervals, what arrived from
// every host since the last one, and runs the user-space part once. A host
// whose stream broke is reported failed from then on, one with nothing new
// slow; the others carry on.

// readHosts adds to --hosts (parsed already) those of --hosts-file (one a
// line, # comments). A host listed twice is one agent: merging its
// partials twice would count its events twice.
func readHosts(list []string, file string) ([]string, error) {
	var hosts []string
	seen := map[string]bool{}
	add := func(h string) {
		if h = strings.TrimSpace(h); h != "" && !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	for _, h := range list {
		add(h)
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--hosts-file: %w", err)
		}
		for i, l := range strings.Split(string(b), "\n") {
			if l, _, _ = strings.Cut(l, "#"); strings.TrimSpace(l) != "" {
				h := strings.TrimSpace(l)
				if err := checkAddress(h); err != nil {
					return nil, fmt.Errorf("--hosts-file %s:%d: %q is not an address HOST:PORT: %v", file, i+1, h, err)
				}
				add(h)
			}
		}
	}
	return hosts, nil
}

type hostStream struct {
	name    string
	mu      sync.Mutex
	pending []*store.Result
	// lag is the longest time, among the pending partials, from the end
	// of the agent's interval to its arrival here.
	lag  time.Duration
	err  error
	done bool
}

func (h *hostStream) take() (parts []*store.Result, lag time.Duration, err error, done bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	parts, h.pending = h.pending, nil
	lag, h.lag = h.lag, 0
	return parts, lag, h.err, h.done
}

func (h *hostStream) finish(err error) {
	h.mu.Lock()
	h.err, h.done = err, true
	h.mu.Unlock()
}

func traceFanOut(ctx context.Context, hosts []string, token string, plan *tracequery.Plan, req server.TraceRequest,
	interval time.Duration, out *traceOutput) error {
	merger := tracequery.NewMerger(plan)
	defer merger.Close()
	req.Partials = true
	streams := make([]*hostStream, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		s := &hostStream{name: h}
		streams[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.finish(streamPartials(ctx, newClient(h, token), req, s))
		}()
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	// The coordinator's intervals lag the agents' by half an interval, so
	// each agent's flush has arrived when the merge happens.
	time.Sleep(interval / 2)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	start := time.Now()
	for {
		final := false
		select {
		case <-tick.C:
		case <-allDone:
			final = true
		case <-ctx.Done():
			final = true
		}
		end := time.Now()
		var parts []*store.Result
		report := map[string]string{}
		contributed := 0
		var lag time.Duration
		for _, s := range streams {
			p, l, err, done := s.take()
			parts = append(parts, p...)
			lag = max(lag, l)
			switch {
			case len(p) > 0:
				report[s.name] = "ok"
				contributed++
			case err != nil:
				report[s.name] = "failed: " + err.Error()
			case done:
				report[s.name] = "finished"
			default:
				report[s.name] = "slow: no interval arrived"
			}
		}
		if contributed > 0 || !final {
			began := time.Now()
			res, err := merger.Merge(context.WithoutCancel(ctx), parts)
			if err != nil {
				return err
			}
			out.hosts = report
			out.fanout = &fanoutTimes{ArrivalLagMs: lag.Seconds() * 1000, MergeMs: time.Since(began).Seconds() * 1000}
			if err := out.write(start, end, res, nil); err != nil {
				return err
			}
		}
		start = end
		if final {
			var failed []string
			for _, s := range streams {
				if _, _, err, _ := s.take(); err != nil {
					failed = append(failed, s.name+": "+err.Error())
				}
			}
			if len(failed) == len(streams) {
				return fmt.Errorf("every host failed (%s)", strings.Join(failed, ", "))
			}
			return nil
		}
	}
}

// streamPartials posts the query to one agent and queues its intervals.
func streamPartials(ctx context.Context, c *client, req server.TraceRequest, s *hostStream) error {
	err := c.trace(ctx, req, func(line *server.TraceLine) error {
		if line.Error != "" {
			return apiError{line.Error}
		}
		if line.Result != nil {
			s.mu.Lock()
			s.pending = append(s.pending, line.Result)
			if line.End != nil {
				s.lag = max(s.lag, time.Since(*line.End))
			}
			s.mu.Unlock()
		}
		return nil
	})
	if err == nil && ctx.Err() == nil && req.For == "" {
		return fmt.Errorf("stream ended early")
	}
	return err
}

// fanoutTimes is what an interval across hosts cost the coordinator: the
// longest wait, among the partials merged, from an agent's interval end
// to the partial's arrival, and the merge with the user-space part.
type fanoutTimes struct {
	ArrivalLagMs float64 `json:"arrival_lag_ms"`
	MergeMs      float64 `json:"merge_ms"`
}

// hostsLine is the per-interval report of which hosts contributed.
func hostsLine(report map[string]string) string {
	names := make([]string, 0, len(report))
	for h := range report {
		names = append(names, h)
	}
	sort.Strings(names)
	var parts []string
	for _, h := range names {
		parts = append(parts, h+" "+report[h])
	}
	return "hosts: " + strings.Join(parts, "; ")
}
