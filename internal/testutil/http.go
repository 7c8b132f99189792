package testutil

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// HTTPGet fetches url, waiting at most 20 s, and gives its status and
// body; not reaching the server fails the test.
func HTTPGet(t testing.TB, url string) (int, []byte) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp.StatusCode, b
}
