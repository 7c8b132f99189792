package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestFlagValues checks each kind of value's parser on what it accepts and
// what it refuses.
func TestFlagValues(t *testing.T) {
	size := sizeIn(1<<20, 1<<50, "no bound")
	for in, want := range map[string]int64{"0": 0, "500MB": 500e6, "10GiB": 10 << 30, "1MiB": 1 << 20, "1.5GiB": 3 << 29, "4096KiB": 4 << 20, "2000000": 2e6, "1PiB": 1 << 50} {
		if got, err := size(in); err != nil || got != want {
			t.Errorf("size %q = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"lots", "-1GB", "5XB", "GB", "NaN", "Inf", "1e3", "0x10", "1KB", "2PiB", "", " ", "1e300", ".5GB"} {
		if got, err := size(in); err == nil {
			t.Errorf("size %q accepted as %d", in, got)
		} else if !strings.Contains(err.Error(), "0 (no bound) or a size in [1MiB, 1PiB]") {
			t.Errorf("size %q: %v", in, err)
		}
	}
	age := ageIn(maxAge)
	for in, want := range map[string]time.Duration{"0": 0, "7d": 7 * 24 * time.Hour, "1.5d": 36 * time.Hour, "36h": 36 * time.Hour, "0s": 0, "36500d": maxAge} {
		if got, err := age(in); err != nil || got != want {
			t.Errorf("age %q = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"NaNd", "1e300d", "-1d", "-5h", "36501d", "7x", "", "d", "Infd", "+1d"} {
		if got, err := age(in); err == nil {
			t.Errorf("age %q accepted as %v", in, got)
		}
	}
	for in, want := range map[string]float64{"1%": 0.01, "0.5%": 0.005, "100%": 1, "off": budgetOff} {
		if got, err := percentOrOff(in); err != nil || got != want {
			t.Errorf("percent %q = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"NaN%", "0%", "101%", "-1%", "1", "Inf%", "1e1%", "%", ""} {
		if got, err := percentOrOff(in); err == nil {
			t.Errorf("percent %q accepted as %v", in, got)
		} else if !strings.Contains(err.Error(), "(0, 100]") {
			t.Errorf("percent %q: %v", in, err)
		}
	}
	dur := durationIn(time.Microsecond, time.Minute, "")
	for _, in := range []string{"-1s", "0", "0s", "2m", "NaN", "1ns", ""} {
		if got, err := dur(in); err == nil {
			t.Errorf("duration %q accepted as %v", in, got)
		} else if !strings.Contains(err.Error(), "a duration in [1µs, 1m]") {
			t.Errorf("duration %q: %v", in, err)
		}
	}
	if got, err := durationIn(time.Second, maxAge, "until Ctrl-C")("0"); err != nil || got != 0 {
		t.Errorf("duration 0 with a meaning = %v, %v", got, err)
	}
	rate := rateIn(1<<10, 1<<40)
	for in, want := range map[string]int64{"2MB": 2e6, "2MB/s": 2e6, "1KiB": 1024} {
		if got, err := rate(in); err != nil || got != want {
			t.Errorf("rate %q = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "NaN", "-1MB", "1B", "2TiB", "/s"} {
		if got, err := rate(in); err == nil {
			t.Errorf("rate %q accepted as %v", in, got)
		}
	}
	count := countIn(1, 10000)
	for _, in := range []string{"0", "-5", "10001", "NaN", "1.5", "", "1e3"} {
		if got, err := count(in); err == nil {
			t.Errorf("count %q accepted as %v", in, got)
		}
	}
	pow := powerOfTwoIn(2, 1<<16)
	for in, want := range map[string]uint{"0": 0, "2": 2, "65536": 65536} {
		if got, err := pow(in); err != nil || got != want {
			t.Errorf("power of 2 %q = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"1", "3", "-1", "131072", "NaN", "4294967296"} {
		if got, err := pow(in); err == nil {
			t.Errorf("power of 2 %q accepted as %v", in, got)
		}
	}
	for _, in := range []string{"0", "2", "NaN", "-0.5", "Inf", ""} {
		if got, err := probability(in); err == nil {
			t.Errorf("probability %q accepted as %v", in, got)
		}
	}
	for _, in := range []string{"", ",", " , "} {
		if _, err := vitalList("")(in); err == nil {
			t.Errorf("vitals %q accepted", in)
		}
	}
	if vs, err := vitalList("none")(""); err != nil || len(vs) != 0 {
		t.Errorf("empty vitals where empty means none = %v, %v", vs, err)
	}
	for _, in := range []string{"x", "h:99999", "h:-1", "h:http", ":"} {
		if got, err := addressOr("off")(in); err == nil && in != ":" {
			t.Errorf("address %q accepted as %v", in, got)
		}
	}
	for _, in := range []string{"127.0.0.1:0", "localhost:4317", "[::1]:80", "off"} {
		if _, err := addressOr("off")(in); err != nil {
			t.Errorf("address %q: %v", in, err)
		}
	}
}

// flagCase is how the table of TestEveryFlagValidated tries one flag: bad
// values with what the refusal must say, or why the flag takes any text.
type flagCase struct {
	bad  map[string]string // value → what the refusal says (its range)
	args []string          // more arguments the command needs to get to the flag
	any  string            // why any value is accepted (free text, checked at use)
}

// booleanFlag is the case of every boolean flag: the flag package parses it.
var booleanFlag = flagCase{bad: map[string]string{"maybe": "invalid boolean value", "2": "invalid boolean value"}}

// flagCases are keyed by COMMAND/FLAG, or by FLAG for every command that
// has it.
var flagCases = map[string]flagCase{
	"data":            {bad: map[string]string{"": "is empty", " ": "is empty"}},
	"api":             {bad: map[string]string{"nohost": `is not an address HOST:PORT or ""`, "h:99999": "is not a number in [0, 65535]", "ftp://h:1": "is not a URL like http://HOST:PORT"}},
	"record/api":      {bad: map[string]string{"nohost": `is not an address HOST:PORT or ""`, "h:http": "is not a number in [0, 65535]"}},
	"token":           {bad: map[string]string{"": "empty token", " ": "empty token"}},
	"token-file":      {bad: map[string]string{"/nonexistent/token": "no such file or directory"}},
	"read":            booleanFlag,
	"ui/api":          {bad: map[string]string{"": "give the address to serve the UI on", "nohost": `is not an address HOST:PORT or ""`, "h:99999": "is not a number in [0, 65535]"}},
	"api-host":        {bad: map[string]string{"http://x": "is not a host name (no port, no scheme)", "x:80": "is not a host name", "": "is not a host name"}},
	"max-traces":      {bad: map[string]string{"0": "a whole number in [1, 1024]", "-1": "in [1, 1024]", "NaN": "a whole number"}},
	"trace-memory":    {bad: map[string]string{"0": "a size in [1MiB, 1TiB]", "NaN": "a size", "-1MiB": "a size"}},
	"query-timeout":   {bad: map[string]string{"0": "a duration in [100ms, 24h]", "-1s": "a duration", "NaN": "a duration", "25h": "a duration in [100ms, 24h]"}},
	"admin-group":     {bad: map[string]string{"no-such-group-x": "no-such-group-x"}},
	"reader-group":    {bad: map[string]string{"no-such-group-x": "no-such-group-x"}},
	"json":            booleanFlag,
	"host":            {any: "a host name as rows carry it; empty means the hostname or the latest recorded"},
	"source":          {bad: map[string]string{"ch:8123": "is not a URL like http://HOST:PORT", "ftp://ch": "is not a URL like http://HOST:PORT", "http://": "is not a URL like"}},
	"source-db":       {bad: map[string]string{"": "is not a name of letters, digits and _", "a-b": "is not a name of letters", "1x": "is not a name of letters"}},
	"source-user":     {any: "a ClickHouse user name"},
	"source-password": {any: "a password"},

	"record/epoch":        {bad: map[string]string{"0s": "a duration in [1s, 24h]", "500ms": "a duration in [1s, 24h]", "-1s": "a duration in [1s, 24h]", "25h": "a duration in [1s, 24h]", "NaN": "a duration in [1s, 24h]"}},
	"vitals":              {bad: map[string]string{"": "the list of vitals is empty", "cpu,heart": `unknown vital "heart"`, ",": `unknown vital ""`}},
	"online":              booleanFlag,
	"budget":              {bad: map[string]string{"NaN%": `"NaN%" is not a percentage in (0, 100]`, "0%": "in (0, 100]", "101%": "in (0, 100]", "-1%": "in (0, 100]", "1": "in (0, 100]", "Inf%": "in (0, 100]", "": "in (0, 100]"}},
	"record/threshold":    {bad: map[string]string{"3": "is not a power of 2 in [2, 65536]", "-1": "is not a power of 2", "131072": "is not a power of 2", "NaN": "is not a power of 2"}},
	"cpu-hz":              {bad: map[string]string{"0": "a whole number in [1, 10000]", "-5": "in [1, 10000]", "10001": "in [1, 10000]", "NaN": "in [1, 10000]", "1.5": "in [1, 10000]"}},
	"sched-min":           {bad: map[string]string{"-1s": "a duration in [1µs, 1m]", "0": "in [1µs, 1m]", "2m": "in [1µs, 1m]", "NaN": "in [1µs, 1m]"}},
	"blck-min":            {bad: map[string]string{"-1s": "a duration in [1µs, 1m]", "0": "in [1µs, 1m]", "2m": "in [1µs, 1m]"}},
	"cpuprofile":          {any: "a file to create; created once the recorder starts"},
	"retain-raw":          {bad: map[string]string{"NaNd": "an age in [0, 36500d]", "1e300d": "an age in [0, 36500d]", "-1d": "an age", "-5h": "an age", "36501d": "an age", "a week": "an age"}},
	"retain-rollups":      {bad: map[string]string{"NaNd": "an age in [0, 36500d]", "1e300d": "an age", "Infd": "an age"}},
	"retain-spans":        {bad: map[string]string{"NaNd": "an age in [0, 36500d]", "-1h": "an age"}},
	"retain-size":         {bad: map[string]string{"NaN": "0 (no bound) or a size in [1MiB, 1PiB]", "-1GB": "or a size in [1MiB, 1PiB]", "1e300": "a size", "5XB": "a size", "1KB": "a size in [1MiB, 1PiB]"}},
	"otlp-grpc":           {bad: map[string]string{"": `is not an address HOST:PORT or "off"`, "localhost": `or "off"`}},
	"otlp-http":           {bad: map[string]string{"": `is not an address HOST:PORT or "off"`, "x:-1": "is not a number in [0, 65535]"}},
	"otlp-max-bytes":      {bad: map[string]string{"-1": "a size in [1KiB, 1GiB]", "0": "a size in [1KiB, 1GiB]", "NaN": "a size", "2GiB": "a size in [1KiB, 1GiB]"}},
	"account":             booleanFlag,
	"account-follow":      booleanFlag,
	"account-comm":        {bad: map[string]string{",": "names no program", "averyveryverylongname": "longer than the 15 bytes"}},
	"account-exe":         {bad: map[string]string{"bin/api": "is not an absolute path", ",": "names no path"}},
	"span-period":         {bad: map[string]string{"0": "a duration in [1s, 24h]", "-1m": "a duration in [1s, 24h]", "NaN": "a duration"}},
	"export":              {bad: map[string]string{"ch:8123": "is not a URL like http://HOST:PORT", "http://": "is not a URL"}},
	"export-db":           {bad: map[string]string{"": "is not a name of letters, digits and _", "a-b": "is not a name"}},
	"export-user":         {any: "a ClickHouse user name"},
	"export-password":     {any: "a password"},
	"export-spool":        {bad: map[string]string{"NaN": "a size in [1MiB, 1PiB]", "-1": "a size in [1MiB, 1PiB]", "0": "a size in [1MiB, 1PiB]", "1KB": "a size in [1MiB, 1PiB]"}},
	"export-rate":         {bad: map[string]string{"0": "a rate in [1KiB, 1TiB] per second", "NaN": "a rate", "-1MB": "a rate", "1B": "a rate in [1KiB, 1TiB]"}},
	"format":              {bad: map[string]string{"xml": `is not one of "table", "csv", "json"`, "": `is not one of`}},
	"explain":             booleanFlag,
	"list":                booleanFlag,
	"local":               booleanFlag,
	"unsafe-read":         booleanFlag,
	"verbose":             booleanFlag,
	"dot":                 booleanFlag,
	"for":                 {bad: map[string]string{"-1s": "0 (until Ctrl-C) or a duration in [1ms, 876000h]", "NaN": "a duration", "1e300h": "a duration"}},
	"interval":            {bad: map[string]string{"0": "a duration in [10ms, 24h]", "5ms": "a duration in [10ms, 24h]", "-1s": "a duration", "25h": "a duration in [10ms, 24h]"}},
	"map-size":            {bad: map[string]string{"-1": "a whole number in [0, 1048576]", "2000000": "in [0, 1048576]", "x": "a whole number"}},
	"save":                {bad: map[string]string{"bad name": "save name", "1x": "save name"}},
	"hosts":               {bad: map[string]string{"nohost": "is not an address HOST:PORT", "a:b": "is not a number in [0, 65535]"}},
	"c":                   {any: "a shell command, run as given (-c and -p together are refused)"},
	"p":                   {bad: map[string]string{"-1": "a whole number in [0, 4194304]", "x": "a whole number", "99999999": "in [0, 4194304]"}},
	"window":              {bad: map[string]string{"-1s": "0 (none) or a duration in [10ms, 876000h]", "5ms": "a duration in [10ms", "NaN": "a duration"}},
	"slide":               {bad: map[string]string{"5ms": "0 (--interval) or a duration in [10ms, 24h]", "-1s": "a duration", "25h": "a duration in [10ms, 24h]"}},
	"include-self":        booleanFlag,
	"diff":                booleanFlag,
	"storage-budget":      {bad: map[string]string{"-1MB": "0 (off) or a size in [1MiB, 1PiB]", "1KB": "a size in [1MiB, 1PiB]", "NaN": "a size", "Off": "a size"}},
	"memprofile":          {any: "a file to create; written after each commit"},
	"perfetto":            {any: "a file to create"},
	"out":                 {any: "a file to create (- for stdout)"},
	"vital":               {any: "sent to the recorder's API, which refuses an unknown vital (400)"},
	"pid":                 {any: "-1 for all; a pid that recorded nothing exports nothing"},
	"comm":                {any: "a process name, matched as stored"},
	"hosts-file":          {any: "a file, read when the query starts: its lines are checked as --hosts (TestHostsFileChecked)"},
	"enable":              {bad: map[string]string{"heart": `unknown vital "heart"`, "cpu,,x": `unknown vital`}},
	"disable":             {bad: map[string]string{"heart": `unknown vital "heart"`}},
	"findings/since":      {bad: map[string]string{"0": "a duration in [1s, 876000h]", "-1h": "a duration in [1s", "NaN": "a duration"}},
	"latency-graph/since": {bad: map[string]string{"-1s": "0 (all retained) or a duration in [1s, 876000h]", "NaN": "a duration"}},
	"range":               {any: "a range is read against the recording (relative times, run ids): findings.ParseRange refuses a bad one as a usage error"},
	"target":              {any: "as --range"},
	"reference":           {any: "as --range"},
	"timescale":           {bad: map[string]string{"2m": `is not one of "epoch", "5m", "1h", "1d"`, "": "is not one of"}},
	"history":             {bad: map[string]string{"-1": "a whole number in [0, 1000000]", "x": "a whole number", "1000001": "in [0, 1000000]"}},
	"top":                 {bad: map[string]string{"-1": "a whole number in [0, 1000000]", "x": "a whole number"}},
	"min-samples":         {bad: map[string]string{"0": "a whole number in [1, 1000000]", "-3": "in [1, 1000000]"}},
	"run/epoch":           {bad: map[string]string{"500ms": "a duration in [1s, 24h]", "NaN": "a duration"}},
	"id":                  {any: "a run's name"},
	"param":               {bad: map[string]string{"x": "is not NAME=VALUE", "=v": "is not NAME=VALUE"}},
	"perf-metric":         {bad: map[string]string{"speed": `is not one of "", "rate"`}},
	"perf-regex":          {bad: map[string]string{"(": "error parsing regexp", "abc": "has no group to capture the figure"}},
	"runs/threshold":      {bad: map[string]string{"0": "a probability in (0, 1]", "2": "a probability in (0, 1]", "NaN": "a probability", "-0.5": "a probability"}},
	"client":              {any: "a client name, matched as stored"},
	"service":             {any: "a service name, matched as stored (required)"},
	"operation":           {any: "an operation name, matched as stored (required)"},
}

var flagLineRE = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// TestEveryFlagValidated asks every command for its flags (-h) and gives
// each flag bad values from flagCases: each must be refused with the flag's
// name and the range it takes, exit status 2, before the command creates
// anything (its --data directory stays absent). A flag without a case
// fails the test, so a new flag comes with its validation.
func TestEveryFlagValidated(t *testing.T) {
	bin := testutil.BuildHolter(t)
	used := map[string]bool{}
	for _, c := range commands() {
		if c.name == "version" || c.name == "help" || c.name == "completion" {
			continue
		}
		var help bytes.Buffer
		cmd := exec.Command(bin, c.name, "-h")
		cmd.Stderr, cmd.Stdout = &help, &help
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s -h: %v (its defaults are parsed too)\n%s", c.name, err, help.String())
		}
		flags := flagLineRE.FindAllStringSubmatch(help.String(), -1)
		if len(flags) == 0 {
			t.Fatalf("%s -h lists no flags:\n%s", c.name, help.String())
		}
		for _, m := range flags {
			name := m[1]
			key := c.name + "/" + name
			fc, ok := flagCases[key]
			if !ok {
				key = name
				fc, ok = flagCases[key]
			}
			if !ok {
				t.Errorf("%s --%s has no case in flagCases: say which values it refuses, or why it takes any", c.name, name)
				continue
			}
			used[key] = true
			if fc.any != "" {
				continue
			}
			for value, want := range fc.bad {
				never := filepath.Join(t.TempDir(), "never")
				args := []string{c.name}
				if name != "data" {
					args = append(args, "--data", never)
				}
				args = append(append(args, "--"+name+"="+value), fc.args...)
				// A value let through starts the command for real: the
				// timeout makes that a failure, not a hang.
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Dir = t.TempDir()
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				err := cmd.Run()
				cancel()
				var ee *exec.ExitError
				code := 0
				if errors.As(err, &ee) {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				prefix := "--" + name + ": "
				if fc.bad["maybe"] != "" || name == "param" {
					prefix = "-" + name // the flag package's own message
				}
				out := stderr.String()
				if code != 2 || !strings.Contains(out, prefix) || !strings.Contains(out, want) {
					t.Errorf("holter %s --%s=%q: exit %d (want 2), stderr:\n%s\nwant %q and %q", c.name, name, value, code, out, prefix, want)
				}
				if _, err := os.Stat(never); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("holter %s --%s=%q created its data directory before refusing the value", c.name, name, value)
				}
			}
		}
	}
	for key := range flagCases {
		if !used[key] {
			t.Errorf("flagCases has %q, which no command has", key)
		}
	}
}

// TestHostsFileChecked: the addresses of --hosts-file are checked as
// --hosts's are, with the file and line named.
func TestHostsFileChecked(t *testing.T) {
	f := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(f, []byte("# agents\n127.0.0.1:7070\nnohost\n"), 0o644)
	_, err := readHosts([]string{"h:1"}, f)
	if err == nil || !strings.Contains(err.Error(), f+":3") || !strings.Contains(err.Error(), `"nohost" is not an address HOST:PORT`) {
		t.Fatalf("readHosts with a bad line: %v", err)
	}
	os.WriteFile(f, []byte("# agents\n127.0.0.1:7070\n"), 0o644)
	if hosts, err := readHosts([]string{"h:1"}, f); err != nil || len(hosts) != 2 {
		t.Fatalf("readHosts = %v, %v", hosts, err)
	}
}

// FuzzFlagValues gives every kind of value's parser the same text: none
// may panic, and what one accepts must lie in its range. (--perf-regex is
// Go's regexp.Compile, fuzzed where it lives.)
func FuzzFlagValues(f *testing.F) {
	for _, s := range []string{"0", "1", "7d", "1.5d", "36h", "NaN", "NaNd", "1e300d", "-1s", "256MB", "10GiB", "1%", "0.5%",
		"off", "NaN%", "cpu,sched", "", ",", "all", "127.0.0.1:7070", "h:99999", "http://ch:8123", "2MB/s", "65536", "0.05",
		"9223372036854775807", "18446744073709551616", "1e-320", "99999999999999999999d", "+Inf", "\x00", "µs", "1µs"} {
		f.Add(s)
	}
	sizes := sizeIn(1<<20, 1<<50, "no bound")
	rates := rateIn(1<<10, 1<<40)
	durations := durationIn(time.Microsecond, time.Minute, "default")
	ages := ageIn(maxAge)
	counts := countIn(1, 10000)
	pows := powerOfTwoIn(2, 1<<16)
	vitals := vitalList("")
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := sizes(s); err == nil && n != 0 && (n < 1<<20 || n > 1<<50) {
			t.Fatalf("size %q = %d, out of range", s, n)
		}
		if n, err := rates(s); err == nil && (n < 1<<10 || n > 1<<40) {
			t.Fatalf("rate %q = %d, out of range", s, n)
		}
		if d, err := durations(s); err == nil && d != 0 && (d < time.Microsecond || d > time.Minute) {
			t.Fatalf("duration %q = %v, out of range", s, d)
		}
		if d, err := ages(s); err == nil && (d < 0 || d > maxAge) {
			t.Fatalf("age %q = %v, out of range", s, d)
		}
		if v, err := percentOrOff(s); err == nil && v != budgetOff && !(v > 0 && v <= 1) {
			t.Fatalf("percentage %q = %v, out of range", s, v)
		}
		if n, err := counts(s); err == nil && (n < 1 || n > 10000) {
			t.Fatalf("count %q = %d, out of range", s, n)
		}
		if n, err := pows(s); err == nil && n != 0 && (n < 2 || n > 1<<16 || n&(n-1) != 0) {
			t.Fatalf("power of 2 %q = %d", s, n)
		}
		if p, err := probability(s); err == nil && (math.IsNaN(p) || p <= 0 || p > 1) {
			t.Fatalf("probability %q = %v", s, p)
		}
		if vs, err := vitals(s); err == nil && len(vs) == 0 {
			t.Fatalf("vitals %q: an empty list accepted", s)
		}
		commList(s)
		pathList(s)
		addressList(s)
		apiAddress(s)
		addressOr("off")(s)
		identifier(s)
		traceName(s)
	})
}
