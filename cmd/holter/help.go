package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/holter-dev/holter/internal/store"
)

// examples are shown by `holter help COMMAND`.
var examples = map[string][]string{
	"record": {
		"holter record                                  # into ./holter-data, UI on 127.0.0.1:7070",
		"holter record --data /var/lib/holter --epoch 10s --vitals cpu,sched,blck",
		"holter record --export http://clickhouse:8123  # and ship every epoch to ClickHouse",
	},
	"ui":     {"holter ui --data old-recording", "holter ui --source http://clickhouse:8123 --api 127.0.0.1:7071"},
	"ui-url": {"holter ui-url", "holter ui-url --read   # the read-only login"},
	"query": {
		`holter query "SELECT vital, sum(weight_sum) FROM vitals GROUP BY vital"`,
		`holter query --format csv "SELECT * FROM epochs ORDER BY epoch DESC LIMIT 10"`,
	},
	"trace": {
		`holter trace "SELECT comm, count() FROM syscall.read GROUP BY comm" --for 10s`,
		"holter trace --list 'syscall.*'",
		"holter trace @runqlat",
	},
	"status":   {"holter status", "holter status --json"},
	"vitals":   {"holter vitals --enable syscall,sock --disable kmem"},
	"findings": {"holter findings --since 1h"},
	"diff":     {"holter diff --target -15m/now --reference -1h/-15m"},
	"run":      {"holter run --param size=4k -- dd if=/dev/zero of=f bs=4k count=1000"},
	"runs":     {"holter runs"},
	"trace-path": {
		"holter trace-path 4bf92f3577b34da6a3ce929d0e0e4736",
		"holter trace-path --source http://clickhouse:8123 4bf92f3577b34da6a3ce929d0e0e4736",
		"holter trace-path --perfetto 4bf92f3577b34da6a3ce929d0e0e4736 > request.json   # open in ui.perfetto.dev",
	},
	"latency-graph": {`holter latency-graph --service front --operation "GET /item" --dot`},
	"export": {
		"holter export pprof --range -15m/now --vital cpu --out cpu.pb.gz && go tool pprof -top cpu.pb.gz",
		"holter export folded --range 2026-11-25T10:00/2026-11-25T10:05 --vital blck --pid 1234 --out - | flamegraph.pl > blck.svg",
		"holter export perfetto --range -1m/now --vital all --out samples.json   # open in ui.perfetto.dev",
		"holter export parquet --range -1h/now samples --out samples.parquet   # a table over a range: DuckDB, pandas, Spark",
		"holter export parquet \"SELECT comm, sum(weight) AS w FROM samples GROUP BY comm\" --out - > by-comm.parquet   # a read-only query",
	},
	"completion": {"source <(holter completion bash)", "holter completion fish > ~/.config/fish/completions/holter.fish"},
}

// commit is set at build time with -ldflags "-X main.commit=..." (the
// Makefile does); else the commit Go recorded is shown.
var commit string

// versionText says which holter this is: the version and commit given at
// build time or the commit Go recorded (vcs.revision, "+dirty" when the
// tree was modified), and the Go and DuckDB versions it was built with.
func versionText() string {
	commit, date := commit, ""
	if bi, ok := debug.ReadBuildInfo(); ok && commit == "" {
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				date = " " + s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified {
			commit += "+dirty"
		}
	}
	duckdb, err := store.DuckDBVersion()
	if err != nil {
		duckdb = err.Error()
	}
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("holter %s\ncommit %s%s\ngo %s %s/%s\nduckdb %s\n",
		version, commit, date, runtime.Version(), runtime.GOOS, runtime.GOARCH, duckdb)
}

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprint(stdout, versionText())
	return nil
}

// flagSink, when set, is given every flag set a command makes.
var flagSink func(*flag.FlagSet)

// commandFlags are a command's flags, from the flag set it parses with:
// the command is run with -h, which every command parses before doing
// anything.
func commandFlags(c command) []*flag.Flag {
	var sets []*flag.FlagSet
	flagSink = func(fs *flag.FlagSet) { sets = append(sets, fs) }
	c.run([]string{"-h"}, io.Discard, io.Discard)
	flagSink = nil
	var flags []*flag.Flag
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
	}
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	return flags
}

func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// runHelp prints the commands, or one command's summary, examples and flags.
func runHelp(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stdout)
		return nil
	}
	if len(args) > 1 {
		return usagef("help takes one command, not %q", strings.Join(args, " "))
	}
	c, ok := findCommand(args[0])
	if !ok {
		return usagef("unknown command %q (holter help lists them)", args[0])
	}
	fmt.Fprintf(stdout, "holter %s: %s\n", c.name, c.summary)
	if ex := examples[c.name]; len(ex) > 0 {
		fmt.Fprintln(stdout, "\nexamples:")
		for _, e := range ex {
			fmt.Fprintln(stdout, "  "+e)
		}
	}
	if flags := commandFlags(c); len(flags) > 0 {
		fmt.Fprintln(stdout, "\nflags:")
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		for _, f := range flags {
			fs.Var(f.Value, f.Name, f.Usage)
			fs.Lookup(f.Name).DefValue = f.DefValue
		}
		fs.SetOutput(stdout)
		fs.PrintDefaults()
	}
	return nil
}

// runCompletion prints a shell completion script of the commands and
// their flags.
func runCompletion(args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return usagef("give the shell: holter completion bash|zsh|fish")
	}
	switch args[0] {
	case "bash":
		fmt.Fprint(stdout, bashCompletion())
	case "zsh":
		fmt.Fprint(stdout, "#compdef holter\nautoload -U +X bashcompinit && bashcompinit\n"+bashCompletion())
	case "fish":
		fmt.Fprint(stdout, fishCompletion())
	default:
		return usagef("unknown shell %q: bash, zsh or fish", args[0])
	}
	return nil
}

func bashCompletion() string {
	var b strings.Builder
	var names []string
	b.WriteString("# holter completion for bash: source <(holter completion bash)\n_holter() {\n")
	b.WriteString("\tlocal cur=${COMP_WORDS[COMP_CWORD]} opts=\n")
	b.WriteString("\tcase ${COMP_WORDS[1]} in\n")
	for _, c := range commands() {
		names = append(names, c.name)
		var opts []string
		for _, f := range commandFlags(c) {
			opts = append(opts, "--"+f.Name)
		}
		fmt.Fprintf(&b, "\t%s) opts=%q ;;\n", c.name, strings.Join(opts, " "))
	}
	b.WriteString("\tesac\n")
	fmt.Fprintf(&b, "\tif ((COMP_CWORD == 1)); then\n\t\tCOMPREPLY=($(compgen -W %q -- \"$cur\"))\n", strings.Join(names, " ")+" --version")
	fmt.Fprintf(&b, "\telif [[ ${COMP_WORDS[1]} == help || ${COMP_WORDS[1]} == completion ]] && ((COMP_CWORD == 2)); then\n")
	fmt.Fprintf(&b, "\t\t[[ ${COMP_WORDS[1]} == help ]] && COMPREPLY=($(compgen -W %q -- \"$cur\")) || COMPREPLY=($(compgen -W 'bash zsh fish' -- \"$cur\"))\n", strings.Join(names, " "))
	b.WriteString("\telif [[ $cur == -* ]]; then\n\t\tCOMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n")
	b.WriteString("\telse\n\t\tCOMPREPLY=($(compgen -f -- \"$cur\"))\n\tfi\n}\ncomplete -F _holter holter\n")
	return b.String()
}

func fishCompletion() string {
	var b strings.Builder
	b.WriteString("# holter completion for fish: holter completion fish > ~/.config/fish/completions/holter.fish\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "complete -c holter -f -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.summary))
		for _, f := range commandFlags(c) {
			fmt.Fprintf(&b, "complete -c holter -n '__fish_seen_subcommand_from %s' -l %s -d %s\n", c.name, f.Name, fishQuote(firstLine(f.Usage)))
		}
	}
	return b.String()
}

func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
