package recorder

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestBoostSamplesEachRequest runs two direct_write workloads at once for
// 2 s: one started by a shell the recorder boosts (Boost), so that it is
// boosted as the shell's child, the other not. Every block request of the
// boosted one is sampled, each standing for one request (its label's count
// grows by one request between its samples); the other's are sampled a few
// times an epoch, where their label's count crosses a power of two.
func TestBoostSamplesEachRequest(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildWorkload(t, "direct_write")
	// The plain one is a build of its own: labels carry the executable
	// but no process, so two runs of one file would share their label,
	// and its count, which tells how many requests the boosted one made.
	plainBin := testutil.BuildWorkload(t, "direct_write")
	dir := testutil.BlockDir(t)
	var plainPid int
	st := recordWhile(t, func(rec *Recorder) {
		if err := rec.Boost(uint32(1 << 30)); err == nil || !strings.Contains(err.Error(), "no such process") {
			t.Errorf("boost of a process that does not exist: %v, want no such process", err)
		}
		// The shell forks the workload (it is not its last command) once
		// it is boosted.
		sh := exec.Command("sh", "-c", fmt.Sprintf("sleep 0.2; %s %s 2; true", bin, filepath.Join(dir, "boosted")))
		plain := exec.Command(plainBin, filepath.Join(dir, "plain"), "2.2")
		for _, c := range []*exec.Cmd{sh, plain} {
			c.Stderr = os.Stderr
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
		}
		if err := rec.Boost(uint32(sh.Process.Pid)); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*exec.Cmd{sh, plain} {
			if err := c.Wait(); err != nil {
				t.Errorf("%v: %v", c.Args, err)
			}
		}
		if err := rec.Unboost(uint32(sh.Process.Pid)); err != nil {
			t.Error(err)
		}
		if rec.boostMax() != 0 {
			t.Errorf("boost_max %d with no process boosted, want 0", rec.boostMax())
		}
		plainPid = plain.Process.Pid
	})
	// The boosted workload is the shell's child: the other direct_write.
	boostedPid := int(toInt(queryRow(t, st, fmt.Sprintf(`SELECT coalesce(max(pid), 0) FROM samples
		WHERE vital = 'blio' AND comm = 'direct_write' AND pid <> %d`, plainPid))[0]))
	// Per epoch and workload: its samples, and the requests its label
	// counted (the greatest estimate over the 64 KiB a request weighs).
	for _, w := range []struct {
		name string
		pid  int
	}{{"boosted", boostedPid}, {"plain", plainPid}} {
		res, err := st.Query(context.Background(), fmt.Sprintf(`SELECT epoch, count(*), max(est_count) // 65536 FROM samples
			WHERE vital = 'blio' AND pid = %d AND bytes_requested = 65536 GROUP BY epoch ORDER BY epoch`, w.pid))
		if err != nil {
			t.Fatal(err)
		}
		total, samples, want := int64(0), int64(0), int64(0)
		for _, row := range res.Rows {
			n, requests := toInt(row[1]), toInt(row[2])
			total += requests
			samples += n
			// All of them, or as many as boosts may take an epoch.
			want += min(requests, BoostPerSecond)
			t.Logf("%s (pid %d), epoch %v: %d samples of %d requests", w.name, w.pid, row[0], n, requests)
			switch w.name {
			case "plain":
				// 2^16 to 2^32 bytes is 16 powers of two an epoch,
				// and a request submitted in one epoch may complete in
				// the next.
				if n > 24 {
					t.Errorf("unboosted workload, epoch %v: %d samples, want at most 24 (one per power of two)", row[0], n)
				}
			}
		}
		if total < 50 {
			t.Fatalf("%s workload made %d requests, too few to tell sampling each from sampling some", w.name, total)
		}
		// A request that completes after its epoch was read is counted
		// late, not filed, so a few may be missing.
		if w.name == "boosted" && float64(samples) < 0.95*float64(want) {
			t.Errorf("boosted workload: %d samples of %d requests, want each sampled up to %d an epoch", samples, total, BoostPerSecond)
		}
	}
}
