package tracequery

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// Ready is a named query of the library (holter trace @NAME), like
// SystemTap's tapsets and bpftrace's tools.
type Ready struct {
	Name, Desc, Query string
}

// Library is the ready queries, by name.
var Library = []Ready{
	{"syscalls-by-process", "system calls per process",
		"SELECT comm, pid, count() AS syscalls FROM syscall.any GROUP BY comm, pid ORDER BY syscalls DESC LIMIT 20"},
	{"runqlat", "run-queue latency histogram (wakeup to running), ns",
		"SELECT hist(latency) AS runq_latency_ns, p50(latency) AS p50_ns, p99(latency) AS p99_ns FROM sched.runq_latency"},
	{"biolatency", "block I/O latency histogram (issue to completion), ns",
		"SELECT hist(latency) AS io_latency_ns, count() AS ios, sum(bytes) AS bytes FROM block.io_latency"},
	{"files-opened", "files opened, by process and path",
		"SELECT comm, str(filename) AS file, count() AS opens, sum(ret < 0) AS failed FROM syscall.openat GROUP BY comm, file ORDER BY opens DESC LIMIT 30"},
	{"tcp-connects", "outgoing TCP connections (SYN sent), by process and destination port",
		"SELECT comm, pid, dport, count() AS connects FROM tracepoint.sock.inet_sock_set_state WHERE newstate = 2 AND protocol = 6 GROUP BY comm, pid, dport ORDER BY connects DESC LIMIT 20"},
	{"page-faults", "user page faults by process",
		"SELECT comm, pid, count() AS faults FROM tracepoint.exceptions.page_fault_user GROUP BY comm, pid ORDER BY faults DESC LIMIT 20"},
	{"lock-contention", "kernel lock contention by site (slow paths), ns waited",
		"SELECT kstack AS site, count() AS contentions, sum(latency) AS wait_ns, max(latency) AS max_wait_ns FROM lock.contention GROUP BY site ORDER BY wait_ns DESC LIMIT 10"},
	{"oncpu-profile", "on-CPU profile at 99 Hz: hottest stacks",
		"SELECT comm, ustack, kstack, count() AS samples FROM profile.hz_99 GROUP BY comm, ustack, kstack ORDER BY samples DESC LIMIT 20"},
	{"read-sizes", "read(2) sizes returned, by process",
		"SELECT comm, hist(ret) AS bytes FROM syscall.read WHERE ret >= 0 GROUP BY comm"},
}

// Resolve returns a query's text: itself, or the library's for "@NAME".
func Resolve(q string) (string, bool) {
	q = strings.TrimSpace(q)
	name, ok := strings.CutPrefix(q, "@")
	if !ok {
		return q, true
	}
	for _, r := range Library {
		if r.Name == name {
			return r.Query, true
		}
	}
	return "", false
}

// LibraryNames lists the ready queries' names, sorted.
func LibraryNames() []string {
	var n []string
	for _, r := range Library {
		n = append(n, "@"+r.Name)
	}
	sort.Strings(n)
	return n
}

// RunOptions says how long and how often.
type RunOptions struct {
	Interval time.Duration // default 1s; with Window, the slide
	Duration time.Duration // 0: until ctx ends
	// Window, if set, makes each answer cover the last Window (a whole
	// number of Intervals), sliding by Interval: the intervals' partials
	// are kept and merged as across hosts (Fay's moving windows).
	Window time.Duration
	// Attached, if set, is called once the probes are attached.
	Attached func()
	// Row, if set, gets each row of a per-event plan (Plan.PerEvent) as
	// its event arrives; the intervals then carry only their counters. Run
	// ends once LIMIT rows have gone, or Row fails.
	Row func(row []any) error
	// Partials hands back each interval's partial rows instead of the
	// query's answer, for a coordinator to merge across hosts (Merger).
	Partials bool
	// Recorded answers the part of a WITH query that joins recorded
	// tables: the recording's store (join.go); nil when none is open.
	Recorded store.Querier
	// Phase, if set, is called as each step of the start is done (see
	// StartPhases), for measuring where the start's time goes.
	Phase func(name string)
}

// Run starts the plan's probes, flushes every interval and calls each with
// the interval's answer, until ctx ends or Duration has passed; the last,
// partial interval is flushed too, and given to each unless nothing
// reached it (but for a run's only interval).
func Run(ctx context.Context, p *Plan, ro RunOptions, each func(*Interval) error) error {
	if ro.Interval <= 0 {
		ro.Interval = time.Second
	}
	if ro.Window > 0 {
		if ro.Partials {
			return errors.New("a sliding window is merged where the query runs: not with partials")
		}
		if ro.Window < ro.Interval || ro.Window%ro.Interval != 0 {
			return fmt.Errorf("the window (%v) must be a whole number of slides (%v)", ro.Window, ro.Interval)
		}
	}
	if p.Query.With != nil {
		if ro.Partials {
			return ErrJoinAcrossHosts
		}
		if err := p.checkRecorded(ctx, ro.Recorded); err != nil {
			return err
		}
		inner := each
		each = func(iv *Interval) error {
			res, err := p.joinRecorded(context.WithoutCancel(ctx), ro.Recorded, iv.Result)
			if err != nil {
				return err
			}
			iv.Result = res
			return inner(iv)
		}
	}
	var onRow func([]any) error
	if p.PerEvent && ro.Row != nil && !ro.Partials && ro.Window == 0 {
		onRow = ro.Row
	}
	s, err := startPhased(p, ro.Phase, onRow)
	if err != nil {
		return err
	}
	defer s.Close()
	s.partials = ro.Partials || ro.Window > 0
	flush := s.Flush
	if ro.Window > 0 {
		flush = windowed(s, int(ro.Window/ro.Interval))
		defer s.duck.close()
	}
	if ro.Attached != nil {
		ro.Attached()
	}
	tick := time.NewTicker(ro.Interval)
	defer tick.Stop()
	var deadline <-chan time.Time
	end := time.Now().Add(ro.Duration)
	if ro.Duration > 0 {
		t := time.NewTimer(ro.Duration)
		defer t.Stop()
		deadline = t.C
	}
	delivered := 0
	for {
		partial := true
		select {
		case <-tick.C:
			if ro.Duration > 0 && time.Until(end) < ro.Interval/4 {
				// The run ends with this interval (a --for that is a
				// whole number of intervals), not with a sliver after it.
				partial = false
				break
			}
			iv, err := flush(context.WithoutCancel(ctx))
			if err != nil {
				return err
			}
			if err := each(iv); err != nil {
				return err
			}
			delivered++
			if err := s.RowErr(); err != nil {
				return err
			}
			continue
		case <-deadline:
			// A --for of whole intervals ends with a whole one, also
			// when its tick and the deadline were ready together and
			// select took the deadline (a loaded machine).
			partial = ro.Duration%ro.Interval != 0
		case <-ctx.Done():
		case <-s.Done():
		}
		s.Detach()
		iv, err := flush(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
		if err := s.RowErr(); err != nil {
			return err
		}
		if partial && !iv.Events && len(iv.Counters) == 0 && delivered > 0 {
			return nil // an empty trailing sliver of an interval
		}
		return each(iv)
	}
}

// windowed makes a session's flush answer over its last n intervals: it
// keeps each interval's partials and merges the window's.
func windowed(s *Session, n int) func(context.Context) (*Interval, error) {
	m := &Merger{s: &Session{plan: s.plan, kernel: s.kernel, users: s.users}}
	var parts []*store.Result
	var starts []time.Time
	return func(ctx context.Context) (*Interval, error) {
		iv, err := s.Flush(ctx)
		if err != nil {
			return nil, err
		}
		parts, starts = append(parts, iv.Result), append(starts, iv.Start)
		if len(parts) > n {
			parts, starts = parts[1:], starts[1:]
		}
		res, err := m.Merge(ctx, parts)
		if err != nil {
			return nil, err
		}
		iv.Result, iv.Start = res, starts[0]
		return iv, nil
	}
}
