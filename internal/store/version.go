package store

import (
	"database/sql"
	"fmt"
)

// DuckDBVersion asks an in-memory DuckDB its version (v1.4.3): the C
// API's duckdb_library_version is freed by the Go bindings, which aborts.
func DuckDBVersion() (string, error) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return "", fmt.Errorf("duckdb version: %w", err)
	}
	defer db.Close()
	var v string
	if err := db.QueryRow("SELECT version()").Scan(&v); err != nil {
		return "", fmt.Errorf("duckdb version: %w", err)
	}
	return v, nil
}
