package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
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

// The rollups of the buckets being filled are kept up to date
// incrementally: the store holds each open bucket's totals and per-label
// sums in memory, adds every committed epoch to them, and rewrites the
// bucket's rows from them — the cost of an epoch's commit does not grow as
// its day fills. A bucket not in memory (the first epoch after Open, a new
// bucket, or after a failed commit) is read back from the raw tables once.
//
// The distinct-label count of a bucket is the number of distinct label
// hashes among its samples: every label is sampled at least once in each
// epoch it occurs in (its first event crosses the first threshold), and
// sample label hashes are seed-free, unlike the per-epoch HCAs.
type openBucket struct {
	host   string
	start  int64 // bucket_ns
	vitals map[string]*bucketVital
}

type bucketVital struct {
	epochs, events, weight, samples, lost, secondary uint64
	labels                                           map[uint64]*labelSum
}

// labelSum is one label's weight and sample count in a bucket, with the
// heaviest of its samples as the representative (the first on a tie).
type labelSum struct {
	weight, samples, repWeight uint64
	pid                        uint32
	comm, exe                  string
	kstack, ustack             uint64
}

func (b *bucketVital) add(s *labelSum, hash uint64) {
	l := b.labels[hash]
	if l == nil {
		b.labels[hash] = s
		return
	}
	l.weight += s.weight
	l.samples += s.samples
	if s.repWeight > l.repWeight {
		l.repWeight, l.pid, l.comm, l.exe, l.kstack, l.ustack = s.repWeight, s.pid, s.comm, s.exe, s.kstack, s.ustack
	}
}

func (o *openBucket) vital(name string) *bucketVital {
	v := o.vitals[name]
	if v == nil {
		v = &bucketVital{labels: map[uint64]*labelSum{}}
		o.vitals[name] = v
	}
	return v
}

// addEpoch adds an epoch's totals and samples to the bucket.
func (o *openBucket) addEpoch(e *Epoch) {
	for _, v := range e.Vitals {
		b := o.vital(v.Name)
		b.epochs++
		b.events += v.Events
		b.weight += v.WeightSum
		b.samples += v.Samples
		b.lost += v.Lost()
		b.secondary += v.Secondary
	}
	for i := range e.Samples {
		sm := &e.Samples[i]
		o.vital(sm.Vital).add(&labelSum{weight: sm.Weight, samples: 1, repWeight: sm.Weight, pid: sm.Pid,
			comm: sm.Comm, exe: sm.Exe, kstack: sm.KStackID, ustack: sm.UStackID}, sm.LabelHash)
	}
}

// loadBucket reads an open bucket back from the raw tables, inside the
// epoch's transaction (so including the epoch being written).
func loadBucket(ctx context.Context, conn *sql.Conn, host string, start, width int64) (*openBucket, error) {
	o := &openBucket{host: host, start: start, vitals: map[string]*bucketVital{}}
	inBucket := `e.host = $1 AND e.start_ns >= $2 AND e.start_ns < $2 + $3`
	rows, err := conn.QueryContext(ctx, `
		SELECT v.vital, count(*), sum(v.events), sum(v.weight_sum), sum(v.samples),
		       sum(v.lost_ringbuf + v.lost_state + v.lost_recursion), sum(v.secondary)
		FROM vitals v JOIN epochs e ON e.host = v.host AND e.epoch = v.epoch
		WHERE `+inBucket+` GROUP BY v.vital`, host, start, width)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var name string
		var b bucketVital
		if err := rows.Scan(&name, &b.epochs, &b.events, &b.weight, &b.samples, &b.lost, &b.secondary); err != nil {
			rows.Close()
			return nil, err
		}
		b.labels = map[uint64]*labelSum{}
		o.vitals[name] = &b
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	rows, err = conn.QueryContext(ctx, `
		SELECT s.vital, s.label_hash, sum(s.weight), count(*), max(s.weight),
		       arg_max(s.pid, s.weight), arg_max(s.comm, s.weight), arg_max(s.exe, s.weight),
		       coalesce(arg_max(s.kstack_id, s.weight), 0), coalesce(arg_max(s.ustack_id, s.weight), 0)
		FROM samples s JOIN epochs e ON e.host = s.host AND e.epoch = s.epoch
		WHERE `+inBucket+` GROUP BY s.vital, s.label_hash`, host, start, width)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var hash uint64
		var l labelSum
		if err := rows.Scan(&name, &hash, &l.weight, &l.samples, &l.repWeight, &l.pid, &l.comm, &l.exe, &l.kstack, &l.ustack); err != nil {
			return nil, err
		}
		o.vital(name).labels[hash] = &l
	}
	return o, rows.Err()
}

// updateRollups brings, inside the epoch's transaction, every bucket that
// contains the epoch up to date: the rollups always equal the sum of their
// epochs, including the bucket still being filled.
func (s *Store) updateRollups(ctx context.Context, conn *sql.Conn, e *Epoch) error {
	if s.open == nil {
		s.open = make([]*openBucket, len(Timescales))
	}
	for i, ts := range Timescales {
		w := ts.Width.Nanoseconds()
		start := e.StartNs - e.StartNs%w
		o := s.open[i]
		if o != nil && o.host == e.Host && o.start == start {
			o.addEpoch(e)
		} else {
			var err error
			if o, err = loadBucket(ctx, conn, e.Host, start, w); err != nil {
				return fmt.Errorf("rollup %s: %w", ts.Name, err)
			}
			s.open[i] = o
		}
		if err := writeBucket(ctx, conn, ts.Name, o); err != nil {
			return fmt.Errorf("rollup %s: %w", ts.Name, err)
		}
	}
	return nil
}

// writeBucket replaces a bucket's rows with its current sums and top labels.
func writeBucket(ctx context.Context, conn *sql.Conn, timescale string, o *openBucket) error {
	for _, q := range []string{
		`DELETE FROM rollups WHERE timescale = ? AND host = ? AND bucket_ns = ?`,
		`DELETE FROM rollup_top WHERE timescale = ? AND host = ? AND bucket_ns = ?`,
	} {
		if _, err := conn.ExecContext(ctx, q, timescale, o.host, o.start); err != nil {
			return err
		}
	}
	var rollups, tops [][]driver.Value
	for name, b := range o.vitals {
		rollups = append(rollups, []driver.Value{timescale, o.host, o.start, name, b.epochs, b.events, b.weight,
			b.samples, int64(len(b.labels)), b.lost, b.secondary})
		for rank, hash := range topLabels(b.labels, TopLabels) {
			l := b.labels[hash]
			tops = append(tops, []driver.Value{timescale, o.host, o.start, name, int32(rank + 1), hash, l.weight,
				int64(l.samples), l.pid, l.comm, l.exe, nullID(l.kstack), nullID(l.ustack)})
		}
	}
	return conn.Raw(func(dc any) error {
		dconn, ok := dc.(driver.Conn)
		if !ok {
			return errors.New("unexpected driver connection")
		}
		if err := appendRows(dconn, "rollups", len(rollups), func(i int) []driver.Value { return rollups[i] }); err != nil {
			return err
		}
		return appendRows(dconn, "rollup_top", len(tops), func(i int) []driver.Value { return tops[i] })
	})
}

// topLabels is the n heaviest labels, heaviest first, ties by hash.
func topLabels(labels map[uint64]*labelSum, n int) []uint64 {
	heavier := func(a, b uint64) bool {
		wa, wb := labels[a].weight, labels[b].weight
		return wa > wb || wa == wb && a < b
	}
	top := make([]uint64, 0, n+1)
	for h := range labels {
		if len(top) == n && !heavier(h, top[n-1]) {
			continue
		}
		i := len(top)
		top = append(top, h)
		for ; i > 0 && heavier(h, top[i-1]); i-- {
			top[i] = top[i-1]
		}
		top[i] = h
		if len(top) > n {
			top = top[:n]
		}
	}
	return top
}
