package recorder

import "fmt"

// Hook is where one of a vital's programs runs.
type Hook struct {
	Vital   Vital
	Program string // its name in the vitals object
	// Tracepoint is the BTF tracepoint the program attaches to; "" for the
	// cpu vital's perf event (cpu-clock, or cycles where a PMU exists, on
	// every CPU at Config.CPUHz).
	Tracepoint string
}

// Hooks lists the hooks the vitals attach to, each once (sched and blck
// share theirs). An empty program on each costs what triggering the vitals
// costs whatever their programs do: bench/floor attaches those to measure
// that floor.
func Hooks(vitals []Vital) ([]Hook, error) {
	spec, err := loadVitals()
	if err != nil {
		return nil, fmt.Errorf("load vitals object: %w", err)
	}
	var out []Hook
	seen := map[string]bool{}
	for _, v := range vitals {
		if v == CPU {
			out = append(out, Hook{Vital: v, Program: vitalsProgVitalCpu})
			continue
		}
		for _, p := range tracingPrograms[v] {
			if !seen[p] {
				seen[p] = true
				out = append(out, Hook{Vital: v, Program: p, Tracepoint: spec.Programs[p].AttachTo})
			}
		}
	}
	return out, nil
}
