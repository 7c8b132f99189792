package export

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// stackEpoch is epoch n of host h1: one cpu sample on each user stack of
// ustacks, all on one kernel stack. A stack has frames frames, long
// names, so that the stacks of an epoch weigh in the spool.
func stackEpoch(n int64, frames int, ustacks ...uint64) *store.Epoch {
	start := int64(1_790_000_000_000_000_000) + n*int64(time.Second)
	e := &store.Epoch{Host: "h1", Epoch: n, StartNs: start, EndNs: start + int64(time.Second),
		Vitals:      []store.Vital{{Name: "cpu", Events: uint64(len(ustacks)), WeightSum: uint64(len(ustacks)), Samples: uint64(len(ustacks))}},
		Executables: []store.Executable{{Path: "/usr/bin/deep", BuildID: "b1"}}}
	e.Stacks = append(e.Stacks, store.Stack{ID: 7, Kind: "kernel", Frames: []string{"k_leaf", "k_root"}, Modules: []string{"vmlinux", "vmlinux"}})
	for i, id := range ustacks {
		st := store.Stack{ID: id, Kind: "user"}
		for j := 0; j < frames; j++ {
			st.Frames = append(st.Frames, fmt.Sprintf("function_%d_frame_%02d_of_a_deep_stack", id, j))
			st.Modules = append(st.Modules, "/usr/lib/libdeep.so")
		}
		e.Stacks = append(e.Stacks, st)
		e.Samples = append(e.Samples, store.Sample{TsNs: start + int64(i), Vital: "cpu", LabelHash: id, Weight: 1, EstCount: 1,
			Pid: 42, Tid: 42, Comm: "deep", Exe: "/usr/bin/deep", KStackID: 7, UStackID: id})
	}
	return e
}

// ids are n stack ids from first on.
func ids(first uint64, n int) []uint64 {
	var out []uint64
	for i := 0; i < n; i++ {
		out = append(out, first+uint64(i))
	}
	return out
}

// stacksFixture is a store and an exporter of its host h1 to a database
// of a real ClickHouse server.
type stacksFixture struct {
	st  *store.Store
	ch  *clickhouse.Client
	e   *Exporter
	dir string // the spool
}

func newStacksFixture(t *testing.T, server *testutil.ClickHouse, db string, opts Options) *stacksFixture {
	t.Helper()
	f := &stacksFixture{dir: filepath.Join(t.TempDir(), "spool")}
	var err error
	if f.ch, err = clickhouse.New(server.URL, &clickhouse.Options{Database: db}); err != nil {
		t.Fatal(err)
	}
	if f.st, err = store.Open(t.TempDir(), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.st.Close() })
	opts.Client, opts.Store, opts.Host, opts.SpoolDir = f.ch, f.st, "h1", f.dir
	if f.e, err = New(opts); err != nil {
		t.Fatal(err)
	}
	return f
}

// commit writes an epoch to the store and tells the exporter.
func (f *stacksFixture) commit(t *testing.T, ep *store.Epoch) error {
	t.Helper()
	if err := f.st.WriteEpoch(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	return f.e.Committed(context.Background(), ep.Epoch)
}

// run ships until the test ends.
func (f *stacksFixture) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitWhole waits until epoch last is shipped and the spool is empty.
func (f *stacksFixture) waitWhole(t *testing.T, last int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if st := f.e.Status(); st.LastShippedEpoch == last && st.SpooledBatches == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("epoch %d not shipped within 60s: %+v", last, f.e.Status())
}

func (f *stacksFixture) chQuery(t *testing.T, q string) [][]any {
	t.Helper()
	res, err := f.ch.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return res.Rows
}

func (f *stacksFixture) storeQuery(t *testing.T, q string, args ...any) [][]any {
	t.Helper()
	res, err := f.st.Query(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return res.Rows
}

// unresolved lists the stacks samples of epochs up to upTo in ClickHouse
// refer to that ClickHouse does not have with the frames the store has.
func (f *stacksFixture) unresolved(t *testing.T, upTo int64) []string {
	t.Helper()
	var refs []string
	for _, r := range f.chQuery(t, fmt.Sprintf(`SELECT DISTINCT toString(id) FROM (
		SELECT kstack_id AS id FROM samples WHERE host = 'h1' AND epoch <= %[1]d AND isNotNull(kstack_id)
		UNION ALL SELECT ustack_id AS id FROM samples WHERE host = 'h1' AND epoch <= %[1]d AND isNotNull(ustack_id))`, upTo)) {
		refs = append(refs, fmt.Sprint(r[0]))
	}
	if len(refs) == 0 {
		return nil
	}
	in := strings.Join(refs, ",")
	frames := func(rows [][]any) map[string]string {
		m := map[string]string{}
		for _, r := range rows {
			m[fmt.Sprint(r[0])] = fmt.Sprint(r[1])
		}
		return m
	}
	have := frames(f.chQuery(t, `SELECT toString(stack_id), frames FROM stacks WHERE stack_id IN (`+in+`)`))
	want := frames(f.storeQuery(t, `SELECT stack_id::VARCHAR, frames FROM stacks WHERE stack_id IN (`+in+`)`))
	var out []string
	for _, id := range refs {
		if have[id] != want[id] {
			out = append(out, fmt.Sprintf("%s: ClickHouse %q, store %q", id, have[id], want[id]))
		}
	}
	return out
}

// shipsAsStored ships until epoch last is shipped: ClickHouse then has
// the store's epochs, each once, with all their samples and stacks.
func (f *stacksFixture) shipsAsStored(t *testing.T, last int64) {
	t.Helper()
	f.run(t)
	f.waitWhole(t, last)
	if want, got := f.perEpoch(t, last, true), f.perEpoch(t, last, false); want != got {
		t.Errorf("epoch:rows:samples in the store %s, in ClickHouse %s", want, got)
	}
	if bad := f.unresolved(t, last); len(bad) > 0 {
		t.Errorf("samples in ClickHouse without their stacks: %v", bad)
	}
}

// perEpoch is "epoch:epochs rows:samples" for each epoch of h1 up to upTo
// in the store or in ClickHouse.
func (f *stacksFixture) perEpoch(t *testing.T, upTo int64, inStore bool) string {
	t.Helper()
	var rows [][]any
	if inStore {
		rows = f.storeQuery(t, `SELECT epoch, 1, (SELECT count(*) FROM samples s WHERE s.host = e.host AND s.epoch = e.epoch)
			FROM epochs e WHERE host = 'h1' AND epoch <= $1 ORDER BY epoch`, upTo)
	} else {
		rows = f.chQuery(t, fmt.Sprintf(`SELECT epoch, n, s FROM (SELECT epoch, count() AS n FROM epochs WHERE host = 'h1' AND epoch <= %[1]d GROUP BY epoch)
			ANY LEFT JOIN (SELECT epoch, count() AS s FROM samples WHERE host = 'h1' GROUP BY epoch) USING epoch ORDER BY epoch`, upTo))
	}
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%v:%v:%v", r[0], r[1], r[2]))
	}
	return strings.Join(out, " ")
}

// TestExportShippedEpochIsWhole ships epochs at a low byte rate, so that
// the pause after each batch leaves ClickHouse between two batches of an
// epoch for a while, and watches: at every moment, every stack a sample
// in ClickHouse refers to is there (stacks go before their samples), and
// once Status says an epoch is shipped, all of it is — its epochs row
// exactly once, all its samples, all their stacks. (A CI run of
// TestFleetUI compared the epoch Status named with the host's store while
// its stacks were still in the spool.)
func TestExportShippedEpochIsWhole(t *testing.T) {
	server := testutil.StartClickHouse(t, "127.0.0.1")
	f := newStacksFixture(t, server, "whole", Options{Rate: 40 << 10})
	const last = 3
	for n := int64(1); n <= last; n++ {
		// New stacks in every epoch, and the first epoch's again.
		if err := f.commit(t, stackEpoch(n, 12, append(ids(1000*uint64(n), 40), ids(1000, 5)...)...)); err != nil {
			t.Fatal(err)
		}
	}
	f.run(t)
	deadline := time.Now().Add(90 * time.Second)
	for f.e.Status().Server == "" { // the schema is made
		if time.Now().After(deadline) {
			t.Fatalf("no schema within 90s: %+v", f.e.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	seen := int64(-1)
	for seen < last {
		if time.Now().After(deadline) {
			t.Fatalf("epoch %d not shipped within 90s: %+v", last, f.e.Status())
		}
		if bad := f.unresolved(t, last); len(bad) > 0 {
			t.Fatalf("samples in ClickHouse without their stacks (%+v): %v", f.e.Status(), bad)
		}
		shipped := f.e.Status().LastShippedEpoch
		if shipped > seen {
			if want, got := f.perEpoch(t, shipped, true), f.perEpoch(t, shipped, false); want != got {
				t.Fatalf("Status says epoch %d is shipped; epoch:rows:samples in the store %s, in ClickHouse %s", shipped, want, got)
			}
			if bad := f.unresolved(t, shipped); len(bad) > 0 {
				t.Fatalf("Status says epoch %d is shipped; stacks missing: %v", shipped, bad)
			}
			seen = shipped
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestExportSpoolWriteFailure fails the spooling of an epoch midway (a
// directory where its third batch file goes) — the first epoch of a new
// spool, then a later one; the next commit spools it again: nothing of it
// arrives twice, and its stacks — which the failed try had counted as
// shipped once — arrive.
func TestExportSpoolWriteFailure(t *testing.T) {
	server := testutil.StartClickHouse(t, "127.0.0.1")
	f := newStacksFixture(t, server, "failure", Options{Rate: 1 << 30})
	failThird := func(ep *store.Epoch) {
		t.Helper()
		obstacle := filepath.Join(f.dir, fmt.Sprintf("%020d.batch", f.e.spool.next+2))
		if err := os.MkdirAll(filepath.Join(obstacle, "x"), 0o750); err != nil {
			t.Fatal(err)
		}
		err := f.commit(t, ep)
		if err == nil {
			t.Fatalf("spooling epoch %d with its third batch file unwritable did not fail", ep.Epoch)
		}
		t.Logf("spooling epoch %d failed as planned: %v", ep.Epoch, err)
		if err := os.RemoveAll(obstacle); err != nil {
			t.Fatal(err)
		}
	}
	failThird(stackEpoch(1, 4, ids(100, 20)...))
	if err := f.commit(t, stackEpoch(2, 4, append(ids(200, 20), ids(100, 3)...)...)); err != nil {
		t.Fatal(err)
	}
	failThird(stackEpoch(3, 4, append(ids(300, 20), ids(200, 3)...)...))
	// Epoch 4's commit spools epoch 3 again, then epoch 4, on epoch 3's
	// stacks.
	if err := f.commit(t, stackEpoch(4, 4, ids(300, 5)...)); err != nil {
		t.Fatal(err)
	}
	f.shipsAsStored(t, 4)
}

// TestExportSpoolDropKeepsStacks overflows the spool before ClickHouse is
// reached, with an epoch 1 of many deep stacks and a light epoch 2 whose
// samples are on some of them, which the exporter spooled once, with
// epoch 1: epoch 1 is dropped, whole and counted, and epoch 2 arrives
// with all its stacks. Epoch 1 is dropped at once, being larger than the
// spool, or when epoch 2 is spooled, after it.
func TestExportSpoolDropKeepsStacks(t *testing.T) {
	server := testutil.StartClickHouse(t, "127.0.0.1")
	for _, c := range []struct {
		name   string
		stacks int   // epoch 1's
		limit  int64 // 0: just what epoch 1 takes
	}{{"larger", 400, 64 << 10}, {"after", 40, 0}} {
		t.Run(c.name, func(t *testing.T) {
			limit := c.limit
			if limit == 0 {
				limit = 1 << 30 // until epoch 1 is spooled
			}
			f := newStacksFixture(t, server, "drop_"+c.name, Options{Rate: 1 << 30, SpoolLimit: limit})
			if err := f.commit(t, stackEpoch(1, 24, ids(100, c.stacks)...)); err != nil {
				t.Fatal(err)
			}
			if c.limit == 0 {
				f.e.spool.limit = f.e.spool.bytes
			}
			if err := f.commit(t, stackEpoch(2, 24, ids(110, 5)...)); err != nil {
				t.Fatal(err)
			}
			st := f.e.Status()
			if st.DroppedBatches == 0 {
				t.Fatalf("a spool of %d bytes kept epoch 1 of %d deep stacks: %+v", f.e.spool.limit, c.stacks, st)
			}
			f.run(t)
			f.waitWhole(t, 2)
			if got := f.perEpoch(t, 2, false); got != "2:1:5" {
				t.Errorf("epoch:rows:samples in ClickHouse: %s, want epoch 1 dropped whole and epoch 2's 5 samples", got)
			}
			if bad := f.unresolved(t, 2); len(bad) > 0 {
				t.Errorf("samples in ClickHouse without their stacks: %v", bad)
			}
		})
	}
}

// TestExportRespooledAfterCrash spools an epoch whose stacks an earlier
// epoch shipped, then loses the spool's state as a crash between the
// batch files and spool.json would: a new exporter, which has shipped no
// stacks, spools the epoch again, its stacks with it. Every batch of the
// epoch is then in the spool twice, the second time after more stack
// batches: each append-only batch must still arrive once.
func TestExportRespooledAfterCrash(t *testing.T) {
	server := testutil.StartClickHouse(t, "127.0.0.1")
	f := newStacksFixture(t, server, "respooled", Options{Rate: 1 << 30})
	if err := f.commit(t, stackEpoch(1, 4, ids(100, 20)...)); err != nil {
		t.Fatal(err)
	}
	if err := f.commit(t, stackEpoch(2, 4, ids(100, 20)...)); err != nil {
		t.Fatal(err)
	}
	f.e.spool.state.LastEpoch = 1 // epoch 2's files written, its state not
	if err := f.e.spool.saveState(); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.e, err = New(f.e.opts); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Committed(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	f.shipsAsStored(t, 2)
}
