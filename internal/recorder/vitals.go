package recorder

import (
	"fmt"
	"sort"
	"strings"
)

// Vital identifies a vital sign; the values are the BPF side's enum vital.
type Vital uint32

// The vitals of the mission table. The BPF side reserves a slot for each.
const (
	CPU Vital = iota
	Sched
	Blck
	Blio
	L2
	Kmem
	Umem
	Syscall
	Signal
	Sock
	Lock
	numVitals
)

type vitalInfo struct {
	name string
	// unit of the weight the counters grow by
	unit string
	// implemented is false for vitals this version only reports on
	implemented bool
}

var vitalInfos = [numVitals]vitalInfo{
	CPU:     {"cpu", "µs on CPU", true},
	Sched:   {"sched", "µs runnable, waiting for a CPU", true},
	Blck:    {"blck", "µs blocked", true},
	Blio:    {"blio", "bytes of block I/O", true},
	L2:      {"l2", "cache misses", false},
	Kmem:    {"kmem", "pages allocated", true},
	Umem:    {"umem", "page faults", true},
	Syscall: {"syscall", "µs in system calls", true},
	Signal:  {"signal", "signals", true},
	Sock:    {"sock", "bytes sent and received", true},
	Lock:    {"lock", "µs waiting for kernel locks", true},
}

func (v Vital) String() string {
	if v < numVitals {
		return vitalInfos[v].name
	}
	return fmt.Sprintf("vital(%d)", uint32(v))
}

// Unit is what the vital's weights count.
func (v Vital) Unit() string { return vitalInfos[v].unit }

// AllVitals lists every vital by name.
func AllVitals() []Vital {
	out := make([]Vital, numVitals)
	for i := range out {
		out[i] = Vital(i)
	}
	return out
}

// ParseVitals reads a comma-separated list of vital names; "all" or ""
// means every implemented vital.
func ParseVitals(list string) ([]Vital, error) {
	list = strings.TrimSpace(list)
	if list == "" || list == "all" {
		var out []Vital
		for _, v := range AllVitals() {
			if vitalInfos[v].implemented {
				out = append(out, v)
			}
		}
		return out, nil
	}
	seen := map[Vital]bool{}
	var out []Vital
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		v, ok := vitalByName(name)
		if !ok {
			return nil, fmt.Errorf("unknown vital %q (known: %s)", name, strings.Join(vitalNames(), ", "))
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

func vitalByName(name string) (Vital, bool) {
	for i, info := range vitalInfos {
		if info.name == name {
			return Vital(i), true
		}
	}
	return 0, false
}

func vitalNames() []string {
	var names []string
	for _, info := range vitalInfos {
		names = append(names, info.name)
	}
	return names
}
