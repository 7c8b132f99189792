package store

import (
	"context"
	"fmt"
	"time"
)

// Retention bounds what the store keeps. Raw epochs (vitals, samples) go
// first; rollups are kept longer. A zero field means no limit of that kind.
type Retention struct {
	// RawAge is how long raw epochs are kept.
	RawAge time.Duration
	// RollupAge is how long rollups and findings are kept.
	RollupAge time.Duration
}

// PruneReport says what Prune removed.
type PruneReport struct {
	Epochs     int64
	RollupRows int64
	Stacks     int64
}

// Prune applies r as of now. Each step is its own transaction, and an
// epoch is removed whole (its vitals and samples with it).
func (s *Store) Prune(ctx context.Context, r Retention, now time.Time) (PruneReport, error) {
	var rep PruneReport
	if r.RawAge > 0 {
		n, err := s.pruneEpochsBefore(ctx, now.Add(-r.RawAge).UnixNano())
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
		if _, err := s.db.ExecContext(ctx, `DELETE FROM findings WHERE end_ns < ?`, now.Add(-r.RollupAge).UnixNano()); err != nil {
			return rep, fmt.Errorf("prune findings: %w", err)
		}
	}
	if rep.Epochs > 0 || rep.RollupRows > 0 {
		res, err := s.db.ExecContext(ctx, `DELETE FROM stacks WHERE stack_id NOT IN (
			SELECT kstack_id FROM samples WHERE kstack_id IS NOT NULL UNION ALL
			SELECT ustack_id FROM samples WHERE ustack_id IS NOT NULL UNION ALL
			SELECT kstack_id FROM rollup_top WHERE kstack_id IS NOT NULL UNION ALL
			SELECT ustack_id FROM rollup_top WHERE ustack_id IS NOT NULL)`)
		if err != nil {
			return rep, fmt.Errorf("prune stacks: %w", err)
		}
		rep.Stacks, _ = res.RowsAffected()
		if rep.Stacks > 0 {
			s.mu.Lock()
			s.knownStacks = map[uint64]struct{}{}
			s.mu.Unlock()
			if err := s.loadKnown(); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
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
