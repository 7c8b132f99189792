// Package clock converts the kernel's monotonic timestamps (what BPF's
// bpf_ktime_get_ns returns) to wall-clock time.
package clock

import (
	"time"

	"golang.org/x/sys/unix"
)

// MonoToWall is what to add to a CLOCK_MONOTONIC time in nanoseconds to
// get Unix nanoseconds. The wall clock is read between two monotonic
// reads, five times, and the tightest bracket is kept: a thread preempted
// between its reads (a loaded host) would otherwise shift every converted
// timestamp by the length of its preemption.
func MonoToWall() int64 {
	best, bestWidth := int64(0), int64(-1)
	for i := 0; i < 5; i++ {
		a := mono()
		wall := time.Now().UnixNano()
		b := mono()
		if w := b - a; bestWidth < 0 || w < bestWidth {
			best, bestWidth = wall-(a+w/2), w
		}
	}
	return best
}

func mono() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
