package recorder

import (
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// statsBatch reads one copy's per-CPU totals of every vital from the
// stats map in one system call (BPF_MAP_LOOKUP_BATCH) into buffers it
// keeps. The budget reads them four times a second, and cilium/ebpf's
// per-key look-up of a per-CPU value allocated its buffer and the
// unmarshalled slice each time: one system call and two allocations a
// vital, the idle recorder's largest steady allocation (some 70 KB a
// second). A kernel that refuses the batch (before 5.6) has the caller
// look up key by key.
type statsBatch struct {
	fd          int
	ncpu        int
	keys        []uint32
	vals        []vitalsHlStats // vital-major: vals[v*ncpu+cpu]
	start, next uint32          // the batch's in and out keys
}

// bpfMapLookupBatch is BPF_MAP_LOOKUP_BATCH's command number.
const bpfMapLookupBatch = 24

// batchAttr is union bpf_attr's batch member, on a 64-bit machine (the
// pointers are the kernel's __aligned_u64): they are pointers here so
// that what they point at stays where they say.
type batchAttr struct {
	inBatch, outBatch, keys, values unsafe.Pointer
	count, mapFd                    uint32
	elemFlags, flags                uint64
}

// A 32-bit machine's pointers would not fill the kernel's fields.
var _ [unsafe.Sizeof(batchAttr{}) - 56]byte

func newStatsBatch(m *ebpf.Map, ncpu int) (*statsBatch, error) {
	if uintptr(m.ValueSize()) != unsafe.Sizeof(vitalsHlStats{}) || m.MaxEntries() < 2*uint32(numVitals) {
		return nil, fmt.Errorf("stats map: value of %d bytes and %d entries, want %d and %d",
			m.ValueSize(), m.MaxEntries(), unsafe.Sizeof(vitalsHlStats{}), 2*numVitals)
	}
	return &statsBatch{fd: m.FD(), ncpu: ncpu, keys: make([]uint32, numVitals), vals: make([]vitalsHlStats, int(numVitals)*ncpu)}, nil
}

// read fills b.vals with copy copyIdx's totals, keys copyIdx*numVitals
// up to the next copy's. The batch starts after the key in inBatch, at the
// first where it is none.
func (b *statsBatch) read(copyIdx uint32) error {
	attr := batchAttr{
		outBatch: unsafe.Pointer(&b.next),
		keys:     unsafe.Pointer(&b.keys[0]),
		values:   unsafe.Pointer(&b.vals[0]),
		count:    uint32(numVitals),
		mapFd:    uint32(b.fd),
	}
	if copyIdx > 0 {
		b.start = copyIdx*uint32(numVitals) - 1
		attr.inBatch = unsafe.Pointer(&b.start)
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfMapLookupBatch, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 && !(errno == unix.ENOENT && attr.count == uint32(numVitals)) {
		return fmt.Errorf("batch look-up of the stats map: %w", errno)
	}
	if attr.count != uint32(numVitals) || b.keys[0] != copyIdx*uint32(numVitals) {
		return fmt.Errorf("batch look-up of the stats map: %d entries from key %d, want %d from %d",
			attr.count, b.keys[0], numVitals, copyIdx*uint32(numVitals))
	}
	return nil
}

// of is vital v's per-CPU totals from the last read.
func (b *statsBatch) of(v Vital) []vitalsHlStats {
	return b.vals[int(v)*b.ncpu : (int(v)+1)*b.ncpu]
}
