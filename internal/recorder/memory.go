package recorder

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

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

// meminfo reads /proc/meminfo and /proc/zoneinfo at most once a second:
// the free memory the kmem and umem samples carry, and the kernel memory
// in use the kmem samples carry. (zoneinfo is read under each zone's lock,
// with interrupts off.)
type meminfo struct {
	at   time.Time
	read memoryUse
}

// memoryUse is what the samples carry of /proc/meminfo and /proc/zoneinfo,
// in KiB.
type memoryUse struct {
	free uint64
	// kernel is the kernel memory in use (parseMeminfo): socket and pipe
	// buffers, unreclaimable slabs, page tables, kernel stacks, vmalloc.
	// A kernel-memory leak grows it, and page cache filled and reclaimed
	// or processes started and ended hardly move it. 0 when unknown.
	kernel uint64
}

func (m *meminfo) get() memoryUse {
	if time.Since(m.at) < time.Second {
		return m.read
	}
	m.at = time.Now()
	mem, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return m.read
	}
	zones, err := os.ReadFile("/proc/zoneinfo")
	if err != nil {
		zones = nil // without the per-CPU lists, no kernel memory in use
	}
	m.read = parseMeminfo(mem, zones, uint64(os.Getpagesize()/1024))
	return m.read
}

// parseMeminfo reads MemFree and the kernel memory in use from the text of
// /proc/meminfo and /proc/zoneinfo, whose pages are pageKB KiB. The kernel
// memory in use is what is left of MemTotal without the free memory, the
// page cache (Buffers, Cached: Shmem is in it), the user memory
// (AnonPages, SwapCached, Hugetlb) and the kernel's reclaimable memory
// (KReclaimable): the kernel counts socket buffers and other pages taken
// straight from the page allocator in none of its lines. The free memory
// includes the pages freed onto the per-CPU lists, which MemFree leaves
// out: after a process frees its memory they hold hundreds of MiB for
// seconds. Lines a kernel lacks (KReclaimable before 4.20, Hugetlb before
// 4.16) count as 0; no zoneinfo or no MemTotal, no kernel memory in use.
func parseMeminfo(meminfo, zoneinfo []byte, pageKB uint64) memoryUse {
	kb := map[string]uint64{}
	for _, line := range strings.Split(string(meminfo), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err == nil {
			kb[name] = v
		}
	}
	u := memoryUse{free: kb["MemFree"]}
	pcp, ok := perCPUFree(zoneinfo)
	if _, total := kb["MemTotal"]; !total || !ok {
		return u
	}
	used := kb["MemTotal"] - min(kb["MemTotal"], kb["MemFree"]+pcp*pageKB)
	if other := kb["Buffers"] + kb["Cached"] + kb["SwapCached"] + kb["AnonPages"] + kb["KReclaimable"] + kb["Hugetlb"]; used > other {
		u.kernel = used - other
	}
	return u
}

// perCPUFree sums the pages on the per-CPU free lists, the "count" of each
// CPU's pageset in /proc/zoneinfo; false when it names none.
func perCPUFree(zoneinfo []byte) (uint64, bool) {
	var pages uint64
	found := false
	for _, line := range strings.Split(string(zoneinfo), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "count:"); ok {
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
				pages, found = pages+n, true
			}
		}
	}
	return pages, found
}
