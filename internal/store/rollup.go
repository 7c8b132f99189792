package store

import (
	"context"
	"database/sql"
	"fmt"
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

// updateRollups recomputes, inside the epoch's transaction, every bucket
// that contains the epoch starting at startNs: the rollups always equal the
// sum of their epochs, including the bucket still being filled.
//
// The distinct-label count of a bucket is the number of distinct label
// hashes among its samples: every label is sampled at least once in each
// epoch it occurs in (its first event crosses the first threshold), and
// sample label hashes are seed-free, unlike the per-epoch HCAs.
func updateRollups(ctx context.Context, conn *sql.Conn, host string, startNs int64) error {
	for _, ts := range Timescales {
		w := ts.Width.Nanoseconds()
		bucket := startNs - startNs%w
		args := []any{ts.Name, host, bucket}
		for _, q := range []string{
			`DELETE FROM rollups WHERE timescale = ? AND host = ? AND bucket_ns = ?`,
			`DELETE FROM rollup_top WHERE timescale = ? AND host = ? AND bucket_ns = ?`,
		} {
			if _, err := conn.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("rollup %s: %w", ts.Name, err)
			}
		}
		inBucket := `e.host = $2 AND e.start_ns >= $3 AND e.start_ns < $3 + $4`
		rollup := `INSERT INTO rollups
			SELECT $1, $2, $3, v.vital, count(*), sum(v.events), sum(v.weight_sum), sum(v.samples),
			       coalesce(any_value(d.n), 0), sum(v.lost_ringbuf + v.lost_state), sum(v.secondary)
			FROM vitals v JOIN epochs e ON e.host = v.host AND e.epoch = v.epoch
			LEFT JOIN (SELECT s.vital, count(DISTINCT s.label_hash) AS n
			           FROM samples s JOIN epochs e ON e.host = s.host AND e.epoch = s.epoch
			           WHERE ` + inBucket + ` GROUP BY s.vital) d ON d.vital = v.vital
			WHERE ` + inBucket + `
			GROUP BY v.vital`
		top := `INSERT INTO rollup_top
			SELECT $1, $2, $3, vital, rk, label_hash, w, n, pid, comm, exe, kstack_id, ustack_id FROM (
				SELECT s.vital, s.label_hash, sum(s.weight) AS w, count(*) AS n,
				       arg_max(s.pid, s.weight) AS pid, arg_max(s.comm, s.weight) AS comm, arg_max(s.exe, s.weight) AS exe,
				       arg_max(s.kstack_id, s.weight) AS kstack_id, arg_max(s.ustack_id, s.weight) AS ustack_id,
				       row_number() OVER (PARTITION BY s.vital ORDER BY sum(s.weight) DESC, s.label_hash) AS rk
				FROM samples s JOIN epochs e ON e.host = s.host AND e.epoch = s.epoch
				WHERE ` + inBucket + `
				GROUP BY s.vital, s.label_hash)
			WHERE rk <= $5`
		for _, q := range []string{rollup, top} {
			if _, err := conn.ExecContext(ctx, q, ts.Name, host, bucket, w, TopLabels); err != nil {
				return fmt.Errorf("rollup %s: %w", ts.Name, err)
			}
		}
	}
	return nil
}
