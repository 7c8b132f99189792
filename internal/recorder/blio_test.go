package recorder

import (
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/testutil"
)

// TestBlockRequestCompletingAfterItsEpochIsKept: a block request's sample
// belongs to the epoch it was submitted in and is sent when it completes;
// one that completes after that epoch closed, within lateGrace, is still
// stored in it. The request is a direct write to a loop device whose
// backing file is on a frozen file system: it completes when the test
// thaws it, after the epoch's end. Before lateGrace such samples were
// dropped as late (a busy disk lost one rare write in 200 that way).
func TestBlockRequestCompletingAfterItsEpochIsKept(t *testing.T) {
	testutil.RequireRoot(t)
	lp := testutil.FrozenLoop(t)
	dev, devName, mnt := lp.Dev, lp.Name, lp.Mnt
	run := testutil.RunTool(t)

	const epoch = 4 * time.Second // lateGrace 2 s
	var mu sync.Mutex
	var epochs []*store.Epoch
	closed := make(chan int64, 16)
	_, stop := startRecorder(t, Config{Epoch: epoch, Budget: -1, Vitals: []Vital{Blio}}, func(e *store.Epoch) error {
		mu.Lock()
		epochs = append(epochs, e)
		mu.Unlock()
		closed <- e.EndNs
		return nil
	})
	// Each write is submitted 0.8 s before an epoch ends and completes
	// 0.7 s after (the file system frozen for 1.5 s): late by less than
	// lateGrace. An epoch reaches the sink lateGrace after it ended, so
	// the next ends epoch-lateGrace later.
	type write struct {
		pid       int
		submitted time.Time
	}
	var writes []write
	for len(writes) < 2 {
		var end int64
		select {
		case end = <-closed:
		case <-time.After(4 * epoch):
			t.Fatal("no epoch committed in 16 s")
		}
		at := time.Unix(0, end).Add(epoch - 800*time.Millisecond)
		if time.Until(at) < 200*time.Millisecond {
			continue // a loaded machine: wait for the next
		}
		time.Sleep(time.Until(at))
		run("fsfreeze", "-f", mnt)
		dd := exec.Command("dd", "if=/dev/zero", "of="+dev, "bs=4096", "count=1", "oflag=direct", "status=none")
		submitted := time.Now()
		if err := dd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		run("fsfreeze", "-u", mnt)
		if err := dd.Wait(); err != nil {
			t.Fatalf("dd to %s: %v", dev, err)
		}
		writes = append(writes, write{dd.Process.Pid, submitted})
	}
	time.Sleep(epoch) // the last write's epoch through its grace
	stop()

	mu.Lock()
	defer mu.Unlock()
	late := 0
	for _, w := range writes {
		var in *store.Epoch
		for _, e := range epochs {
			if w.submitted.UnixNano() >= e.StartNs && w.submitted.UnixNano() < e.EndNs {
				in = e
			}
		}
		if in == nil {
			t.Fatalf("write of process %d at %v: in no epoch recorded", w.pid, w.submitted)
		}
		var found *store.Sample
		for _, e := range epochs {
			for i, s := range e.Samples {
				if s.Vital == "blio" && s.Pid == uint32(w.pid) && s.Fields["dev"] == devName {
					if e != in {
						t.Errorf("write of process %d submitted in epoch %d stored in epoch %d", w.pid, in.Epoch, e.Epoch)
					}
					found = &e.Samples[i]
				}
			}
		}
		if found == nil {
			t.Errorf("write of process %d, submitted %v before its epoch %d ended: no sample", w.pid,
				time.Duration(in.EndNs-w.submitted.UnixNano()), in.Epoch)
			continue
		}
		lat := time.Duration(found.Fields["latency_ns"].(int64))
		t.Logf("write of process %d: submitted %v before epoch %d ended, completed %v after", w.pid,
			time.Duration(in.EndNs-w.submitted.UnixNano()), in.Epoch, w.submitted.Add(lat).Sub(time.Unix(0, in.EndNs)))
		if w.submitted.Add(lat).UnixNano() > in.EndNs {
			late++
		}
	}
	if late == 0 {
		t.Errorf("no write completed after its epoch ended: the test did not test it")
	}
}

// TestMergedBioIsChargedToItsSubmitter: a bio merged into a request
// already queued, another process's, makes no request of its own; it is
// still an event of its submitter's, sampled (a rare writer's write that
// joined a busy writer's adjacent request had no sample before). The loop
// device's file system is frozen, so that its requests stay queued: the
// test process fills the driver's queue (its own I/O, which the recorder
// leaves out) with writes to every other block, and ten copies of dd,
// each a label of its own, write into the gaps.
func TestMergedBioIsChargedToItsSubmitter(t *testing.T) {
	testutil.RequireRoot(t)
	lp := testutil.FrozenLoop(t)
	dir := t.TempDir()
	const copies = 10
	var mu sync.Mutex
	var samples []store.Sample
	startRecorder(t, Config{Epoch: 2 * time.Second, Budget: -1, Vitals: []Vital{Blio}}, func(e *store.Epoch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range e.Samples {
			if s.Vital == "blio" && s.Fields["dev"] == lp.Name {
				samples = append(samples, s)
			}
		}
		return nil
	})
	// sampleOf is the last blio sample of process pid, nil while none.
	sampleOf := func(pid int) *store.Sample {
		mu.Lock()
		defer mu.Unlock()
		var found *store.Sample
		for i := range samples {
			if samples[i].Pid == uint32(pid) {
				found = &samples[i]
			}
		}
		return found
	}
	testutil.UntilMerged(t, lp, dir, copies, func(pid int) bool { return sampleOf(pid) != nil }, func(c *exec.Cmd) bool {
		s := sampleOf(c.Process.Pid)
		t.Logf("%s (process %d): %v", filepath.Base(c.Path), c.Process.Pid, s.Fields)
		return s.Fields["latency_ns"] == nil
	})
}
