// Command holter records a Linux host's vital signs and answers questions
// about them. See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// usageError marks a mistake on the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"record", "record the vital signs into the store and serve the API", runRecord},
		{"ui", "serve the web UI over a stored recording, or over the fleet in ClickHouse (--source)", runUI},
		{"ui-url", "print the login URL of the running recorder's web UI", runUIURL},
		{"query", "answer SQL over the store", runQuery},
		{"trace", "run a live tracing query compiled into eBPF probes", runTrace},
		{"status", "say what is recorded, what is unsupported and why", runStatus},
		{"vitals", "start or stop recording vitals in the running recorder", runVitals},
		{"findings", "list what the filters and rules found in a time range", runFindings},
		{"diff", "rank the metrics that differ most between two time ranges", runDiff},
		{"run", "run a command while recording and add it to the run catalog", runRun},
		{"runs", "list the run catalog and the anomalous runs with their metrics", runRuns},
		{"trace-path", "show a request's causal path across services with its kernel costs", runTracePath},
		{"latency-graph", "show a workload's latency graph (text, JSON or DOT)", runLatencyGraph},
		{"export", "write a range's samples as a pprof profile, folded stacks or Perfetto trace, or a table or query as Parquet: holter export pprof|folded|perfetto|parquet", runExport},
		{"version", "print the version, commit, and Go and DuckDB versions (also --version, -v)", runVersion},
		{"help", "show a command's examples and flags: holter help COMMAND", runHelp},
		{"completion", "print a shell completion script: holter completion bash|zsh|fish", runCompletion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: holter COMMAND [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nholter help COMMAND shows a command's examples and flags.")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0 || args[0] == "-h" || args[0] == "--help":
		usage(stdout)
		return 0
	case args[0] == "--version" || args[0] == "-v" || args[0] == "-version":
		args = []string{"version"}
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		var ue usageError
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "holter %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "holter %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "holter: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// newFlags makes a command's flag set; parse errors are usage errors.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("holter "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if flagSink != nil {
		flagSink(fs)
	}
	return fs
}

// parse reads args into fs, and refuses any value (given or default) its
// flag's parser does not accept (values.go).
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			// -h parses the defaults too: a default its parser refuses
			// shows here, in the test that asks every command for -h.
			if bad := refusedFlag(fs); bad != nil {
				return bad
			}
			return err
		}
		if m := flagErrorRE.FindStringSubmatch(err.Error()); m != nil {
			return usagef("--%s: %s: %s", m[2], m[1], m[3])
		}
		return usageError{err.Error()}
	}
	return refusedFlag(fs)
}

// flagErrorRE is the flag package's refusal of a value, reworded as the
// refusals of valueFlag's flags are: --NAME: "VALUE": why.
var flagErrorRE = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for flag -([a-z0-9-]+): (.*)$`)

const dataHelp = "data directory holding the store (default: $HOLTER_DATA, else ./holter-data or /var/lib/holter, the first that exists)"

// localDataDir is a recording in the working directory (make run's).
const localDataDir = "holter-data"

// systemDataDir is the system service's recording (its StateDirectory).
var systemDataDir = "/var/lib/holter"

// defaultDataDir is --data's default: $HOLTER_DATA when set; else
// ./holter-data when it exists; else the system service's /var/lib/holter
// when it exists; else ./holter-data, a new recording here. Commands run
// anywhere thus find the system recorder, and one started in a directory
// holding a recording finds that one.
func defaultDataDir() string {
	if d := os.Getenv("HOLTER_DATA"); d != "" {
		return d
	}
	if isDir(localDataDir) {
		return localDataDir
	}
	if isDir(systemDataDir) {
		return systemDataDir
	}
	return localDataDir
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
