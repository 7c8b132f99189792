package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func testEpoch(n int64) *Epoch {
	return &Epoch{
		Host: "h1", Epoch: n, StartNs: n * 1e9, EndNs: (n + 1) * 1e9,
		Vitals: []Vital{{Name: "cpu", Events: 10, WeightSum: 1000, Samples: 2, DistinctLabels: 3, Threshold: 2}},
		Samples: []Sample{
			{TsNs: n*1e9 + 1, Vital: "cpu", LabelHash: 1 << 63, Weight: 10, EstCount: 10, Pid: 42, Tid: 43,
				Comm: "spin", Exe: "/bin/spin", KStackID: 7, Fields: map[string]any{"ip": uint64(0xffffffff81000000), "in_kernel": true}},
			{TsNs: n*1e9 + 2, Vital: "blio", Weight: 4096, Pid: 42, Tid: 42, Comm: "spin", Exe: "/bin/spin",
				Fields: map[string]any{"op": "write", "latency_ns": int64(1234), "dev": "253:0"}},
		},
		Stacks:      []Stack{{ID: 7, Kind: "kernel", Frames: []string{"schedule", "pipe_read"}, Modules: []string{"vmlinux", "vmlinux"}}},
		Executables: []Executable{{Path: "/bin/spin", BuildID: "abcd"}},
	}
}

func TestWriteAndQuery(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for n := int64(1); n <= 3; n++ {
		if err := s.WriteEpoch(ctx, testEpoch(n)); err != nil {
			t.Fatal(err)
		}
	}
	next, err := s.NextEpoch(ctx, "h1")
	if err != nil || next != 4 {
		t.Fatalf("NextEpoch = %d, %v; want 4", next, err)
	}
	res, err := s.Query(ctx, `SELECT count(*) AS n, sum(latency_ns) AS lat FROM samples WHERE vital = 'blio'`)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Rows[0][0]; got != int64(3) {
		t.Fatalf("blio samples = %v, want 3", got)
	}
	res, err = s.Query(ctx, `SELECT frames[2] FROM stacks`)
	if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != "pipe_read" {
		t.Fatalf("stacks = %+v, %v", res, err)
	}
	s.Close()

	// Reopen: everything committed is there, the sequence continues.
	s, err = Open(dir, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err = s.Query(ctx, `SELECT count(*) FROM epochs`)
	if err != nil || res.Rows[0][0] != int64(3) {
		t.Fatalf("epochs after reopen = %+v, %v", res, err)
	}
}

func TestCorruptFileIsNotOverwritten(t *testing.T) {
	dir := t.TempDir()
	junk := bytes.Repeat([]byte("not a database "), 1000)
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, junk, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, nil)
	if err == nil {
		t.Fatal("opened a corrupt store")
	}
	t.Log(err)
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, junk) {
		t.Fatal("corrupt file was modified")
	}
}

// A store whose recorder is killed (its files as they are while it is
// open) opens again, on a new store and on one opened before: the WAL it
// leaves never holds the schema's DDL, whose replay DuckDB fails at.
func TestKilledStoreOpensAgain(t *testing.T) {
	dir := t.TempDir()
	for run := range 3 {
		s, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if err := s.WriteEpoch(context.Background(), testEpoch(int64(run))); err != nil {
			t.Fatal(err)
		}
		// What a kill leaves: the files now, the store never closed.
		killed := t.TempDir()
		for _, name := range []string{FileName, FileName + ".wal"} {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(killed, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		k, err := Open(killed, nil)
		if err != nil {
			t.Fatalf("run %d: the store as a kill leaves it does not open: %v", run, err)
		}
		res, err := k.Query(context.Background(), "SELECT count(*) FROM epochs")
		if err != nil {
			t.Fatal(err)
		}
		if n := res.Rows[0][0].(int64); n != int64(run+1) {
			t.Errorf("run %d: %d epochs in the killed store, want the %d committed", run, n, run+1)
		}
		k.Close()
	}
}

func TestUnwritableDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "file")
	os.WriteFile(dir, nil, 0o644)
	_, err := Open(filepath.Join(dir, "sub"), nil)
	if err == nil {
		t.Fatal("opened a store under a regular file")
	}
	t.Log(err)
	if _, err := Open(filepath.Join(t.TempDir(), "missing"), &Options{ReadOnly: true}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only open of a missing store: %v", err)
	}
}

func TestEpochIsAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	bad := testEpoch(1)
	bad.Vitals = append(bad.Vitals, bad.Vitals[0]) // duplicate key: the epoch must fail whole
	if err := s.WriteEpoch(ctx, bad); err == nil {
		t.Fatal("epoch with a duplicate vital was written")
	}
	for _, table := range []string{"epochs", "vitals", "samples", "stacks"} {
		res, err := s.Query(ctx, "SELECT count(*) FROM "+table)
		if err != nil {
			t.Fatal(err)
		}
		if n := res.Rows[0][0]; n != int64(0) {
			t.Errorf("%s has %v rows after a failed epoch", table, n)
		}
	}
	// The stack of the failed epoch is written when a later epoch brings it.
	if err := s.WriteEpoch(ctx, testEpoch(1)); err != nil {
		t.Fatal(err)
	}
	res, _ := s.Query(ctx, "SELECT count(*) FROM stacks")
	if n := res.Rows[0][0]; n != int64(1) {
		t.Errorf("stacks = %v after retry, want 1", n)
	}
}
