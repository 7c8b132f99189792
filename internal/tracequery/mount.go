package tracequery

import "golang.org/x/sys/unix"

func mountTraceFS() error {
	return unix.Mount("nodev", "/sys/kernel/tracing", "tracefs", 0, "")
}
