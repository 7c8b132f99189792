package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestRollupsEqualTheirEpochs writes a day and a half of one-minute epochs
// with random totals and samples and checks every rollup bucket against
// sums computed from the raw tables.
func TestRollupsEqualTheirEpochs(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	reopened := false
	const minute = int64(60e9)
	start := int64(1_700_000_000) * 1e9     // not aligned to any bucket
	for n := int64(1); n <= 36*60; n += 7 { // every 7th minute: 309 epochs over 36 hours
		if n > 18*60 && !reopened {
			// a restart in the middle of buckets: they are read back
			reopened = true
			s.Close()
			if s, err = Open(dir, nil); err != nil {
				t.Fatal(err)
			}
		}
		e := &Epoch{Host: "h", Epoch: n, StartNs: start + n*minute, EndNs: start + (n+1)*minute}
		for _, v := range []string{"cpu", "blck"} {
			e.Vitals = append(e.Vitals, Vital{Name: v, Events: uint64(rng.IntN(1000)), WeightSum: uint64(rng.IntN(1e6)),
				Samples: uint64(rng.IntN(50)), LostRingbuf: uint64(rng.IntN(2)), LostRecursion: uint64(rng.IntN(2)), Secondary: uint64(rng.IntN(10))})
			for i := 0; i < 5; i++ {
				e.Samples = append(e.Samples, Sample{TsNs: e.StartNs + 1, Vital: v, LabelHash: uint64(rng.IntN(40)),
					Weight: uint64(rng.IntN(1000)), Pid: uint32(rng.IntN(5)), Comm: "c", Exe: "/x"})
			}
		}
		if err := s.WriteEpoch(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for _, ts := range Timescales {
		w := ts.Width.Nanoseconds()
		q := fmt.Sprintf(`WITH raw AS (
				SELECT e.start_ns - e.start_ns %% %[1]d AS bucket_ns, v.vital, count(*) AS epochs, sum(v.events) AS events,
				       sum(v.weight_sum) AS weight_sum, sum(v.samples) AS samples, sum(v.lost_ringbuf + v.lost_state + v.lost_recursion) AS lost,
				       sum(v.secondary) AS secondary
				FROM vitals v JOIN epochs e USING (host, epoch) GROUP BY ALL),
			labels AS (
				SELECT e.start_ns - e.start_ns %% %[1]d AS bucket_ns, s.vital, count(DISTINCT s.label_hash) AS n
				FROM samples s JOIN epochs e USING (host, epoch) GROUP BY ALL)
			SELECT count(*) AS buckets,
			       count(*) FILTER (WHERE r.epochs IS DISTINCT FROM raw.epochs OR r.events <> raw.events
			           OR r.weight_sum <> raw.weight_sum OR r.samples <> raw.samples OR r.lost <> raw.lost
			           OR r.secondary <> raw.secondary OR r.distinct_labels <> labels.n) AS wrong,
			       (SELECT count(*) FROM rollups WHERE timescale = '%[2]s') AS rows
			FROM raw JOIN labels USING (bucket_ns, vital)
			LEFT JOIN rollups r ON r.timescale = '%[2]s' AND r.bucket_ns = raw.bucket_ns AND r.vital = raw.vital`, w, ts.Name)
		res, err := s.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		buckets, wrong, rows := res.Rows[0][0].(int64), res.Rows[0][1].(int64), res.Rows[0][2].(int64)
		t.Logf("%s: %d buckets, %d rollup rows, %d wrong", ts.Name, buckets, rows, wrong)
		if buckets == 0 || wrong != 0 || rows != buckets {
			t.Errorf("%s rollups: %d of %d buckets differ from their epochs (%d rows)", ts.Name, wrong, buckets, rows)
		}
		res, err = s.Query(ctx, fmt.Sprintf(`SELECT count(*) FROM (
				SELECT e.start_ns - e.start_ns %% %d AS bucket_ns, s.vital, s.label_hash, sum(s.weight) AS w
				FROM samples s JOIN epochs e USING (host, epoch) GROUP BY 1, 2, 3
				QUALIFY row_number() OVER (PARTITION BY bucket_ns, vital ORDER BY w DESC, label_hash) = 1) best
			LEFT JOIN rollup_top t ON t.timescale = '%s' AND t.bucket_ns = best.bucket_ns AND t.vital = best.vital AND t.rank = 1
			WHERE t.label_hash IS DISTINCT FROM best.label_hash OR t.weight <> best.w`, w, ts.Name))
		if err != nil {
			t.Fatal(err)
		}
		if n := res.Rows[0][0].(int64); n != 0 {
			t.Errorf("%s: %d buckets whose top label is not the heaviest", ts.Name, n)
		}
	}
}
