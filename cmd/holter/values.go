package main

import (
	"flag"
	"fmt"
	"math"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/recorder"
	"github.com/holter-dev/holter/internal/store"
)

// Flag values that check themselves. Each kind of value (sizes, rates,
// durations, ages, percentages, counts, lists, addresses) has one parser
// here that every command uses; a flag declares the range it accepts, and
// parse refuses a value outside it, naming the flag and the range, before
// the command loads or creates anything.

// flagValue is a flag value with its parser. Set keeps the text and what it
// means, or why it means nothing: parse reports the error with the flag's
// name, where the flag package would print its usage after it.
type flagValue[T any] struct {
	text  string
	val   T
	err   error
	parse func(string) (T, error)
}

func (v *flagValue[T]) String() string {
	if v == nil {
		return ""
	}
	return v.text
}

func (v *flagValue[T]) Set(s string) error {
	v.text = s
	v.val, v.err = v.parse(s)
	return nil
}

func (v *flagValue[T]) refused() error { return v.err }

// valueFlag defines a flag whose text is read by parse. A default that
// parse refuses is reported like a given value (a test runs every
// command's -h, which parses the defaults).
func valueFlag[T any](fs *flag.FlagSet, name, def, usage string, parse func(string) (T, error)) *T {
	v := &flagValue[T]{parse: parse}
	v.Set(def)
	fs.Var(v, name, usage)
	return &v.val
}

// refusedFlag is the first flag of fs whose value (given or default) its
// parser refused, as a usage error naming it.
func refusedFlag(fs *flag.FlagSet) error {
	var bad error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := f.Value.(interface{ refused() error }); ok && bad == nil {
			if err := v.refused(); err != nil {
				bad = usagef("--%s: %v", f.Name, err)
			}
		}
	})
	return bad
}

// decimalRE is how numbers are written in sizes, ages and percentages:
// no sign, exponent, NaN or Inf.
var decimalRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

func decimal(s string) (float64, bool) {
	if !decimalRE.MatchString(s) {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil && !math.IsInf(v, 0)
}

// closedRange writes [lo, hi].
func closedRange(lo, hi string) string { return "[" + lo + ", " + hi + "]" }

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"PiB", 1 << 50},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"PB", 1e15}, {"B", 1}, {"", 1},
}

// parseSize reads a number of bytes: 1000, 256MB, 64KiB, 1.5GiB.
func parseSize(s string) (int64, bool) {
	for _, u := range sizeUnits {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, ok := decimal(strings.TrimSpace(num))
		if !ok || n*u.mult > 1<<62 {
			return 0, false
		}
		return int64(n * u.mult), true
	}
	return 0, false
}

// formatSize writes n in the largest unit it is a whole number of.
func formatSize(n int64) string {
	best := sizeUnits[len(sizeUnits)-1]
	for _, u := range sizeUnits {
		if n != 0 && math.Mod(float64(n), u.mult) == 0 && u.mult > best.mult {
			best = u
		}
	}
	return fmt.Sprintf("%g%s", float64(n)/best.mult, best.suffix)
}

// sizeIn parses a size in [lo, hi]; zero, when it is given a meaning
// ("no bound"), is accepted as well.
func sizeIn(lo, hi int64, zero string) func(string) (int64, error) {
	return func(s string) (int64, error) {
		n, ok := parseSize(s)
		if ok && (n >= lo && n <= hi || n == 0 && zero != "") {
			return n, nil
		}
		want := "a size in " + closedRange(formatSize(lo), formatSize(hi))
		if zero != "" {
			want = "0 (" + zero + ") or " + want
		}
		return 0, fmt.Errorf("%q is not %s, like 256MB or 10GiB", s, want)
	}
}

// sizeOrOff is sizeIn, with "off" (or 0) for no bound.
func sizeOrOff(lo, hi int64) func(string) (int64, error) {
	in := sizeIn(lo, hi, "off")
	return func(s string) (int64, error) {
		if s == "off" {
			return 0, nil
		}
		return in(s)
	}
}

// rateIn parses bytes per second in [lo, hi]: a size, optionally with /s.
func rateIn(lo, hi int64) func(string) (int64, error) {
	return func(s string) (int64, error) {
		n, ok := parseSize(strings.TrimSuffix(s, "/s"))
		if ok && n >= lo && n <= hi {
			return n, nil
		}
		return 0, fmt.Errorf("%q is not a rate in %s per second, like 2MB", s, closedRange(formatSize(lo), formatSize(hi)))
	}
}

// formatDuration writes d without the zero minutes and seconds of
// time.Duration's String (24h, not 24h0m0s).
func formatDuration(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// durationIn parses a Go duration (1ms, 1m30s) in [lo, hi], lo > 0; 0 is
// accepted as well when zero says what it means.
func durationIn(lo, hi time.Duration, zero string) func(string) (time.Duration, error) {
	return func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(s)
		if err == nil && (d >= lo && d <= hi || d == 0 && zero != "") {
			return d, nil
		}
		want := "a duration in " + closedRange(formatDuration(lo), formatDuration(hi))
		if zero != "" {
			want = "0 (" + zero + ") or " + want
		}
		return 0, fmt.Errorf("%q is not %s, like 1m30s", s, want)
	}
}

// maxAge bounds ages: a century, well within time.Duration's 292 years.
const maxAge = 36500 * 24 * time.Hour

// ageIn parses how long to keep something: a duration, or days (7d, 1.5d);
// 0 means forever.
func ageIn(hi time.Duration) func(string) (time.Duration, error) {
	return func(s string) (time.Duration, error) {
		var d time.Duration
		ok := false
		if s == "0" {
			return 0, nil
		} else if days, isDays := strings.CutSuffix(s, "d"); isDays {
			n, valid := decimal(days)
			if ok = valid && n*float64(24*time.Hour) <= float64(hi); ok {
				d = time.Duration(n * float64(24*time.Hour))
			}
		} else if v, err := time.ParseDuration(s); err == nil && v >= 0 && v <= hi {
			d, ok = v, true
		}
		if !ok {
			return 0, fmt.Errorf("%q is not an age in [0, %dd], like 7d or 36h (0 keeps everything)", s, hi/(24*time.Hour))
		}
		return d, nil
	}
}

// budgetOff is what a percentage flag that may be switched off reads as
// when it is.
const budgetOff = -1

// percentOrOff parses a share of the machine, "1%" or "0.5%" in (0, 100],
// as a fraction; "off" reads as budgetOff.
func percentOrOff(s string) (float64, error) {
	if s == "off" {
		return budgetOff, nil
	}
	num, ok := strings.CutSuffix(s, "%")
	v, valid := decimal(num)
	if !ok || !valid || v <= 0 || v > 100 {
		return 0, fmt.Errorf("%q is not a percentage in (0, 100], like 1%% or 0.5%% (or off)", s)
	}
	return v / 100, nil
}

// countIn parses a whole number in [lo, hi].
func countIn(lo, hi int) func(string) (int, error) {
	return func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			return 0, fmt.Errorf("%q is not a whole number in %s", s, closedRange(strconv.Itoa(lo), strconv.Itoa(hi)))
		}
		return n, nil
	}
}

// powerOfTwoIn parses a power of 2 in [lo, hi]; 0 means the default.
func powerOfTwoIn(lo, hi uint) func(string) (uint, error) {
	return func(s string) (uint, error) {
		n, err := strconv.ParseUint(s, 10, 32)
		if err == nil && (n == 0 || n >= uint64(lo) && n <= uint64(hi) && n&(n-1) == 0) {
			return uint(n), nil
		}
		return 0, fmt.Errorf("%q is not a power of 2 in [%d, %d] (0: the default)", s, lo, hi)
	}
}

// probability parses a number in (0, 1].
func probability(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0 && v <= 1) {
		return 0, fmt.Errorf("%q is not a probability in (0, 1]", s)
	}
	return v, nil
}

// oneOf parses one of names.
func oneOf(names ...string) func(string) (string, error) {
	return func(s string) (string, error) {
		for _, n := range names {
			if s == n {
				return s, nil
			}
		}
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = strconv.Quote(n)
		}
		return "", fmt.Errorf("%q is not one of %s", s, strings.Join(quoted, ", "))
	}
}

// vitalList parses a list of vitals, "all" or NAME[,NAME…]; an empty list
// is refused unless empty says what it means.
func vitalList(empty string) func(string) ([]recorder.Vital, error) {
	return func(s string) ([]recorder.Vital, error) {
		if strings.TrimSpace(s) == "" {
			if empty != "" {
				return nil, nil
			}
			return nil, fmt.Errorf("the list of vitals is empty: give all or some of %s", strings.Join(vitalNames(), ", "))
		}
		return recorder.ParseVitals(s)
	}
}

// commList parses program names as in /proc/PID/comm: the kernel keeps 15
// bytes of a name, so a longer one never matches.
func commList(s string) ([]string, error) {
	names := splitList(s)
	if strings.TrimSpace(s) != "" && len(names) == 0 {
		return nil, fmt.Errorf("%q names no program", s)
	}
	for _, n := range names {
		if len(n) > 15 {
			return nil, fmt.Errorf("%q is longer than the 15 bytes the kernel keeps of a program name", n)
		}
	}
	return names, nil
}

// pathList parses absolute paths.
func pathList(s string) ([]string, error) {
	paths := splitList(s)
	if strings.TrimSpace(s) != "" && len(paths) == 0 {
		return nil, fmt.Errorf("%q names no path", s)
	}
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%q is not an absolute path", p)
		}
	}
	return paths, nil
}

// addressOr parses HOST:PORT, or one of the words that switch it off.
func addressOr(words ...string) func(string) (string, error) {
	return func(s string) (string, error) {
		for _, w := range words {
			if s == w {
				return s, nil
			}
		}
		if err := checkAddress(s); err != nil {
			want := "an address HOST:PORT"
			for _, w := range words {
				want += fmt.Sprintf(" or %q", w)
			}
			return "", fmt.Errorf("%q is not %s: %v", s, want, err)
		}
		return s, nil
	}
}

func checkAddress(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (port != "0" && n == 0) {
		return fmt.Errorf("port %q is not a number in [0, 65535]", port)
	}
	return nil
}

// addressList parses HOST:PORT[,HOST:PORT…].
func addressList(s string) ([]string, error) {
	var out []string
	for _, a := range splitList(s) {
		if err := checkAddress(a); err != nil {
			return nil, fmt.Errorf("%q is not an address HOST:PORT: %v", a, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// nonEmpty parses text that must be given, such as a directory.
func nonEmpty(s string) (string, error) {
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("%q is empty", s)
	}
	return s, nil
}

// regexWithGroup parses a regular expression with a group to capture.
func regexWithGroup(s string) (*regexp.Regexp, error) {
	if s == "" {
		return nil, nil
	}
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, err
	}
	if re.NumSubexp() < 1 {
		return nil, fmt.Errorf("%q has no group to capture the figure", s)
	}
	return re, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// apiAddress parses where a recorder's API is: HOST:PORT or an http(s)
// URL; empty means the recorder of --data.
func apiAddress(s string) (string, error) {
	if s == "" || !strings.Contains(s, "://") {
		return addressOr("")(s)
	}
	return httpURL(s)
}

// httpURL parses an http or https URL with a host; empty means none.
func httpURL(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not a URL like http://HOST:PORT", s)
	}
	return s, nil
}

var identifierRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// identifier parses a database name: letters, digits and _.
func identifier(s string) (string, error) {
	if !identifierRE.MatchString(s) {
		return "", fmt.Errorf("%q is not a name of letters, digits and _ (not starting with a digit)", s)
	}
	return s, nil
}

// traceName parses the name a live query's results are saved under; empty
// means they are not.
func traceName(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if _, err := store.TraceTable(s); err != nil {
		return "", err
	}
	return s, nil
}

// maxCount bounds counts that have no natural limit (--top, --history).
const maxCount = 1_000_000
