package diagnose_test

import (
	"fmt"

	"github.com/holter-dev/holter/internal/diagnose"
)

func Example() {
	// Throughput of four runs: the deadline scheduler costs a little at
	// size 64k and halves throughput at 256k.
	runs := []diagnose.Run{
		{ID: "a", Params: map[string]string{"sched": "noop", "size": "64k"}, Perf: 100},
		{ID: "b", Params: map[string]string{"sched": "deadline", "size": "64k"}, Perf: 98},
		{ID: "c", Params: map[string]string{"sched": "noop", "size": "256k"}, Perf: 120},
		{ID: "d", Params: map[string]string{"sched": "deadline", "size": "256k"}, Perf: 60},
	}
	cat, err := diagnose.NewCatalog(runs, &diagnose.ProfileOptions{Empirical: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	p := cat.Profile(diagnose.Change{Param: "sched", From: "noop", To: "deadline"})
	fmt.Printf("noop -> deadline deviations %.2f\n", p.Deviations)
	s, _ := cat.Score(runs[2], runs[3], nil)
	fmt.Printf("%s against %s: deviation %.2f, p-value %.2f\n", s.Target, s.Reference, s.Deviation, s.PValue)

	// Which metric explains it: the device request size shrank.
	ranked, _, _ := diagnose.Rank([]diagnose.Metric{
		{Name: "request size", Target: diagnose.Sample{Values: []float64{4, 4, 4, 128}},
			Reference: diagnose.Sample{Values: []float64{128, 128, 128, 128}}},
		{Name: "syscall delay", Target: diagnose.Sample{Values: []float64{10, 11, 12, 13}},
			Reference: diagnose.Sample{Values: []float64{9, 10, 11, 12}}},
	}, &diagnose.RankOptions{MinSamples: 4})
	for _, r := range ranked {
		fmt.Printf("%s: EMD %.3f\n", r.Name, r.EMD)
	}
	// Output:
	// noop -> deadline deviations [-0.02 -0.50]
	// d against c: deviation -0.50, p-value 0.50
	// request size: EMD 0.727
	// syscall delay: EMD 0.087
}
