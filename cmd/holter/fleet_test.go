package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/recorder"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

const fleetToken = "fleet-token"

// fleetAgent is a recorder running as its own "host" in a network
// namespace, exporting to ClickHouse.
type fleetAgent struct {
	name, data, api string
	ns              *testutil.Netns
	rec             *recording
	workload        *exec.Cmd
}

func startFleetAgent(t *testing.T, bin string, ns *testutil.Netns, name, chURL string) *fleetAgent {
	t.Helper()
	a := &fleetAgent{name: name, data: filepath.Join(t.TempDir(), name), api: ns.IP + ":7070", ns: ns}
	a.rec = startRecordCmd(t, ns.Command(bin, "record", "--data", a.data, "--host", name, "--epoch", "1s",
		"--vitals", "cpu,sched", "--budget", "off", "--api", a.api, "--token", fleetToken,
		"--export", chURL, "--export-user", testutil.ClickHouseUser, "--export-password", testutil.ClickHousePassword,
		"--export-db", "fleet", "--export-rate", "50MB"))
	t.Cleanup(func() { a.stop() })
	// Each host's own work: a busy loop in its namespace.
	a.workload = ns.Command("sh", "-c", "while :; do :; done")
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
func (a *fleetAgent) status(t *testing.T) *recorder.Status {
	t.Helper()
	c := newClient(a.api, fleetToken)
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
	bin := testutil.BuildHolter(t)
	nsA := testutil.NewNetns(t, "holter-fa", 41)
	nsB := testutil.NewNetns(t, "holter-fb", 42)
	ch := testutil.StartClickHouse(t, "127.0.0.1", nsA.HostIP, nsB.HostIP)
	port := ch.URL[strings.LastIndex(ch.URL, ":")+1:]
	a := startFleetAgent(t, bin, nsA, "fleet-a", "http://"+nsA.HostIP+":"+port)
	b := startFleetAgent(t, bin, nsB, "fleet-b", "http://"+nsB.HostIP+":"+port)
	a.rec.waitEpochs(t, 3)
	b.rec.waitEpochs(t, 3)
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

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
