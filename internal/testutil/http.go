package testutil

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// HTTPGet fetches url, waiting at most 20 s, and gives its status and
// body; not reaching the server fails the test.
func HTTPGet(t testing.TB, url string) (int, []byte) {
	t.Helper()
	return HTTPGetWithToken(t, url, "")
}

// HTTPGetWithToken is HTTPGet sending the API token given, as
// Authorization: Bearer.
func HTTPGetWithToken(t testing.TB, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return HTTPDo(t, &http.Client{Timeout: 20 * time.Second}, req)
}

// HTTPDo makes a request with c and gives its status and body; not
// reaching the server fails the test.
func HTTPDo(t testing.TB, c *http.Client, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return resp.StatusCode, b
}

// NobodysCopy copies the executable bin into a new directory, removed
// when the test ends, that another user (nobody) may enter but not list,
// and returns the directory and the copy, which that user may run.
func NobodysCopy(t testing.TB, bin string) (dir, copied string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "holter-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	copied = filepath.Join(dir, filepath.Base(bin))
	if err := os.WriteFile(copied, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, copied
}
