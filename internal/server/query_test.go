package server

import (
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// TestQueryLimitsOverHTTP: /api/query answers within the store's limits:
// a query past the number the store runs is a 503 with Retry-After, one
// past its time a 504 that says so, and an answer past the row limit is
// cut and marked, its numbers exact.
func TestQueryLimitsOverHTTP(t *testing.T) {
	st, err := store.Open(t.TempDir(), &store.Options{MaxQueries: 1, QueryTimeout: 8 * time.Second, MaxResultRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	base := startServer(t, Options{Store: st})
	q := func(sql string) (*http.Response, []byte) {
		resp, err := http.Get(base + "/api/query?q=" + url.QueryEscape(sql))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}

	var wg sync.WaitGroup
	var slow *http.Response
	var slowBody []byte
	wg.Add(1)
	go func() {
		defer wg.Done()
		slow, slowBody = q(`SELECT count(*) FROM range(1e12::BIGINT)`)
	}()
	// The endless query holds the one slot: another waits, then is refused.
	var busy *http.Response
	var busyBody []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if busy, busyBody = q(`SELECT 1`); busy.StatusCode == http.StatusServiceUnavailable {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if busy.StatusCode != http.StatusServiceUnavailable || busy.Header.Get("Retry-After") == "" {
		t.Errorf("a query while the store is busy: %d, Retry-After %q: %s", busy.StatusCode, busy.Header.Get("Retry-After"), busyBody)
	}
	// Every endpoint that reads the store says so alike (the UI asks
	// again when told), at once while the slot is still held.
	var others sync.WaitGroup
	for _, path := range []string{"/api/latency-graph?service=s&operation=o", "/api/traces/a1b2c3d4000000000000000000000001/path", "/metrics", "/api/findings?from=0&to=1"} {
		others.Add(1)
		go func() {
			defer others.Done()
			resp, err := http.Get(base + path)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Errorf("GET %s while the store is busy: %d, Retry-After %q: %s", path, resp.StatusCode, resp.Header.Get("Retry-After"), b)
			}
		}()
	}
	others.Wait()
	wg.Wait()
	if slow.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(slowBody), "--query-timeout") {
		t.Errorf("an endless query: %d %s, want 504 naming the time limit", slow.StatusCode, slowBody)
	}

	resp, b := q(`SELECT range AS n, 9007199254740993::BIGINT AS big, 18446744073709551615::UBIGINT AS u,
		170141183460469231731687303715884105727::HUGEINT AS h, 1.5::DOUBLE AS d, 1.25::DECIMAL(5,2) AS dec,
		'nan'::DOUBLE AS nan, [9007199254740993] AS l FROM range(100)`)
	if resp.StatusCode != 200 {
		t.Fatalf("a long answer: %d %s", resp.StatusCode, b)
	}
	var res store.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Rows) != 10 {
		t.Errorf("100 rows with a limit of 10: %d rows, truncated %v", len(res.Rows), res.Truncated)
	}
	h, _ := new(big.Int).SetString("170141183460469231731687303715884105727", 10)
	want := []any{int64(0), int64(9007199254740993), uint64(18446744073709551615), h, 1.5, json.Number("1.25"), "NaN", []any{int64(9007199254740993)}}
	if got := res.Rows[0]; fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
		t.Errorf("numbers through the API:\n got %#v\nwant %#v", got, want)
	}
}
