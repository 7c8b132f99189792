package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func writeDays(t *testing.T, s *Store, start time.Time, epochs int, every time.Duration, samples int) {
	t.Helper()
	for n := 1; n <= epochs; n++ {
		at := start.Add(time.Duration(n) * every).UnixNano()
		e := &Epoch{Host: "h", Epoch: int64(n), StartNs: at, EndNs: at + int64(time.Minute),
			Vitals: []Vital{{Name: "cpu", Events: 10, WeightSum: 100}}}
		for i := 0; i < samples; i++ {
			id := uint64(n*1000 + i + 1)
			e.Samples = append(e.Samples, Sample{TsNs: at, Vital: "cpu", LabelHash: uint64(i), Weight: uint64(i),
				Comm: fmt.Sprintf("comm-%d-%d", n, i), Exe: "/x", KStackID: id})
			e.Stacks = append(e.Stacks, Stack{ID: id, Kind: "kernel", Frames: []string{fmt.Sprintf("f%d", id)}, Modules: []string{"vmlinux"}})
		}
		if err := s.WriteEpoch(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
}

func count(t *testing.T, s *Store, q string) int64 {
	t.Helper()
	res, err := s.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return res.Rows[0][0].(int64)
}

func TestPruneByAgeKeepsRollups(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	writeDays(t, s, start, 72, time.Hour, 15) // three days, hourly; more labels than a bucket keeps on top
	now := start.Add(73 * time.Hour)
	rep, err := s.Prune(context.Background(), Retention{RawAge: 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	cutoff := now.Add(-24 * time.Hour).UnixNano()
	if n := count(t, s, fmt.Sprintf(`SELECT count(*) FROM epochs WHERE start_ns < %d`, cutoff)); n != 0 {
		t.Errorf("%d raw epochs older than the limit remain", n)
	}
	if n := count(t, s, `SELECT count(*) FROM epochs`); n != 24 {
		t.Errorf("%d raw epochs remain, want the last 24", n)
	}
	for _, q := range []string{
		`SELECT count(*) FROM samples WHERE epoch NOT IN (SELECT epoch FROM epochs)`,
		`SELECT count(*) FROM vitals WHERE epoch NOT IN (SELECT epoch FROM epochs)`,
		`SELECT count(*) FROM stacks WHERE stack_id NOT IN (SELECT kstack_id FROM samples UNION ALL SELECT kstack_id FROM rollup_top WHERE kstack_id IS NOT NULL)`,
	} {
		if n := count(t, s, q); n != 0 {
			t.Errorf("%s: %d", q, n)
		}
	}
	if n := count(t, s, `SELECT count(*) FROM rollups WHERE timescale = '1d'`); n != 4 {
		t.Errorf("1-day rollups = %d, want 4 (kept past the raw limit)", n)
	}
	if rep.Stacks == 0 {
		t.Error("no unreferenced stack was pruned")
	}
}

// TestPruneToSize fills a store past a size limit: the oldest raw epochs
// go, the newest stay, the data fits the limit afterwards and the rollups
// of the pruned epochs are kept.
func TestPruneToSize(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	writeDays(t, s, start, 240, time.Minute, 2000) // 480 000 samples: several of DuckDB's row groups
	if _, err := s.db.ExecContext(ctx, `CHECKPOINT`); err != nil {
		t.Fatal(err)
	}
	full, err := s.UsedBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rollupsBefore := count(t, s, `SELECT count(*) FROM rollups`)
	// DuckDB's used size moves by a block or two (256 KiB each) from one
	// checkpoint to the next with nothing written, and 5-7 MB of the 12
	// stay whatever is pruned (a block is freed only when none of its rows
	// is left): the limit is well above both.
	limit := full / 10 * 7
	rep, err := s.Prune(ctx, Retention{MaxBytes: limit}, start.Add(241*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes used, limit %d: pruned %d epochs, %d stacks; %d bytes used after", full, limit, rep.Epochs, rep.Stacks, rep.UsedBytes)
	if rep.Epochs == 0 || rep.Epochs == 240 || rep.UsedBytes > limit {
		t.Fatalf("prune to %d bytes: %+v", limit, rep)
	}
	if oldest := count(t, s, `SELECT min(epoch) FROM epochs`); oldest != rep.Epochs+1 {
		t.Errorf("oldest epoch kept is %d, want %d: the oldest go first", oldest, rep.Epochs+1)
	}
	if n := count(t, s, `SELECT max(epoch) FROM epochs`); n != 240 {
		t.Errorf("newest epoch %d was pruned", n)
	}
	if n := count(t, s, `SELECT count(*) FROM rollups`); n != rollupsBefore {
		t.Errorf("rollups %d → %d: size pruning took rollups while raw epochs were left", rollupsBefore, n)
	}
	// Under the limit, nothing goes (a megabyte over it, so that a block
	// more after the next checkpoint does not count).
	rep, err = s.Prune(ctx, Retention{MaxBytes: limit + 1<<20}, start.Add(242*time.Minute))
	if err != nil || rep.Epochs != 0 {
		t.Fatalf("second prune under the limit: %+v, %v", rep, err)
	}
	// A limit nothing can meet: raw epochs go, then rollups, then it says so.
	if _, err := s.Prune(ctx, Retention{MaxBytes: 1}, start.Add(243*time.Minute)); err == nil {
		t.Error("a 1-byte limit was met")
	} else {
		t.Logf("1-byte limit: %v", err)
	}
	if n := count(t, s, `SELECT count(*) FROM epochs`); n != 0 {
		t.Errorf("%d raw epochs left under an impossible limit", n)
	}
}

// TestPruneByAgeKeepsTheOpenDay prunes with a raw age shorter than the day
// so far: the day's epochs stay, since its rollups are rewritten from them
// at each commit, and the day's rollup still counts all of them after the
// next commit.
func TestPruneByAgeKeepsTheOpenDay(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	writeDays(t, s, start, 30, time.Hour, 3) // epochs 1-30 at 1 h … 30 h
	now := start.Add(30*time.Hour + 30*time.Minute)
	if _, err := s.Prune(context.Background(), Retention{RawAge: time.Hour}, now); err != nil {
		t.Fatal(err)
	}
	day2 := start.Add(24 * time.Hour).UnixNano()
	if n := count(t, s, fmt.Sprintf(`SELECT count(*) FROM epochs WHERE start_ns < %d`, day2)); n != 0 {
		t.Errorf("%d raw epochs of the closed day remain", n)
	}
	if n := count(t, s, `SELECT count(*) FROM epochs`); n != 7 {
		t.Errorf("%d raw epochs remain, want the open day's 7 (24 h … 30 h)", n)
	}
	at := start.Add(31 * time.Hour).UnixNano()
	if err := s.WriteEpoch(context.Background(), &Epoch{Host: "h", Epoch: 31, StartNs: at, EndNs: at + int64(time.Minute),
		Vitals: []Vital{{Name: "cpu", Events: 10, WeightSum: 100}}}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, fmt.Sprintf(`SELECT epochs FROM rollups WHERE timescale = '1d' AND bucket_ns = %d`, day2)); n != 8 {
		t.Errorf("the open day's rollup counts %d epochs, want 8", n)
	}
}
