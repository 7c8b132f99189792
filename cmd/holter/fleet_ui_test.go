package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// serveUI starts `holter ui ARGS --api 127.0.0.1:0` and returns its URL
// and token.
func serveUI(t *testing.T, bin string, args ...string) uiSession {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"ui", "--api", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("holter ui %v printed nothing: %v\n%s", args, err, stderr.String())
	}
	_, login, _ := strings.Cut(strings.TrimSpace(line), " on ")
	return sessionOf(t, login)
}

// apiGet fetches an API answer as generic JSON; it must succeed.
func apiGet(t *testing.T, s uiSession, path string, q url.Values) any {
	t.Helper()
	var v any
	apiDecode(t, s, path+"?"+q.Encode(), &v)
	return v
}

// TestFleetUI runs two agents as hosts in network namespaces, each
// recording its own busy loop and shipping to a real ClickHouse, and
// serves `holter ui --source` over it: for each host, the vitals of every
// shipped epoch, the top processes and sites and the samples of the range
// are what that host's own store answers (`holter ui --data`). Then
// headless Chromium (ui/test/fleet.test.mjs) checks the host selector
// offers both hosts and a vital's chart overlays one line per host.
func TestFleetUI(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	bin := testutil.BuildHolter(t)
	began := time.Now()
	nsA := testutil.NewNetns(t, "holter-ua", 51)
	nsB := testutil.NewNetns(t, "holter-ub", 52)
	ch := testutil.StartClickHouse(t, "127.0.0.1", nsA.HostIP, nsB.HostIP)
	port := ch.URL[strings.LastIndex(ch.URL, ":")+1:]
	a := startFleetAgent(t, bin, nsA, "ui-a", "http://"+nsA.HostIP+":"+port)
	b := startFleetAgent(t, bin, nsB, "ui-b", "http://"+nsB.HostIP+":"+port)
	for _, ag := range []*fleetAgent{a, b} {
		select {
		case <-ag.rec.started:
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not start within 60s:\n%s", ag.name, ag.rec.log)
		}
	}
	// Epochs 1 and 2 shipped and 3 committed: a machine busy with other
	// tests may take its time.
	shipped := map[*fleetAgent]int64{a: a.waitShipped(t, 2, 90*time.Second), b: b.waitShipped(t, 2, 90*time.Second)}
	a.stop()
	b.stop()
	t.Logf("recorded and shipped in %v", time.Since(began))
	began = time.Now()

	fleet := serveUI(t, bin, "--source", ch.URL, "--source-db", "fleet",
		"--source-user", testutil.ClickHouseUser, "--source-password", testutil.ClickHousePassword)
	for _, ag := range []*fleetAgent{a, b} {
		own := serveUI(t, bin, "--data", ag.data)
		// The range: the host's epochs up to the last shipped one.
		res := apiGet(t, own, "/api/query", url.Values{"q": {fmt.Sprintf(
			"SELECT min(start_ns)::VARCHAR, max(end_ns)::VARCHAR, count(*) FROM epochs WHERE host = '%s' AND epoch <= %d", ag.name, shipped[ag])}})
		row := res.(map[string]any)["rows"].([]any)[0].([]any)
		// Strings: nanoseconds since 1970 are beyond a JSON number's exact range.
		var from, to int64
		fmt.Sscan(row[0].(string), &from)
		fmt.Sscan(row[1].(string), &to)
		to-- // the next epoch starts where the last shipped one ends
		q := func(extra ...string) url.Values {
			v := url.Values{"host": {ag.name}, "from": {fmt.Sprint(from)}, "to": {fmt.Sprint(to)}}
			for i := 0; i+1 < len(extra); i += 2 {
				v.Set(extra[i], extra[i+1])
			}
			return v
		}
		checks := []struct {
			path string
			q    url.Values
		}{
			{"/api/vitals", q("timescale", "epoch")},
			{"/api/top", q("vital", "cpu", "by", "comm", "limit", "20")},
			{"/api/top", q("vital", "cpu", "by", "site", "limit", "20")},
			{"/api/top", q("vital", "sched", "by", "pid", "limit", "20")},
			{"/api/samples", q("limit", "50")},
			{"/api/samples", q("vital", "cpu", "comm", "sh", "order", "weight", "limit", "20")},
		}
		for _, c := range checks {
			mine, theirs := apiGet(t, own, c.path, c.q), apiGet(t, fleet, c.path, c.q)
			if !reflect.DeepEqual(mine, theirs) {
				m, _ := json.Marshal(mine)
				f, _ := json.Marshal(theirs)
				t.Errorf("%s %s?%s\nown store:  %.2000s\nClickHouse: %.2000s", ag.name, c.path, c.q.Encode(), m, f)
			}
		}
		// Not empty: the epochs are there with cpu samples of the loop.
		var va struct {
			Series []struct {
				Vital string
				T     []int64
			}
		}
		remarshalJSON(t, apiGet(t, fleet, "/api/vitals", q("vital", "cpu")), &va)
		if len(va.Series) != 1 || int64(len(va.Series[0].T)) != int64(row[2].(float64)) {
			t.Errorf("%s: cpu of %v epochs from ClickHouse: %+v", ag.name, row[2], va.Series)
		}
		var sa struct{ Total int64 }
		remarshalJSON(t, apiGet(t, fleet, "/api/samples", q("vital", "cpu")), &sa)
		if sa.Total == 0 {
			t.Errorf("%s: no cpu samples in ClickHouse for the range", ag.name)
		}
	}

	t.Logf("compared in %v", time.Since(began))

	// The browser: the host selector and the overlay of both hosts.
	requireBrowser(t)
	runBrowserTests(t, "test/fleet.test.mjs", "ui-fleet", "HOLTER_URL="+fleet.loginURL, "HOLTER_HOSTS=ui-a,ui-b")
}

func remarshalJSON(t *testing.T, v, out any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}
