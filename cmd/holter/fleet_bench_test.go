package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// fanOutRun runs one live query across hosts and returns, per interval
// after the first two, the coordinator's interval latency (the longest
// wait from an agent's interval end to its partial's arrival, plus the
// merge), and the coordinator's CPU time.
func fanOutRun(b *testing.B, bin string, hosts []string, query string) (lat []time.Duration, cpu time.Duration) {
	cmd := exec.Command(bin, "trace", "--hosts", strings.Join(hosts, ","), "--for", "8s", "--json", query)
	cmd.Env = append(os.Environ(), "HOLTER_TOKEN="+fleetToken)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 16<<20)
	n := 0
	for sc.Scan() {
		var l struct {
			Hosts  map[string]string
			Fanout fanoutTimes
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			b.Fatal(err)
		}
		if n++; n <= 2 {
			continue
		}
		ok := 0
		for _, s := range l.Hosts {
			if s == "ok" {
				ok++
			}
		}
		if ok == len(hosts) {
			lat = append(lat, time.Duration((l.Fanout.ArrivalLagMs+l.Fanout.MergeMs)*float64(time.Millisecond)))
		}
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("holter trace --hosts: %v\n%s", err, stderr.String())
	}
	if len(lat) < 3 {
		b.Fatalf("only %d intervals with every host: %s", len(lat), stderr.String())
	}
	return lat, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// BenchmarkFleetFanOut is issue 8's fan-out overhead per extra host: the
// same live query (syscalls by command, 8 s, 1 s intervals) over one agent
// and over two, each agent a host in a network namespace; per interval,
// the coordinator's latency from the agents' interval end to the merged
// answer, and the coordinator's CPU. One agent is the baseline of the
// same run.
//
// go test -run '^$' -bench FleetFanOut -benchtime 1x -count 3 ./cmd/holter/
func BenchmarkFleetFanOut(b *testing.B) {
	testutil.RequireRoot(b)
	bin := testutil.BuildHolter(b)
	nsA := testutil.NewNetns(b, "holter-ba", 63)
	nsB := testutil.NewNetns(b, "holter-bb", 64)
	var hosts []string
	for i, ns := range []*testutil.Netns{nsA, nsB} {
		ag := startFleetAgent(b, bin, ns, []string{"bench-a", "bench-b"}[i], "")
		ag.workload.Process.Kill() // no busy loop: the machine is shared
		ag.workload.Wait()
		ag.workload = nil
		ag.rec.waitEpochs(b, 1)
		hosts = append(hosts, ag.api)
	}
	a, c := hosts[0], hosts[1]
	const query = "SELECT comm, count(*) AS n, avg(ret) AS r FROM syscall.any GROUP BY comm"
	for i := 0; i < b.N; i++ {
		lat1, cpu1 := fanOutRun(b, bin, []string{a}, query)
		lat2, cpu2 := fanOutRun(b, bin, []string{a, c}, query)
		m1, m2 := median(lat1), median(lat2)
		b.ReportMetric(float64(m1)/1e6, "ms-1host")
		b.ReportMetric(float64(m2)/1e6, "ms-2hosts")
		b.ReportMetric(float64(m2-m1)/1e6, "ms/extra-host")
		b.ReportMetric(float64(cpu2)/float64(cpu1), "cpu-2vs1")
		b.Logf("interval latency (agent interval end → merged): 1 host median %v (n=%d), 2 hosts %v (n=%d): +%v per extra host, ratio %.2f; coordinator CPU %v vs %v: ratio %.2f",
			m1.Round(10*time.Microsecond), len(lat1), m2.Round(10*time.Microsecond), len(lat2), (m2 - m1).Round(10*time.Microsecond),
			float64(m2)/float64(m1), cpu1.Round(time.Millisecond), cpu2.Round(time.Millisecond), float64(cpu2)/float64(cpu1))
	}
}
