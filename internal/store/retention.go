package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Retention bounds what the store keeps. Raw epochs (vitals, samples) go
// first; rollups are kept longer. A zero field means no limit of that kind.
type Retention struct {
	// RawAge is how long raw epochs are kept, but never less than the
	// day so far: the rollups of the open buckets are made from them.
	RawAge time.Duration
	// RollupAge is how long rollups and findings are kept.
	RollupAge time.Duration
	// MaxBytes bounds the space the store's data occupies (DuckDB's used
	// blocks and write-ahead log). Over it, the oldest raw epochs are
	// pruned until the data fits in nine tenths of it (epochs of the day
	// being rolled up too, whose rollups then count only the epochs
	// left); the file itself
	// does not shrink, but its freed blocks are reused, so it stops
	// growing at about MaxBytes. Rollups are pruned for size only when no
	// raw epoch is left.
	MaxBytes int64
}

// PruneReport says what Prune removed.
type PruneReport struct {
	Epochs     int64
	RollupRows int64
	Stacks     int64
	// UsedBytes is the space the data occupies after pruning, when a size
	// limit is set.
	UsedBytes int64
}

// Prune applies r as of now. Each step is its own transaction, and an
// epoch is removed whole (its vitals and samples with it).
func (s *Store) Prune(ctx context.Context, r Retention, now time.Time) (rep PruneReport, err error) {
	if err := s.failing(); err != nil {
		return rep, fmt.Errorf("prune: %w", err)
	}
	defer func() { err = s.wrote(err) }()
	if r.RawAge > 0 {
		// The rollups of a bucket being filled are rewritten from its raw
		// epochs at each commit (rollup.go): the epochs of the day being
		// rolled up stay until the day's bucket is closed, whatever the
		// age asked for.
		cutoff := now.Add(-r.RawAge).UnixNano()
		day := Timescales[len(Timescales)-1].Width.Nanoseconds()
		cutoff = min(cutoff, now.UnixNano()-now.UnixNano()%day)
		n, err := s.pruneEpochsBefore(ctx, cutoff)
		if err != nil {
			return rep, err
		}
		rep.Epochs += n
	}
	if r.RollupAge > 0 {
		for _, table := range []string{"rollups", "rollup_top"} {
			res, err := s.db.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE bucket_ns < ?`, table), now.Add(-r.RollupAge).UnixNano())
			if err != nil {
				return rep, fmt.Errorf("prune %s: %w", table, err)
			}
			n, _ := res.RowsAffected()
			rep.RollupRows += n
		}
		// Findings are as small as rollups and kept as long; runs are a
		// catalog the user builds by hand and are never pruned.
		for _, table := range []string{"findings", "analysed"} {
			if _, err := s.db.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE end_ns < ?`, table), now.Add(-r.RollupAge).UnixNano()); err != nil {
				return rep, fmt.Errorf("prune %s: %w", table, err)
			}
		}
	}
	if err := s.pruneStacks(ctx, &rep); err != nil {
		return rep, err
	}
	if r.MaxBytes > 0 {
		if err := s.pruneToSize(ctx, r.MaxBytes, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// pruneStacks removes the stacks no sample or top label refers to any more.
func (s *Store) pruneStacks(ctx context.Context, rep *PruneReport) error {
	if rep.Epochs > 0 || rep.RollupRows > 0 {
		res, err := s.db.ExecContext(ctx, `DELETE FROM stacks WHERE stack_id NOT IN (
			SELECT kstack_id FROM samples WHERE kstack_id IS NOT NULL UNION ALL
			SELECT ustack_id FROM samples WHERE ustack_id IS NOT NULL UNION ALL
			SELECT kstack_id FROM rollup_top WHERE kstack_id IS NOT NULL UNION ALL
			SELECT ustack_id FROM rollup_top WHERE ustack_id IS NOT NULL)`)
		if err != nil {
			return fmt.Errorf("prune stacks: %w", err)
		}
		n, _ := res.RowsAffected()
		rep.Stacks += n
		if n > 0 {
			if err := s.loadKnown(); err != nil {
				return fmt.Errorf("prune stacks: %w", err)
			}
		}
	}
	return nil
}

// UsedBytes is the space the store's data occupies: DuckDB's used blocks
// and its write-ahead log.
func (s *Store) UsedBytes(ctx context.Context) (int64, error) {
	var blockSize, usedBlocks int64
	var wal string
	err := s.db.QueryRowContext(ctx, `SELECT block_size, used_blocks, wal_size FROM pragma_database_size() LIMIT 1`).
		Scan(&blockSize, &usedBlocks, &wal)
	if err != nil {
		return 0, fmt.Errorf("store size: %w", err)
	}
	return blockSize*usedBlocks + parseSize(wal), nil
}

// parseSize reads DuckDB's human-readable sizes ("1.2 MiB", "0 bytes").
func parseSize(v string) int64 {
	var x float64
	var unit string
	if _, err := fmt.Sscanf(v, "%g %s", &x, &unit); err != nil {
		return 0
	}
	for i, u := range []string{"bytes", "KiB", "MiB", "GiB", "TiB"} {
		if unit == u {
			return int64(x * float64(int64(1)<<(10*i)))
		}
	}
	return 0
}

// pruneToSize removes the oldest raw epochs, then the oldest rollup
// buckets, until the data fits in nine tenths of limit. Each round estimates
// how many to remove from the average size of what is left, checkpoints so
// the freed blocks count, and measures again. DuckDB frees a block only
// when none of its rows is left, so a round that freed nothing removes
// twice as many the next time.
func (s *Store) pruneToSize(ctx context.Context, limit int64, rep *PruneReport) error {
	target := limit / 10 * 9
	const rounds = 10
	// Before a checkpoint the measure is an upper bound (the log holds rows
	// uncompressed, and deleted rows' blocks are not yet freed): under the
	// limit, the store needs neither pruning nor the checkpoint, which
	// costs a busy recorder ~0.4 s of CPU.
	used, err := s.UsedBytes(ctx)
	if err != nil {
		return err
	}
	if used <= limit {
		rep.UsedBytes = used
		return nil
	}
	var lastUsed, lastK int64
	for round := 0; ; round++ {
		if _, err := s.db.ExecContext(ctx, `CHECKPOINT`); err != nil {
			return fmt.Errorf("prune to size: %w", err)
		}
		used, err := s.UsedBytes(ctx)
		if err != nil {
			return err
		}
		rep.UsedBytes = used
		if used <= limit && (round == 0 || used <= target) {
			return nil
		}
		// The last round only measures what the one before it removed.
		if round == rounds {
			break
		}
		var epochs int64
		if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM epochs`).Scan(&epochs); err != nil {
			return fmt.Errorf("prune to size: %w", err)
		}
		// The share of the raw epochs to remove: at least one, and a
		// little more than the excess, since rollups share the file.
		if epochs > 0 {
			k := max(1, int64(float64(epochs)*float64(used-target)/float64(used)*1.2))
			if round > 0 && used >= lastUsed {
				k = max(k, 2*lastK)
			}
			k = min(epochs, k)
			lastUsed, lastK = used, k
			var cutoff int64
			err := s.db.QueryRowContext(ctx, `SELECT start_ns + 1 FROM epochs ORDER BY start_ns LIMIT 1 OFFSET ?`, k-1).Scan(&cutoff)
			if err != nil {
				return fmt.Errorf("prune to size: %w", err)
			}
			n, err := s.pruneEpochsBefore(ctx, cutoff)
			if err != nil {
				return err
			}
			rep.Epochs += n
		} else {
			// Nothing raw left: the oldest tenth of the rollup buckets.
			var cutoff sql.NullInt64
			err := s.db.QueryRowContext(ctx, `SELECT quantile_disc(bucket_ns, 0.1) + 1 FROM rollups`).Scan(&cutoff)
			if err != nil || !cutoff.Valid {
				return fmt.Errorf("prune to size: %d bytes used, over the limit of %d, and nothing left to prune (%v)", used, limit, err)
			}
			for _, table := range []string{"rollups", "rollup_top"} {
				res, err := s.db.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE bucket_ns < ?`, table), cutoff.Int64)
				if err != nil {
					return fmt.Errorf("prune %s: %w", table, err)
				}
				n, _ := res.RowsAffected()
				rep.RollupRows += n
			}
		}
		if err := s.pruneStacks(ctx, rep); err != nil {
			return err
		}
	}
	if rep.UsedBytes > limit {
		return fmt.Errorf("prune to size: %d bytes still used after pruning, over the limit of %d", rep.UsedBytes, limit)
	}
	return nil
}

func (s *Store) pruneEpochsBefore(ctx context.Context, cutoffNs int64) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("prune epochs: %w", err)
	}
	defer tx.Rollback()
	old := `SELECT host, epoch FROM epochs WHERE start_ns < ?`
	for _, table := range []string{"samples", "vitals"} {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE (host, epoch) IN (%s)`, table, old), cutoffNs); err != nil {
			return 0, fmt.Errorf("prune %s: %w", table, err)
		}
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM epochs WHERE start_ns < ?`, cutoffNs)
	if err != nil {
		return 0, fmt.Errorf("prune epochs: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, tx.Commit()
}
