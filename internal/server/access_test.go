package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/holter-dev/holter/internal/access"
	"github.com/holter-dev/holter/internal/recorder"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

const readToken = "read-token-0123456789"

// recorderOptions are a server's options with every recorder operation
// answering as a recorder's would (no BPF: the test is of who reaches them).
func recorderOptions() Options {
	return Options{
		Status:   func() any { return recorder.Status{Host: "h"} },
		SetVital: func(string, bool) error { return nil },
		AddRun:   func(context.Context, store.Run) error { return nil },
		Boost:    func(uint32, bool) error { return nil },
	}
}

// stateChanging are the routes that change the recorder or load
// programs, each with a request the route itself accepts or refuses with
// a code of its own (never 401 or 403).
var stateChanging = []struct{ method, path, body string }{
	{"POST", "/api/vitals/cpu?enabled=false", ""},
	{"POST", "/api/runs", `{"id": "r1", "params": {"a": "1"}}`},
	{"PUT", "/api/boost/42", ""},
	{"DELETE", "/api/boost/42", ""},
	{"POST", "/api/trace", `{"query": "SELECT nope FROM"}`},
}

// readOnly are routes a reader may use.
var readOnly = []struct{ method, path, body string }{
	{"GET", "/api/status", ""},
	{"GET", "/api/overview", ""},
	{"GET", "/api/openapi.yaml", ""},
	{"GET", "/api/query?q=SELECT+1", ""},
	{"POST", "/api/query", "SELECT 1"},
	{"POST", "/api/export/parquet", "SELECT 1"},
	{"GET", "/metrics", ""},
	{"GET", "/", ""},
}

// call makes a request with plainClient, headers given as name, value
// pairs, and returns its status and body.
func call(t *testing.T, c *http.Client, method, u, body string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	code, b := testutil.HTTPDo(t, c, req)
	return code, string(b)
}

// TestTokenRequired: over HTTP, even on loopback, no token and a wrong
// one are 401s, the admin token opens every route, the reader token the
// read-only ones, and the login URL sets a cookie that works like the
// token and sends the browser on.
func TestTokenRequired(t *testing.T) {
	opts := recorderOptions()
	opts.ReadToken = readToken
	base := startServer(t, opts)
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	for _, c := range []struct {
		name    string
		headers []string
		code    int
	}{{"no token", nil, 401}, {"wrong token", bearer("wrong"), 401}, {"empty bearer", bearer(""), 401},
		{"admin token", bearer(testToken), 200}, {"reader token", bearer(readToken), 200}} {
		for _, path := range []string{"/api/status", "/", "/metrics"} {
			if code, body := call(t, plainClient, "GET", base+path, "", c.headers...); code != c.code {
				t.Errorf("%s, GET %s: %d %s, want %d", c.name, path, code, body, c.code)
			}
		}
	}
	for _, r := range readOnly {
		if code, body := call(t, plainClient, r.method, base+r.path, r.body, bearer(readToken)...); code != 200 {
			t.Errorf("reader: %s %s: %d %s, want 200", r.method, r.path, code, body)
		}
	}
	for _, r := range stateChanging {
		code, body := call(t, plainClient, r.method, base+r.path, r.body, bearer(readToken)...)
		if code != 403 || !strings.Contains(body, "needs the admin role") {
			t.Errorf("reader: %s %s: %d %s, want 403 naming the admin role", r.method, r.path, code, body)
		}
		if code, body := call(t, plainClient, r.method, base+r.path, r.body, bearer(testToken)...); code == 401 || code == 403 {
			t.Errorf("admin: %s %s: %d %s", r.method, r.path, code, body)
		}
	}

	// The login URL: a cookie, HttpOnly and SameSite=Strict, then the page.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Transport: &http.Transport{}, Jar: jar}
	resp, err := browser.Get(LoginURL(strings.TrimPrefix(base, "http://"), readToken))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.RawQuery != "" {
		t.Errorf("login: %d at %s, want 200 at the page without the token", resp.StatusCode, resp.Request.URL)
	}
	if set := resp.Request.Response.Header.Get("Set-Cookie"); !strings.Contains(set, "HttpOnly") || !strings.Contains(set, "SameSite=Strict") {
		t.Errorf("login cookie %q, want HttpOnly and SameSite=Strict", set)
	}
	if code, body := call(t, browser, "GET", base+"/api/status", ""); code != 200 {
		t.Errorf("status with the login cookie: %d %s", code, body)
	}
	if code, _ := call(t, browser, "POST", base+"/api/vitals/cpu?enabled=false", ""); code != 403 {
		t.Errorf("vitals with a reader's login cookie: %d, want 403", code)
	}
	if code, body := call(t, plainClient, "GET", base+"/?token=wrong", ""); code != 401 {
		t.Errorf("login with a wrong token: %d %s", code, body)
	}
}

// TestHostAndOrigin: a Host that is not one of the server's names is
// refused whatever the token (DNS rebinding), and so is a request another
// page made (Origin, Sec-Fetch-Site) to any state-changing route, while
// the server's own pages get through.
func TestHostAndOrigin(t *testing.T) {
	opts := recorderOptions()
	opts.Hosts = []string{"Holter.Example"}
	base := startServer(t, opts)
	hostport := strings.TrimPrefix(base, "http://")
	_, port, _ := net.SplitHostPort(hostport)
	auth := []string{"Authorization", "Bearer " + testToken}
	for host, want := range map[string]int{
		"rebind.evil.example:" + port: 403, "rebind.evil.example": 403, "10.1.2.3:" + port: 403, "localhost.evil.example": 403,
		hostport: 200, "localhost:" + port: 200, "LOCALHOST": 200, "[::1]:" + port: 200, "127.0.0.2:" + port: 200, "holter.example:" + port: 200,
	} {
		code, body := call(t, plainClient, "GET", base+"/api/status", "", append([]string{"Host", host}, auth...)...)
		if code != want {
			t.Errorf("Host %q: %d %s, want %d", host, code, body, want)
		}
		if want == 403 && !strings.Contains(body, "not a name of this server") {
			t.Errorf("Host %q: %s", host, body)
		}
	}

	for _, r := range append(stateChanging, readOnly[4]) {
		for _, h := range [][]string{
			{"Origin", "http://evil.example"},
			{"Origin", "http://127.0.0.1:1"},
			{"Origin", "null"},
			{"Sec-Fetch-Site", "cross-site"},
			{"Sec-Fetch-Site", "same-site"},
		} {
			code, body := call(t, plainClient, r.method, base+r.path, r.body, append(h, auth...)...)
			if code != 403 || !strings.Contains(body, "cross-origin request refused") {
				t.Errorf("%s %s with %s: %s: %d %s, want 403", r.method, r.path, h[0], h[1], code, body)
			}
		}
		for _, h := range [][]string{
			{"Origin", base},
			{"Sec-Fetch-Site", "same-origin"},
			{"Sec-Fetch-Site", "none"},
			nil,
		} {
			if code, body := call(t, plainClient, r.method, base+r.path, r.body, append(h, auth...)...); code == 401 || code == 403 {
				t.Errorf("%s %s from the server's own page (%v): %d %s", r.method, r.path, h, code, body)
			}
		}
	}
	// A page elsewhere may link to the UI, but not read the API.
	if code, _ := call(t, plainClient, "GET", base+"/", "", append([]string{"Sec-Fetch-Site", "cross-site"}, auth...)...); code != 200 {
		t.Errorf("the UI's page from a link on another site: %d", code)
	}
	if code, _ := call(t, plainClient, "GET", base+"/api/query?q=SELECT+1", "", append([]string{"Sec-Fetch-Site", "cross-site"}, auth...)...); code != 403 {
		t.Errorf("a cross-site GET of the API: %d, want 403", code)
	}
}

func TestHostPolicy(t *testing.T) {
	for _, c := range []struct {
		bound string
		host  string
		want  bool
	}{
		{"127.0.0.1", "127.0.0.1:7070", true},
		{"127.0.0.1", "[::1]", true},
		{"127.0.0.1", "[::1", false},
		{"127.0.0.1", "::1", true},
		{"127.0.0.1", "192.168.1.1:7070", false},
		{"127.0.0.1", "name.example", true},
		{"127.0.0.1", "name.example.:7070", false},
		{"127.0.0.1", ":7070", false},
		{"127.0.0.1", "", false},
		{"10.0.0.5", "10.0.0.5:7070", true},
		{"10.0.0.5", "10.0.0.6:7070", false},
		{"0.0.0.0", "10.0.0.6:7070", true},
		{"::", "[fe80::1]:7070", true},
		{"0.0.0.0", "evil.example:7070", false},
	} {
		if got := newHostPolicy(c.bound, []string{"name.example"}).allows(c.host); got != c.want {
			t.Errorf("bound %s, Host %q: %v, want %v", c.bound, c.host, got, c.want)
		}
	}
}

func TestCheckAddr(t *testing.T) {
	for _, c := range []struct {
		addr  string
		given bool
		ok    bool
	}{{"127.0.0.1:0", false, true}, {"localhost:7070", false, true}, {"[::1]:0", false, true},
		{"0.0.0.0:0", false, false}, {"0.0.0.0:0", true, true}, {"10.0.0.1:7070", false, false}, {"nocolon", true, false}} {
		if err := CheckAddr(c.addr, c.given); (err == nil) != c.ok {
			t.Errorf("CheckAddr(%q, %v) = %v", c.addr, c.given, err)
		}
	}
	if err := CheckAddr("0.0.0.0:0", false); err == nil || !strings.Contains(err.Error(), "give a token") {
		t.Errorf("non-loopback without a token: %v", err)
	}
}

// socketClient talks HTTP over the Unix socket path.
func socketClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
}

// socketHelperEnv makes a run of the test binary TestHelperSocketClient.
const socketHelperEnv = "HOLTER_TEST_SOCKET_REQUEST"

// TestHelperSocketClient is the client that TestSocketPeerCredentials
// runs as another user: it makes one request over a socket and prints
// the answer's status and body, or the error.
func TestHelperSocketClient(t *testing.T) {
	spec := os.Getenv(socketHelperEnv)
	if spec == "" {
		t.Skip("run by TestSocketPeerCredentials")
	}
	var req struct{ Socket, Method, Path, Body string }
	if err := json.Unmarshal([]byte(spec), &req); err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest(req.Method, "http://holter"+req.Path, strings.NewReader(req.Body))
	resp, err := socketClient(req.Socket).Do(r)
	if err != nil {
		fmt.Printf("ERROR %v\n", err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("STATUS %d %s\n", resp.StatusCode, b)
}

// asUser runs one request over a socket in a process of uid 65534
// (nobody) with the supplementary groups given, and returns its answer:
// "STATUS code body" or "ERROR …".
func asUser(t *testing.T, bin string, groups []uint32, socket, method, path, body string) string {
	t.Helper()
	spec, _ := json.Marshal(map[string]string{"Socket": socket, "Method": method, "Path": path, "Body": body})
	cmd := exec.Command(bin, "-test.run=^TestHelperSocketClient$", "-test.count=1")
	cmd.Env = append(os.Environ(), socketHelperEnv+"="+string(spec))
	cmd.Dir = filepath.Dir(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: groups}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as uid 65534: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "STATUS ") || strings.HasPrefix(l, "ERROR ") {
			return l
		}
	}
	t.Fatalf("client as uid 65534 answered nothing:\n%s", out)
	return ""
}

// TestSocketPeerCredentials serves on an admin and a reader socket and
// calls them as root, and as uid 65534 in no group, in the reader group
// and in the admin group: the socket files keep out whom their mode does
// not admit, and the peer credentials decide what the others may do, also
// when a socket's mode admits everyone.
func TestSocketPeerCredentials(t *testing.T) {
	testutil.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, bin := testutil.NobodysCopy(t, self)
	const adminGID, readerGID = 64701, 64702
	adminSock, readSock := filepath.Join(dir, "holter.sock"), filepath.Join(dir, "holter-read.sock")
	opts := recorderOptions()
	opts.Groups = access.Groups{Admin: []uint32{adminGID}, Reader: []uint32{readerGID}}
	opts.Sockets = []Socket{{Path: adminSock, Group: []uint32{adminGID}, Cap: access.Root},
		{Path: readSock, Group: []uint32{readerGID}, Cap: access.Reader}}
	startServer(t, opts)
	for path, want := range map[string]string{adminSock: "Srw-rw----", readSock: "Srw-rw----"} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode().String() != want || st.Uid != 0 {
			t.Errorf("%s: mode %s uid %d, want %s and root's", path, fi.Mode(), st.Uid, want)
		}
	}

	// Root: everything on the admin socket, reading on the reader's.
	root := socketClient(adminSock)
	for _, r := range append(stateChanging[:4], readOnly...) {
		if code, body := call(t, root, r.method, "http://holter"+r.path, r.body); code != 200 {
			t.Errorf("root on the admin socket: %s %s: %d %s", r.method, r.path, code, body)
		}
	}
	if code, body := call(t, socketClient(readSock), "POST", "http://holter/api/vitals/cpu?enabled=false", ""); code != 403 {
		t.Errorf("root on the reader socket switching a vital: %d %s, want 403", code, body)
	}

	type want struct {
		groups       []uint32
		socket, m, p string
		body         string
		answer       string // prefix of the answer
	}
	for _, c := range []want{
		{nil, adminSock, "GET", "/api/status", "", "ERROR"},
		{nil, readSock, "GET", "/api/status", "", "ERROR"},
		{[]uint32{readerGID}, adminSock, "GET", "/api/status", "", "ERROR"},
		{[]uint32{readerGID}, readSock, "GET", "/api/status", "", "STATUS 200"},
		{[]uint32{readerGID}, readSock, "POST", "/api/query", "SELECT 42", "STATUS 200"},
		{[]uint32{readerGID}, readSock, "POST", "/api/vitals/cpu?enabled=false", "", "STATUS 403"},
		{[]uint32{readerGID}, readSock, "POST", "/api/runs", `{"id": "r1"}`, "STATUS 403"},
		{[]uint32{readerGID}, readSock, "PUT", "/api/boost/42", "", "STATUS 403"},
		{[]uint32{readerGID}, readSock, "POST", "/api/trace", `{"query": "SELECT count() FROM syscall.getppid"}`, "STATUS 403"},
		{[]uint32{adminGID}, adminSock, "POST", "/api/vitals/cpu?enabled=false", "", "STATUS 200"},
		{[]uint32{adminGID}, adminSock, "POST", "/api/trace", `{"query": "SELECT nope FROM", "unsafe_read": true}`, "STATUS 403 {\"error\":\"unsafe_read"},
		{[]uint32{adminGID}, adminSock, "POST", "/api/trace", `{"query": "SELECT nope FROM"}`, "STATUS 400"},
	} {
		if got := asUser(t, bin, c.groups, c.socket, c.m, c.p, c.body); !strings.HasPrefix(got, c.answer) {
			t.Errorf("uid 65534 in groups %v, %s %s on %s: %s, want %s…", c.groups, c.m, c.p, filepath.Base(c.socket), got, c.answer)
		}
	}
	if got := asUser(t, bin, nil, adminSock, "GET", "/api/status", ""); !strings.Contains(got, "permission denied") {
		t.Errorf("uid 65534 on the admin socket: %s, want permission denied", got)
	}
	// A socket whose mode admits everyone still admits only whom the peer
	// credentials name.
	for _, s := range []string{adminSock, readSock} {
		if err := os.Chmod(s, 0o666); err != nil {
			t.Fatal(err)
		}
		if got := asUser(t, bin, nil, s, "GET", "/api/status", ""); !strings.HasPrefix(got, "STATUS 403") || !strings.Contains(got, "socket admits root") {
			t.Errorf("uid 65534 in no group on %s of mode 0666: %s, want 403", filepath.Base(s), got)
		}
	}
	if got := asUser(t, bin, []uint32{readerGID}, adminSock, "POST", "/api/vitals/cpu?enabled=false", ""); !strings.HasPrefix(got, "STATUS 403") {
		t.Errorf("a reader on the admin socket of mode 0666 switching a vital: %s, want 403", got)
	}
}
