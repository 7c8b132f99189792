package recorder

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/holter-dev/holter/internal/memlock"
	"golang.org/x/sys/unix"
)

// ErrNotSupported marks a vital the running kernel or hardware cannot give.
var ErrNotSupported = errors.New("not supported on this host")

// ErrPermission is returned when the process may not load BPF programs.
var ErrPermission = errors.New("permission denied")

// CheckPrivileges reports, before anything is loaded, whether this process
// can record: it needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), which
// root has.
func CheckPrivileges() error {
	var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	if has(unix.CAP_SYS_ADMIN) {
		return nil
	}
	var missing []string
	if !has(unix.CAP_BPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(unix.CAP_PERFMON) {
		missing = append(missing, "CAP_PERFMON")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: recording needs root, or the capabilities %s (missing: %s)",
			ErrPermission, "CAP_BPF and CAP_PERFMON", strings.Join(missing, ", "))
	}
	return nil
}

// objects are the BPF maps shared by every vital program.
type objects struct {
	maps vitalsMaps
	// globals is the programs' global variables (.bss), control among
	// them: a program reads control by its address, with no map lookup.
	globals *ebpf.Map
	control *ebpf.Variable
	// progs are the programs loaded so far, by name. A vital that is shed
	// keeps its programs loaded and only drops its links, so retrying it
	// attaches them again without a second verification (~50 ms of CPU
	// for the syscall vital's two), and their run time never goes back.
	progs map[string]*ebpf.Program
}

func loadMaps(spec *ebpf.CollectionSpec) (*objects, error) {
	if err := memlock.Raise(); err != nil {
		return nil, err
	}
	var loaded struct {
		vitalsMaps
		Globals *ebpf.Map      `ebpf:".bss"`
		Control *ebpf.Variable `ebpf:"control"`
	}
	if err := spec.LoadAndAssign(&loaded, nil); err != nil {
		return nil, loadError("load maps", err)
	}
	return &objects{maps: loaded.vitalsMaps, globals: loaded.Globals, control: loaded.Control, progs: map[string]*ebpf.Program{}}, nil
}

func (o *objects) mapReplacements() map[string]*ebpf.Map {
	m := o.maps
	return map[string]*ebpf.Map{
		".bss": o.globals, vitalsMapHcas: m.Hcas, vitalsMapStats: m.Stats,
		vitalsMapSamples: m.Samples, vitalsMapTaskStates: m.TaskStates, vitalsMapTaskMarks: m.TaskMarks,
		vitalsMapInflight: m.Inflight, vitalsMapInflightStacks: m.InflightStacks, vitalsMapIoScratch: m.IoScratch,
		vitalsMapScratch: m.Scratch, vitalsMapScratchDepth: m.ScratchDepth, vitalsMapOnCpus: m.OnCpus,
		vitalsMapBoosted: m.Boosted, vitalsMapBoostTaken: m.BoostTaken,
	}
}

func (o *objects) Close() error {
	for _, p := range o.progs {
		p.Close()
	}
	o.globals.Close()
	return o.maps.Close()
}

func loadError(what string, err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("%s: rejected by the kernel verifier: %w", what, err)
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%s: %w (needs root, or CAP_BPF and CAP_PERFMON; a locked-down kernel may also refuse): %v", what, ErrPermission, err)
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("%s: %w: %v", what, ErrNotSupported, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// loadProgram loads one program of the collection, sharing the maps, or
// returns it as loaded before.
func (o *objects) loadProgram(spec *ebpf.CollectionSpec, name string) (*ebpf.Program, error) {
	if p, ok := o.progs[name]; ok {
		return p, nil
	}
	if spec == nil {
		return nil, fmt.Errorf("program %s not loaded, and no vitals object to load it from", name)
	}
	ps, ok := spec.Programs[name]
	if !ok {
		return nil, fmt.Errorf("program %s missing from the vitals object", name)
	}
	one := &ebpf.CollectionSpec{
		Maps:      spec.Maps,
		Programs:  map[string]*ebpf.ProgramSpec{name: ps},
		Variables: spec.Variables,
		Types:     spec.Types,
	}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: o.mapReplacements()})
	if err != nil {
		return nil, loadError("load "+name, err)
	}
	defer coll.Close()
	p := coll.DetachProgram(name)
	o.progs[name] = p
	return p, nil
}

// loaded reports whether every one of the programs named is loaded.
func (o *objects) loaded(names []string) bool {
	for _, n := range names {
		if _, ok := o.progs[n]; !ok {
			return false
		}
	}
	return true
}

// attachment is one vital's programs and their links; the programs belong
// to the objects.
type attachment struct {
	progs   []*ebpf.Program
	links   []link.Link
	perfFDs []int
	trigger string
}

func (a *attachment) Close() error {
	for _, l := range a.links {
		l.Close()
	}
	for _, fd := range a.perfFDs {
		unix.Close(fd)
	}
	return nil
}

// attachTracing loads and attaches BTF tracepoint programs.
func (o *objects) attachTracing(spec *ebpf.CollectionSpec, names ...string) (*attachment, error) {
	a := &attachment{}
	for _, name := range names {
		prog, err := o.loadProgram(spec, name)
		if err != nil {
			a.Close()
			return nil, err
		}
		a.progs = append(a.progs, prog)
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			a.Close()
			return nil, loadError("attach "+name, err)
		}
		a.links = append(a.links, l)
	}
	return a, nil
}

// attachCPU samples every online CPU with a perf event: CPU cycles where a
// PMU exists, else the cpu-clock software event.
func (o *objects) attachCPU(spec *ebpf.CollectionSpec, hz int) (*attachment, error) {
	prog, err := o.loadProgram(spec, vitalsProgVitalCpu)
	if err != nil {
		return nil, err
	}
	a, err := attachPerCPU(prog, hz)
	if err != nil {
		return nil, err
	}
	a.trigger = fmt.Sprintf("cpu-clock perf event at %d Hz per CPU", hz)
	if reason := probeHardware(unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES); reason != "" {
		a.trigger += " (" + reason + ")"
	}
	return a, nil
}

// AttachPerCPU runs prog, a perf-event program, hz times a second of CPU
// time on every online CPU, as the cpu vital's program runs; closing the
// result detaches it.
func AttachPerCPU(prog *ebpf.Program, hz int) (io.Closer, error) {
	return attachPerCPU(prog, hz)
}

func attachPerCPU(prog *ebpf.Program, hz int) (*attachment, error) {
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	a := &attachment{progs: []*ebpf.Program{prog}}
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(1e9 / hz), // ns: the BPF side weighs each sample by its period
	}
	for _, cpu := range cpus {
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			a.Close()
			return nil, loadError(fmt.Sprintf("perf_event_open cpu-clock on CPU %d", cpu), err)
		}
		a.perfFDs = append(a.perfFDs, fd)
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
		if err != nil {
			a.Close()
			return nil, loadError(fmt.Sprintf("attach %s to CPU %d", prog, cpu), err)
		}
		a.links = append(a.links, l)
	}
	return a, nil
}

// probeHardware opens and closes a hardware perf event on CPU 0; it returns
// "" when the hardware counts it and a reason otherwise.
func probeHardware(typ uint32, config uint64) string {
	attr := unix.PerfEventAttr{Type: typ, Config: config, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Bits: unix.PerfBitDisabled}
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Sprintf("no hardware PMU counts it: perf_event_open: %v", err)
	}
	unix.Close(fd)
	return ""
}

func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("online CPUs: %w", err)
	}
	return parseCPUList(strings.TrimSpace(string(b)))
}

// parseCPUList parses the kernel's CPU list format, e.g. "0-3,6".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("parse CPU list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("parse CPU list %q: %w", s, err)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
