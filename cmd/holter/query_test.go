package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/store"
)

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
