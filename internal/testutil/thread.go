package testutil

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SetThreadName renames the calling thread (its comm).
func SetThreadName(name string) error {
	b, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	return unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(b)), 0, 0, 0)
}

// CallGetppidAs starts a thread named name that calls getppid about once a
// millisecond until the returned function is called (which waits for it).
func CallGetppidAs(t testing.TB, name string) (stop func()) {
	t.Helper()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		// Locked to the end: the thread exits with the goroutine, and its
		// name with it.
		runtime.LockOSThread()
		if err := SetThreadName(name); err != nil {
			t.Error(err)
			return
		}
		for {
			select {
			case <-quit:
				return
			default:
				unix.Getppid()
				time.Sleep(time.Millisecond)
			}
		}
	}()
	return func() { close(quit); <-done }
}
