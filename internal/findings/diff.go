package findings

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/diagnose"
)

// ErrBadRange marks a range the user gave wrongly (unparsable, empty, an
// unknown run), as opposed to a failing store: the CLI reports it as a
// usage error and the API as a 400. ErrNotRecorded marks a well-formed
// range the host recorded nothing in.
var (
	ErrBadRange    = errors.New("bad range")
	ErrNotRecorded = errors.New("not recorded")
)

type rangeError struct {
	msg  string
	kind error
}

func (e rangeError) Error() string        { return e.msg }
func (e rangeError) Is(target error) bool { return target == e.kind }

func badRange(format string, a ...any) error {
	return rangeError{fmt.Sprintf(format, a...), ErrBadRange}
}

// ParseRange reads START/END — each RFC 3339, 2006-01-02T15:04[:05] in UTC,
// UTC nanoseconds since 1970, a duration relative to now like -15m, or
// "now" — or the id of a run in the catalog, whose range is of the run's
// processes (Range.Run) when it recorded them.
func ParseRange(ctx context.Context, q Querier, s string, now time.Time) (Range, error) {
	a, b, ok := strings.Cut(s, "/")
	if !ok {
		if s == "" {
			return Range{}, badRange("empty range: give START/END (e.g. -15m/-5m) or a run id")
		}
		res, err := q.Query(ctx, `SELECT start_ns, end_ns, len(pids) > 0 FROM runs WHERE id = `+sqlString(s))
		if err != nil {
			return Range{}, err
		}
		if len(res.Rows) == 0 {
			return Range{}, badRange("unknown range %q: not START/END and no run has that id", s)
		}
		r := Range{StartNs: toInt(res.Rows[0][0]), EndNs: toInt(res.Rows[0][1])}
		if res.Rows[0][2] == true {
			r.Run = s
		}
		return r, nil
	}
	start, err := ParseTime(a, now)
	if err != nil {
		return Range{}, badRange("range %q: start: %v", s, err)
	}
	end, err := ParseTime(b, now)
	if err != nil {
		return Range{}, badRange("range %q: end: %v", s, err)
	}
	if !end.After(start) {
		return Range{}, badRange("range %q is empty: it ends before it starts", s)
	}
	return Range{StartNs: start.UnixNano(), EndNs: end.UnixNano()}, nil
}

// ParseTime reads one end of a range (see ParseRange).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if s == "now" || s == "" {
		return now, nil
	}
	if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		d, err := time.ParseDuration(s)
		if err != nil {
			return time.Time{}, fmt.Errorf("%q is not a duration like -15m", s)
		}
		return now.Add(d), nil
	}
	// Nanoseconds since 1970, as the API's from/to: more digits than any
	// calendar date has.
	if len(s) > 10 && strings.Trim(s, "0123456789") == "" {
		ns, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("%q is too large for nanoseconds since 1970", s)
		}
		return time.Unix(0, ns), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time like 2026-11-22T10:00, an RFC 3339 time, nanoseconds since 1970, -15m or now", s)
}

// Diff is a reference-driven ranking of a target range against a reference
// range: what `holter diff` prints and GET /api/diff answers.
type Diff struct {
	Host      string            `json:"host"`
	Target    Range             `json:"target"`
	Reference Range             `json:"reference"`
	Ranked    []diagnose.Ranked `json:"ranked"`
	Skipped   []SkippedMetric   `json:"skipped"`
}

// SkippedMetric is a metric left out of a Diff, and why.
type SkippedMetric struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// DiffOptions are the inputs of RankRanges besides the ranges.
type DiffOptions struct {
	// Host is the host whose recording is compared; "" is the one that
	// recorded last.
	Host string
	// MinSamples is the fewest values a metric needs on each side.
	MinSamples int
	// Now is where relative times count from; zero is time.Now().
	Now time.Time
}

// RankRanges parses target and reference (see ParseRange), checks that the
// host recorded epochs in both, and ranks the low-level metrics between
// them (CompareRanges). Errors of the user's input wrap ErrBadRange or
// ErrNotRecorded.
func RankRanges(ctx context.Context, q Querier, target, reference string, o DiffOptions) (*Diff, error) {
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	t, err := ParseRange(ctx, q, target, now)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	r, err := ParseRange(ctx, q, reference, now)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	host := o.Host
	if host == "" {
		res, err := q.Query(ctx, `SELECT host FROM epochs ORDER BY end_ns DESC LIMIT 1`)
		if err != nil {
			return nil, err
		}
		if len(res.Rows) == 0 {
			return nil, rangeError{"nothing recorded yet", ErrNotRecorded}
		}
		host = fmt.Sprint(res.Rows[0][0])
	}
	for _, side := range []struct {
		name string
		r    Range
	}{{"target", t}, {"reference", r}} {
		res, err := q.Query(ctx, fmt.Sprintf(`SELECT count(*) FROM epochs WHERE host = %s AND end_ns > %d AND start_ns < %d`,
			sqlString(host), side.r.StartNs, side.r.EndNs))
		if err != nil {
			return nil, err
		}
		if toInt(res.Rows[0][0]) == 0 {
			return nil, rangeError{fmt.Sprintf("%s range %s to %s: no epochs recorded on host %s",
				side.name, fmtNs(side.r.StartNs), fmtNs(side.r.EndNs), host), ErrNotRecorded}
		}
	}
	ranked, skipped, err := CompareRanges(ctx, q, host, t, r, &diagnose.RankOptions{MinSamples: o.MinSamples})
	if err != nil {
		return nil, err
	}
	out := &Diff{Host: host, Target: t, Reference: r, Ranked: ranked, Skipped: []SkippedMetric{}}
	if out.Ranked == nil {
		out.Ranked = []diagnose.Ranked{}
	}
	for _, s := range skipped {
		out.Skipped = append(out.Skipped, SkippedMetric{s.Name, s.Err.Error()})
	}
	return out, nil
}

func fmtNs(ns int64) string { return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05") }
