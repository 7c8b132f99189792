// Package export ships a host's committed epochs to ClickHouse, the
// fleet's store (Chopstix §2.2's central aggregator; Stardust §3.4's
// low-priority, small-chunk shipping).
//
// After each commit the recorder hands the epoch number to Committed,
// which reads what the epoch added to every shipped table (Table; new
// tables ship by being listed) and writes it as batches into an on-disk
// spool in the data directory. Run sends the oldest batch, one at a time,
// within a byte rate; what ClickHouse has not acknowledged stays in the
// spool across outages and restarts. The spool has a size limit; over it
// the oldest batches are dropped and counted in Status.
//
// Exactly once: a batch is one INSERT of fewer rows than the server's
// block size, so it arrives wholly or not at all, and every row carries
// its batch id (_batch). A batch that may have arrived — its send failed,
// or an earlier process spooled it — is looked up by id before it is sent
// again. Tables whose rows later epochs rewrite (rollups, findings, stacks)
// are ReplacingMergeTrees NAME_rows keyed like the store, versioned by
// epoch, read through a view NAME that selects FINAL.
//
// An epoch's batches are spooled together, a group, and are in ClickHouse
// wholly or not at all once the spool is through with them: Status names
// as shipped only an epoch all of whose batches the server acknowledged,
// and over the size limit the spool drops the oldest groups whole. Stacks
// and executables, which samples refer to, ship before the samples, and
// each only once (Table.Once) — marked so when its batch is spooled, not
// before; when spooling an epoch will drop batches, which may hold the
// only copy, the exporter forgets them and spools all the epoch's.
//
// Spans arrive between epochs, so they ship by another cursor: every
// commit of spans or span accounting takes the next span commit sequence
// number under the store's writer lock (store.SpanCommitSeq), so the
// committed rows are always a prefix of the sequence; after each epoch,
// Committed spools the rows of the commits after the last one spooled
// (Table.Seq) and records the number in the spool's state with them. Span
// links, events and accounting get the host's name as a host column
// (Table.AddHost); span tables are ordered by trace id, which is how a
// causal path reads them (requests.Fleet).
//
// The ClickHouse schema is derived from the store's: holter creates the
// database and tables and adds the columns a newer store has. Only SQL the
// Debian-packaged 18.16 server and current servers both accept is used.
package export
