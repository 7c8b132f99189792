package findings

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/storetest"
)

// variedEpoch is an epoch with something of every kind loadSamples reads:
// more than ten processes per vital (the heaviest ten and those over 1%
// keep their stacks), a process with more than twenty user stacks (the
// rest are joined), labels sampled several times (each sample standing
// for its label's count since the one before, given out of order),
// failed, futex, exit and plain system calls, fatal and other signals,
// failed and good block requests, memory readings with and without the
// kernel's, and a vital sampled that the epoch has no summary of. The
// times and estimates are distinct, so that no order the store picks
// among ties changes an answer.
func variedEpoch(rng *rand.Rand, number int64) *store.Epoch {
	start := int64(1_790_000_000_000_000_000) + number*60e9
	e := &store.Epoch{Host: "h", Epoch: number, StartNs: start, EndNs: start + 60e9}
	vitals := []string{"cpu", "sched", "blck", "kmem", "umem", "syscall", "signal", "blio"}
	for _, v := range vitals {
		e.Vitals = append(e.Vitals, store.Vital{Name: v, Events: uint64(1e6 + rng.IntN(1e6)), WeightSum: uint64(1e8 + rng.IntN(1e8)),
			Secondary: uint64(rng.IntN(100)), Threshold: uint64(2 << rng.IntN(3))})
	}
	ts := rng.Perm(6000)
	next := func() int64 { t := ts[0]; ts = ts[1:]; return start + int64(t)*1000 + 1 }
	stack := func(kind string, id uint64) uint64 {
		if id != 0 && !slices.ContainsFunc(e.Stacks, func(s store.Stack) bool { return s.ID == id }) {
			e.Stacks = append(e.Stacks, store.Stack{ID: id, Kind: kind, Frames: []string{fmt.Sprintf("f%d", id), "main"}, Modules: []string{"/m", "/m"}})
		}
		return id
	}
	for label := range 400 {
		vital := append(vitals, "lock")[label%9]
		pid := uint32(label%37 + 1)
		if label%5 == 0 {
			pid = 1000 // one process with many labels and stacks
		}
		est := uint64(0)
		for k := range 1 + rng.IntN(4) {
			est += uint64(1 + rng.IntN(5000))
			s := store.Sample{TsNs: next(), Vital: vital, LabelHash: uint64(label)*0x9e3779b97f4a7c15 + 1, Weight: uint64(rng.IntN(3000)),
				EstCount: est, Pid: pid, Tid: pid + uint32(rng.IntN(3)), Comm: fmt.Sprintf("p%d-%d", pid, k), Exe: fmt.Sprintf("/bin/p%d", pid%7),
				KStackID: stack("kernel", uint64(rng.IntN(30))), UStackID: stack("user", uint64(rng.IntN(60))<<32), Fields: map[string]any{}}
			switch vital {
			case "cpu":
				s.Fields["in_kernel"] = rng.IntN(2) == 0
			case "sched":
				s.Fields["preempted"] = rng.IntN(2) == 0
			case "syscall":
				s.Fields["syscall_nr"] = []int32{0, 1, 60, 202, 231}[rng.IntN(5)]
				s.Fields["ret"] = []int64{0, 12, -2, -11, -4096, math.MinInt64}[rng.IntN(6)]
			case "signal":
				s.Fields["signal"] = []int32{9, 11, 15, 17}[rng.IntN(4)]
				s.Fields["target_pid"] = uint32(rng.IntN(4))
				s.Fields["handler"] = uint64(rng.IntN(2))
			case "blio":
				s.Fields["error"] = []int32{0, 0, 10}[rng.IntN(3)]
				s.Fields["dev"], s.Fields["op"] = "8:0", []string{"read", "write"}[rng.IntN(2)]
				s.Fields["sector"], s.Fields["bytes_requested"], s.Fields["bytes_completed"] = uint64(rng.IntN(1e6)), uint64(4096), uint64(rng.IntN(4097))
			case "kmem", "umem":
				s.Fields["free_kb"] = uint64(1e6 + rng.IntN(1e5))
				if vital == "kmem" && rng.IntN(3) > 0 {
					s.Fields["kernel_kb"] = uint64(2e5 + rng.IntN(1e4))
				}
			}
			e.Samples = append(e.Samples, s)
		}
	}
	// Per vital, a process that weighs nearly all, and fifteen light
	// ones: the ten heaviest of them keep their stacks, under 1% each.
	for k, vital := range vitals {
		for j := range 16 {
			est, pid := uint64(1e7), uint32(7000)
			if j > 0 {
				est, pid = uint64(100*j+k), uint32(8000+j)
			}
			e.Samples = append(e.Samples, store.Sample{TsNs: next(), Vital: vital, LabelHash: uint64(1e6 + 100*k + j), Weight: 1, EstCount: est,
				Pid: pid, Tid: pid, Comm: "light", Exe: "/bin/light", KStackID: stack("kernel", uint64(j+1)), UStackID: stack("user", uint64(j+1)<<32),
				Fields: map[string]any{}})
		}
	}
	rng.Shuffle(len(e.Samples), func(a, b int) { e.Samples[a], e.Samples[b] = e.Samples[b], e.Samples[a] })
	return e
}

// TestEpochWindowIsLoads: the window the online analysis makes from a
// committed epoch is the one Load reads back from the store, figure for
// figure, on epochs of every kind of sample and on synthetic busy ones;
// and its stacks, missing from an empty cache, are read from the store.
func TestEpochWindowIsLoads(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	var epochs []*store.Epoch
	for n := range 4 {
		epochs = append(epochs, variedEpoch(rng, int64(n)))
	}
	busy := store.BusyEpoch(rng, 10, time.Minute, 5000)
	busy.Host = "h"
	epochs = append(epochs, busy)
	for _, e := range epochs {
		if err := st.WriteEpoch(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range epochs {
		loaded, err := Load(ctx, FromStore(st), LoadOptions{Host: e.Host, From: time.Unix(0, e.StartNs), To: time.Unix(0, e.StartNs+1), CPUs: 2})
		if err != nil {
			t.Fatal(err)
		}
		made, err := EpochWindow(e, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := made.FetchStacks(ctx, FromStore(st)); err != nil {
			t.Fatal(err)
		}
		if len(loaded.Groups) < 100 || e != busy && (len(loaded.Exits) == 0 || len(loaded.Signals) == 0 || len(loaded.Unsatisfied) == 0) {
			t.Fatalf("epoch %d: %d groups, %d exits, %d signals, %d failed block requests: the epoch does not try much",
				e.Epoch, len(loaded.Groups), len(loaded.Exits), len(loaded.Signals), len(loaded.Unsatisfied))
		}
		if diff := windowDiff(loaded, made); diff != "" {
			t.Errorf("epoch %d: the window made from the epoch is not Load's: %s", e.Epoch, diff)
		}
	}
	if _, err := EpochWindow(&store.Epoch{Host: "h", Epoch: 99}, 2, nil); err == nil {
		t.Error("an epoch without vitals made a window")
	}
}

// windowDiff says where two windows of an epoch differ ("": nowhere),
// sums compared to a relative 1e-9 (their order differs).
func windowDiff(a, b *Window) string {
	near := func(x, y float64) bool {
		return x == y || math.IsNaN(x) && math.IsNaN(y) || math.Abs(x-y) <= 1e-9*math.Max(math.Abs(x), math.Abs(y))
	}
	nearAll := func(x, y []float64) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if !near(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	switch {
	case a.Host != b.Host || a.Timescale != b.Timescale || !slices.Equal(a.Intervals, b.Intervals) || a.CPUs != b.CPUs:
		return fmt.Sprintf("header %s %s %v %d, %s %s %v %d", a.Host, a.Timescale, a.Intervals, a.CPUs, b.Host, b.Timescale, b.Intervals, b.CPUs)
	case a.ReportFrom != b.ReportFrom || a.SampledFrom != b.SampledFrom:
		return fmt.Sprintf("report from %d, %d; sampled from %d, %d", a.ReportFrom, b.ReportFrom, a.SampledFrom, b.SampledFrom)
	case fmt.Sprint(a.Unavailable) != fmt.Sprint(b.Unavailable):
		return fmt.Sprintf("unavailable %v, %v", a.Unavailable, b.Unavailable)
	case len(a.Vitals) != len(b.Vitals):
		return fmt.Sprintf("%d vitals, %d", len(a.Vitals), len(b.Vitals))
	}
	for v, s := range a.Vitals {
		o := b.Vitals[v]
		if o == nil || !nearAll(s.Events, o.Events) || !nearAll(s.Weight, o.Weight) || !nearAll(s.Secondary, o.Secondary) {
			return fmt.Sprintf("vital %s: %+v, %+v", v, s, o)
		}
	}
	for name, x := range map[string][2][]float64{"kernel cpu": {a.KernelCPU, b.KernelCPU}, "free": {a.FreeKB, b.FreeKB},
		"kernel first": {a.KernelFirstKB, b.KernelFirstKB}, "kernel last": {a.KernelLastKB, b.KernelLastKB}} {
		if !nearAll(x[0], x[1]) {
			return fmt.Sprintf("%s %v, %v", name, x[0], x[1])
		}
	}
	if !slices.Equal(a.Exits, b.Exits) || !slices.Equal(a.Signals, b.Signals) || !slices.Equal(a.Unsatisfied, b.Unsatisfied) {
		return fmt.Sprintf("exits %v, %v; signals %v, %v; block requests %v, %v", a.Exits, b.Exits, a.Signals, b.Signals, a.Unsatisfied, b.Unsatisfied)
	}
	ga, gb := sortedPair(a.Groups, b.Groups, compareGroups)
	if len(ga) != len(gb) {
		return fmt.Sprintf("%d groups, %d", len(ga), len(gb))
	}
	for k := range ga {
		x, y := ga[k], gb[k]
		wx, wy, ex, ey := x.Weight, y.Weight, x.Events, y.Events
		x.Weight, y.Weight, x.Events, y.Events = 0, 0, 0, 0
		if x != y || !near(wx, wy) || !near(ex, ey) {
			return fmt.Sprintf("group %d: %+v (%v, %v), %+v (%v, %v)", k, x, wx, ex, y, wy, ey)
		}
		for _, id := range []uint64{x.KStack, x.UStack} {
			if fmt.Sprint(a.Stacks.Get(id)) != fmt.Sprint(b.Stacks.Get(id)) {
				return fmt.Sprintf("stack %d: %v, %v", id, a.Stacks.Get(id), b.Stacks.Get(id))
			}
		}
	}
	pa, pb := sortedPair(a.Procs, b.Procs, func(x, y ProcStat) int {
		return cmp.Or(cmp.Compare(x.Interval, y.Interval), strings.Compare(x.Vital, y.Vital), cmp.Compare(x.Pid, y.Pid))
	})
	if len(pa) != len(pb) {
		return fmt.Sprintf("%d processes, %d", len(pa), len(pb))
	}
	for k := range pa {
		x, y := pa[k], pb[k]
		if x.Interval != y.Interval || x.Vital != y.Vital || x.Pid != y.Pid || x.Comm != y.Comm || x.Exe != y.Exe || x.Samples != y.Samples ||
			!near(x.Weight, y.Weight) || !near(x.Events, y.Events) {
			return fmt.Sprintf("process %d: %+v, %+v", k, x, y)
		}
	}
	return ""
}

// sortedPair returns sorted copies of a and b.
func sortedPair[T any](a, b []T, by func(x, y T) int) ([]T, []T) {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, by)
	slices.SortFunc(b, by)
	return a, b
}
