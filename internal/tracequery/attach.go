package tracequery

import (
	"fmt"
	"os"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

func (s *Session) attach(pr *Program, prog *ebpf.Program) error {
	pb := pr.Probe
	switch pb.Kind {
	case ProbeTracepoint:
		l, err := link.Tracepoint(pb.Group, pb.Event, prog, nil)
		if err != nil {
			return fmt.Errorf("attach %s: %w", pb, err)
		}
		s.links = append(s.links, l)
	case ProbeUprobe, ProbeUretprobe:
		ex, err := link.OpenExecutable(pb.Path)
		if err != nil {
			return fmt.Errorf("attach %s: %w", pb, err)
		}
		opts := &link.UprobeOptions{Address: pb.Address, RefCtrOffset: pb.RefCtr}
		sym := pb.Symbol
		if sym == "" {
			sym = "usdt"
		}
		var l link.Link
		if pb.Kind == ProbeUprobe {
			l, err = ex.Uprobe(sym, prog, opts)
		} else {
			l, err = ex.Uretprobe(sym, prog, opts)
		}
		if err != nil {
			return fmt.Errorf("attach %s: %w", pb, err)
		}
		s.links = append(s.links, l)
	case ProbeBTF, ProbeKfunc:
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			return fmt.Errorf("attach %s: %w", pb, err)
		}
		s.links = append(s.links, l)
	case ProbeRawTP:
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: pb.Event, Program: prog})
		if err != nil {
			return fmt.Errorf("attach %s: %w", pb, err)
		}
		s.links = append(s.links, l)
	case ProbeKprobe:
		var l link.Link
		var err error
		if pb.Return {
			l, err = link.Kretprobe(pb.Symbol, prog, nil)
		} else {
			l, err = link.Kprobe(pb.Symbol, prog, nil)
		}
		if err != nil {
			return fmt.Errorf("attach %s: %w", pb, err)
		}
		s.links = append(s.links, l)
	case ProbePerf:
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{}))}
		cpus := []int{0}
		if pb.Freq > 0 {
			attr.Sample, attr.Bits = pb.Freq, unix.PerfBitFreq
			n, err := onlineCPUs()
			if err != nil {
				return err
			}
			cpus = n
		} else {
			attr.Sample = uint64(pb.Period.Nanoseconds())
		}
		for _, cpu := range cpus {
			fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if err != nil {
				return fmt.Errorf("attach %s: perf_event_open on CPU %d: %w", pb, cpu, err)
			}
			s.perfFDs = append(s.perfFDs, fd)
			l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
			if err != nil {
				return fmt.Errorf("attach %s on CPU %d: %w", pb, cpu, err)
			}
			s.links = append(s.links, l)
		}
	default:
		return fmt.Errorf("attach %s: no way to attach this kind of probe", pb)
	}
	return nil
}

func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("online CPUs: %w", err)
	}
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		var lo, hi int
		if n, _ := fmt.Sscanf(part, "%d-%d", &lo, &hi); n == 2 {
			for c := lo; c <= hi; c++ {
				cpus = append(cpus, c)
			}
		} else if _, err := fmt.Sscanf(part, "%d", &lo); err == nil {
			cpus = append(cpus, lo)
		}
	}
	return cpus, nil
}
