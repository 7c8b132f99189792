package server

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/holter-dev/holter/internal/recorder"
)

// params reads and checks one request's query parameters. The first
// mistake is kept and reported whole ("from: ..."), so a handler reads
// every parameter and then checks err once.
type params struct {
	q   url.Values
	err error
}

// newParams refuses parameters the endpoint does not know: a misspelt
// filter must not silently match everything.
func newParams(q url.Values, known ...string) *params {
	p := &params{q: q}
	var unknown []string
	for k := range q {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		p.fail("unknown parameter %q (this endpoint takes %s)", unknown[0], strings.Join(known, ", "))
	}
	return p
}

func (p *params) fail(format string, a ...any) {
	if p.err == nil {
		p.err = httpError{http.StatusBadRequest, fmt.Sprintf(format, a...)}
	}
}

// str returns the parameter, or "" when absent; it must not be repeated.
func (p *params) str(name string) string {
	vs := p.q[name]
	if len(vs) > 1 {
		p.fail("%s: given %d times, once at most", name, len(vs))
	}
	if len(vs) == 0 {
		return ""
	}
	if len(vs[0]) > 256 {
		p.fail("%s: longer than 256 bytes", name)
		return ""
	}
	return vs[0]
}

// int reads an integer within [lo, hi]; ok is false when absent.
func (p *params) int(name string, lo, hi int64) (v int64, ok bool) {
	s := p.str(name)
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lo || v > hi {
		p.fail("%s: %q is not an integer between %d and %d", name, s, lo, hi)
		return 0, false
	}
	return v, true
}

// timeRange reads a from–to pair of UTC nanoseconds; both are required.
func (p *params) timeRange(fromName, toName string) (from, to int64) {
	from, okFrom := p.int(fromName, 0, math.MaxInt64)
	to, okTo := p.int(toName, 0, math.MaxInt64)
	switch {
	case p.err != nil:
	case !okFrom || !okTo:
		p.fail("%s and %s are required: UTC nanoseconds since 1970", fromName, toName)
	case from >= to:
		p.fail("%s (%d) must be before %s (%d)", fromName, from, toName, to)
	}
	return from, to
}

// vital reads one vital name; required says whether it may be absent.
func (p *params) vital(name string, required bool) string {
	s := p.str(name)
	if s == "" {
		if required {
			p.fail("%s is required: one of %s", name, strings.Join(vitalNames(), ", "))
		}
		return ""
	}
	if !slices.Contains(vitalNames(), s) {
		p.fail("%s: unknown vital %q (one of %s)", name, s, strings.Join(vitalNames(), ", "))
	}
	return s
}

// vitals reads a comma-separated list of vitals; absent means all.
func (p *params) vitals(name string) []string {
	s := p.str(name)
	if s == "" {
		return vitalNames()
	}
	var out []string
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if !slices.Contains(vitalNames(), v) {
			p.fail("%s: unknown vital %q (one of %s)", name, v, strings.Join(vitalNames(), ", "))
			return nil
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// oneOf reads a parameter that takes one of a few words; absent gives def.
func (p *params) oneOf(name, def string, words ...string) string {
	s := p.str(name)
	if s == "" {
		return def
	}
	if !slices.Contains(words, s) {
		p.fail("%s: %q is not one of %s", name, s, strings.Join(words, ", "))
	}
	return s
}

func vitalNames() []string {
	var out []string
	for _, v := range recorder.AllVitals() {
		out = append(out, v.String())
	}
	return out
}

func vitalUnit(name string) string {
	for _, v := range recorder.AllVitals() {
		if v.String() == name {
			return v.Unit()
		}
	}
	return ""
}
