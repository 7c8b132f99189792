// Package clock converts the kernel's timestamps (what BPF's
// bpf_ktime_get_ns and bpf_ktime_get_tai_ns return) to wall-clock time.
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

// TAIToWall is what to add to a CLOCK_TAI time in nanoseconds (what BPF's
// bpf_ktime_get_tai_ns returns) to get Unix nanoseconds. TAI is the wall
// clock plus a whole number of seconds that changes only with a leap
// second, so the conversion does not depend on when it is made: a step of
// the wall clock moves both.
func TAIToWall() int64 {
	var tai, wall unix.Timespec
	unix.ClockGettime(unix.CLOCK_TAI, &tai)
	unix.ClockGettime(unix.CLOCK_REALTIME, &wall)
	return int64(time.Duration(wall.Nano() - tai.Nano()).Round(time.Second))
}
