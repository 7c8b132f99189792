package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// fleetToken is the agents' API token, given them in a file
// (fleetTokenFile) and to the fan-out in $HOLTER_TOKEN.
const fleetToken = "fleet-token-0123456789"

// fleetTokenFile writes fleetToken to a file for --token-file.
func fleetTokenFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(fleetToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fleetAgent is a recorder running as its own "host" in a network
// namespace, exporting to ClickHouse.
type fleetAgent struct {
	name, data, api string
	token           string // the API's
	ns              *testutil.Netns
	rec             *recording
	workload        *exec.Cmd
}

func startFleetAgent(t testing.TB, bin string, ns *testutil.Netns, name, chURL string) *fleetAgent {
	t.Helper()
	a := &fleetAgent{name: name, data: filepath.Join(t.TempDir(), name), api: ns.IP + ":7070", token: fleetToken, ns: ns}
	args := []string{"record", "--data", a.data, "--host", name, "--epoch", "1s",
		"--vitals", "cpu,sched", "--budget", "off", "--online=false", "--api", a.api, "--token-file", fleetTokenFile(t)}
	if chURL != "" {
		args = append(args, "--export", chURL, "--export-user", testutil.ClickHouseUser, "--export-password", testutil.ClickHousePassword,
			"--export-db", "fleet", "--export-rate", "50MB")
	}
	a.rec = startRecordCmd(t, ns.Command(bin, args...))
	t.Cleanup(func() { a.stop() })
	// Each host's own work, in its namespace: a loop that runs a few
	// milliseconds at a time, not a busy one, since the fleet tests run
	// beside the other waiting tests (TestMain).
	a.workload = ns.Command("sh", "-c", "while :; do i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; sleep 0.02; done")
	if err := a.workload.Start(); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *fleetAgent) stop() {
	if a.workload != nil && a.workload.Process != nil {
		a.workload.Process.Kill()
		a.workload.Wait()
		a.workload = nil
	}
	if a.rec != nil && a.rec.cmd.ProcessState == nil {
		a.rec.cmd.Process.Signal(syscall.SIGINT)
		a.rec.cmd.Wait()
		<-a.rec.done
	}
}

// status asks the agent's API (from the root namespace, with the token).
func (a *fleetAgent) status(t *testing.T) *agentStatus {
	t.Helper()
	c := newClient(a.api, a.token)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.status(ctx)
	if err != nil {
		t.Fatalf("status of %s: %v\n%s", a.name, err, a.rec.log)
	}
	return st
}

// waitShipped waits until the agent has shipped past epoch n.
func (a *fleetAgent) waitShipped(t *testing.T, n int64, within time.Duration) int64 {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if st := a.status(t); st.Export != nil && st.Export.LastShippedEpoch > n {
			return st.Export.LastShippedEpoch
		}
		time.Sleep(200 * time.Millisecond)
	}
	st := a.status(t)
	b, _ := json.Marshal(st.Export)
	t.Fatalf("%s did not ship past epoch %d within %v: %s\n%s", a.name, n, within, b, a.rec.log)
	return 0
}

// perEpoch is a per-epoch summary that must agree between a host's store
// and ClickHouse: sample count, cpu weight, vitals rows.
const perEpochLocal = `SELECT e.epoch, e.samples, (SELECT count(*) FROM samples s WHERE s.host = e.host AND s.epoch = e.epoch),
	(SELECT coalesce(sum(weight_sum), 0) FROM vitals v WHERE v.host = e.host AND v.epoch = e.epoch)
	FROM epochs e WHERE e.host = $1 AND e.epoch < $2 ORDER BY e.epoch`

// ClickHouse 18.16 joins two tables per SELECT: the joins nest.
const perEpochFleet = `SELECT epoch, samples, n, w FROM (
		SELECT epoch, samples, n FROM (SELECT epoch, samples FROM epochs WHERE host = '%[1]s' AND epoch < %[2]d)
		ANY LEFT JOIN (SELECT epoch, count() AS n FROM samples WHERE host = '%[1]s' GROUP BY epoch) USING epoch)
	ANY LEFT JOIN (SELECT epoch, sum(weight_sum) AS w FROM vitals WHERE host = '%[1]s' GROUP BY epoch) USING epoch
	ORDER BY epoch`

func summary(res *store.Result) []string {
	var out []string
	for _, r := range res.Rows {
		var cells []string
		for _, c := range r {
			cells = append(cells, fmt.Sprint(c))
		}
		out = append(out, strings.Join(cells, ","))
	}
	return out
}

// compareHost checks that every epoch of the host before `before` is in
// ClickHouse exactly once, with the same samples and vitals as the host's
// own store. The agent must be stopped (its store is opened).
func compareHost(t *testing.T, bin, chURL, host, data string, before int64) {
	t.Helper()
	st, err := store.Open(data, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	local, err := st.Query(context.Background(), perEpochLocal, host, before)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Through the CLI, as a user would ask the fleet.
	out, err := exec.Command(bin, "query", "--source", chURL, "--source-db", "fleet", "--format", "csv",
		fmt.Sprintf(perEpochFleet, host, before)).Output()
	if err != nil {
		t.Fatalf("holter query --source: %v: %s", err, stderrOf(err))
	}
	want, got := summary(local), strings.Split(strings.TrimSpace(string(out)), "\n")[1:]
	if len(want) < 2 {
		t.Fatalf("%s: only %d epochs to compare", host, len(want))
	}
	if strings.Join(want, "\n") != strings.Join(got, "\n") {
		t.Errorf("%s: per-epoch epoch/samples/sample rows/weight differ\nlocal store:\n%s\nClickHouse:\n%s",
			host, strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
	ch, _ := clickhouse.New(chURL, &clickhouse.Options{Database: "fleet"})
	dups, err := ch.Query(context.Background(), fmt.Sprintf(`SELECT epoch, count() AS c FROM epochs WHERE host = '%s' GROUP BY epoch HAVING c > 1`, host))
	if err != nil {
		t.Fatal(err)
	}
	if len(dups.Rows) > 0 {
		t.Errorf("%s: epochs that arrived more than once: %v", host, dups.Rows)
	}
}

// TestFleetExport runs two agents as separate hosts in network namespaces,
// each recording its own busy loop and shipping to one ClickHouse server
// reached over the namespaces' veths: both hosts' epochs arrive, and the
// fleet's per-host, per-epoch numbers match each host's own store.
func TestFleetExport(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	bin := testutil.BuildHolter(t)
	ch, a, b := startExportingPair(t, bin, "holter-f", 41, "fleet", 3)
	shippedA := a.waitShipped(t, 2, 60*time.Second)
	shippedB := b.waitShipped(t, 2, 60*time.Second)
	if st := a.status(t).Export; st.Server == "" || st.DroppedBatches != 0 {
		t.Errorf("fleet-a export status: %+v", st)
	}
	a.stop()
	b.stop()
	compareHost(t, bin, ch.URL, "fleet-a", a.data, shippedA)
	compareHost(t, bin, ch.URL, "fleet-b", b.data, shippedB)
	// Host selector material: the fleet knows both hosts.
	out, err := exec.Command(bin, "query", "--source", ch.URL, "--source-db", "fleet", "--format", "csv",
		"SELECT DISTINCT host FROM epochs ORDER BY host").Output()
	if err != nil || strings.TrimSpace(string(out)) != "host\nfleet-a\nfleet-b" {
		t.Errorf("hosts in ClickHouse: %q, %v", out, err)
	}
}

// startExportingPair starts ClickHouse and two agents exporting to it, in
// network namespaces NS+"a" and NS+"b" numbered n and n+1, recording as
// hosts NAME-a and NAME-b; it returns once each committed epochs epochs.
func startExportingPair(t *testing.T, bin, ns string, n int, name string, epochs int) (*testutil.ClickHouse, *fleetAgent, *fleetAgent) {
	t.Helper()
	nsA := testutil.NewNetns(t, ns+"a", n)
	nsB := testutil.NewNetns(t, ns+"b", n+1)
	ch := testutil.StartClickHouse(t, "127.0.0.1", nsA.HostIP, nsB.HostIP)
	port := ch.URL[strings.LastIndex(ch.URL, ":")+1:]
	a := startFleetAgent(t, bin, nsA, name+"-a", "http://"+nsA.HostIP+":"+port)
	b := startFleetAgent(t, bin, nsB, name+"-b", "http://"+nsB.HostIP+":"+port)
	a.rec.waitEpochs(t, epochs)
	b.rec.waitEpochs(t, epochs)
	return ch, a, b
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// loopbackAgent reads the address of the recorder recording into dir,
// and the token it keeps there.
func loopbackAgent(t *testing.T, r *recording, dir, name string) *fleetAgent {
	t.Helper()
	select {
	case <-r.started:
	case <-time.After(30 * time.Second):
		t.Fatalf("recorder did not start:\n%s", r.log)
	}
	for i := 0; i < 100; i++ {
		if info, ok := readAgentInfo(dir); ok {
			return &fleetAgent{name: name, data: dir, api: info.API, token: dirToken(dir), rec: r}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no agent.json in %s", dir)
	return nil
}

// TestExportOutage stops ClickHouse while a host records, kills and
// restarts the recorder during the outage, then brings the server back:
// every epoch recorded meanwhile arrives, exactly once, whole.
func TestExportOutage(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	bin := testutil.BuildHolter(t)
	ch := testutil.StartClickHouse(t, "127.0.0.1")
	dir := filepath.Join(t.TempDir(), "data")
	otlpAddr := freeAddr(t)
	args := []string{"--data", dir, "--host", "outage", "--epoch", "1s", "--vitals", "cpu,sched", "--budget", "off", "--online=false",
		"--api", "127.0.0.1:0", "--export", ch.URL, "--export-db", "fleet", "--export-rate", "50MB",
		"--otlp-grpc", "off", "--otlp-http", otlpAddr}
	r := startRecord(t, bin, args...)
	a := loopbackAgent(t, r, dir, "outage")
	t.Cleanup(func() { a.stop() })
	a.waitShipped(t, 1, 60*time.Second)
	// Spans committed before, during the outage, and after the restart
	// within it: each must arrive once.
	var sent []string
	sendSpans := func(phase int) {
		var spans []testSpan
		now := time.Now().UnixNano()
		for i := 0; i < 5; i++ {
			id := fmt.Sprintf("%08x%08x", phase, i)
			sent = append(sent, id)
			spans = append(spans, testSpan{service: "svc", name: "op", trace: fmt.Sprintf("%032x", phase), id: id,
				start: now, end: now + 1000, event: "e"})
		}
		postSpans(t, nil, otlpAddr, spans)
	}
	sendSpans(1)
	a.waitSpansShipped(t, 60*time.Second)

	ch.Stop()
	sendSpans(2)
	during := r.waitEpochs(t, 3)
	// A restart while the server is away: the spool is all there is.
	r.cmd.Process.Kill()
	r.cmd.Wait()
	<-r.done
	r = startRecord(t, bin, args...)
	a = loopbackAgent(t, r, dir, "outage")
	during = append(during, r.waitEpochs(t, 3)...)
	sendSpans(3)
	if st := a.status(t).Export; st.Connected || st.SpooledBatches == 0 || st.LastError == "" {
		t.Errorf("during the outage the status should say the server is away and batches wait: %+v", st)
	}
	ch.Start()
	last := during[len(during)-1]
	shipped := a.waitShipped(t, last, 60*time.Second)
	a.waitSpansShipped(t, 60*time.Second)
	a.stop()
	compareHost(t, bin, ch.URL, "outage", dir, shipped)
	fleet, _ := clickhouse.New(ch.URL, &clickhouse.Options{Database: "fleet"})
	res, err := fleet.Query(context.Background(), "SELECT epoch FROM epochs WHERE host = 'outage'")
	if err != nil {
		t.Fatal(err)
	}
	arrived := map[int64]bool{}
	for _, row := range res.Rows {
		arrived[row[0].(int64)] = true
	}
	for _, e := range during {
		if !arrived[e] {
			t.Errorf("epoch %d, committed during the outage, did not arrive", e)
		}
	}
	for _, table := range []string{"spans", "span_events"} {
		res, err = fleet.Query(context.Background(), "SELECT span_id, count() FROM "+table+" WHERE host = 'outage' GROUP BY span_id")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, row := range res.Rows {
			got[row[0].(string)] = row[1].(int64)
		}
		for _, id := range sent {
			if got[id] != 1 {
				t.Errorf("%s: span %s arrived %d times, want once", table, id, got[id])
			}
		}
		if len(got) != len(sent) {
			t.Errorf("%s: %d spans in ClickHouse, %d sent", table, len(got), len(sent))
		}
	}
}

// traceLine is one interval of holter trace --json.
type traceLine struct {
	Rows  []map[string]any
	Hosts map[string]string
}

// TestFleetTrace runs a live query across two agents in network
// namespaces, authenticating with their token, and kills one mid-query:
// the merged intervals say which hosts contributed, the killed one is
// reported failed, and the query goes on with the other. Exactness: a
// workload makes a known number of reads of known sizes while both
// agents answer; both watch the same kernel, so the fleet's count and sum
// are exactly twice one host's, and its avg, p99 and count_distinct —
// merged from sum and count, histogram buckets and distinct bitmaps —
// equal what one host (holter trace --local, run beside) computes.
func TestFleetTrace(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	bin := testutil.BuildHolter(t)
	nsA := testutil.NewNetns(t, "holter-ta", 43)
	nsB := testutil.NewNetns(t, "holter-tb", 44)
	a := startFleetAgent(t, bin, nsA, "trace-a", "")
	b := startFleetAgent(t, bin, nsB, "trace-b", "")
	a.rec.waitEpochs(t, 1)
	b.rec.waitEpochs(t, 1)

	// tracecalls reads /dev/zero r times, cycling through 1, 100, 1000
	// and 5000 bytes, once its gate file appears.
	const r = 400
	work := testutil.BuildWorkload(t, "tracecalls")
	gate := filepath.Join(t.TempDir(), "gate")
	wl := exec.Command(work, gate, "0", fmt.Sprint(r), "0")
	if err := wl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wl.Process.Kill(); wl.Wait() })
	query := fmt.Sprintf(`SELECT count(*) AS n, sum(count) AS s, avg(count) AS a, p99(count) AS q, count_distinct(count) AS d
		FROM syscall.read WHERE pid = %d AND fd > 2`, wl.Process.Pid)

	traceLines := func(cmd *exec.Cmd, each func(n int, l traceLine)) (<-chan []traceLine, *strings.Builder) {
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan []traceLine, 1)
		go func() {
			var lines []traceLine
			dec := json.NewDecoder(stdout)
			for {
				var l traceLine
				if err := dec.Decode(&l); err != nil {
					break
				}
				lines = append(lines, l)
				each(len(lines), l)
			}
			done <- lines
		}()
		return done, &stderr
	}
	// One host's answer, over the same kernel, as the baseline; it runs
	// until interrupted.
	localUp := make(chan struct{})
	local := exec.Command(bin, "trace", "--local", "--json", query)
	localDone, localErr := traceLines(local, func(n int, _ traceLine) {
		if n == 1 {
			close(localUp)
		}
	})
	select {
	case <-localUp:
	case <-time.After(30 * time.Second):
		t.Fatalf("holter trace --local gave no interval: %s", localErr)
	}
	// Once an interval has both hosts' partials (they are attached), the
	// workload runs; two intervals later one agent is killed.
	fleetUp := make(chan struct{})
	both := 0
	fleet := exec.Command(bin, "trace", "--hosts", a.api+","+b.api, "--for", "12s", "--json", query)
	fleet.Env = append(os.Environ(), "HOLTER_TOKEN="+fleetToken)
	fleetDone, stderr := traceLines(fleet, func(n int, l traceLine) {
		switch {
		case both == 0 && l.Hosts[a.api] == "ok" && l.Hosts[b.api] == "ok":
			both = n
			close(fleetUp)
		case both > 0 && n == both+2:
			b.rec.cmd.Process.Kill()
		}
	})
	select {
	case <-fleetUp:
	case <-time.After(30 * time.Second):
		fleet.Process.Kill()
		t.Fatalf("holter trace --hosts gave no interval with both hosts: %s", stderr)
	}
	// Both agents answer: the reads happen now.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := wl.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	lines := <-fleetDone
	if err := fleet.Wait(); err != nil {
		t.Fatalf("holter trace --hosts: %v\n%s\n%v", err, stderr.String(), lines)
	}
	local.Process.Signal(syscall.SIGINT)
	localLines := <-localDone
	local.Wait()
	if len(localLines) < 2 {
		t.Fatalf("holter trace --local: %d intervals\n%s", len(localLines), localErr)
	}
	if len(lines) < both+4 {
		t.Fatalf("only %d intervals, %d after both hosts contributed:\n%v\n%s", len(lines), len(lines)-both, lines, stderr.String())
	}
	last := lines[len(lines)-2]
	if last.Hosts[a.api] != "ok" || !strings.HasPrefix(last.Hosts[b.api], "failed") {
		t.Errorf("after the kill: %s should contribute and %s be reported failed: %v", a.api, b.api, last.Hosts)
	}
	if len(last.Rows) != 1 {
		t.Errorf("the surviving host's results should go on: %v", last.Rows)
	}

	// Exactness.
	num := func(l traceLine, col string) float64 {
		if len(l.Rows) == 0 {
			return 0 // no host contributed to this interval
		}
		if len(l.Rows) != 1 {
			t.Fatalf("%d rows in an interval, want 1: %v", len(l.Rows), l.Rows)
		}
		f, _ := l.Rows[0][col].(float64)
		return f
	}
	total := func(ls []traceLine, col string) (sum float64) {
		for _, l := range ls {
			sum += num(l, col)
		}
		return sum
	}
	const bytes = r / 4 * (1 + 100 + 1000 + 5000)
	if n, s := total(localLines, "n"), total(localLines, "s"); n != r || s != bytes {
		t.Fatalf("one host counted %v reads of %v bytes, want %d of %d", n, s, r, bytes)
	}
	if n, s := total(lines, "n"), total(lines, "s"); n != 2*r || s != 2*bytes {
		t.Errorf("the fleet counted %v reads of %v bytes, want exactly twice one host's: %d of %d", n, s, 2*r, 2*bytes)
	}
	var one traceLine
	for _, l := range localLines {
		if num(l, "n") == r {
			one = l
		}
	}
	if one.Rows == nil {
		t.Fatalf("one host's reads straddle two intervals: %v", localLines)
	}
	whole := 0
	for _, l := range lines {
		// An interval holding one agent's whole burst or both: the same
		// events, once or twice, so the same avg, p99 and distinct count.
		if n := num(l, "n"); n != r && n != 2*r {
			if n != 0 {
				t.Logf("an agent's burst straddles its intervals: %v", l.Rows)
			}
			continue
		}
		whole++
		for _, col := range []string{"a", "q", "d"} {
			if num(l, col) != num(one, col) {
				t.Errorf("%s: fleet %v, one host %v (fleet interval %v, one host's %v)", col, num(l, col), num(one, col), l.Rows, one.Rows)
			}
		}
	}
	if whole == 0 {
		t.Errorf("no fleet interval holds a whole burst: %v", lines)
	}
	if num(one, "a") != 1525.25 || num(one, "d") != 4 {
		t.Errorf("one host: avg %v, count_distinct %v; want 1525.25 and 4", num(one, "a"), num(one, "d"))
	}
}
