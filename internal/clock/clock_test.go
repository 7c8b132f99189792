package clock

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMonoToWall converts a monotonic reading taken next to a wall-clock
// reading: the two agree within a millisecond.
func TestMonoToWall(t *testing.T) {
	off := MonoToWall()
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	got := time.Unix(0, ts.Nano()+off)
	if d := time.Since(got); d < 0 || d > time.Millisecond {
		t.Fatalf("converted monotonic time is %v from the wall clock", d)
	}
}
