package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// unitFile is a systemd unit's keys by section, each with its values in order.
type unitFile map[string]map[string][]string

func parseUnit(t *testing.T, path string) unitFile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value in a section: %q", path, n, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u
}

// one is the single value of key in section.
func (u unitFile) one(t *testing.T, section, key string) string {
	t.Helper()
	vs := u[section][key]
	if len(vs) != 1 {
		t.Fatalf("[%s] %s: %d values, want 1", section, key, len(vs))
	}
	return vs[0]
}

// parseEnvFile reads an EnvironmentFile: KEY=VALUE lines, the value
// unquoted when it is in double or single quotes.
func parseEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s:%d: not KEY=VALUE: %q", path, i+1, line)
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		env[strings.TrimSpace(k)] = v
	}
	return env
}

// expandExec expands an ExecStart line as systemd does: a word "$VAR" is
// the variable's value split at white space, "${VAR}" anywhere its value
// as is, within its word.
func expandExec(line string, env map[string]string) []string {
	braced := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	var argv []string
	for _, w := range strings.Fields(line) {
		if m := regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)$`).FindStringSubmatch(w); m != nil {
			argv = append(argv, strings.Fields(env[m[1]])...)
			continue
		}
		argv = append(argv, braced.ReplaceAllStringFunc(w, func(s string) string { return env[s[2:len(s)-1]] }))
	}
	return argv
}

// capNames turns a CapabilityBoundingSet into setpriv's names (cap_bpf → bpf).
func capNames(set string) []string {
	var names []string
	for _, c := range strings.Fields(set) {
		names = append(names, strings.TrimPrefix(strings.ToLower(c), "cap_"))
	}
	return names
}

// TestSystemdUnit runs deploy/systemd/holter.service's ExecStart as systemd
// would: its EnvironmentFile (deploy/systemd/holter.env, what make install
// puts in /etc/default/holter) expanded into it, $STATE_DIRECTORY set, and
// the unit's CapabilityBoundingSet and NoNewPrivileges applied with setpriv,
// so that the capabilities it lists are shown to suffice. The recorder must
// record, and answer the CLI over its socket from another directory, found
// through $HOLTER_DATA; a SIGTERM stops it with status 0, which
// Restart=on-failure does not restart. The env file's epoch and API address
// are overridden as an administrator would edit it (a 1s epoch, any free
// port). systemd-analyze verify checks the unit's syntax.
func TestSystemdUnit(t *testing.T) {
	testutil.RequireRoot(t)
	setpriv := testutil.RequireTool(t, "setpriv")
	bin := testutil.BuildHolter(t)
	deploy := filepath.Join(testutil.RepoRoot(), "deploy", "systemd")
	u := parseUnit(t, filepath.Join(deploy, "holter.service"))
	for key, want := range map[string]string{
		"Restart": "on-failure", "StateDirectory": "holter", "ProtectSystem": "strict",
		"PrivateTmp": "yes", "NoNewPrivileges": "yes", "EnvironmentFile": "-/etc/default/holter",
	} {
		if got := u.one(t, "Service", key); got != want {
			t.Errorf("[Service] %s=%s, want %s", key, got, want)
		}
	}
	if got := u.one(t, "Service", "ProtectHome"); got != "yes" && got != "read-only" {
		t.Errorf("ProtectHome=%s", got)
	}

	if analyze, err := exec.LookPath("systemd-analyze"); err == nil {
		verified := filepath.Join(t.TempDir(), "holter.service")
		b, _ := os.ReadFile(filepath.Join(deploy, "holter.service"))
		os.WriteFile(verified, []byte(strings.Replace(string(b), "/usr/local/bin/holter", bin, 1)), 0o644)
		if out, err := exec.Command(analyze, "verify", verified).CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	} else if testutil.InCI() {
		t.Error("systemd-analyze is missing: the unit's syntax is unchecked")
	}

	state := t.TempDir()
	env := parseEnvFile(t, filepath.Join(deploy, "holter.env"))
	if !strings.Contains(env["HOLTER_ARGS"], "--api") {
		t.Errorf("holter.env's HOLTER_ARGS names no --api: %q", env["HOLTER_ARGS"])
	}
	env["HOLTER_ARGS"] += " --epoch 1s --api 127.0.0.1:0"
	env["STATE_DIRECTORY"] = state
	argv := expandExec(u.one(t, "Service", "ExecStart"), env)
	if argv[0] != "/usr/local/bin/holter" || argv[1] != "record" {
		t.Fatalf("ExecStart runs %q, want /usr/local/bin/holter record", argv)
	}
	argv[0] = bin
	caps := capNames(u.one(t, "Service", "CapabilityBoundingSet"))
	sp := []string{"--bounding-set", "-all,+" + strings.Join(caps, ",+"), "--inh-caps", "-all", "--no-new-privs", "--"}
	cmd := exec.Command(setpriv, append(sp, argv...)...)
	cmd.Dir = "/"
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	r := startRecordCmd(t, cmd)
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	r.waitEpochs(t, 2)

	q := exec.Command(bin, "query", "--format", "csv", "SELECT count(*) AS n, bool_and(samples >= 0) AS ok FROM epochs")
	q.Dir = t.TempDir()
	q.Env = append(os.Environ(), "HOLTER_DATA="+state)
	out, errOut, code := runCmd(t, q)
	if code != 0 || !regexp.MustCompile(`^n,ok\n([2-9]|\d\d+),true\n$`).MatchString(out) {
		t.Fatalf("query through the service's socket: exit %d: %s%s\nrecorder log:\n%s", code, out, errOut, r.log)
	}
	st := exec.Command(bin, "status")
	st.Dir = t.TempDir()
	st.Env = append(os.Environ(), "HOLTER_DATA="+state)
	out, errOut, code = runCmd(t, st)
	if code != 0 || !strings.Contains(out, "recording") {
		t.Errorf("status through the service's socket: exit %d: %s%s", code, out, errOut)
	}
	for _, f := range []string{"holter.sock", "api.token", "agent.json"} {
		if _, err := os.Stat(filepath.Join(state, f)); err != nil {
			t.Errorf("state directory: %v", err)
		}
	}

	r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("SIGTERM: %v (systemd would restart it on failure)\n%s", err, r.log)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("no exit within the unit's TimeoutStopSec after SIGTERM")
	}
}

// TestMakeInstall installs into a temporary root (DESTDIR) with a PREFIX,
// as a packager would, and checks what lands where; a second install keeps
// an edited /etc/default/holter.
func TestMakeInstall(t *testing.T) {
	testutil.RequireTool(t, "make")
	root := t.TempDir()
	install := func() {
		cmd := exec.Command("make", "install", "DESTDIR="+root, "PREFIX=/usr")
		cmd.Dir = testutil.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make install: %v\n%s", err, out)
		}
	}
	install()
	bin := filepath.Join(root, "usr", "bin", "holter")
	fi, err := os.Stat(bin)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed binary: %v %v", err, fi)
	}
	out, err := exec.Command(bin, "version").Output()
	head, _ := exec.Command("git", "-C", testutil.RepoRoot(), "rev-parse", "HEAD").Output()
	if err != nil || !strings.HasPrefix(string(out), "holter ") || !strings.Contains(string(out), "\ncommit "+strings.TrimSpace(string(head))) {
		t.Errorf("installed holter version (want the commit %s from make's -ldflags): %v %q", head, err, out)
	}
	unit := filepath.Join(root, "etc", "systemd", "system", "holter.service")
	u := parseUnit(t, unit)
	if got := u.one(t, "Service", "ExecStart"); !strings.HasPrefix(got, "/usr/bin/holter record ") {
		t.Errorf("installed unit's ExecStart=%s, want /usr/bin/holter under PREFIX=/usr", got)
	}
	envFile := filepath.Join(root, "etc", "default", "holter")
	if env := parseEnvFile(t, envFile); env["HOLTER_ARGS"] == "" {
		t.Errorf("%s sets no HOLTER_ARGS", envFile)
	}
	edited := "HOLTER_ARGS=\"--api 127.0.0.1:7071\"\n"
	os.WriteFile(envFile, []byte(edited), 0o644)
	install()
	if b, _ := os.ReadFile(envFile); string(b) != edited {
		t.Errorf("a second install replaced the administrator's %s", envFile)
	}
}

// TestDefaultDataDir: commands run outside a data directory find the
// system recorder's, or $HOLTER_DATA's.
func TestDefaultDataDir(t *testing.T) {
	sys := t.TempDir()
	defer func(d string) { systemDataDir = d }(systemDataDir)
	systemDataDir = filepath.Join(sys, "holter")
	t.Chdir(t.TempDir())
	t.Setenv("HOLTER_DATA", "")
	if got := defaultDataDir(); got != localDataDir {
		t.Errorf("nothing exists: %q, want %q (a new recording here)", got, localDataDir)
	}
	os.Mkdir(systemDataDir, 0o700)
	if got := defaultDataDir(); got != systemDataDir {
		t.Errorf("system recorder exists: %q, want %q", got, systemDataDir)
	}
	os.Mkdir(localDataDir, 0o700)
	if got := defaultDataDir(); got != localDataDir {
		t.Errorf("./holter-data exists: %q, want it", got)
	}
	t.Setenv("HOLTER_DATA", "/elsewhere")
	if got := defaultDataDir(); got != "/elsewhere" {
		t.Errorf("$HOLTER_DATA: %q", got)
	}
}

// TestReadmeRunsAsRootWithoutSudo: the README's first commands need no
// sudo as root (the VM image has none): none is written there, and `make
// build`, which `make run` and `make test` start with, runs as root with a
// sudo on PATH that fails and says it was called.
func TestReadmeRunsAsRootWithoutSudo(t *testing.T) {
	testutil.RequireRoot(t)
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(string(b))
	if block == nil {
		t.Fatal("README has no sh block")
	}
	for _, line := range strings.Split(strings.TrimSpace(block[1]), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "sudo") {
			t.Errorf("README's first commands use sudo: %q", line)
		}
	}
	fake := t.TempDir()
	marker := filepath.Join(fake, "called")
	os.WriteFile(filepath.Join(fake, "sudo"), []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o755)
	cmd := exec.Command("make", "build")
	cmd.Dir = testutil.RepoRoot()
	cmd.Env = append(os.Environ(), "PATH="+fake+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build as root: %v\n%s", err, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("make build called sudo as root")
	}
}

// TestLicense: the root LICENSE is the Apache License 2.0's full text, and
// every BPF program declares the GPL, as bpf/README.md says.
func TestLicense(t *testing.T) {
	root := testutil.RepoRoot()
	b, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{"Apache License\n                           Version 2.0, January 2004",
		"1. Definitions.", "2. Grant of Copyright License.", "3. Grant of Patent License.", "4. Redistribution.",
		"5. Submission of Contributions.", "6. Trademarks.", "7. Disclaimer of Warranty.",
		"8. Limitation of Liability.", "9. Accepting Warranty or Additional Liability.", "END OF TERMS AND CONDITIONS"} {
		if !strings.Contains(text, want) {
			t.Errorf("LICENSE lacks %q", want)
		}
	}
	progs, _ := filepath.Glob(filepath.Join(root, "bpf", "*.bpf.c"))
	if len(progs) == 0 {
		t.Fatal("no bpf/*.bpf.c")
	}
	for _, p := range progs {
		src, _ := os.ReadFile(p)
		if !strings.Contains(string(src), `SEC("license") = "GPL";`) {
			t.Errorf("%s does not declare the GPL", p)
		}
	}
	readme, _ := os.ReadFile(filepath.Join(root, "bpf", "README.md"))
	if !strings.Contains(string(readme), "## License") || !strings.Contains(string(readme), "GPL") {
		t.Error("bpf/README.md does not state the BPF programs' license")
	}
}
