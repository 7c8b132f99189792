package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// bigEpoch is an epoch of many samples, so a full disk shows at once.
func bigEpoch(n int64) *Epoch {
	e := testEpoch(n)
	for i := 0; i < 3000; i++ {
		e.Samples = append(e.Samples, Sample{Vital: "cpu", Comm: fmt.Sprintf("c%d", i), Exe: fmt.Sprintf("/x/%d/%d", n, i), Pid: uint32(i)})
	}
	return e
}

// openWithEpoch opens the store in dir and commits epoch 1 to it.
func openWithEpoch(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteEpoch(context.Background(), bigEpoch(1)); err != nil {
		s.Close()
		t.Fatal(err)
	}
	return s
}

// writeUntil writes epoch n until it commits, or fails the test after d:
// a fault clears at the first write after it is gone and faultRetry passed.
func writeUntil(t *testing.T, s *Store, n int64, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := s.WriteEpoch(context.Background(), bigEpoch(n))
		if err == nil {
			return
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("epoch %d after the fault: %v, not ErrUnavailable", n, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("epoch %d still not committed %v after the fault cleared: %v (health %+v)", n, d, err, s.Health())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func epochList(t *testing.T, s *Store) string {
	t.Helper()
	res, err := s.Query(context.Background(), `SELECT list(epoch ORDER BY epoch) FROM epochs`)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(res.Rows[0][0])
}

// TestFullDisk fills the file system under the store: the epoch that does
// not fit fails with ErrUnavailable, so do the writes and queries after it
// while the disk is full, the store says it is failing for a full disk;
// once space is freed an epoch commits again, on the same Store, and
// nothing committed before is lost.
func TestFullDisk(t *testing.T) {
	dir := testutil.Tmpfs(t, 48)
	var logged []string
	s, err := Open(dir, &Options{Logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for n := int64(1); n <= 2; n++ {
		if err := s.WriteEpoch(ctx, bigEpoch(n)); err != nil {
			t.Fatalf("epoch %d before the disk filled: %v", n, err)
		}
	}
	filler := testutil.Fill(t, dir, 0)
	for n := int64(3); n <= 6; n++ {
		err := s.WriteEpoch(ctx, bigEpoch(n))
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("epoch %d on a full disk: %v, want ErrUnavailable", n, err)
		}
	}
	h := s.Health()
	if h.State != "failing" || h.Fault != "disk full" || h.Faults != 1 || h.FailedWrites != 4 {
		t.Errorf("health on a full disk: %+v", h)
	}
	if _, err := s.Query(ctx, `SELECT count(*) FROM epochs`); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a query in the fault: %v, want ErrUnavailable", err)
	}
	if err := s.WriteSpans(ctx, &SpanBatch{Spans: []Span{{Host: "h", TraceID: strings.Repeat("1", 32), SpanID: strings.Repeat("2", 16)}}}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("spans in the fault: %v, want ErrUnavailable", err)
	}
	os.Remove(filler)
	writeUntil(t, s, 7, 20*time.Second)
	if h := s.Health(); h.State != "ok" || h.Faults != 1 {
		t.Errorf("health after the fault cleared: %+v", h)
	}
	if err := s.WriteEpoch(ctx, bigEpoch(8)); err != nil {
		t.Fatalf("epoch 8: %v", err)
	}
	if got := epochList(t, s); got != "[1 2 7 8]" {
		t.Errorf("epochs after the fault: %s, want [1 2 7 8]", got)
	}
	t.Logf("log:\n%s", strings.Join(logged, "\n"))
	if len(logged) != 2 || !strings.Contains(logged[0], "storage fault (disk full)") || !strings.Contains(logged[1], "cleared") {
		t.Errorf("the log says %q, want the fault's start and its end", logged)
	}
	s.Close()
	// Whatever the handle did, the file keeps every committed epoch.
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatalf("store does not reopen after a full disk: %v", err)
	}
	if got := epochList(t, s); got != "[1 2 7 8]" {
		t.Errorf("epochs after reopening: %s, want [1 2 7 8]", got)
	}
}

// TestFullDiskWithRoomForTheLog fills the disk but for a little: the log
// takes some commits and then a commit fails midway. The store must not
// go on with the instance whose commit failed (DuckDB 1.4.3 crashed the
// process on the next epoch's rollups), and recovers once space is freed.
func TestFullDiskWithRoomForTheLog(t *testing.T) {
	dir := testutil.Tmpfs(t, 48)
	s := openWithEpoch(t, dir)
	defer s.Close()
	ctx := context.Background()
	filler := testutil.Fill(t, dir, 1<<20)
	var failed []int64
	for n := int64(2); n <= 12; n++ {
		if err := s.WriteEpoch(ctx, bigEpoch(n)); err != nil {
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("epoch %d: %v, want ErrUnavailable", n, err)
			}
			failed = append(failed, n)
		}
	}
	if len(failed) == 0 {
		t.Fatal("no epoch failed with 1 MiB left")
	}
	os.Remove(filler)
	writeUntil(t, s, 13, 20*time.Second)
	res, err := s.Query(ctx, `SELECT count(*) FROM epochs WHERE epoch IN (1, 13)`)
	if err != nil || res.Rows[0][0] != int64(2) {
		t.Fatalf("epochs 1 and 13 after the fault: %v, %v", res, err)
	}
	t.Logf("epochs that failed: %v; stored: %s", failed, epochList(t, s))
}

// TestReadOnlyRemount has the kernel remount the store's file system
// read-only, as it does on an I/O error (ext4, errors=remount-ro): writes
// fail with ErrUnavailable, the store says why and closes its files (the
// file system can be unmounted and checked), and once it is mounted
// writable again epochs commit.
func TestReadOnlyRemount(t *testing.T) {
	fs := testutil.NewExtFS(t, 64)
	dir := fs.Dir
	s := openWithEpoch(t, dir)
	defer s.Close()
	ctx := context.Background()
	fs.Break()
	for n := int64(2); n <= 3; n++ {
		if err := s.WriteEpoch(ctx, bigEpoch(n)); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("epoch %d on a read-only file system: %v, want ErrUnavailable", n, err)
		}
	}
	if h := s.Health(); h.State != "failing" || h.Fault != "read-only file system" {
		t.Errorf("health on a read-only file system: %+v", h)
	}
	time.Sleep(faultRetry) // a retry while still read-only keeps failing
	if err := s.WriteEpoch(ctx, bigEpoch(4)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("epoch 4, still read-only: %v", err)
	}
	fs.Repair()
	writeUntil(t, s, 5, 20*time.Second)
	if got := epochList(t, s); got != "[1 5]" {
		t.Errorf("epochs after the fault: %s, want [1 5]", got)
	}
}

// TestCommitLostInTheFault: the kernel may lose the last commit before
// ext4 remounts itself read-only although its fsync succeeded (fault.go);
// here the write-ahead log is cut back to before the last epoch and span
// commits once the file system is repaired, which is what the kernel
// leaves then. The store writes both again as the fault clears, before
// the next epoch, and says so.
func TestCommitLostInTheFault(t *testing.T) {
	fs := testutil.NewExtFS(t, 64)
	var logMu sync.Mutex
	var log strings.Builder
	s, err := Open(fs.Dir, &Options{Logf: func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(&log, format+"\n", args...)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	span := func(id string) *SpanBatch {
		return &SpanBatch{Spans: []Span{{Host: "h1", TraceID: strings.Repeat(id, 32), SpanID: strings.Repeat("2", 16)}}}
	}
	if err := s.WriteEpoch(ctx, bigEpoch(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteSpans(ctx, span("a")); err != nil {
		t.Fatal(err)
	}
	wal := filepath.Join(fs.Dir, FileName+".wal")
	st, err := os.Stat(wal)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteEpoch(ctx, bigEpoch(2)); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteSpans(ctx, span("b")); err != nil {
		t.Fatal(err)
	}
	fs.Break()
	if err := s.WriteEpoch(ctx, bigEpoch(3)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("epoch 3 on a read-only file system: %v, want ErrUnavailable", err)
	}
	fs.Repair()
	if err := os.Truncate(wal, st.Size()); err != nil {
		t.Fatal(err)
	}
	writeUntil(t, s, 3, 20*time.Second)
	if got := epochList(t, s); got != "[1 2 3]" {
		t.Errorf("epochs after the fault: %s, want [1 2 3]", got)
	}
	res, err := s.Query(ctx, `SELECT list(DISTINCT left(trace_id, 1) ORDER BY left(trace_id, 1)) FROM spans`)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(res.Rows[0][0]); got != "[a b]" {
		t.Errorf("spans after the fault: %s, want [a b]", got)
	}
	logMu.Lock()
	defer logMu.Unlock()
	for _, want := range []string{"epoch 2 was committed as the storage fault began", "write spans (commit 2) was committed as the storage fault began"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, log.String())
		}
	}
}

// TestDeletedStore deletes the data directory under an open store: the
// store says so at once, and refuses writes rather than committing them
// to a file that is gone.
func TestDeletedStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var logged []string
	s, err := Open(dir, &Options{Logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.WriteEpoch(ctx, testEpoch(1)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	h := s.Health()
	if h.State != "failing" || h.Fault != "deleted" || !strings.Contains(h.LastError, "deleted with its data directory") {
		t.Fatalf("health after deleting the data directory: %+v", h)
	}
	if err := s.WriteEpoch(ctx, testEpoch(2)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("epoch after the deletion: %v, want ErrUnavailable", err)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "restart the recorder") {
		t.Errorf("log: %q", logged)
	}
	// Recreating the directory does not bring the store back.
	os.MkdirAll(dir, 0o750)
	time.Sleep(faultRetry)
	if err := s.WriteEpoch(ctx, testEpoch(3)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("epoch after recreating the directory: %v, want ErrUnavailable", err)
	}
}

// TestFailedStartOnFullDisk opens for writing a store (with a log left by
// a kill) on a file system with too little room: it is refused, and no
// file in the directory changes.
func TestFailedStartOnFullDisk(t *testing.T) {
	dir := testutil.Tmpfs(t, 48)
	killedStore(t, dir, 3)
	for _, keep := range []int64{0, 128 << 10, 2 << 20} {
		filler := testutil.Fill(t, dir, keep)
		before := testutil.DirHashes(t, dir)
		_, err := Open(dir, nil)
		if !errors.Is(err, ErrNotVerified) {
			t.Fatalf("open with %d KiB free: %v, want a refusal", keep>>10, err)
		}
		t.Log(err)
		if after := testutil.DirHashes(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("open with %d KiB free changed the directory:\nbefore %v\nafter  %v", keep>>10, before, after)
		}
		os.Remove(filler)
	}
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("open with room: %v", err)
	}
	defer s.Close()
	if got := epochList(t, s); got != "[1 2 3]" {
		t.Errorf("epochs: %s", got)
	}
}

// killedStore leaves in dir a store of n epochs as a killed recorder
// leaves it: the file and its log as they are while the store is open.
func killedStore(t *testing.T, dir string, n int64) {
	t.Helper()
	src := t.TempDir()
	s, err := Open(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := int64(1); i <= n; i++ {
		if err := s.WriteEpoch(context.Background(), bigEpoch(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{FileName, FileName + ".wal"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCorruptStoreIsNotTouched corrupts a block in the middle of a real
// store, one its samples live in: opening it for writing is refused
// before any migration or checkpoint, and the file is byte for byte as it
// was.
func TestCorruptStoreIsNotTouched(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for n := int64(1); n <= 20; n++ {
		if err := s.WriteEpoch(context.Background(), bigEpoch(n)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	path := filepath.Join(dir, FileName)
	// Where the samples' comm column is stored, in the middle of the
	// file: bytes that hold rows (a block's unused bytes are not read).
	ro, err := Open(dir, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ro.db.Query(`SELECT block_id, block_offset FROM pragma_storage_info('samples')
		WHERE column_name = 'comm' AND segment_type = 'VARCHAR' AND block_id >= 0 ORDER BY block_id, block_offset`)
	if err != nil {
		t.Fatal(err)
	}
	var segs [][2]int64
	for res.Next() {
		var b, o int64
		res.Scan(&b, &o)
		segs = append(segs, [2]int64{b, o})
	}
	res.Close()
	ro.Close()
	if len(segs) == 0 {
		t.Fatal("the samples' comm column has no blocks")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// DuckDB's file: three 4 KiB headers, then 256 KiB blocks.
	seg := segs[len(segs)/2]
	off := 3*4096 + seg[0]*(256<<10) + seg[1] + 32
	for i := int64(0); i < 64; i++ {
		b[off+i] ^= 0x5a
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before := testutil.DirHashes(t, dir)
	_, err = Open(dir, nil)
	if !errors.Is(err, ErrNotVerified) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("open of a store with a corrupt block: %v, want a refusal naming the checksum", err)
	}
	t.Log(err)
	if after := testutil.DirHashes(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the refused open changed the directory:\nbefore %v\nafter  %v", before, after)
	}
}

// TestGarbageWAL: a write-ahead log DuckDB would silently discard (random
// bytes, or its header followed by random bytes) is refused, read-only
// and for writing, naming the log and what to do, and nothing changes; a
// log whose last entry a kill cut short opens without its last commit.
func TestGarbageWAL(t *testing.T) {
	junk := make([]byte, 50_000)
	for i := range junk {
		junk[i] = byte(i*7919 + i/13)
	}
	for name, wal := range map[string]func(good []byte) []byte{
		"random":            func([]byte) []byte { return junk },
		"header, then junk": func(good []byte) []byte { return append(good[:8:8], junk...) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			killedStore(t, dir, 3)
			walPath := filepath.Join(dir, FileName+".wal")
			good, _ := os.ReadFile(walPath)
			os.WriteFile(walPath, wal(good), 0o600)
			before := testutil.DirHashes(t, dir)
			for _, ro := range []bool{false, true} {
				_, err := Open(dir, &Options{ReadOnly: ro})
				if !errors.Is(err, ErrNotVerified) || !strings.Contains(err.Error(), walPath) || !strings.Contains(err.Error(), "move it away") {
					t.Fatalf("open (read-only %v) with a garbage log: %v", ro, err)
				}
			}
			if after := testutil.DirHashes(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("refusing the log changed the directory")
			}
		})
	}
	t.Run("cut short", func(t *testing.T) {
		dir := t.TempDir()
		killedStore(t, dir, 3)
		walPath := filepath.Join(dir, FileName+".wal")
		good, _ := os.ReadFile(walPath)
		os.WriteFile(walPath, good[:len(good)-100], 0o600)
		s, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("a log cut short in its last entry: %v", err)
		}
		defer s.Close()
		if got := epochList(t, s); got != "[1 2]" {
			t.Errorf("epochs: %s, want [1 2] (the third's commit was cut)", got)
		}
	})
	t.Run("damaged entry", func(t *testing.T) {
		dir := t.TempDir()
		killedStore(t, dir, 3)
		walPath := filepath.Join(dir, FileName+".wal")
		b, _ := os.ReadFile(walPath)
		b[len(b)/2] ^= 0xff
		os.WriteFile(walPath, b, 0o600)
		before := testutil.DirHashes(t, dir)
		_, err := Open(dir, nil)
		if !errors.Is(err, ErrNotVerified) || !strings.Contains(err.Error(), "is damaged") {
			t.Fatalf("open with a damaged log entry: %v", err)
		}
		t.Log(err)
		if after := testutil.DirHashes(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("refusing the log changed the directory")
		}
	})
}

// TestGarbageWALAtRecovery: a log that turns to garbage during a fault
// keeps the store from opening again (DuckDB would drop it), and the
// fault's last error says why.
func TestGarbageWALAtRecovery(t *testing.T) {
	dir := testutil.Tmpfs(t, 48)
	s := openWithEpoch(t, dir)
	defer s.Close()
	ctx := context.Background()
	filler := testutil.Fill(t, dir, 0)
	if err := s.WriteEpoch(ctx, bigEpoch(2)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("epoch 2 on a full disk: %v", err)
	}
	os.Remove(filler)
	walPath := filepath.Join(dir, FileName+".wal")
	if err := os.WriteFile(walPath, []byte(strings.Repeat("garbage!", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(faultRetry)
	if err := s.WriteEpoch(ctx, bigEpoch(3)); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "is not one DuckDB wrote") {
		t.Fatalf("epoch 3 with a garbage log: %v", err)
	}
	if h := s.Health(); h.State != "failing" || !strings.Contains(h.LastError, walPath) {
		t.Errorf("health: %+v", h)
	}
}

// TestNewStoreOnFullDisk: a store is not created on a full disk, where it
// would be cut short and no later start could open it.
func TestNewStoreOnFullDisk(t *testing.T) {
	dir := testutil.Tmpfs(t, 48)
	filler := testutil.Fill(t, dir, 1<<20)
	if _, err := Open(filepath.Join(dir, "data"), nil); !errors.Is(err, ErrNotVerified) || !strings.Contains(err.Error(), "free some space") {
		t.Fatalf("a new store on a full disk: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused store's file exists: %v", err)
	}
	os.Remove(filler)
	s, err := Open(filepath.Join(dir, "data"), nil)
	if err != nil {
		t.Fatalf("a new store with room: %v", err)
	}
	s.Close()
}
