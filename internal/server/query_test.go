package server

import (
	"encoding/json"
	"io"
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
// cut and marked.
func TestQueryLimitsOverHTTP(t *testing.T) {
	st, err := store.Open(t.TempDir(), &store.Options{MaxQueries: 1, QueryTimeout: 3 * time.Second, MaxResultRows: 10})
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
	wg.Wait()
	if slow.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(slowBody), "--query-timeout") {
		t.Errorf("an endless query: %d %s, want 504 naming the time limit", slow.StatusCode, slowBody)
	}

	resp, b := q(`SELECT range AS n FROM range(100)`)
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
}
