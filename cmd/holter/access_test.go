package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/access"
	"github.com/holter-dev/holter/internal/testutil"
)

// uiSession is a UI that holter serves, and the token its login URL gives.
type uiSession struct {
	base, token, loginURL string
}

// sessionOf reads a login URL, http://HOST/?token=TOKEN.
func sessionOf(t *testing.T, loginURL string) uiSession {
	t.Helper()
	u, err := url.Parse(strings.TrimSpace(loginURL))
	if err != nil || u.Query().Get("token") == "" {
		t.Fatalf("%q is not a login URL (%v)", loginURL, err)
	}
	return uiSession{base: u.Scheme + "://" + u.Host, token: u.Query().Get("token"), loginURL: u.String()}
}

// recorderSession is the UI of the recorder recording into dir, from the
// login URL `holter ui-url` prints.
func recorderSession(t *testing.T, bin, dir string) uiSession {
	t.Helper()
	out, errOut, code := runHolter(t, bin, "ui-url", "--data", dir)
	if code != 0 {
		t.Fatalf("holter ui-url: exit %d: %s", code, errOut)
	}
	return sessionOf(t, out)
}

// get fetches path (with its query) with the session's token.
func (s uiSession) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	return testutil.HTTPGetWithToken(t, s.base+path, s.token)
}

// browserLogin opens a login URL as a browser does, keeping the cookie it
// sets, and returns the client.
func browserLogin(t *testing.T, loginURL string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 20 * time.Second}
	resp, err := c.Get(loginURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(resp.Request.URL.String(), "token") {
		t.Fatalf("login at %s: %d at %s", loginURL, resp.StatusCode, resp.Request.URL)
	}
	return c
}

// statusCode makes a request with c and returns its status and body.
func statusCode(t *testing.T, c *http.Client, method, u string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, b := testutil.HTTPDo(t, c, req)
	return code, string(b)
}

// runAs runs holter as uid 65534 in the groups given, with env added.
func runAs(t *testing.T, bin string, groups []uint32, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = append(os.Environ(), env...)
	if groups != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: groups}}
	}
	return runCmd(t, cmd)
}

func mode(t *testing.T, path string) (os.FileMode, uint32) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid
}

// TestAccessEndToEnd runs a recorder whose admin and reader groups are
// two gids, and uses it as root, as uid 65534 in neither group, in the
// reader group and in the admin group: through the CLI on its sockets,
// through HTTP with its tokens (given on the command line, in a file, in
// $HOLTER_TOKEN, or by the login URL `holter ui-url` prints); then `holter
// ui` over the recording keeps the same token.
func TestAccessEndToEnd(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	top, bin := testutil.NobodysCopy(t, testutil.BuildHolter(t))
	dir := filepath.Join(top, "data")
	const adminGID, readerGID = 64711, 64712
	nobody, reader, admin := []uint32{}, []uint32{readerGID}, []uint32{adminGID}
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--vitals", "cpu", "--budget", "off",
		"--otlp-grpc", "off", "--otlp-http", "off", "--online=false", "--admin-group", fmt.Sprint(adminGID), "--reader-group", fmt.Sprint(readerGID))
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	r.waitEpochs(t, 1)

	// Who may reach what in the data directory.
	for name, want := range map[string]struct {
		mode string
		gid  uint32
	}{
		"":                      {"drwxr-x--x", 0},
		access.AdminSocketFile:  {"Srw-rw----", adminGID},
		access.ReaderSocketFile: {"Srw-rw----", readerGID},
		access.AdminTokenFile:   {"-rw-------", 0},
		access.ReaderTokenFile:  {"-rw-r-----", readerGID},
		"holter.duckdb":         {"-rw-r-----", 0},
		agentFile:               {"-rw-r--r--", 0},
	} {
		if m, gid := mode(t, filepath.Join(dir, name)); m.String() != want.mode || gid != want.gid {
			t.Errorf("%s: %s group %d, want %s group %d", filepath.Join(dir, name), m, gid, want.mode, want.gid)
		}
	}

	// The CLI over the sockets.
	trace := func(extra ...string) []string {
		return append(append([]string{"trace", "--data", dir, "--for", "1s", "--interval", "1s"}, extra...), "SELECT count() AS n FROM syscall.getppid")
	}
	for _, c := range []struct {
		who    string
		groups []uint32
		args   []string
		code   int
		want   string
	}{
		{"root", nil, []string{"status", "--data", dir}, 0, "recording"},
		{"root", nil, trace("--unsafe-read"), 0, "n"},
		{"nobody", nobody, []string{"status", "--data", dir}, 1, "the recorder's socket admits root"},
		{"nobody", nobody, []string{"query", "--data", dir, "SELECT 1"}, 1, "permission denied"},
		{"reader", reader, []string{"status", "--data", dir}, 0, "recording"},
		{"reader", reader, []string{"query", "--data", dir, "SELECT count(*) AS n FROM epochs"}, 0, "n"},
		{"reader", reader, []string{"vitals", "--data", dir, "--disable", "cpu"}, 1, "needs the admin role"},
		{"reader", reader, trace(), 1, "needs the admin role"},
		{"admin", admin, trace(), 0, "n"},
		{"admin", admin, trace("--unsafe-read"), 1, "unsafe_read"},
		{"admin", admin, []string{"vitals", "--data", dir, "--enable", "cpu"}, 0, "recording"},
	} {
		out, errOut, code := runAs(t, bin, c.groups, nil, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("%s: holter %s: exit %d, want %d with %q:\n%s%s", c.who, strings.Join(c.args, " "), code, c.code, c.want, out, errOut)
		}
	}

	// HTTP: the login URL of holter ui-url logs a browser in; readers
	// have theirs.
	s := recorderSession(t, bin, dir)
	if tok, _ := os.ReadFile(filepath.Join(dir, access.AdminTokenFile)); strings.TrimSpace(string(tok)) != s.token {
		t.Errorf("holter ui-url's token %q is not the one in %s", s.token, access.AdminTokenFile)
	}
	browser := browserLogin(t, s.loginURL)
	if code, body := statusCode(t, browser, "GET", s.base+"/api/status"); code != 200 {
		t.Errorf("status after the login: %d %s", code, body)
	}
	for _, tok := range []string{"", "wrong"} {
		if code, _, _ := (uiSession{base: s.base, token: tok}).getCode(t, "/api/status"); code != 401 {
			t.Errorf("token %q: %d, want 401", tok, code)
		}
	}
	out, errOut, code := runAs(t, bin, nobody, nil, "ui-url", "--data", dir)
	if code != 1 || !strings.Contains(errOut, "permission denied") {
		t.Errorf("holter ui-url as nobody: exit %d %s%s", code, out, errOut)
	}
	out, errOut, code = runAs(t, bin, reader, nil, "ui-url", "--read", "--data", dir)
	if code != 0 {
		t.Fatalf("holter ui-url --read as a reader: exit %d %s", code, errOut)
	}
	readerBrowser := browserLogin(t, sessionOf(t, out).loginURL)
	if code, body := statusCode(t, readerBrowser, "GET", s.base+"/api/status"); code != 200 {
		t.Errorf("a reader's status: %d %s", code, body)
	}
	if code, body := statusCode(t, readerBrowser, "POST", s.base+"/api/vitals/cpu?enabled=false"); code != 403 {
		t.Errorf("a reader switching a vital: %d %s", code, body)
	}

	// A token given in a file, in $HOLTER_TOKEN, on the command line.
	tokFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokFile, []byte(s.token+"\n"), 0o600)
	elsewhere := t.TempDir() // no token files there to fall back on
	addr := strings.TrimPrefix(s.base, "http://")
	for _, c := range []struct {
		env  []string
		args []string
		code int
		want string
	}{
		{nil, []string{"status", "--data", elsewhere, "--api", addr, "--token-file", tokFile}, 0, "recording"},
		{[]string{"HOLTER_TOKEN=" + s.token}, []string{"query", "--data", elsewhere, "--api", addr, "SELECT 42 AS answer"}, 0, "42"},
		{[]string{"HOLTER_TOKEN=wrong"}, []string{"query", "--data", elsewhere, "--api", addr, "SELECT 42 AS answer"}, 1, "missing or wrong token"},
		{nil, []string{"query", "--data", elsewhere, "--api", addr, "--token", s.token, "SELECT 42 AS answer"}, 0, "42"},
		{nil, []string{"query", "--api", addr, "--token", "x", "--token-file", tokFile, "SELECT 1"}, 2, "not both"},
		{nil, []string{"query", "--api", addr, "--token-file", filepath.Join(elsewhere, "none"), "SELECT 1"}, 2, "no such file"},
	} {
		out, errOut, code := runAs(t, bin, nil, c.env, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("%v holter %s: exit %d, want %d with %q:\n%s%s", c.env, strings.Join(c.args, " "), code, c.code, c.want, out, errOut)
		}
	}

	// holter ui over the recording: the same token, kept across restarts.
	r.cmd.Process.Signal(syscall.SIGINT)
	r.cmd.Wait()
	<-r.done
	us := serveUI(t, bin, "--data", dir)
	if us.token != s.token {
		t.Errorf("holter ui's token %q, the recorder's %q: want the one kept in %s", us.token, s.token, access.AdminTokenFile)
	}
	if code, body := statusCode(t, browserLogin(t, us.loginURL), "GET", us.base+"/api/overview"); code != 200 {
		t.Errorf("holter ui after the login: %d %s", code, body)
	}
	if code, _, _ := (uiSession{base: us.base}).getCode(t, "/api/overview"); code != 401 {
		t.Errorf("holter ui without a token: %d, want 401", code)
	}
}

// getCode is get for a session that may be refused: its status, body and
// the error message of a refusal.
func (s uiSession) getCode(t *testing.T, path string) (int, []byte, string) {
	t.Helper()
	code, b := s.get(t, path)
	var e struct{ Error string }
	json.Unmarshal(b, &e)
	return code, b, e.Error
}

// TestStaleAgentFile: an agent.json naming a live process that is not
// the recorder it recorded (a pid reused since, so another start time)
// neither blocks holter record nor makes holter status see a recorder,
// and the two agree while one records.
func TestStaleAgentFile(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	bin := testutil.BuildHolter(t)
	dir := t.TempDir()
	sleep := exec.Command("sleep", "300")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	start, err := processStart(sleep.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, stale := range []string{
		fmt.Sprintf(`{"pid": %d, "start": %d, "api": "127.0.0.1:1"}`, sleep.Process.Pid, start-1),
		fmt.Sprintf(`{"pid": %d, "api": "127.0.0.1:1", "token": "old"}`, sleep.Process.Pid), // as recorders wrote it before start times
	} {
		if err := os.WriteFile(filepath.Join(dir, agentFile), []byte(stale), 0o644); err != nil {
			t.Fatal(err)
		}
		if info, ok := readAgentInfo(dir); ok {
			t.Errorf("%s taken for a live recorder: %+v", stale, info)
		}
	}
	out, errOut, code := runHolter(t, bin, "status", "--data", dir)
	if !strings.Contains(out+errOut, "no recorder is running") {
		t.Errorf("status beside a stale agent.json: exit %d %s%s", code, out, errOut)
	}
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "", "--vitals", "cpu", "--otlp-grpc", "off", "--otlp-http", "off",
		"--online=false")
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	r.waitEpochs(t, 1)
	if info, ok := readAgentInfo(dir); !ok || info.Pid != r.cmd.Process.Pid {
		t.Errorf("agent.json of the running recorder: %+v %v", info, ok)
	}
	if out, errOut, code := runHolter(t, bin, "status", "--data", dir); code != 0 || !strings.Contains(out, "recording") {
		t.Errorf("status while recording: exit %d %s%s", code, out, errOut)
	}
	if _, errOut, code := runHolter(t, bin, "record", "--data", dir, "--api", ""); code == 0 || !strings.Contains(errOut, "already recording") {
		t.Errorf("a second recorder: exit %d %s", code, errOut)
	}
	r.cmd.Process.Signal(syscall.SIGINT)
	r.cmd.Wait()
	<-r.done
	if out, _, _ := runHolter(t, bin, "status", "--data", dir); !strings.Contains(out, "no recorder is running") {
		t.Errorf("status after the recorder stopped:\n%s", out)
	}
}

// TestServeFlagsCheckedFirst: an address, a data directory or a limit the
// API cannot use is refused before anything is loaded or created (the
// data directory does not appear).
func TestServeFlagsCheckedFirst(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildHolter(t)
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--api", "0.0.0.0:0"}, 1, "is not loopback: give a token"},
		{[]string{"--api", "10.1.2.3:7070"}, 1, "is not loopback: give a token"},
		{[]string{"--api", "nocolon"}, 2, "is not an address HOST:PORT"},
		{[]string{"--api-host", "evil.example:80"}, 2, "is not a host name"},
		{[]string{"--max-traces", "0"}, 2, `--max-traces: "0" is not a whole number in [1, 1024]`},
		{[]string{"--trace-memory", "0"}, 2, "--trace-memory"},
		{[]string{"--token", "x", "--token-file", "/etc/hostname"}, 2, "not both"},
		{[]string{"--data", long}, 2, "longer than the 107 bytes"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		args := append([]string{"record", "--data", dir}, c.args...)
		_, errOut, code := runHolter(t, bin, args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("holter %s: exit %d, want %d with %q: %s", strings.Join(args, " "), code, c.code, c.want, errOut)
		}
		for _, d := range []string{dir, long} {
			if _, err := os.Stat(d); err == nil {
				t.Errorf("holter %s made %s", strings.Join(args, " "), d)
			}
		}
	}
}
