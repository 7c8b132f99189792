package recorder

import (
	"slices"
	"testing"
)

// TestBudgetSteps: a look over the budget throttles the vitals that cost
// their share of it or more, one step a look, by what cuts their cost —
// the threshold of a vital that samples much, the thinning of one whose
// events go into its sketch by the ten thousand a second and can be
// thinned — up to the bounds; never anything of a vital that costs little;
// and once under half the budget for calmLooks looks, each throttled
// vital comes back a step, thinning first.
func TestBudgetSteps(t *testing.T) {
	const budget, base = 0.01, 1
	var b budgetState
	for v := range b.shift {
		b.shift[v] = base
	}
	storm := map[Vital]float64{Syscall: 0.05, CPU: 0.004, Sched: 0.0005, Umem: 0.0001}
	var samples, sketched [numVitals]float64
	samples[Syscall], sketched[Syscall] = 500, 1e6
	samples[CPU], sketched[CPU] = 200, 200
	samples[Sched], sketched[Sched] = 5, 5
	var looks [][]Vital
	for range maxRaise + maxThin + 2 {
		looks = append(looks, b.step(budget, base, storm, samples, sketched))
	}
	t.Logf("changed at each look: %v", looks)
	if !slices.Equal(looks[0], []Vital{Syscall, CPU}) {
		t.Errorf("first look over the budget changed %v, want syscall then cpu", looks[0])
	}
	if b.shift[Syscall] != base+maxRaise || b.thin[Syscall] != maxThin {
		t.Errorf("syscall at t=2^%d, thinned 2^%d; want 2^%d and 2^%d", b.shift[Syscall], b.thin[Syscall], base+maxRaise, maxThin)
	}
	if b.shift[CPU] != base+maxRaise || b.thin[CPU] != 0 {
		t.Errorf("cpu at t=2^%d, thinned 2^%d; want 2^%d, never thinned", b.shift[CPU], b.thin[CPU], base+maxRaise)
	}
	if b.shift[Sched] != base || b.shift[Umem] != base || b.thin[Umem] != 0 {
		t.Errorf("vitals under their share throttled: sched t=2^%d, umem t=2^%d thinned 2^%d", b.shift[Sched], b.shift[Umem], b.thin[Umem])
	}
	if got := looks[len(looks)-1]; len(got) != 0 {
		t.Errorf("a look with every vital as far as it goes changed %v", got)
	}

	quiet := map[Vital]float64{Syscall: 0.001, CPU: 0.001, Sched: 0.0005, Umem: 0.0001}
	for i := range calmLooks - 1 {
		if got := b.step(budget, base, quiet, samples, sketched); len(got) != 0 {
			t.Fatalf("quiet look %d changed %v before %d calm looks", i+1, got, calmLooks)
		}
	}
	if got := b.step(budget, base, quiet, samples, sketched); !slices.Equal(got, []Vital{CPU, Syscall}) || b.thin[Syscall] != maxThin-1 || b.shift[Syscall] != base+maxRaise || b.shift[CPU] != base+maxRaise-1 {
		t.Errorf("after %d calm looks: changed %v, syscall t=2^%d thinned 2^%d, cpu t=2^%d", calmLooks, got, b.shift[Syscall], b.thin[Syscall], b.shift[CPU])
	}
	for range (maxRaise + maxThin) * calmLooks {
		b.step(budget, base, quiet, samples, sketched)
	}
	if b.shift[Syscall] != base || b.thin[Syscall] != 0 || b.shift[CPU] != base {
		t.Errorf("long after the storm: syscall t=2^%d thinned 2^%d, cpu t=2^%d; want all back", b.shift[Syscall], b.thin[Syscall], b.shift[CPU])
	}
}
