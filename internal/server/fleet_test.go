package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/export"
	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// shipAll ships epochs 1 to last of each host in st to ch through the
// exporter, as recorders with --export would, and waits until all arrived.
func shipAll(t *testing.T, st *store.Store, ch *clickhouse.Client, last int64, hosts ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var exs []*export.Exporter
	var running sync.WaitGroup
	defer func() { cancel(); running.Wait() }()
	for _, host := range hosts {
		ex, err := export.New(export.Options{Client: ch, Store: st, Host: host, SpoolDir: filepath.Join(t.TempDir(), "spool"), Rate: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		for e := int64(1); e <= last; e++ { // a new spool starts at the epoch it is told of
			if err := ex.Committed(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		exs = append(exs, ex)
		running.Add(1)
		go func() { defer running.Done(); ex.Run(ctx) }()
	}
	deadline := time.Now().Add(60 * time.Second)
	for i, ex := range exs {
		for {
			s := ex.Status()
			if s.LastShippedEpoch == last && s.SpooledBatches == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not all shipped within 60s: %+v", hosts[i], s)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// getJSON fetches url and decodes its body, whatever the status.
func getJSON(t *testing.T, url string) (int, any) {
	t.Helper()
	code, b := testutil.HTTPGet(t, url)
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("GET %s: %d, body is not JSON: %q", url, code, b)
	}
	return code, v
}

// TestFleetAPIMatchesStore ships two synthetic hosts' recordings from a
// DuckDB store to a real ClickHouse server and asks both the same
// questions through the API: every endpoint gives the same answer from
// the fleet's ClickHouse as from the hosts' own store, per host and for
// all hosts (per-host series, a host column in the top tables). Then bad
// input in fleet mode: an unknown host, endpoints that need a recorder,
// and the ClickHouse server stopping.
func TestFleetAPIMatchesStore(t *testing.T) {
	chServer := testutil.StartClickHouse(t, "127.0.0.1")
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// Two hosts whose epochs interleave: h2 starts 20 s after h1.
	synthetic{host: "h1", startNs: synthStart, epoch: time.Minute, epochs: 8, samplesPerEpoc: 66}.write(t, st)
	synthetic{host: "h2", startNs: synthStart + 20e9, epoch: time.Minute, epochs: 8, samplesPerEpoc: 30}.write(t, st)
	// Findings as each host's online analysis stores them, with the range
	// it analysed: the host's own store reports them as the fleet does.
	for i, host := range []string{"h1", "h2"} {
		f := findings.Finding{Rule: "rule5-blocking", Timescale: "epoch", Subject: "pid 200 (blocker) disk", StartNs: minute(2 + i),
			EndNs: minute(4 + i), Severity: []float64{0.2, 0.3}[i], Score: float64(2 + i), Resource: findings.ResourceDisk,
			Summary: "blocker blocks", Vitals: []string{"blck"}, Processes: []findings.Process{{Pid: 200, Comm: "blocker"}},
			Culprit: &findings.Culprit{Pid: 200, Comm: "blocker", Function: "mid_1"}}
		if err := st.AddAnalysis(context.Background(), host, []store.Finding{f.Row(host)}, 0, minute(0), minute(9)); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := clickhouse.New(chServer.URL, &clickhouse.Options{Database: "fleetapi"})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	shipAll(t, st, ch, 8, "h1", "h2")
	t.Logf("shipped in %v", time.Since(began))
	began = time.Now()
	local := startServer(t, Options{Store: st})
	fleet := startServer(t, Options{Store: Fleet{Client: ch}})

	sel := rangeQ(2, 6)
	base := fmt.Sprintf("base_from=%d&base_to=%d", minute(6), minute(8))
	paths := []string{
		"/api/overview",
		"/api/vitals?" + rangeQ(0, 8) + "&timescale=epoch",
		"/api/vitals?" + rangeQ(0, 8) + "&timescale=5m&vital=cpu,blck",
		"/api/vitals?" + rangeQ(3, 3), // from = to: the same 400
		"/api/samples?" + sel,
		"/api/samples?" + sel + "&order=weight&limit=17&offset=5",
		"/api/samples?" + sel + "&vital=cpu&comm=spin&func=leaf_1",
		"/api/samples?" + sel + "&pid=200&exe=blocker&uid=1000",
		"/api/stacks?id=1003&id=9223372036854775813&id=77",
		"/api/flame?" + sel + "&vital=cpu",
		"/api/flame?" + sel + "&vital=blck&" + base,
		"/api/flame?" + sel + "&vital=cpu&func=mid_2",
		"/api/findings?" + rangeQ(0, 8),
		"/api/findings?" + rangeQ(0, 8) + "&rule=rule5-blocking",
		"/api/findings?" + rangeQ(5, 8),
	}
	for _, by := range []string{"comm", "exe", "pid", "uid", "site", "ksite"} {
		paths = append(paths, "/api/top?"+sel+"&vital=cpu&limit=50&by="+by)
	}
	paths = append(paths, "/api/top?"+sel+"&vital=blck&by=site&limit=3")
	compared := 0
	var tookL, tookF time.Duration
	for _, p := range paths {
		for _, host := range []string{"", "h1", "h2", "nowhere"} {
			url := p
			if host != "" {
				url += map[bool]string{true: "&", false: "?"}[strings.Contains(p, "?")] + "host=" + host
			}
			t0 := time.Now()
			codeL, ansL := getJSON(t, local+url)
			t1 := time.Now()
			codeF, ansF := getJSON(t, fleet+url)
			tookL, tookF = tookL+t1.Sub(t0), tookF+time.Since(t1)
			if m, ok := ansF.(map[string]any); ok {
				delete(m, "fleet") // the one field that tells them apart
				delete(ansL.(map[string]any), "fleet")
			}
			if codeL != codeF || !reflect.DeepEqual(ansL, ansF) {
				l, _ := json.Marshal(ansL)
				f, _ := json.Marshal(ansF)
				t.Errorf("GET %s\nown store  %d: %.3000s\nClickHouse %d: %.3000s", url, codeL, l, codeF, f)
				continue
			}
			compared++
		}
	}
	t.Logf("%d answers the same from DuckDB and ClickHouse, asked in %v; DuckDB answered in %v, ClickHouse in %v (%.1fx)",
		compared, time.Since(began), tookL, tookF, tookF.Seconds()/tookL.Seconds())

	// The answers are not empty, and all hosts' answers break down by host.
	_, v := getJSON(t, fleet+"/api/vitals?"+rangeQ(0, 8)+"&vital=cpu")
	var va VitalsAnswer
	remarshal(t, v, &va)
	if len(va.Series) != 2 || va.Series[0].Host != "h1" || va.Series[1].Host != "h2" ||
		len(va.Series[0].T) != 8 || len(va.Series[1].T) != 8 {
		t.Errorf("cpu of all hosts: want a series of 8 epochs for each of h1 and h2: %+v", va.Series)
	}
	_, v = getJSON(t, fleet+"/api/top?"+sel+"&vital=cpu&by=comm")
	var top TopAnswer
	remarshal(t, v, &top)
	hosts := map[string]bool{}
	for _, r := range top.Rows {
		hosts[r.Host] = true
	}
	if !hosts["h1"] || !hosts["h2"] || len(top.Rows) != 6 {
		t.Errorf("fleet top processes: want each host's 3 processes with their host: %+v", top.Rows)
	}
	_, v = getJSON(t, fleet+"/api/findings?"+rangeQ(0, 8))
	var fa FindingsAnswer
	remarshal(t, v, &fa)
	if len(fa.Incidents) != 2 || fa.Incidents[0].StartNs != minute(3) || fa.Incidents[0].Severity != 0.3 || fa.Incidents[1].Findings[0].Score != 2 {
		t.Errorf("fleet findings: want each host's shipped finding, ranked: %+v", fa.Incidents)
	}
	_, v = getJSON(t, fleet+"/api/samples?"+sel+"&host=h2")
	var sa SamplesAnswer
	remarshal(t, v, &sa)
	if sa.Total != 4*30 {
		t.Errorf("h2 samples in minutes 2–6: %d, want 4 epochs of 30", sa.Total)
	}

	// Bad input: an unknown host is a 404 that names it, what needs a
	// host's own recorder or store is a 404 that says so, and a ClickHouse
	// server that does not answer is a prompt 502 that names it, not a hang.
	for _, c := range []struct {
		method, path string
		code         int
		want         string
	}{
		{"GET", "/api/overview?host=nowhere", 404, `nothing recorded for host \"nowhere\"`},
		{"GET", "/api/top?" + rangeQ(0, 8) + "&vital=cpu&host=nowhere", 404, `nothing recorded for host \"nowhere\"`},
		{"GET", "/api/status", 404, "fleet mode"},
		{"POST", "/api/vitals/cpu?enabled=false", 404, "fleet mode"},
		{"POST", "/api/trace", 404, "not in fleet mode: live queries"},
		{"GET", "/api/latency-graph", 400, "give service= and operation="},
		{"GET", "/api/traces/xyz/path", 400, "32 hex digits"},
		{"GET", "/metrics", 404, "not in fleet mode: the virtual performance counters"},
		{"GET", "/api/diff?target=1&reference=2", 404, "not in fleet mode: the metric diff"},
		{"PUT", "/api/boost/1", 404, "not in fleet mode: a host's own recorder samples its processes"},
		{"GET", "/api/query?q=SELECT+count()+AS+n+FROM+epochs", 200, `"rows":[[16]]`},
		{"GET", "/api/query?q=DROP+TABLE+epochs", 400, "clickhouse:"},
	} {
		req, _ := http.NewRequest(c.method, fleet+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.want) {
			t.Errorf("%s %s: %d %s, want %d with %q", c.method, c.path, resp.StatusCode, b, c.code, c.want)
		}
	}
	if res, err := ch.Query(context.Background(), "SELECT count() FROM epochs"); err != nil || fmt.Sprint(res.Rows) != "[[16]]" {
		t.Errorf("the epochs table after the refused DROP: %v, %v", res, err)
	}

	// A database nothing was shipped to.
	empty, err := clickhouse.New(chServer.URL, &clickhouse.Options{Database: "nothing_here"})
	if err != nil {
		t.Fatal(err)
	}
	if code, ans := getJSON(t, startServer(t, Options{Store: Fleet{Client: empty}})+"/api/overview"); code != http.StatusBadGateway ||
		!strings.Contains(fmt.Sprint(ans), "has no database nothing_here") {
		t.Errorf("overview of a database nothing was shipped to: %d %v", code, ans)
	}

	// The server goes away: every read endpoint answers 502 at once.
	chServer.Stop()
	for _, p := range []string{"/api/overview", "/api/vitals?" + rangeQ(0, 8), "/api/samples?" + rangeQ(0, 8), "/api/query?q=SELECT+1"} {
		began := time.Now()
		code, ans := getJSON(t, fleet+p)
		msg := fmt.Sprint(ans)
		if code != http.StatusBadGateway || !strings.Contains(msg, "ClickHouse at "+chServer.URL) || !strings.Contains(msg, "does not answer") {
			t.Errorf("GET %s with ClickHouse stopped: %d %s", p, code, msg)
		}
		if d := time.Since(began); d > 5*time.Second {
			t.Errorf("GET %s with ClickHouse stopped took %v", p, d)
		}
	}
}

func remarshal(t *testing.T, v, out any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}
