package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/testutil"
)

type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr   string `json:"expr"`
			RawSQL string `json:"rawSql"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T, name string) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "deploy", "grafana", name))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no title or panels", name)
	}
	return d
}

// TestGrafanaDashboards checks deploy/grafana's dashboards against what
// they read: a recorder that records and ships to a real ClickHouse. Every
// metric the Prometheus dashboard's queries name is one /metrics exposes,
// and promtool parses each query (as a recording rule); every SQL query of
// the ClickHouse dashboard runs on the shipped tables (Grafana's
// $__timeFilter macro given all time), the per-host CPU one with rows.
func TestGrafanaDashboards(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	promtool := testutil.RequireTool(t, "promtool")
	prom := readDashboard(t, "holter-prometheus.json")
	fleet := readDashboard(t, "holter-clickhouse.json")
	bin := testutil.BuildHolter(t)
	ch := testutil.StartClickHouse(t, "127.0.0.1")
	dir := filepath.Join(t.TempDir(), "data")
	r := startRecord(t, bin, "--data", dir, "--host", "graf", "--epoch", "1s", "--vitals", "cpu,sched,blck,blio", "--budget", "off",
		"--online=false", "--api", "127.0.0.1:0", "--export", ch.URL, "--export-db", "fleet", "--otlp-grpc", "off", "--otlp-http", freeAddr(t))
	a := loopbackAgent(t, r, dir, "graf")
	t.Cleanup(func() { a.stop() })
	a.waitShipped(t, 2, 90*time.Second)

	s := recorderSession(t, bin, dir)
	code, body := s.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	exposed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(string(body), -1) {
		exposed[m[1]] = true
		switch m[2] {
		case "histogram":
			exposed[m[1]+"_bucket"], exposed[m[1]+"_sum"], exposed[m[1]+"_count"] = true, true, true
		case "summary":
			exposed[m[1]+"_sum"], exposed[m[1]+"_count"] = true, true
		}
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: holter-dashboard\n    rules:\n")
	n := 0
	for _, p := range prom.Panels {
		for _, tg := range p.Targets {
			for _, name := range regexp.MustCompile(`holter_[a-z0-9_]+`).FindAllString(tg.Expr, -1) {
				if !exposed[name] {
					t.Errorf("panel %q: /metrics has no %s", p.Title, name)
				}
			}
			expr := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*").Replace(tg.Expr)
			n++
			fmt.Fprintf(&rules, "      - record: holter:dashboard_%d\n        expr: %q\n", n, expr)
		}
	}
	rulesFile := filepath.Join(t.TempDir(), "rules.yml")
	os.WriteFile(rulesFile, []byte(rules.String()), 0o644)
	if out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules (the dashboard's queries): %v\n%s", err, out)
	}

	c, err := clickhouse.New(ch.URL, &clickhouse.Options{Database: "fleet"})
	if err != nil {
		t.Fatal(err)
	}
	timeFilter := regexp.MustCompile(`\$__timeFilter\(((?:[^()]|\([^()]*(?:\([^()]*\))?[^()]*\))*)\)`)
	for _, p := range fleet.Panels {
		for _, tg := range p.Targets {
			if tg.RawSQL == "" {
				t.Errorf("panel %q has no SQL", p.Title)
				continue
			}
			sql := timeFilter.ReplaceAllString(tg.RawSQL, "$1 >= toDateTime(0)")
			if strings.Contains(sql, "$__") {
				t.Errorf("panel %q: a macro left in %s", p.Title, sql)
				continue
			}
			res, err := c.Query(context.Background(), sql)
			if err != nil {
				t.Errorf("panel %q: %v\n%s", p.Title, err, sql)
				continue
			}
			if strings.HasPrefix(p.Title, "CPU per host") && len(res.Rows) == 0 {
				t.Errorf("panel %q: no rows from the shipped epochs", p.Title)
			}
		}
	}
}
