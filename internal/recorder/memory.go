package recorder

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

// MapMemory is the kernel memory charged to one BPF map.
type MapMemory struct {
	Map   string `json:"map"`
	Bytes uint64 `json:"bytes"`
	// Sketch marks the maps the paper's kernel-memory bar is about: the
	// HCAs, the exact totals and the control block.
	Sketch bool `json:"sketch"`
}

// kernelMemory reads each map's memlock charge from /proc/self/fdinfo.
func (r *Recorder) kernelMemory() []MapMemory {
	m := r.objs.maps
	maps := []struct {
		name   string
		m      *ebpf.Map
		sketch bool
	}{
		{vitalsMapHcas, m.Hcas, true}, {vitalsMapStats, m.Stats, true}, {"control", r.objs.globals, true},
		{vitalsMapSamples, m.Samples, false}, {vitalsMapInflight, m.Inflight, false}, {vitalsMapInflightStacks, m.InflightStacks, false},
		{vitalsMapIoScratch, m.IoScratch, false}, {vitalsMapScratch, m.Scratch, false}, {vitalsMapScratchDepth, m.ScratchDepth, false},
		{vitalsMapTaskStates, m.TaskStates, false}, {vitalsMapOnCpus, m.OnCpus, false},
		{vitalsMapTaskMarks, m.TaskMarks, false}, {vitalsMapBoosted, m.Boosted, false}, {vitalsMapBoostTaken, m.BoostTaken, false},
	}
	var out []MapMemory
	for _, x := range maps {
		b, err := mapMemlock(x.m.FD())
		if err != nil {
			continue
		}
		out = append(out, MapMemory{Map: x.name, Bytes: b, Sketch: x.sketch})
	}
	return out
}

func mapMemlock(fd int) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "memlock:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("fdinfo %d has no memlock line", fd)
}
