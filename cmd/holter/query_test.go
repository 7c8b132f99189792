package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/store"
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
