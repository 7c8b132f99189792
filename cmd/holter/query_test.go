package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestQueryNumbersExact: integers too large for a float64 print exactly in
// every output format, through a recorder's API as from the store itself.
func TestQueryNumbersExact(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	const token = "query-test-token"
	t.Setenv("HOLTER_TOKEN", token)
	srv, err := server.Listen(server.Options{Addr: "127.0.0.1:0", Token: token, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	const q = `SELECT 1795614627860501234::BIGINT AS b, 18446744073709551615::UBIGINT AS u,
		-170141183460469231731687303715884105727::HUGEINT AS h, 0.1::DOUBLE AS d, 12.25::DECIMAL(6,2) AS m`
	want := []string{"1795614627860501234", "18446744073709551615", "-170141183460469231731687303715884105727", "0.1", "12.25"}
	check := func(how string, args ...string) {
		for _, format := range []string{"table", "csv", "json"} {
			var out, errOut bytes.Buffer
			if err := runQuery(append(append([]string{"--format", format}, args...), q), &out, &errOut); err != nil {
				t.Fatalf("%s, %s: %v", how, format, err)
			}
			for _, w := range want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("%s, %s: %s is not in the output:\n%s", how, format, w, out.String())
				}
			}
			if strings.Contains(out.String(), "e+") {
				t.Errorf("%s, %s: a number printed as a float:\n%s", how, format, out.String())
			}
		}
	}
	check("through the API", "--api", srv.Addr(), "--data", t.TempDir())
	srv.Shutdown(context.Background())
	st.Close()
	check("from the store", "--data", dir)
}

// TestQueryTimeoutFlag: --query-timeout must be positive, and stops a
// query that runs past it with an error that names it.
func TestQueryTimeoutFlag(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	var out, errOut bytes.Buffer
	err = runQuery([]string{"--data", dir, "--query-timeout", "0s", "SELECT 1"}, &out, &errOut)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--query-timeout") {
		t.Errorf("--query-timeout 0s: %v", err)
	}
	err = runQuery([]string{"--data", dir, "--query-timeout", "500ms", "SELECT count(*) FROM range(1e12::BIGINT)"}, &out, &errOut)
	if !errors.Is(err, store.ErrQueryTimeout) {
		t.Errorf("an endless query with --query-timeout 500ms: %v", err)
	}
}

// TestQueryExactThroughRecorder asks a running recorder, over its socket,
// for nanosecond timestamps and the sums of unsigned counters, in every
// format, and finds the same digits the store gives directly once the
// recorder stopped: no number passes through a float on the way.
func TestQueryExactThroughRecorder(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	bin := testutil.BuildHolter(t)
	dir := t.TempDir()
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "", "--vitals", "cpu,syscall", "--online=false",
		"--otlp-grpc", "off", "--otlp-http", "off")
	r.waitEpochs(t, 2)
	const q = `SELECT e.epoch, e.start_ns, e.end_ns, sum(v.weight_sum) AS weight, sum(v.events) AS events,
		e.start_ns::HUGEINT * 1000 AS big, 18446744073709551615::UBIGINT AS u
		FROM epochs e JOIN vitals v USING (host, epoch) WHERE e.epoch <= (SELECT min(epoch) + 1 FROM epochs)
		GROUP BY ALL ORDER BY e.epoch`
	through := map[string]string{}
	for _, format := range []string{"table", "csv", "json"} {
		out, errOut, code := runHolter(t, bin, "query", "--data", dir, "--format", format, q)
		if code != 0 {
			t.Fatalf("query --format %s through the recorder: exit %d %s", format, code, errOut)
		}
		through[format] = out
	}
	r.cmd.Process.Signal(syscall.SIGINT)
	r.cmd.Wait()
	<-r.done
	direct, errOut, code := runHolter(t, bin, "query", "--data", dir, "--format", "csv", q)
	if code != 0 {
		t.Fatalf("query from the store: exit %d %s", code, errOut)
	}
	if through["csv"] != direct {
		t.Errorf("csv through the recorder:\n%s\nfrom the store:\n%s", through["csv"], direct)
	}
	lines := strings.Split(strings.TrimSpace(direct), "\n")
	if len(lines) != 3 {
		t.Fatalf("from the store:\n%s", direct)
	}
	for _, line := range lines[1:] {
		for _, v := range strings.Split(line, ",") {
			for _, format := range []string{"table", "json"} {
				if !strings.Contains(through[format], v) {
					t.Errorf("%s through the recorder lacks %s:\n%s", format, v, through[format])
				}
			}
		}
	}
	for format, out := range through {
		if strings.Contains(out, "e+") {
			t.Errorf("%s: a number printed as a float:\n%s", format, out)
		}
	}
}
