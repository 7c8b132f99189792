package recorder

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/holter-dev/holter/internal/testutil"
)

// The budget's batch read of a copy's totals gives, vital by vital and
// CPU by CPU, what a look-up of each key gives, for both copies, and
// nothing of the other copy's.
func TestStatsBatchReadsWhatLookupsRead(t *testing.T) {
	testutil.RequireRoot(t)
	spec, err := loadVitals()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := loadMaps(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	m, ncpu := objs.maps.Stats, ebpf.MustPossibleCPU()
	for key := range 2 * uint32(numVitals) {
		per := make([]vitalsHlStats, ncpu)
		for cpu := range per {
			per[cpu] = vitalsHlStats{Runs: 1000*uint64(key) + uint64(cpu), Samples: uint64(key) + 7, Sketched: uint64(cpu) + 3, Events: uint64(key) << 20}
		}
		if err := m.Put(key, per); err != nil {
			t.Fatal(err)
		}
	}
	b, err := newStatsBatch(m, ncpu)
	if err != nil {
		t.Fatal(err)
	}
	for copyIdx := range uint32(2) {
		if err := b.read(copyIdx); err != nil {
			t.Fatal(err)
		}
		for v := range numVitals {
			var want []vitalsHlStats
			if err := m.Lookup(copyIdx*uint32(numVitals)+uint32(v), &want); err != nil {
				t.Fatal(err)
			}
			got := b.of(Vital(v))
			for cpu := range want {
				if got[cpu] != want[cpu] {
					t.Errorf("copy %d vital %d CPU %d: batch %+v, look-up %+v", copyIdx, v, cpu, got[cpu], want[cpu])
				}
			}
		}
	}
}
