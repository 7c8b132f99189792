// Package parquet is `holter export parquet`: a table of the store over a
// range, or a read-only query, written as a Parquet file that DuckDB,
// pandas and Spark read.
//
// Select turns the command's argument into the query exported. A table's
// rows are restricted to the range by its time: ts_ns or bucket_ns within
// it, start_ns..end_ns overlapping it, or, for a table of per-epoch rows
// without a time of its own (vitals), its epoch's span; a table without
// any (stacks, executables) is exported whole. A query is exported as
// given, and must pass the store's read-only gate (store.ExportParquet
// checks it where it runs, in the recorder or in the store opened here).
//
// The file is written by DuckDB's COPY in the store that runs the query,
// into a directory the store allows (store.Options.ExportDir): when this
// process opens the store, a private directory beside the output file,
// from which the file is renamed into place; when a recorder holds the
// store, its API's POST /api/export/parquet answers with the file, which
// is written to a temporary file beside the output and renamed. Either
// way a failed export leaves no file, and an existing one is replaced
// only by a whole new one.
package parquet
