package account

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestMergedIOIsChargedToItsSubmitter: a write whose bio merges into a
// request already queued (another process's adjacent write) makes no
// request of its own; its bytes are still its submitter's I/O. Ten
// tracked dd processes write into the gaps between queued writes to a
// loop device whose file system is frozen (testutil.MergeWrites): each
// must have its 4 KiB of I/O on that device, the merged ones as they
// merged. Before, the merged writes had no I/O at all.
func TestMergedIOIsChargedToItsSubmitter(t *testing.T) {
	testutil.RequireRoot(t)
	lp := testutil.FrozenLoop(t)
	st := openStore(t)
	a, stop := startAccountant(t, Options{Host: "h", Write: st.WriteThreadActivity, FlushEvery: 100 * time.Millisecond, KStackMin: -1})
	defer stop()
	if err := a.Track(uint32(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const copies = 10
	// io is the bytes of process pid's I/O to the device, and how many of
	// its rows are merges (no time: the request it joined is not followed).
	io := func(pid int) (bytes, merges int64) {
		res, err := st.Query(context.Background(), fmt.Sprintf(
			`SELECT coalesce(sum(bytes), 0)::BIGINT, count(*) FILTER (WHERE end_ns = start_ns)
			FROM thread_activity WHERE kind = 'io' AND pid = %d AND dev = '%s'`, pid, lp.Name))
		if err != nil {
			t.Fatal(err)
		}
		return res.Rows[0][0].(int64), res.Rows[0][1].(int64)
	}
	testutil.UntilMerged(t, lp, dir, copies, func(pid int) bool {
		b, _ := io(pid)
		return b >= 4096
	}, func(c *exec.Cmd) bool {
		b, m := io(c.Process.Pid)
		if b != 4096 {
			t.Errorf("%s (process %d): %d bytes of I/O, want 4096", filepath.Base(c.Path), c.Process.Pid, b)
		}
		return m > 0
	})
}
