package recorder

import "testing"

// TestParseMeminfo: the kernel memory in use is what MemTotal holds besides
// the free memory (with the per-CPU lists' pages), the page cache, user
// memory and reclaimable kernel memory; without MemTotal or the per-CPU
// lists there is none to tell, and an older kernel's lines missing count
// as 0.
func TestParseMeminfo(t *testing.T) {
	const meminfo = `MemTotal:       24684084 kB
MemFree:        22701584 kB
MemAvailable:   24123812 kB
Buffers:           17632 kB
Cached:          1444952 kB
SwapCached:            0 kB
AnonPages:         40928 kB
Shmem:              8872 kB
KReclaimable:     291684 kB
Slab:             336716 kB
SReclaimable:     291684 kB
SUnreclaim:        45032 kB
KernelStack:        1704 kB
PageTables:         4112 kB
HugePages_Total:       0
Hugetlb:            2048 kB
`
	const zoneinfo = `Node 0, zone   Normal
  pages free     5578811
        min      11412
  pagesets
    cpu: 0
              count:    25081
              high:     26076
              batch:    63
  vm stats threshold: 40
    cpu: 1
              count:    10781
              high:     21060
              batch:    63
  vm stats threshold: 40
  node_unreclaimable:  0
`
	for _, c := range []struct {
		name              string
		meminfo, zoneinfo string
		free, kernel      uint64
	}{
		{"6.18", meminfo, zoneinfo, 22701584, 24684084 - 22701584 - 4*(25081+10781) - 17632 - 1444952 - 40928 - 291684 - 2048},
		{"no KReclaimable, no Hugetlb", "MemTotal: 1000 kB\nMemFree: 500 kB\nCached: 100 kB\nAnonPages: 50 kB\n", "    cpu: 0\n      count: 10\n", 500, 310},
		{"no per-CPU lists", meminfo, "", 22701584, 0},
		{"no MemTotal", "MemFree: 500 kB\n", zoneinfo, 500, 0},
		{"garbage", "MemTotal: many kB\nMemFree\n", "count: x", 0, 0},
	} {
		if got := parseMeminfo([]byte(c.meminfo), []byte(c.zoneinfo), 4); got.free != c.free || got.kernel != c.kernel {
			t.Errorf("%s: free %d, kernel %d KiB; want %d, %d", c.name, got.free, got.kernel, c.free, c.kernel)
		}
	}
}
