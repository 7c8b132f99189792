package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/access"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// spanSender posts one span a request to an OTLP/HTTP receiver, each of
// a trace of its own, and keeps which were acknowledged (200) and how
// many were pushed back (503 with Retry-After).
type spanSender struct {
	mu        sync.Mutex
	acked     []string
	pushback  int
	otherErrs []string
	stop      chan struct{}
	done      chan struct{}
}

func sendSpans(t *testing.T, addr string) *spanSender {
	s := &spanSender{stop: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: 30 * time.Second}
	go func() {
		defer close(s.done)
		for i := 1; ; i++ {
			select {
			case <-s.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			trace := fmt.Sprintf("%016x%016x", time.Now().UnixNano(), i)
			body := fmt.Sprintf(`{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"faulty"}}]},
				"scopeSpans":[{"spans":[{"traceId":"%s","spanId":"0102030405060708","name":"op","startTimeUnixNano":"%d","endTimeUnixNano":"%d"}]}]}]}`,
				trace, time.Now().UnixNano()-1000, time.Now().UnixNano())
			resp, err := client.Post("http://"+addr+"/v1/traces", "application/json", strings.NewReader(body))
			s.mu.Lock()
			switch {
			case err != nil:
				s.otherErrs = append(s.otherErrs, err.Error())
			case resp.StatusCode == http.StatusOK:
				s.acked = append(s.acked, trace)
			case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
				s.pushback++
			default:
				s.otherErrs = append(s.otherErrs, resp.Status)
			}
			s.mu.Unlock()
			if resp != nil {
				resp.Body.Close()
			}
		}
	}()
	t.Cleanup(s.halt)
	return s
}

func (s *spanSender) halt() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *spanSender) pushbacks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pushback
}

// recorderStatus is the recorder's status through `holter status --json`;
// when it cannot be had, the test fails with the recorder's log (a
// recorder that crashed shows there).
func recorderStatus(t *testing.T, r *recording, bin string, args ...string) *agentStatus {
	t.Helper()
	out, errOut, code := runHolter(t, bin, append([]string{"status", "--json"}, args...)...)
	if code != 0 {
		select {
		case <-r.done:
			t.Fatalf("holter status: exit %d: %s; the recorder exited:\n%s", code, errOut, r.log)
		case <-time.After(time.Second):
		}
		t.Fatalf("holter status: exit %d: %s\n%s", code, errOut, r.log)
	}
	var st agentStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("holter status --json: %v\n%s", err, out)
	}
	return &st
}

// waitStatus polls the recorder's status until ok says it is as wanted.
func waitStatus(t *testing.T, r *recording, bin string, what string, ok func(*agentStatus) bool, args ...string) *agentStatus {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := recorderStatus(t, r, bin, args...)
		if ok(st) {
			return st
		}
		select {
		case <-r.done:
			t.Fatalf("the recorder exited while waiting for %s:\n%s", what, r.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute; status %+v, storage %+v\n%s", what, st.Status, st.Storage, r.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startSmallRecorder records the cpu vital alone into data, in epochs of
// a second, with its OTLP/HTTP receiver on the address returned; once two
// epochs are committed it returns with the flags that reach its API. The
// tests ask it at that address rather than through --data: an emergency
// read-only remount loses what was not yet on disk, agent.json with it,
// and a deleted directory takes it along.
func startSmallRecorder(t *testing.T, bin, data string) (r *recording, otlpAddr string, api []string) {
	t.Helper()
	otlpAddr = freeAddr(t)
	r = startRecord(t, bin, "--data", data, "--epoch", "1s", "--api", "127.0.0.1:0", "--vitals", "cpu", "--budget", "off",
		"--online=false", "--account=false", "--otlp-grpc", "off", "--otlp-http", otlpAddr)
	r.waitEpochs(t, 2)
	info, ok := readAgentInfo(data)
	if !ok {
		stopRecording(t, r)
		t.Fatalf("no agent.json in %s", data)
	}
	token, err := os.ReadFile(filepath.Join(data, access.AdminTokenFile))
	if err != nil {
		stopRecording(t, r)
		t.Fatalf("the recorder's token: %v", err)
	}
	return r, otlpAddr, []string{"--api", info.API, "--token", strings.TrimSpace(string(token))}
}

// TestRecorderRidesOutStorageFaults runs the recorder on a file system
// that fills up, or that the kernel remounts read-only, for longer than
// the ten epochs after which it used to exit: it keeps recording, says so
// in its status and log, holds the epochs it cannot commit, answers OTLP
// exports 503 with Retry-After; and once the fault clears it commits the
// held epochs (none missing) and every span it acknowledged is stored.
func TestRecorderRidesOutStorageFaults(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	bin := testutil.BuildHolter(t)
	cases := []struct {
		name  string
		mount func(t *testing.T) (dir string, fault, clear func())
		kind  string
	}{
		{"full disk", func(t *testing.T) (string, func(), func()) {
			dir := testutil.Tmpfs(t, 96)
			var filler string
			return dir, func() { filler = testutil.Fill(t, dir, 0) }, func() { os.Remove(filler) }
		}, "disk full"},
		{"read-only remount", func(t *testing.T) (string, func(), func()) {
			fs := testutil.NewExtFS(t, 96)
			return fs.Dir, fs.Break, fs.Repair
		}, "read-only file system"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Each case waits out a dozen epochs of its own recorder on
			// its own file system: the two wait at once.
			t.Parallel()
			mnt, fault, clear := c.mount(t)
			data := filepath.Join(mnt, "data")
			r, otlpAddr, api := startSmallRecorder(t, bin, data)
			defer stopRecording(t, r)
			spans := sendSpans(t, otlpAddr)
			time.Sleep(time.Second)

			fault()
			st := waitStatus(t, r, bin, "the fault in the status", func(s *agentStatus) bool {
				return s.Storage != nil && s.Storage.State == "failing"
			}, api...)
			if st.Storage.Fault != c.kind {
				t.Errorf("the status says the fault is %q, want %q: %+v", st.Storage.Fault, c.kind, st.Storage)
			}
			faultAt := st.CurrentEpoch
			// Longer than the ten failed epochs the recorder used to stop at.
			st = waitStatus(t, r, bin, "12 epochs into the fault", func(s *agentStatus) bool {
				return s.CurrentEpoch >= faultAt+12 && s.HeldEpochs >= 10
			}, api...)
			out, _, _ := runHolter(t, bin, append([]string{"status"}, api...)...)
			if !strings.Contains(out, "STORAGE FAILING") || !strings.Contains(out, "epochs held in memory") {
				t.Errorf("holter status in the fault:\n%s", out)
			}
			if spans.pushbacks() == 0 {
				t.Errorf("no OTLP export was answered 503 with Retry-After in the fault")
			}

			clear()
			st = waitStatus(t, r, bin, "the store taking writes again", func(s *agentStatus) bool {
				return s.Storage.State == "ok" && s.HeldEpochs == 0 && s.LastCommitted > faultAt+12
			}, api...)
			if st.SkippedEpochs != 0 {
				t.Errorf("%d epochs dropped in a fault shorter than the held bounds", st.SkippedEpochs)
			}
			if st.Storage.Faults != 1 {
				t.Errorf("storage %+v, want one fault", st.Storage)
			}
			time.Sleep(time.Second) // an export or two after the fault
			spans.halt()
			stopRecording(t, r)
			log := r.log.String()
			for _, want := range []string{"storage fault (" + c.kind + ")", "cleared after", "held in memory until the store takes it",
				"the store takes epochs again"} {
				if !strings.Contains(log, want) {
					t.Errorf("the log lacks %q:\n%s", want, log)
				}
			}
			for _, line := range strings.Split(log, "\n") {
				if strings.Contains(line, "written again") {
					t.Logf("the store found a commit lost: %s", line)
				}
				if strings.Contains(line, "could not be cut off") {
					t.Logf("a commit failed after its log was written: %s", line)
				}
			}
			if len(spans.otherErrs) > 0 {
				t.Errorf("OTLP exports answered other than 200 or 503: %v", spans.otherErrs)
			}

			s, err := store.Open(data, &store.Options{ReadOnly: true})
			if err != nil {
				t.Fatalf("the store after the fault: %v", err)
			}
			defer s.Close()
			ctx := context.Background()
			res, err := s.Query(ctx, `SELECT min(epoch), max(epoch), count(*) FROM epochs`)
			if err != nil {
				t.Fatal(err)
			}
			first, last, n := res.Rows[0][0].(int64), res.Rows[0][1].(int64), res.Rows[0][2].(int64)
			if n != last-first+1 || last <= faultAt+12 {
				t.Errorf("epochs %d to %d stored, %d of them (the fault began in epoch %d): the held epochs must all be there; missing %v\n%s",
					first, last, n, faultAt, missingEpochs(t, s, first, last), log)
			}
			res, err = s.Query(ctx, `SELECT trace_id FROM spans`)
			if err != nil {
				t.Fatal(err)
			}
			stored := map[string]bool{}
			for _, row := range res.Rows {
				stored[row[0].(string)] = true
			}
			missing := 0
			for _, id := range spans.acked {
				if !stored[id] {
					missing++
				}
			}
			t.Logf("%d exports acknowledged, %d pushed back with 503; epochs %d to %d stored", len(spans.acked), spans.pushback, first, last)
			if missing > 0 {
				t.Errorf("%d of %d acknowledged spans are not in the store\n%s", missing, len(spans.acked), log)
			}
		})
	}
}

// missingEpochs are the epochs from first to last that the store lacks.
func missingEpochs(t *testing.T, s *store.Store, first, last int64) []int64 {
	t.Helper()
	res, err := s.Query(context.Background(), `SELECT epoch FROM epochs ORDER BY epoch`)
	if err != nil {
		t.Fatal(err)
	}
	in := map[int64]bool{}
	for _, row := range res.Rows {
		in[row[0].(int64)] = true
	}
	var missing []int64
	for n := first; n <= last; n++ {
		if !in[n] {
			missing = append(missing, n)
		}
	}
	return missing
}

// TestRecorderReportsDeletedDataDir deletes the data directory under a
// running recorder: it keeps running, and says so in its log and status
// (asked at its API address: its agent.json went with the directory), and
// OTLP exports are pushed back rather than acknowledged into a file that
// is gone.
func TestRecorderReportsDeletedDataDir(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel() // a waiting test (TestMain)
	bin := testutil.BuildHolter(t)
	data := filepath.Join(t.TempDir(), "data")
	r, otlpAddr, api := startSmallRecorder(t, bin, data)
	defer stopRecording(t, r)
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, r, bin, "the deletion in the status", func(s *agentStatus) bool {
		return s.Storage != nil && s.Storage.Fault == "deleted"
	}, api...)
	if !strings.Contains(st.Storage.LastError, "deleted with its data directory") {
		t.Errorf("status: %+v", st.Storage)
	}
	spans := sendSpans(t, otlpAddr)
	deadline := time.Now().Add(30 * time.Second)
	for spans.pushbacks() == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	spans.halt()
	if spans.pushbacks() == 0 || len(spans.acked) > 0 {
		t.Errorf("after the deletion: %d exports acknowledged, %d pushed back; want none acknowledged", len(spans.acked), spans.pushback)
	}
	at := st.CurrentEpoch
	waitStatus(t, r, bin, "epochs after the deletion", func(s *agentStatus) bool { return s.CurrentEpoch >= at+3 }, api...)
	if !strings.Contains(r.log.String(), "storage fault (deleted)") {
		t.Errorf("the log does not say the store was deleted:\n%s", r.log)
	}
}

// TestRecordRefusesStoresItCannotTrust: `holter record` on a store with a
// corrupt block in the middle, with a garbage write-ahead log, or on a
// file system without room refuses to start, saying why and what to do,
// and leaves the files byte for byte as they were.
func TestRecordRefusesStoresItCannotTrust(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildHolter(t)
	// makeStore writes a store of a few thousand samples into dir.
	makeStore := func(t *testing.T, dir string) {
		st, err := store.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		for n := int64(1); n <= 10; n++ {
			e := &store.Epoch{Host: "h", Epoch: n, StartNs: n * 1e9, EndNs: (n + 1) * 1e9}
			for i := 0; i < 3000; i++ {
				e.Samples = append(e.Samples, store.Sample{Vital: "cpu", Comm: fmt.Sprintf("c%d", i), Exe: fmt.Sprintf("/x/%d/%d", n, i)})
			}
			if err := st.WriteEpoch(context.Background(), e); err != nil {
				t.Fatal(err)
			}
		}
		st.Close()
	}
	cases := []struct {
		name  string
		setup func(t *testing.T) string // the data directory
		want  []string
	}{
		{"corrupt block in the middle", func(t *testing.T) string {
			dir := t.TempDir()
			makeStore(t, dir)
			st, err := store.Open(dir, &store.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			res, err := st.Query(context.Background(), `SELECT block_id, block_offset FROM pragma_storage_info('samples')
				WHERE column_name = 'comm' AND segment_type = 'VARCHAR' AND block_id >= 0 ORDER BY block_id, block_offset`)
			st.Close()
			if err != nil || len(res.Rows) == 0 {
				t.Fatalf("blocks of samples.comm: %v, %v", res, err)
			}
			seg := res.Rows[len(res.Rows)/2]
			path := filepath.Join(dir, store.FileName)
			b, _ := os.ReadFile(path)
			off := 3*4096 + seg[0].(int64)*(256<<10) + seg[1].(int64) + 32
			for i := int64(0); i < 64; i++ {
				b[off+i] ^= 0x5a
			}
			os.WriteFile(path, b, 0o644)
			return dir
		}, []string{"checksum", "left untouched"}},
		{"garbage write-ahead log", func(t *testing.T) string {
			dir := t.TempDir()
			makeStore(t, dir)
			os.WriteFile(filepath.Join(dir, store.FileName+".wal"), bytes.Repeat([]byte("garbage!"), 4096), 0o600)
			return dir
		}, []string{store.FileName + ".wal is not one DuckDB wrote", "move it away"}},
		{"full disk", func(t *testing.T) string {
			dir := testutil.Tmpfs(t, 64)
			makeStore(t, dir)
			testutil.Fill(t, dir, 256<<10)
			return dir
		}, []string{"free some space", "left untouched"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := c.setup(t)
			before := testutil.DirHashes(t, dir)
			// Let through, the store would be recorded into: a minute
			// ends that.
			_, errOut, code := runHolterWithin(t, time.Minute, bin, "record", "--data", dir, "--api", "", "--otlp-grpc", "off", "--otlp-http", "off")
			if code != 1 {
				t.Errorf("exit %d, want 1:\n%s", code, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("the refusal lacks %q:\n%s", w, errOut)
				}
			}
			after := testutil.DirHashes(t, dir)
			if fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("the refused start changed the directory:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestSpansPrunedAfterCommits checks that raw spans older than
// --retain-spans are reduced to rollups by the recorder's commits (the
// pruning runs after an epoch's commit, at most once a --span-period),
// every acknowledged span counted in them.
func TestSpansPrunedAfterCommits(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildHolter(t)
	data := t.TempDir()
	otlpAddr := freeAddr(t)
	r := startRecord(t, bin, "--data", data, "--epoch", "1s", "--api", "", "--vitals", "cpu", "--budget", "off",
		"--online=false", "--account=false", "--otlp-grpc", "off", "--otlp-http", otlpAddr,
		"--retain-spans", "2s", "--span-period", "1s")
	defer stopRecording(t, r)
	r.waitEpochs(t, 1)
	spans := sendSpans(t, otlpAddr)
	time.Sleep(time.Second)
	spans.halt()
	spans.mu.Lock()
	acked := len(spans.acked)
	spans.mu.Unlock()
	if acked == 0 {
		t.Fatalf("no span acknowledged: %v\n%s", spans.otherErrs, r.brief())
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		row := queryJSON(t, bin, data, "SELECT (SELECT count(*) FROM spans WHERE service = 'faulty') AS raw, "+
			"(SELECT coalesce(sum(spans), 0) FROM span_rollups WHERE service = 'faulty') AS rolled")[0]
		raw, rolled := int(row["raw"].(float64)), int(row["rolled"].(float64))
		if raw == 0 && rolled == acked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans acknowledged; after a minute %d raw and %d in rollups\n%s", acked, raw, rolled, r.brief())
		}
		time.Sleep(500 * time.Millisecond)
	}
}
