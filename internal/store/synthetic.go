package store

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// BusyEpoch is a synthetic epoch of a busy host h1, for benchmarks: n
// samples over a few vitals, labels drawn from a pool so that later epochs
// repeat earlier labels and stacks.
func BusyEpoch(rng *rand.Rand, number int64, width time.Duration, n int) *Epoch {
	start := int64(1_790_000_000_000_000_000) + number*int64(width)
	e := &Epoch{Host: "h1", Epoch: number, StartNs: start, EndNs: start + int64(width)}
	vitals := []string{"cpu", "sched", "blck", "kmem", "umem", "syscall", "sock", "lock"}
	for _, v := range vitals {
		e.Vitals = append(e.Vitals, Vital{Name: v, Events: uint64(n) * 20, WeightSum: uint64(n) * 200, Samples: uint64(n / len(vitals)), Threshold: 2})
	}
	for i := 0; i < n; i++ {
		label := rng.IntN(20000)
		stack := uint64(label%3000 + 1)
		e.Samples = append(e.Samples, Sample{
			TsNs: start + int64(i), Vital: vitals[label%len(vitals)], LabelHash: uint64(label) * 0x9e3779b97f4a7c15,
			Weight: uint64(rng.IntN(1000)), EstCount: uint64(rng.IntN(100)), Pid: uint32(label % 500), Tid: uint32(label % 700),
			Comm: fmt.Sprintf("proc-%d", label%500), Exe: fmt.Sprintf("/usr/bin/p%d", label%200), KStackID: stack, UStackID: stack + 1<<40,
			Fields: map[string]any{"syscall_nr": int32(label % 300), "latency_ns": int64(rng.IntN(1e6))},
		})
		e.Stacks = append(e.Stacks, Stack{ID: stack, Kind: "kernel", Frames: []string{"a", "b", "c", "d", "e", "f"}, Modules: []string{"vmlinux", "vmlinux", "vmlinux", "vmlinux", "vmlinux", "vmlinux"}},
			Stack{ID: stack + 1<<40, Kind: "user", Frames: []string{"main", "work", "loop"}, Modules: []string{"p", "p", "libc"}})
	}
	return e
}
