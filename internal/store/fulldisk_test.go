package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestFullDisk fills the file system under the store: the epoch that does
// not fit fails with an error, nothing committed before is lost, and once
// space is freed epochs commit again.
func TestFullDisk(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("holter-test", dir, "tmpfs", 0, "size=16m"); err != nil {
		t.Fatalf("mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })

	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	big := func(n int64) *Epoch {
		e := testEpoch(n)
		for i := 0; i < 3000; i++ {
			e.Samples = append(e.Samples, Sample{Vital: "cpu", Comm: fmt.Sprintf("c%d", i), Exe: fmt.Sprintf("/x/%d/%d", n, i), Pid: uint32(i)})
		}
		return e
	}
	for n := int64(1); n <= 2; n++ {
		if err := s.WriteEpoch(ctx, big(n)); err != nil {
			t.Fatalf("epoch %d before the disk filled: %v", n, err)
		}
	}
	filler := filepath.Join(dir, "filler")
	f, _ := os.Create(filler)
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()

	failed := 0
	for n := int64(3); n <= 6; n++ {
		if err := s.WriteEpoch(ctx, big(n)); err != nil {
			failed++
			t.Logf("epoch %d on a full disk: %v", n, err)
		}
	}
	if failed == 0 {
		t.Fatal("no epoch failed on a full disk")
	}
	os.Remove(filler)
	var recovered bool
	for n := int64(7); n <= 8; n++ {
		if err := s.WriteEpoch(ctx, big(n)); err == nil {
			recovered = true
		} else {
			t.Logf("epoch %d after freeing space: %v", n, err)
		}
	}
	s.Close()

	// Whatever the handle did, the file keeps every committed epoch.
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatalf("store does not reopen after a full disk: %v", err)
	}
	res, err := s.Query(ctx, `SELECT list(epoch ORDER BY epoch) FROM epochs`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("epochs present after reopening: %v (recovered without reopening: %v)", res.Rows[0][0], recovered)
	got := res.Rows[0][0].([]any)
	if len(got) < 2 || got[0] != int64(1) || got[1] != int64(2) {
		t.Fatalf("epochs committed before the disk filled are missing: %v", got)
	}
	if err := s.WriteEpoch(ctx, big(9)); err != nil {
		t.Fatalf("epoch after reopening with free space: %v", err)
	}
}
