package tracequery

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/memlock"
)

// Kernel function probes are asked of the kernel, not assumed: a kprobe
// needs kprobes built in (a kprobe PMU, or tracefs's kprobe_events) and
// an attach the kernel allows; fentry/fexit need a tracing program the
// kernel loads. ProbeKernelFuncs tries each once, for real, and says what
// the kernel answered.

var (
	featureOnce sync.Once
	kprobeErr   error
	fentryErr   error
)

// ProbeKernelFuncs says why a kind of kernel function probe ("kprobe" or
// "kfunc") cannot run on this kernel, or nil if it can.
func ProbeKernelFuncs(kind string) error {
	featureOnce.Do(func() {
		if err := memlock.Raise(); err != nil {
			kprobeErr, fentryErr = err, err
			return
		}
		kprobeErr = probeKprobes()
		fentryErr = probeFentry()
	})
	if kind == "kprobe" {
		return kprobeErr
	}
	return fentryErr
}

// probeFunction is a kernel function every kernel has, with BTF.
const probeFunction = "vfs_read"

func trivialProgram(typ ebpf.ProgramType, at ebpf.AttachType, to string) *ebpf.ProgramSpec {
	return &ebpf.ProgramSpec{Type: typ, AttachType: at, AttachTo: to, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}}
}

func probeKprobes() error {
	_, pmu := os.Stat("/sys/bus/event_source/devices/kprobe/type")
	_, events := os.Stat("/sys/kernel/tracing/kprobe_events")
	if pmu != nil && events != nil {
		return errors.New("this kernel is built without kprobes (no kprobe PMU, no kprobe_events)")
	}
	prog, err := ebpf.NewProgram(trivialProgram(ebpf.Kprobe, ebpf.AttachNone, ""))
	if err != nil {
		return classifyProbeError("load a kprobe program", err)
	}
	defer prog.Close()
	l, err := link.Kprobe(probeFunction, prog, nil)
	if err != nil {
		return classifyProbeError("attach a kprobe to "+probeFunction, err)
	}
	l.Close()
	return nil
}

func probeFentry() error {
	prog, err := ebpf.NewProgram(trivialProgram(ebpf.Tracing, ebpf.AttachTraceFEntry, probeFunction))
	if err != nil {
		return classifyProbeError("load an fentry program on "+probeFunction, err)
	}
	defer prog.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog})
	if err != nil {
		return classifyProbeError("attach an fentry program to "+probeFunction, err)
	}
	l.Close()
	return nil
}

// classifyProbeError says what the kernel's refusal of a probe means, in
// the kernel's own errno (the library's hints would mislead here).
func classifyProbeError(what string, err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		err = errno
	}
	switch {
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		mode := lockdownMode()
		if mode != "" && mode != "none" {
			return fmt.Errorf("the kernel refused to %s: %w (the kernel is locked down: %s)", what, err, mode)
		}
		return fmt.Errorf("the kernel refused to %s: %w (holter trace needs root or CAP_BPF+CAP_PERFMON)", what, err)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOTSUP), errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("this kernel cannot %s: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// lockdownMode is the kernel lockdown in force ("none", "integrity",
// "confidentiality"), or "" if the kernel does not say.
func lockdownMode() string {
	const path = "/sys/kernel/security/lockdown"
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		// securityfs may not be mounted (a fresh machine): as for tracefs,
		// root mounts it to read what the kernel says.
		if unix.Mount("securityfs", "/sys/kernel/security", "securityfs", 0, "") == nil {
			b, err = os.ReadFile(path)
		}
	}
	if err != nil {
		return ""
	}
	if i := bytes.IndexByte(b, '['); i >= 0 {
		if j := bytes.IndexByte(b[i:], ']'); j > 0 {
			return string(b[i+1 : i+j])
		}
	}
	return strings.TrimSpace(string(b))
}
