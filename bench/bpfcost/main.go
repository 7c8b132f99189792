// Command bpfcost measures what BPF programs cost, for the benchmarks in
// bench/ (table1.sh, percost.sh).
//
//	bpfcost floor [-vitals LIST] [-hz 99]
//
// attaches an empty program (return 0) to every hook of the vitals (the
// recorder's defaults unless -vitals says otherwise): their BTF
// tracepoints, and the cpu vital's perf event on every CPU. What the
// workloads lose then is the floor, what triggering the hooks costs
// whatever the programs do. It prints "attached" once every hook is, and
// on SIGINT or SIGTERM detaches and prints each program's run count and
// run time as stats does, named by its hook ("cpu" for the perf event).
//
//	bpfcost hooks
//
// prints the hooks of every vital, one per line: "vital<TAB>program<TAB>hook",
// the hook a BTF tracepoint or "cpu" for the cpu vital's perf event.
//
//	bpfcost stats PID
//
// prints the run count and run time of every program process PID holds
// (the kernel counts them only while its BPF statistics are on:
// kernel.bpf_stats_enabled=1), one per line: "name<TAB>runs<TAB>run_ns",
// the name from its BTF (whole, where the kernel keeps 15 characters).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/holter-dev/holter/internal/memlock"
	"github.com/holter-dev/holter/internal/recorder"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bpfcost floor [-vitals LIST] [-hz N] | bpfcost hooks | bpfcost stats PID")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "floor":
		err = floor(os.Args[2:])
	case "hooks":
		err = hooks()
	case "stats":
		if len(os.Args) != 3 {
			err = errors.New("usage: bpfcost stats PID")
			break
		}
		err = stats(os.Args[2])
	default:
		err = fmt.Errorf("unknown command %q (floor, hooks, stats)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bpfcost:", err)
		os.Exit(1)
	}
}

var empty = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}

func floor(args []string) error {
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	list := fs.String("vitals", "all", "the vitals whose hooks get an empty program")
	hz := fs.Int("hz", recorder.DefaultCPUHz, "the cpu vital's perf event frequency per CPU")
	fs.Parse(args)
	vitals, err := recorder.ParseVitals(*list)
	if err != nil {
		return err
	}
	hooks, err := recorder.Hooks(vitals)
	if err != nil {
		return err
	}
	if err := memlock.Raise(); err != nil {
		return err
	}
	var closers []io.Closer
	progs := map[string]*ebpf.Program{}
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	for _, h := range hooks {
		spec := &ebpf.ProgramSpec{Name: "floor", Instructions: empty, License: "GPL"}
		if h.Tracepoint == "" {
			spec.Type = ebpf.PerfEvent
		} else {
			spec.Type, spec.AttachType, spec.AttachTo = ebpf.Tracing, ebpf.AttachTraceRawTp, h.Tracepoint
		}
		prog, err := ebpf.NewProgram(spec)
		if err != nil {
			return fmt.Errorf("load an empty program for %s: %w", h.Program, err)
		}
		closers = append(closers, prog)
		progs[hookName(h)] = prog
		var l io.Closer
		if h.Tracepoint == "" {
			l, err = recorder.AttachPerCPU(prog, *hz)
		} else {
			l, err = link.AttachTracing(link.TracingOptions{Program: prog})
		}
		if err != nil {
			return fmt.Errorf("attach an empty program where %s runs: %w", h.Program, err)
		}
		closers = append(closers, l)
	}
	fmt.Println("attached")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	for _, c := range closers {
		if _, isProg := c.(*ebpf.Program); !isProg {
			c.Close()
		}
	}
	for name, prog := range progs {
		printStats(name, prog)
	}
	return nil
}

func hookName(h recorder.Hook) string {
	if h.Tracepoint == "" {
		return "cpu"
	}
	return h.Tracepoint
}

func hooks() error {
	all, err := recorder.ParseVitals("all")
	if err != nil {
		return err
	}
	for _, v := range all {
		hs, err := recorder.Hooks([]recorder.Vital{v})
		if err != nil {
			return err
		}
		for _, h := range hs {
			fmt.Printf("%s\t%s\t%s\n", v, h.Program, hookName(h))
		}
	}
	return nil
}

func printStats(name string, prog *ebpf.Program) {
	if st, err := prog.Stats(); err == nil {
		fmt.Printf("%s\t%d\t%d\n", name, st.RunCount, st.Runtime.Nanoseconds())
	}
}

func stats(pid string) error {
	ids, err := heldPrograms(pid)
	if err != nil {
		return err
	}
	for _, id := range ids {
		prog, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // gone meanwhile
		}
		name := ""
		if info, err := prog.Info(); err == nil {
			name = info.Name
			if fi, err := info.FuncInfos(); err == nil && len(fi) > 0 && fi[0].Func != nil {
				name = fi[0].Func.Name
			}
		}
		printStats(name, prog)
		prog.Close()
	}
	return nil
}

// heldPrograms are the ids of the programs process pid holds a file
// descriptor of, each once, as its fdinfo names them.
func heldPrograms(pid string) ([]ebpf.ProgramID, error) {
	dir := filepath.Join("/proc", pid, "fdinfo")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("programs of process %s: %w", pid, err)
	}
	seen := map[ebpf.ProgramID]bool{}
	var ids []ebpf.ProgramID
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			v, ok := strings.CutPrefix(line, "prog_id:")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err == nil && !seen[ebpf.ProgramID(n)] {
				seen[ebpf.ProgramID(n)] = true
				ids = append(ids, ebpf.ProgramID(n))
			}
		}
	}
	return ids, nil
}
