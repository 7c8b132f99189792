// Package store keeps what holter records in an embedded DuckDB database,
// one file in the data directory.
//
// The unit of durability is the epoch: every table row an epoch produces
// (its vitals, its samples, the new stacks and executables they refer to)
// is written in one transaction, so after a crash an epoch is either wholly
// present or absent. A COMMIT that fails is checked against the epochs
// table, since DuckDB can fail one in the checkpoint it runs after storing
// the transaction (WriteEpoch). The store is the single writer of its
// file; other processes read through the recorder's API, or open the file
// read-only when no recorder runs.
//
// DuckDB runs in an engine process (internal/engine), not in the
// recorder's: the writer's process starts for a commit, the retention or
// the online analysis and ends a couple of seconds after its last
// connection closes, checkpointing the write-ahead log first if it grew
// past 1 MiB, so between epochs neither DuckDB's code nor its memory is
// resident. The data directory is locked (flock) while a store is open
// for writing, so that two recorders never share one.
//
// An existing store is checked before it is opened for writing, and not
// written to at all if it fails (verify.go): its write-ahead log must be
// DuckDB's, every row must read back, and the file system must have room.
// Opening writes nothing unless the schema needs migrating. A storage
// fault while open (full, read-only, failing, the file deleted) closes the
// DuckDB instance; writes and queries fail with ErrUnavailable until the
// fault clears and the store reopens itself (fault.go), writing again the
// last commit before the fault if the file system lost it.
//
// DuckDB is configured when the file is opened, before it reads it: no
// extension is installed or loaded on demand and the extension directory
// is one under the data directory that nothing creates, so nothing is
// fetched or written under HOME; spilled data goes to a temp directory
// under the data directory, bounded in size (Options.MaxTempBytes); then
// file and network access is switched off and the configuration locked.
//
// Queries (Query, QueryRows) are a read-only sandbox (sandbox.go): one
// statement, parsed and checked by DuckDB's parser before anything of it
// runs, calling no function that writes, reaches files or the network, or
// runs other SQL. Each runs on a connection of its own, made for it and
// closed after it, so no session state (a transaction, USE, a temporary
// table) outlives it and no query holds a connection the recorder commits
// through: the recorder's commits use a pool of their own.
//
// Query limits: a time limit per query (Options.QueryTimeout, the
// --query-timeout flag); at most Options.MaxQueries at once, one more
// waiting QueueWait and then refused with ErrBusy (a 503 with Retry-After
// over HTTP); and a cap on an answer's rows and bytes. DuckDB makes a
// query's whole answer before the first row is read, outside its memory
// limit, so the cap is applied inside the query: DuckDB stops making rows
// past the row limit and leaves out those past the byte budget, and the
// answer says it was cut (Truncated). Rows are read one at a time
// (Rows.EncodeResult writes them to an HTTP client as they come).
//
// What bounds a query's memory is DuckDB's memory limit, 128 MB for the
// whole database (DuckDB has no limit per connection), the bounded temp
// directory beyond it, and the answer's byte budget; an operator that
// needs more fails the query with an out-of-memory error. What DuckDB
// allocates outside its buffer manager is not bounded by it: one value of
// gigabytes (repeat('x', 1e9)) is allocated whole. What protects the
// recorder's commits is their own connections, never waited for by a
// query; the queries' threads running at a lower CPU priority (DuckDB runs
// a query on the thread that asks, threads = 1); the limit on queries at
// once; and the check of a COMMIT that fails, whose epoch, stored, is
// counted once and its stacks never written twice. A commit can still fail
// when queries hold the memory it needs; that epoch is reported not
// committed.
package store
