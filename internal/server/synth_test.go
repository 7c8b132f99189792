package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// synthetic describes a made-up recording: epochs of every vital with
// samples spread over a few processes and a pool of stacks (a label per
// vital and user stack, so labels recur across epochs as real ones do), written
// through store.WriteEpoch like the recorder's. Tests that need exact
// answers (and the benchmark, which needs volume) use it; the browser test
// uses a real recording.
type synthetic struct {
	host           string
	startNs        int64
	epoch          time.Duration
	epochs         int
	samplesPerEpoc int
}

// synthStacks are the stacks of the synthetic recording: user stacks
// rooted in main, kernel ones in entry_SYSCALL_64, leaf first.
func synthStacks() (user, kernel []store.Stack) {
	for i := range 40 {
		user = append(user, store.Stack{ID: uint64(1000 + i), Kind: "user",
			Frames:  []string{fmt.Sprintf("leaf_%d", i), fmt.Sprintf("mid_%d", i%5), "main"},
			Modules: []string{"/usr/bin/app", "/usr/bin/app", "/usr/bin/app"}})
		kernel = append(kernel, store.Stack{ID: 1<<63 + uint64(i), Kind: "kernel", // beyond a JSON number's exact range
			Frames:  []string{fmt.Sprintf("kfunc_%d", i), "do_syscall_64", "entry_SYSCALL_64"},
			Modules: []string{"", "", ""}})
	}
	return user, kernel
}

var synthProcs = []struct {
	pid  uint32
	uid  uint32
	comm string
	exe  string
}{
	{100, 0, "spinner", "/usr/bin/spinner"},
	{200, 1000, "blocker", "/usr/bin/blocker"},
	{300, 1000, "app", "/usr/bin/app"},
}

// write fills st with the synthetic recording.
func (sy synthetic) write(t testing.TB, st *store.Store) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	user, kernel := synthStacks()
	vitals := vitalNames()
	ctx := context.Background()
	for i := range sy.epochs {
		start := sy.startNs + int64(i)*sy.epoch.Nanoseconds()
		e := &store.Epoch{Host: sy.host, Epoch: int64(i + 1), StartNs: start, EndNs: start + sy.epoch.Nanoseconds()}
		for j, v := range vitals {
			e.Vitals = append(e.Vitals, store.Vital{Name: v, Events: uint64(100 * (j + 1)), WeightSum: uint64(1000*(j+1) + i),
				Samples: uint64(sy.samplesPerEpoc / len(vitals)), DistinctLabels: 5, Threshold: 16})
		}
		seen := map[uint64]bool{}
		for k := range sy.samplesPerEpoc {
			v := vitals[k%len(vitals)]
			p := synthProcs[k%len(synthProcs)]
			u, kn := user[rng.IntN(len(user))], kernel[rng.IntN(len(kernel))]
			sm := store.Sample{TsNs: start + int64(k)*sy.epoch.Nanoseconds()/int64(sy.samplesPerEpoc), Vital: v,
				LabelHash: u.ID*31 + uint64(k%len(vitals)), Weight: uint64(1 + rng.IntN(1000)), EstCount: 16, Pid: p.pid, Tid: p.pid,
				Uid: p.uid, Comm: p.comm, Exe: p.exe, UStackID: u.ID, KStackID: kn.ID, Fields: map[string]any{}}
			switch v {
			case "cpu":
				sm.Fields["ip"] = uint64(0xffffffff81000000) + uint64(k)
				sm.Fields["in_kernel"] = k%2 == 0
			case "blck":
				sm.Fields["delay_ns"] = int64(sm.Weight) * 1000
				sm.Fields["prio"] = int32(120)
			}
			e.Samples = append(e.Samples, sm)
			for _, s := range []store.Stack{u, kn} {
				if !seen[s.ID] {
					seen[s.ID] = true
					e.Stacks = append(e.Stacks, s)
				}
			}
		}
		if err := st.WriteEpoch(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
}
