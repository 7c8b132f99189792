package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestCommitWhoseCheckpointFails: with little memory, DuckDB's checkpoint
// in a commit (every commit checkpoints here) runs out of it, and COMMIT
// fails for an epoch the database holds, which is what the audit saw
// ("epoch 209 not committed" although it was, then epochs failing on
// duplicate stack ids). WriteEpoch must find the epoch stored, make it
// durable, and say it is committed; the next epoch, bringing the same
// stack and executable again, must commit; and after a restart every
// epoch is there once.
func TestCommitWhoseCheckpointFails(t *testing.T) {
	ctx := context.Background()
	epoch := func(n int64, samples int) *Epoch {
		e := testEpoch(n)
		e.Stacks = []Stack{{ID: uint64(1000 + n), Kind: "user", Frames: []string{"main"}, Modules: []string{"/bin/x"}}}
		e.Executables = []Executable{{Path: fmt.Sprintf("/bin/x%d", n), BuildID: "b"}}
		for i := 0; i < samples; i++ {
			e.Samples = append(e.Samples, Sample{Vital: "cpu", Comm: fmt.Sprintf("c%d", i), Exe: fmt.Sprintf("/x/%d/%d", n, i),
				Pid: uint32(i), UStackID: uint64(1000 + n)})
		}
		return e
	}
	faults := 0
	// The memory at which the checkpoint, but not the transaction, runs
	// out depends on DuckDB's version: a few sizes around it.
	for _, mem := range []string{"36MB", "40MB", "44MB", "48MB"} {
		dir := t.TempDir()
		s, err := Open(dir, &Options{memoryLimit: mem, checkpointThreshold: "1KB"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WriteEpoch(ctx, epoch(1, 100)); err != nil {
			t.Fatalf("%s: epoch 1: %v", mem, err)
		}
		err = s.WriteEpoch(ctx, epoch(2, 500))
		in, verr := s.epochStored("h1", 2)
		if verr != nil {
			t.Fatal(verr)
		}
		t.Logf("%s: epoch 2: %v (stored %v, COMMITs failed with their epoch stored: %d)", mem, err, in, s.failedCommitsStored)
		if (err == nil) != in {
			t.Errorf("%s: WriteEpoch said %v, but the epochs table says stored=%v", mem, err, in)
		}
		faults += s.failedCommitsStored
		next := epoch(3, 100)
		next.Stacks = append(next.Stacks, epoch(2, 0).Stacks...)
		next.Executables = append(next.Executables, epoch(2, 0).Executables...)
		if err := s.WriteEpoch(ctx, next); err != nil {
			t.Errorf("%s: epoch 3, bringing epoch 2's stack again: %v", mem, err)
		}
		s.Close()
		s, err = Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Query(ctx, `SELECT (SELECT list(epoch ORDER BY epoch) FROM epochs)::VARCHAR,
			(SELECT count(*) = count(DISTINCT stack_id) FROM stacks), (SELECT count(*) FROM executables WHERE path = '/bin/x2')`)
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(res.Rows[0]); got != "[[1, 2, 3] true 1]" {
			t.Errorf("%s: after a restart: epochs, stacks once, /bin/x2 stored = %s, want [[1, 2, 3] true 1]", mem, got)
		}
	}
	if faults == 0 {
		t.Fatal("no COMMIT failed with its epoch stored: the fault this test is about did not happen")
	}
}

// TestOutOfMemoryMayBeGivenAgain: a write that DuckDB's memory limit
// refuses is no fault of the storage and loses nothing: the error says it
// may be given again (ErrUnavailable, so the recorder holds the epoch
// rather than drop it), the store stays open, and a write that fits goes
// through.
func TestOutOfMemoryMayBeGivenAgain(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir(), &Options{memoryLimit: "16MB"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := testEpoch(1)
	for i := range 400_000 {
		big.Samples = append(big.Samples, Sample{Vital: "cpu", Comm: fmt.Sprintf("c%d", i), Exe: fmt.Sprintf("/x/%d", i), Pid: uint32(i)})
	}
	err = s.WriteEpoch(ctx, big)
	t.Logf("an epoch of 400 000 samples under a 16 MB limit: %v", err)
	if err == nil {
		t.Skip("DuckDB took the epoch within 16 MB: no out-of-memory to test")
	}
	if !outOfMemory(err) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("out of memory: %v; want an ErrUnavailable out-of-memory error", err)
	}
	if h := s.Health(); h.Fault != "" {
		t.Errorf("an out-of-memory started a storage fault: %+v", h)
	}
	if err := s.WriteEpoch(ctx, testEpoch(2)); err != nil {
		t.Errorf("a small epoch after the out-of-memory: %v", err)
	}
}

// TestOutOfMemoryMessages: DuckDB's words for its memory limit, as its
// appender, its queries and its commits give them, are out-of-memory
// errors (held and given again), and an I/O failure is not one.
func TestOutOfMemoryMessages(t *testing.T) {
	for msg, want := range map[string]bool{
		"append to samples: could not allocate block of size 256.0 KiB (122.5 MiB/122.0 MiB used)":                                      true,
		"commit epoch 47: TransactionContext Error: Failed to commit: failed to pin block of size 256.0 KiB (121.8 MiB/122.0 MiB used)": true,
		"Out of Memory Error: failed to allocate data of size 4.0 MiB (120.1 MiB/122.0 MiB used)":                                       true,
		"IO Error: Could not write file \"holter.duckdb.wal\": No space left on device":                                                 false,
	} {
		if got := outOfMemory(errors.New(msg)); got != want {
			t.Errorf("outOfMemory(%q) = %v, want %v", msg, got, want)
		}
	}
}
