package export

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/holter-dev/holter/internal/storetest"
	"github.com/holter-dev/holter/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite docs/clickhouse.md")

// TestSchemaDoc: docs/clickhouse.md is what WriteSchemaDoc writes from the
// store's schema and the shipped tables, so it cannot drift from them.
func TestSchemaDoc(t *testing.T) {
	st := storetest.Open(t)
	var buf bytes.Buffer
	if err := WriteSchemaDoc(context.Background(), st, &buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(testutil.RepoRoot(), "docs", "clickhouse.md")
	if *update {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./internal/export -run TestSchemaDoc -update writes it)", err)
	}
	if !bytes.Equal(have, buf.Bytes()) {
		t.Errorf("docs/clickhouse.md differs from the schema: go test ./internal/export -run TestSchemaDoc -update rewrites it")
	}
}
