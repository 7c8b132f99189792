package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestVersion: --version, -v and version print the same four lines, with
// the Go and DuckDB versions actually linked.
func TestVersion(t *testing.T) {
	bin := testutil.BuildHolter(t)
	var first string
	for _, arg := range []string{"--version", "-v", "version"} {
		out, errOut, code := runHolter(t, bin, arg)
		if code != 0 {
			t.Fatalf("holter %s: exit %d: %s", arg, code, errOut)
		}
		if !regexp.MustCompile(`^holter \S+\ncommit \S+.*\ngo go1\.\d+\S* linux/\w+\nduckdb v\d+\.\d+\.\d+\n$`).MatchString(out) {
			t.Errorf("holter %s:\n%s", arg, out)
		}
		if first == "" {
			first = out
		} else if out != first {
			t.Errorf("holter %s differs from --version:\n%s\n%s", arg, out, first)
		}
	}
}

// TestHelpCommand: holter help COMMAND shows examples and the command's
// own flags; an unknown command is a usage error.
func TestHelpCommand(t *testing.T) {
	bin := testutil.BuildHolter(t)
	out, errOut, code := runHolter(t, bin, "help", "query")
	if code != 0 || !strings.Contains(out, "examples:\n  holter query ") || !strings.Contains(out, "-format ") {
		t.Errorf("help query: exit %d %s\n%s", code, errOut, out)
	}
	for _, c := range commands() {
		if c.name == "help" || c.name == "completion" || c.name == "version" {
			continue
		}
		if out, _, code := runHolter(t, bin, "help", c.name); code != 0 || !strings.Contains(out, "examples:") || !strings.Contains(out, "flags:") {
			t.Errorf("help %s: exit %d, no examples or flags:\n%s", c.name, code, out)
		}
	}
	if _, errOut, code := runHolter(t, bin, "help", "recrod"); code != 2 || !strings.Contains(errOut, `unknown command "recrod"`) {
		t.Errorf("help recrod: exit %d %s", code, errOut)
	}
}

// TestBashCompletion sources `holter completion bash` in bash and asks it
// to complete commands, a command's flags and the help topics; the zsh and
// fish scripts are checked by those shells' parsers when installed.
func TestBashCompletion(t *testing.T) {
	bash := testutil.RequireTool(t, "bash")
	bin := testutil.BuildHolter(t)
	script, errOut, code := runHolter(t, bin, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d %s", code, errOut)
	}
	complete := func(words ...string) string {
		t.Helper()
		var sb strings.Builder
		sb.WriteString(script + "\nCOMP_WORDS=(")
		for _, w := range words {
			sb.WriteString("'" + w + "' ")
		}
		sb.WriteString(")\nCOMP_CWORD=" + strings.Repeat("1+", len(words)-1) + "0\n_holter\necho \"${COMPREPLY[*]}\"\n")
		out, err := exec.Command(bash, "--norc", "-c", sb.String()).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"holter", "qu"}, "query"},
		{[]string{"holter", "trace"}, "trace trace-path"},
		{[]string{"holter", "query", "--fo"}, "--format"},
		{[]string{"holter", "record", "--reta"}, "--retain-raw --retain-rollups --retain-size --retain-spans"},
		{[]string{"holter", "status", "--data", "x", "--j"}, "--json"},
		{[]string{"holter", "help", "late"}, "latency-graph"},
		{[]string{"holter", "completion", "f"}, "fish"},
	} {
		if got := complete(c.words...); got != c.want {
			t.Errorf("%q completes to %q, want %q", c.words, got, c.want)
		}
	}
	for _, sh := range []string{"zsh", "fish"} {
		p := testutil.RequireTool(t, sh)
		s, _, _ := runHolter(t, bin, "completion", sh)
		if out, err := exec.Command(p, "-n", "-c", s).CombinedOutput(); err != nil {
			t.Errorf("%s -n rejects its completion: %v\n%s", sh, err, out)
		}
		script := filepath.Join(t.TempDir(), "holter."+sh)
		os.WriteFile(script, []byte(s), 0o644)
		// What each shell offers: fish's own completer with its
		// descriptions; zsh's function, registered for holter by compinit,
		// gives the command's flags (zsh's compadd then keeps those the
		// word begins with).
		var check string
		var want []string
		if sh == "fish" {
			check = `source $argv[1]; complete -C "holter qu"; complete -C "holter query --fo"; complete -C "holter record --reta"`
			want = []string{"query\t", "--format\t", "--retain-raw\t", "--retain-size\t"}
		} else {
			check = `autoload -U compinit && compinit -u -D; source $1; print -r -- ${_comps[holter]}
				COMP_WORDS=(holter query --fo); COMP_CWORD=2; compgen -F _holter -- --fo`
			want = []string{"_bash_complete -F _holter", "--format", "--query-timeout"}
		}
		out, err := exec.Command(p, "-f", "-c", check, sh, script).CombinedOutput()
		if sh == "fish" {
			out, err = exec.Command(p, "--no-config", "-c", check, script).CombinedOutput()
		}
		if err != nil {
			t.Errorf("%s completion: %v\n%s", sh, err, out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s completion lacks %q:\n%s", sh, w, out)
			}
		}
		if sh == "zsh" && strings.Contains(string(out), "--retain-raw") {
			t.Errorf("zsh offers record's flags for query:\n%s", out)
		}
	}
	if _, errOut, code := runHolter(t, bin, "completion", "tcsh"); code != 2 || !strings.Contains(errOut, "bash, zsh or fish") {
		t.Errorf("completion tcsh: exit %d %s", code, errOut)
	}
}
