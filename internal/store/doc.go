// Package store keeps what holter records in an embedded DuckDB database,
// one file in the data directory.
//
// The unit of durability is the epoch: every table row an epoch produces
// (its vitals, its samples, the new stacks and executables they refer to)
// is written in one transaction, so after a crash an epoch is either wholly
// present or absent. The store is the single writer of its file; other
// processes read through the recorder's API, or open the file read-only
// when no recorder runs.
//
// An existing store is checked before it is opened for writing, and not
// written to at all if it fails (verify.go): its write-ahead log must be
// DuckDB's, every row must read back, and the file system must have room.
// Opening writes nothing unless the schema needs migrating. A storage
// fault while open (full, read-only, failing, the file deleted) closes the
// DuckDB instance; writes fail with ErrUnavailable until the fault clears
// and the store reopens itself (fault.go).
//
// Queries from users are read-only: one statement, of a reading kind, with
// DuckDB's access to files and the network switched off.
package store
