package tracequery

import (
	"testing"

	"github.com/cilium/ebpf"
)

// TestMapBytes: what a plan's maps may hold grows with the sizes asked
// for as the maps are made: two aggregation maps of MapSize keys, each
// value once per CPU, and a streaming query's ring buffer of RingSize bytes.
func TestMapBytes(t *testing.T) {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	compile := func(q string, o Options) *Plan {
		t.Helper()
		p, err := Compile(q, fixture, &o)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const agg = "SELECT comm, count() AS n, hist(latency) FROM syscall.read GROUP BY comm"
	small, big := compile(agg, Options{MapSize: 1000}), compile(agg, Options{MapSize: 3000})
	perKey := uint64(small.KeySize) + uint64((small.ValSize+7)&^7*cpus)
	if got, want := big.MapBytes()-small.MapBytes(), 2*2000*perKey; got != want {
		t.Errorf("2000 more keys in each of 2 aggregation maps: %d bytes more, want %d", got, want)
	}
	if small.MapBytes() < 2*1000*perKey {
		t.Errorf("MapSize 1000: %d bytes, less than its aggregation maps' %d", small.MapBytes(), 2*1000*perKey)
	}
	const stream = "SELECT time, pid, ret FROM syscall.read"
	if got := compile(stream, Options{RingSize: 1 << 22}).MapBytes() - compile(stream, Options{RingSize: 1 << 20}).MapBytes(); got != 3<<20 {
		t.Errorf("a ring buffer 3 MiB larger: %d bytes more", got)
	}
}
