// Package storetest opens stores for tests: a new store in the test's
// temporary directory, closed when the test ends.
package storetest

import (
	"testing"

	"github.com/holter-dev/holter/internal/store"
)

// Open opens a new store in tb's temporary directory and closes it when
// tb ends (before the directory is removed).
func Open(tb testing.TB) *store.Store {
	tb.Helper()
	st, err := store.Open(tb.TempDir(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}
