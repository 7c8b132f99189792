package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Timescale is one of the aggregator's rollup widths (Chopstix §4.3): a
// week is browsed at 1-hour or 1-day resolution without touching the raw
// epochs.
type Timescale struct {
	Name  string
	Width time.Duration
}

// Timescales are the rollups the store keeps, finest first.
var Timescales = []Timescale{{"5m", 5 * time.Minute}, {"1h", time.Hour}, {"1d", 24 * time.Hour}}

// TopLabels is how many labels per vital each rollup bucket keeps, with a
// representative sample each.
const TopLabels = 10

// The rollup tables have no primary key: a bucket is deleted and inserted
// again in the same transaction, which DuckDB's unique indexes refuse once
// they are loaded from disk. updateRollups keeps them unique.
var rollupSchema = []string{
	`CREATE TABLE IF NOT EXISTS rollups (
		timescale VARCHAR NOT NULL,
		host VARCHAR NOT NULL,
		bucket_ns BIGINT NOT NULL,
		vital VARCHAR NOT NULL,
		epochs BIGINT NOT NULL,
		events UBIGINT NOT NULL,
		weight_sum UBIGINT NOT NULL,
		samples UBIGINT NOT NULL,
		distinct_labels BIGINT NOT NULL,
		lost UBIGINT NOT NULL,
		secondary UBIGINT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS rollup_top (
		timescale VARCHAR NOT NULL,
		host VARCHAR NOT NULL,
		bucket_ns BIGINT NOT NULL,
		vital VARCHAR NOT NULL,
		rank INTEGER NOT NULL,
		label_hash UBIGINT NOT NULL,
		weight UBIGINT NOT NULL,
		samples BIGINT NOT NULL,
		pid UINTEGER,
		comm VARCHAR,
		exe VARCHAR,
		kstack_id UBIGINT,
		ustack_id UBIGINT)`,
}

// The rollups of the buckets being filled are rewritten from the raw
// tables at each epoch's commit, inside its transaction, by DuckDB: the
// bucket's totals from its epochs' vitals, its distinct labels and top
// labels from their samples. The store holds nothing per label: an open
// day's labels under process churn (a large program's CPU sites, the
// locks of each process) came to some 100 bytes each per timescale in
// the recorder's heap, tens of MB by the end of a day. What a commit
// reads grows with the day's stored samples, which the recorder's
// storage budget bounds.
//
// The distinct-label count of a bucket is the number of distinct label
// hashes among its samples: every label is sampled at least once in each
// epoch it occurs in (its first event crosses the first threshold), and
// sample label hashes are seed-free, unlike the per-epoch HCAs.

// updateRollups brings, inside the epoch's transaction, every bucket that
// contains the epoch up to date: the rollups always equal the sum of their
// epochs, including the bucket still being filled.
func (s *Store) updateRollups(ctx context.Context, conn *sql.Conn, e *Epoch) error {
	for _, ts := range Timescales {
		w := ts.Width.Nanoseconds()
		start := e.StartNs - e.StartNs%w
		if err := writeBucket(ctx, conn, ts.Name, e.Host, start, w); err != nil {
			return fmt.Errorf("rollup %s: %w", ts.Name, err)
		}
	}
	return nil
}

// writeBucket replaces a bucket's rows with the sums and top labels of
// the epochs stored in it. Epoch numbers grow with time, so the bucket's
// epochs are those between its first and its last, and a scan of the
// samples (appended in epoch order) skips other buckets' row groups by
// their zone maps.
func writeBucket(ctx context.Context, conn *sql.Conn, timescale, host string, start, width int64) error {
	var first, last int64 // the epoch being written is one of them
	if err := conn.QueryRowContext(ctx, `SELECT coalesce(min(epoch), 0), coalesce(max(epoch), -1) FROM epochs WHERE host = $1 AND start_ns >= $2 AND start_ns < $2 + $3`,
		host, start, width).Scan(&first, &last); err != nil {
		return err
	}
	for _, q := range []string{
		`DELETE FROM rollups WHERE timescale = $1 AND host = $2 AND bucket_ns = $3`,
		`DELETE FROM rollup_top WHERE timescale = $1 AND host = $2 AND bucket_ns = $3`,
		`INSERT INTO rollups
		SELECT $1, $2, $3, v.vital, count(*), sum(v.events), sum(v.weight_sum), sum(v.samples),
			coalesce(any_value(l.n), 0), sum(v.lost_ringbuf + v.lost_state + v.lost_recursion), sum(v.secondary)
		FROM vitals v LEFT JOIN (
			SELECT vital, count(DISTINCT label_hash) AS n FROM samples
			WHERE host = $2 AND epoch BETWEEN $4 AND $5 GROUP BY vital) l ON l.vital = v.vital
		WHERE v.host = $2 AND v.epoch BETWEEN $4 AND $5
		GROUP BY v.vital`,
		// The heaviest labels first, from their sums alone; then the
		// representative of each, its heaviest sample (the first on a
		// tie), from its own samples.
		`INSERT INTO rollup_top
		WITH top AS (
			SELECT vital, label_hash, sum(weight) AS weight, count(*) AS samples,
				row_number() OVER (PARTITION BY vital ORDER BY sum(weight) DESC, label_hash) AS rank
			FROM samples WHERE host = $2 AND epoch BETWEEN $4 AND $5
			GROUP BY vital, label_hash
			QUALIFY rank <= ` + fmt.Sprint(TopLabels) + `)
		SELECT $1, $2, $3, t.vital, t.rank, t.label_hash, any_value(t.weight), any_value(t.samples),
			arg_max(s.pid, (s.weight, -s.ts_ns)), arg_max(s.comm, (s.weight, -s.ts_ns)), arg_max(s.exe, (s.weight, -s.ts_ns)),
			arg_max(s.kstack_id, (s.weight, -s.ts_ns)), arg_max(s.ustack_id, (s.weight, -s.ts_ns))
		FROM top t JOIN samples s ON s.vital = t.vital AND s.label_hash = t.label_hash
		WHERE s.host = $2 AND s.epoch BETWEEN $4 AND $5
		GROUP BY t.vital, t.rank, t.label_hash`,
	} {
		args := []any{timescale, host, start, first, last}
		if !strings.Contains(q, "$4") {
			args = args[:3]
		}
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}
