package server

import (
	"net/http"
	"os"
	"sync"
	"testing"
)

// testToken is the admin token of the servers startServer starts.
const testToken = "test-token-0123456789"

// TestMain makes the package's HTTP clients send testToken to the servers
// startServer starts, as the CLI sends its token: every test talks to a
// server that requires one. The tests of access itself use clients of
// their own (plainClient).
func TestMain(m *testing.M) {
	http.DefaultTransport = bearer{token: testToken, next: http.DefaultTransport}
	os.Exit(m.Run())
}

// testServers holds the host:port of each server startServer started.
var testServers sync.Map

// bearer adds a token to requests to a test server that carry none.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if _, ours := testServers.Load(r.URL.Host); ours && r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// CloseIdleConnections closes the idle connections of the transport
// beneath (testutil.ClickHouse.Stop asks).
func (b bearer) CloseIdleConnections() {
	if tr, ok := b.next.(interface{ CloseIdleConnections() }); ok {
		tr.CloseIdleConnections()
	}
}

// plainClient sends only what a test gives it.
var plainClient = &http.Client{Transport: &http.Transport{}}
