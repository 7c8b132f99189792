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

// TestTAIToWall converts a TAI reading taken next to a wall-clock reading:
// the two agree within a millisecond, and the offset is whole seconds.
func TestTAIToWall(t *testing.T) {
	off := TAIToWall()
	if off%int64(time.Second) != 0 {
		t.Fatalf("TAI offset %d ns is not whole seconds", off)
	}
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_TAI, &ts)
	got := time.Unix(0, ts.Nano()+off)
	if d := time.Since(got); d < 0 || d > time.Millisecond {
		t.Fatalf("converted TAI time is %v from the wall clock", d)
	}
}
