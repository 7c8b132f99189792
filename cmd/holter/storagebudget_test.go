package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestStorageBudgetCapsAndCounts records with a small storage budget
// (1 MiB a day: a bank of 128 KiB) while processes come and go, and checks
// from the store and the status: the epochs keep no more than the bank and
// the rate pay for, some samples were capped, and every sample the kernel
// took and user space read was stored or counted capped, per vital.
func TestStorageBudgetCapsAndCounts(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildHolter(t)
	dir := t.TempDir()
	const perDay = 1 << 20
	start := time.Now()
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--budget", "off",
		"--storage-budget", "1MiB")
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	r.waitEpochs(t, 1)
	churn := exec.Command("sh", "-c", "for i in $(seq 300); do /bin/true; ls / >/dev/null; done")
	if out, err := churn.CombinedOutput(); err != nil {
		t.Fatalf("churn: %v: %s", err, out)
	}
	r.waitEpochs(t, 3)

	out, errOut, code := runHolter(t, bin, "status", "--data", dir)
	if code != 0 || !strings.Contains(out, "storage budget 1.049 MB a day") {
		t.Errorf("status: exit %d (%s), no line on the storage budget:\n%s", code, errOut, out)
	}
	out, errOut, code = runHolter(t, bin, "status", "--data", dir, "--json")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	var st struct {
		Budget int64 `json:"storage_budget_bytes_per_day"`
		Bank   int64 `json:"storage_bank_bytes"`
		Spent  int64 `json:"storage_spent_bytes"`
		Vitals []struct {
			Name   string `json:"name"`
			Capped uint64 `json:"capped"`
			Reason string `json:"reason"`
		} `json:"vitals"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	elapsed := time.Since(start)
	mostSpent := perDay/8 + perDay*7/8*elapsed.Seconds()/86400
	t.Logf("budget %d B/day, bank %d B, spent %d B in %v (at most %.0f)", st.Budget, st.Bank, st.Spent, elapsed.Round(time.Second), mostSpent)
	// An epoch's stacks may cost more than the recorder thought when it
	// kept its samples (the next epochs then pay the debt): a margin.
	if st.Budget != perDay || st.Spent <= 0 || float64(st.Spent) > 1.5*mostSpent {
		t.Errorf("status: budget %d (want %d), spent %d bytes (want > 0 and at most %.0f)", st.Budget, perDay, st.Spent, 1.5*mostSpent)
	}
	var capped uint64
	for _, v := range st.Vitals {
		capped += v.Capped
	}
	if capped == 0 {
		t.Errorf("no sample capped under a 1 MiB/day budget with churn:\n%s", out)
	}

	// Each vital and epoch: what was stored and capped is what was taken
	// (less what the ring lost and what came after its epoch closed).
	rows := queryJSON(t, bin, dir, `SELECT v.epoch, v.vital, v.samples AS taken, v.capped, v.lost_ringbuf AS lost,
			count(s.epoch) AS stored
		FROM vitals v LEFT JOIN samples s USING (host, epoch, vital) GROUP BY ALL ORDER BY v.epoch, v.vital`)
	var stored, taken float64
	for _, row := range rows {
		tk, cp, lost, sd := row["taken"].(float64), row["capped"].(float64), row["lost"].(float64), row["stored"].(float64)
		stored += sd
		taken += tk
		if sd+cp > tk-lost {
			t.Errorf("epoch %v %s: stored %v + capped %v > taken %v - lost %v", row["epoch"], row["vital"], sd, cp, tk, lost)
		}
		if sd+cp < (tk-lost)*0.9-20 {
			t.Errorf("epoch %v %s: stored %v + capped %v, taken %v - lost %v: samples gone uncounted", row["epoch"], row["vital"], sd, cp, tk, lost)
		}
	}
	// A sample costs at least its row (52 bytes): the bank and the rate
	// bound what is stored.
	t.Logf("%d epochs of vitals: %.0f samples taken, %.0f stored", len(rows), taken, stored)
	if stored > mostSpent/52 {
		t.Errorf("%.0f samples stored; the budget pays for at most %.0f", stored, mostSpent/52)
	}

	// Started again, the recorder goes on from the bank the last one
	// left, not from a full one: restarts do not buy storage.
	r.cmd.Process.Signal(os.Interrupt)
	r.cmd.Wait()
	left := queryJSON(t, bin, dir, `SELECT value FROM meta WHERE key LIKE 'storage_bank %'`)
	var leftBytes, leftAt int64
	if len(left) != 1 {
		t.Fatalf("the store keeps %d storage banks, want 1: %v", len(left), left)
	}
	if _, err := fmt.Sscanf(fmt.Sprint(left[0]["value"]), "%d %d", &leftBytes, &leftAt); err != nil {
		t.Fatalf("storage bank %v: %v", left[0]["value"], err)
	}
	r = startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "127.0.0.1:0", "--budget", "off",
		"--storage-budget", "1MiB")
	r.waitEpochs(t, 1)
	out, errOut, code = runHolter(t, bin, "status", "--data", dir, "--json")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	refill := float64(perDay) * 7 / 8 * time.Since(time.Unix(0, leftAt)).Seconds() / 86400
	t.Logf("left in the store %d B; bank after a restart %d B (at most %.0f)", leftBytes, st.Bank, float64(leftBytes)+refill)
	if float64(st.Bank) > float64(leftBytes)+refill+1 {
		t.Errorf("a restarted recorder has %d bytes in its bank, the last left %d (+%.0f refilled since): it did not go on from it", st.Bank, leftBytes, refill)
	}
}
