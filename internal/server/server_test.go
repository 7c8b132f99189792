package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/recorder"
	"github.com/holter-dev/holter/internal/store"
)

func startServer(t testing.TB, opts Options) string {
	t.Helper()
	if opts.Store == nil {
		st, err := store.Open(t.TempDir(), &store.Options{ExportDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		err = st.WriteEpoch(context.Background(), &store.Epoch{Host: "h", Epoch: 1, StartNs: 1, EndNs: 2,
			Vitals: []store.Vital{{Name: "cpu", Events: 3, WeightSum: 30}}})
		if err != nil {
			t.Fatal(err)
		}
		opts.Store = st
	}
	if opts.Addr == "" && len(opts.Sockets) == 0 {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.Token == "" {
		opts.Token = testToken
	}
	srv, err := Listen(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	testServers.Store(srv.Addr(), true)
	return "http://" + srv.Addr()
}

func get(t *testing.T, req *http.Request) (int, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("%s %s: body is not JSON: %q", req.Method, req.URL, b)
	}
	return resp.StatusCode, body
}

func TestEndpoints(t *testing.T) {
	base := startServer(t, Options{Status: func() any { return recorder.Status{Host: "h", CurrentEpoch: 7} }})
	q := func(sql string) string { return base + "/api/query?q=" + url.QueryEscape(sql) }
	newReq := func(method, u, body string) *http.Request {
		r, _ := http.NewRequest(method, u, strings.NewReader(body))
		return r
	}
	cases := []struct {
		name      string
		req       *http.Request
		code      int
		wantKey   string
		wantError string
	}{
		{"status", newReq("GET", base+"/api/status", ""), 200, "current_epoch", ""},
		{"query get", newReq("GET", q("SELECT sum(weight_sum) AS w FROM vitals"), ""), 200, "rows", ""},
		{"query post", newReq("POST", base+"/api/query", "SELECT epoch FROM epochs"), 200, "rows", ""},
		{"missing query", newReq("GET", base+"/api/query", ""), 400, "", "missing query"},
		{"empty body", newReq("POST", base+"/api/query", "  "), 400, "", "missing query"},
		{"syntax error", newReq("GET", q("SELEKT 1"), ""), 400, "", "syntax error"},
		{"unknown column", newReq("GET", q("SELECT nope FROM epochs"), ""), 400, "", "nope"},
		{"write refused", newReq("POST", base+"/api/query", "DELETE FROM epochs"), 400, "", "read-only"},
		{"file access refused", newReq("GET", q("SELECT * FROM read_csv('/etc/passwd')"), ""), 400, "", "read_csv"},
		{"too large", newReq("POST", base+"/api/query", "SELECT '"+strings.Repeat("x", MaxQueryBytes)+"'"), 413, "", "longer than"},
		{"unknown path", newReq("GET", base+"/api/nothing", ""), 404, "", ""},
		{"wrong method", newReq("DELETE", base+"/api/query", ""), 405, "", ""},
		{"vital toggle without a recorder", newReq("POST", base+"/api/vitals/cpu?enabled=false", ""), 404, "", "no recorder"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.DefaultClient.Do(c.req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.code {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.code, b)
			}
			if c.wantKey == "" && c.wantError == "" {
				return
			}
			var body map[string]any
			if err := json.Unmarshal(b, &body); err != nil {
				t.Fatalf("body is not JSON: %q", b)
			}
			if c.wantKey != "" {
				if _, ok := body[c.wantKey]; !ok {
					t.Errorf("body lacks %q: %s", c.wantKey, b)
				}
			}
			if c.wantError != "" && !strings.Contains(body["error"].(string), c.wantError) {
				t.Errorf("error %q lacks %q", body["error"], c.wantError)
			}
		})
	}
	_, body := get(t, newReq("GET", q("SELECT sum(weight_sum) AS w FROM vitals"), ""))
	if rows := body["rows"].([]any); len(rows) != 1 || rows[0].([]any)[0].(float64) != 30 {
		t.Errorf("query answered %v", body)
	}
}

func TestStoredRecordingHasNoStatus(t *testing.T) {
	base := startServer(t, Options{})
	r, _ := http.NewRequest("GET", base+"/api/status", nil)
	code, body := get(t, r)
	if code != 404 || !strings.Contains(body["error"].(string), "no recorder") {
		t.Errorf("status without recorder: %d %v", code, body)
	}
}

// TestBoostRoute: PUT and DELETE /api/boost/{pid} reach the recorder with
// the process id; one that is not a process id is a 400 that names it, a
// recorder's refusal a 400 with its reason, and a stored recording a 404.
func TestBoostRoute(t *testing.T) {
	type call struct {
		pid uint32
		on  bool
	}
	var calls []call
	base := startServer(t, Options{Boost: func(pid uint32, on bool) error {
		if pid == 99 {
			return errors.New("boost process 99: no such process")
		}
		calls = append(calls, call{pid, on})
		return nil
	}})
	for _, c := range []struct {
		method, pid string
		code        int
		want        string
	}{
		{"PUT", "42", 200, ""},
		{"DELETE", "42", 200, ""},
		{"PUT", "x1", 400, `pid "x1" is not a process id`},
		{"PUT", "0", 400, `pid "0" is not a process id`},
		{"DELETE", "4294967296", 400, "is not a process id"},
		{"PUT", "99", 400, "no such process"},
	} {
		r, _ := http.NewRequest(c.method, base+"/api/boost/"+c.pid, nil)
		code, body := get(t, r)
		if msg, _ := body["error"].(string); code != c.code || !strings.Contains(msg, c.want) {
			t.Errorf("%s /api/boost/%s: %d %v, want %d %q", c.method, c.pid, code, body, c.code, c.want)
		}
	}
	if want := []call{{42, true}, {42, false}}; !reflect.DeepEqual(calls, want) {
		t.Errorf("the recorder was asked %v, want %v", calls, want)
	}
	stored := startServer(t, Options{})
	r, _ := http.NewRequest("PUT", stored+"/api/boost/42", nil)
	if code, body := get(t, r); code != 404 || !strings.Contains(body["error"].(string), "no recorder") {
		t.Errorf("boost without a recorder: %d %v", code, body)
	}
}
