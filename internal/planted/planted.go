package planted

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/holter-dev/holter/internal/incident"
)

// Class is a kind of incident.
type Class string

// The classes of incident the suite plants.
const (
	CPUHog         Class = "cpu-hog"
	UserLeak       Class = "user-memory-leak"
	KernelLeak     Class = "kernel-memory-leak"
	LockStorm      Class = "lock-contention"
	Starvation     Class = "cpu-starvation"
	FailingSyscall Class = "failing-syscall-loop"
	DiskStall      Class = "disk-stall"
	SlowPeer       Class = "slow-peer"
	SignalStorm    Class = "signal-storm"
)

// Classes are every class, in a fixed order.
var Classes = []Class{CPUHog, UserLeak, KernelLeak, LockStorm, Starvation, FailingSyscall, DiskStall, SlowPeer, SignalStorm}

var sources = map[Class]string{
	CPUHog: cpuHog, UserLeak: userLeak, KernelLeak: kernelLeak, LockStorm: lockStorm, Starvation: starvation,
	FailingSyscall: failingSyscall, DiskStall: diskStall, SlowPeer: slowPeer, SignalStorm: signalStorm,
}

// Incident is one planted incident: a program built for it, with the name
// of the function that causes it and the arguments it runs with.
type Incident struct {
	Class Class
	// Culprit is the function the incident's cause runs in.
	Culprit string
	// Program is the built executable; its name is made up per incident.
	Program string
	Args    []string
	// Seconds is how long the incident lasts.
	Seconds float64
	// Params describes the intensity chosen, for the log.
	Params string

	dir     string
	cleanup []func()
}

// Options are the choices New leaves to its caller.
type Options struct {
	// Dir is where the program is built and its files are kept; it must
	// exist. DataDir is a directory on a block device for a disk stall;
	// Dir is used when it is empty.
	Dir, DataDir string
	// Seconds is how long the incident lasts; zero picks 35-60 s.
	Seconds float64
}

// New makes up an incident of a class with names, timing and intensity
// drawn from rng, and builds its program with gcc.
func New(class Class, rng *rand.Rand, o Options) (*Incident, error) {
	src, ok := sources[class]
	if !ok {
		return nil, fmt.Errorf("planted: unknown class %q", class)
	}
	in := &Incident{Class: class, Seconds: o.Seconds, dir: o.Dir}
	if in.Seconds == 0 {
		in.Seconds = 35 + 25*rng.Float64()
	}
	names := newNames(rng)
	in.Culprit = names.function(3)
	helper := names.function(2)
	t, err := template.New(string(class)).Parse(src)
	if err != nil {
		return nil, fmt.Errorf("planted: %s: %w", class, err)
	}
	var c bytes.Buffer
	if err := t.Execute(&c, map[string]any{"Culprit": in.Culprit, "Helper": helper, "Shift": 7 + rng.IntN(20)}); err != nil {
		return nil, fmt.Errorf("planted: %s: %w", class, err)
	}
	prog := names.program()
	cfile := filepath.Join(o.Dir, prog+".c")
	if err := os.WriteFile(cfile, c.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("planted: %w", err)
	}
	in.Program = filepath.Join(o.Dir, prog)
	// Frame pointers, as a profiler that unwinds by them needs.
	if out, err := exec.Command("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", in.Program, cfile).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("planted: build %s: %w\n%s", class, err, out)
	}
	secs := fmt.Sprintf("%.1f", in.Seconds)
	switch class {
	case CPUHog:
		threads, duty := 1, 0.7+0.3*rng.Float64()
		if rng.IntN(3) == 0 {
			threads, duty = 2, 0.4+0.2*rng.Float64()
		}
		in.Args = []string{secs, fmt.Sprint(threads), fmt.Sprintf("%.2f", duty)}
		in.Params = fmt.Sprintf("%d threads at %.0f%% duty", threads, duty*100)
	case UserLeak:
		mibs, chunk := 5+rng.IntN(40), 64<<rng.IntN(5)
		in.Args = []string{secs, fmt.Sprint(mibs), fmt.Sprint(chunk)}
		in.Params = fmt.Sprintf("%d MiB/s in %d KiB chunks", mibs, chunk)
	case KernelLeak:
		mibs := 3 + rng.IntN(20)
		in.Args = []string{secs, fmt.Sprint(mibs)}
		in.Params = fmt.Sprintf("%d MiB/s of socket buffers", mibs)
	case LockStorm:
		threads, held, between := 3+rng.IntN(6), 200+rng.IntN(1800), 20+rng.IntN(200)
		in.Args = []string{secs, fmt.Sprint(threads), fmt.Sprint(held), fmt.Sprint(between)}
		in.Params = fmt.Sprintf("%d threads holding a mutex %d µs, %d µs apart", threads, held, between)
	case Starvation:
		threads, period, nice := 2+rng.IntN(3), 500+rng.IntN(4500), 3+rng.IntN(8)
		in.Args = []string{secs, fmt.Sprint(threads), fmt.Sprint(period), fmt.Sprint(nice)}
		in.Params = fmt.Sprintf("%d hog threads at nice -%d against a thread waking every %d µs", threads, nice, period)
	case FailingSyscall:
		kind, gap := rng.IntN(3), rng.IntN(50)
		in.Args = []string{secs, fmt.Sprint(kind), fmt.Sprint(gap)}
		in.Params = fmt.Sprintf("%s, %d µs between tries", []string{"connect refused", "open missing file", "read bad fd"}[kind], gap)
	case DiskStall:
		dir := o.DataDir
		if dir == "" {
			dir = o.Dir
		}
		kib, bps := 4<<rng.IntN(5), (1+rng.IntN(4))<<20
		wrap, undo, err := throttle(dir, bps)
		if err != nil {
			return nil, err
		}
		in.cleanup = append(in.cleanup, undo)
		in.Args = append(wrap, in.Program, secs, filepath.Join(dir, prog+".data"), fmt.Sprint(kib))
		in.Program = "/bin/sh"
		in.Params = fmt.Sprintf("%d KiB O_DIRECT writes to a device throttled to %d MiB/s", kib, bps>>20)
	case SlowPeer:
		delay := 50 + rng.IntN(450)
		in.Args = []string{secs, fmt.Sprint(delay)}
		in.Params = fmt.Sprintf("a peer answering in %d ms", delay)
	case SignalStorm:
		sig, burst, gap := []int{10, 12, 34 + rng.IntN(8)}[rng.IntN(3)], 100+rng.IntN(900), rng.IntN(2000)
		in.Args = []string{secs, fmt.Sprint(sig), fmt.Sprint(burst), fmt.Sprint(gap)}
		in.Params = fmt.Sprintf("signal %d in bursts of %d, %d µs apart", sig, burst, gap)
	}
	return in, nil
}

// Command is the incident's process, not started.
func (in *Incident) Command() *exec.Cmd {
	cmd := exec.Command(in.Program, in.Args...)
	cmd.Dir = in.dir
	return cmd
}

// Run runs the incident to its end.
func (in *Incident) Run() error {
	cmd := in.Command()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("planted %s (%s): %w\n%s", in.Class, in.Culprit, err, out)
	}
	return nil
}

// Close undoes what New set up for the incident (a throttled cgroup).
func (in *Incident) Close() {
	for _, f := range in.cleanup {
		f()
	}
	in.cleanup = nil
}

// Background starts work of the kind a server always has, in dir: a short
// process every second and a shell job every ten; an HTTP service
// (python3's) asked for a page five times a second; 8 MiB written to the
// disk and synced every five seconds. It returns what stops it all.
func Background(dir string) (func(), error) {
	port := 20000 + rand.IntN(20000)
	script := fmt.Sprintf(`
cd %[1]q
python3 -m http.server --bind 127.0.0.1 %[2]d >/dev/null 2>&1 &
( while :; do /bin/true; sleep 1; done ) &
( while :; do find /etc -name '*.conf' 2>/dev/null | sort | tail -1 >/dev/null; tar cf - /usr/share/common-licenses 2>/dev/null | gzip -1 >/dev/null; sleep 10; done ) &
( sleep 2; while :; do curl -s -o /dev/null http://127.0.0.1:%[2]d/; sleep 0.2; done ) &
( while :; do dd if=/dev/zero of=io.dat bs=1M count=8 conv=fdatasync 2>/dev/null; sleep 5; done ) &
wait
`, dir, port)
	cmd := exec.Command("bash", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("planted: background: %w", err)
	}
	return func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		os.Remove(filepath.Join(dir, "io.dat"))
	}, nil
}

// WaitRecorded waits, up to timeout, until the recorder recording into
// data has committed the epochs up to ts, asking with the holter binary
// given. holter findings then reads what the recorder's online analysis
// judged of them and evaluates the rest itself: on a loaded host the
// analysis, at the lowest priority, may be minutes behind.
func WaitRecorded(ctx context.Context, holter, data string, ts time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		// As text: a recorder's API answers in JSON, whose numbers are
		// doubles.
		out, err := exec.CommandContext(ctx, holter, "query", "--data", data, "--format", "csv",
			"SELECT CAST(coalesce(max(end_ns), 0) AS VARCHAR) FROM epochs").Output()
		if lines := strings.Fields(string(out)); err == nil && len(lines) > 0 {
			if n, err := strconv.ParseInt(lines[len(lines)-1], 10, 64); err == nil && n >= ts.UnixNano() {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("planted: the recorder did not commit the epochs up to %s within %s", ts.UTC().Format(time.RFC3339Nano), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// throttle makes a blkio cgroup (cgroup v1) or an io cgroup (v2) limiting
// writes to the device holding dir to bps bytes a second, and returns the
// arguments of /bin/sh that run a command in it, and what removes it.
func throttle(dir string, bps int) ([]string, func(), error) {
	out, err := exec.Command("findmnt", "-no", "MAJ:MIN", "-T", dir).Output()
	if err != nil {
		return nil, nil, fmt.Errorf("planted: the device of %s: %w", dir, err)
	}
	dev := strings.TrimSpace(string(out))
	// A partition's writes are throttled at its disk.
	if whole, err := os.ReadFile("/sys/dev/block/" + dev + "/../dev"); err == nil {
		dev = strings.TrimSpace(string(whole))
	}
	name := fmt.Sprintf("holter-planted-%d-%d", os.Getpid(), time.Now().UnixNano())
	var cg, limit, file string
	if _, err := os.Stat("/sys/fs/cgroup/blkio"); err == nil {
		cg, file, limit = filepath.Join("/sys/fs/cgroup/blkio", name), "blkio.throttle.write_bps_device", fmt.Sprintf("%s %d", dev, bps)
	} else {
		cg, file, limit = filepath.Join("/sys/fs/cgroup", name), "io.max", fmt.Sprintf("%s wbps=%d", dev, bps)
	}
	if err := os.Mkdir(cg, 0o755); err != nil {
		return nil, nil, fmt.Errorf("planted: a cgroup to throttle the disk: %w", err)
	}
	undo := func() { os.Remove(cg) }
	if err := os.WriteFile(filepath.Join(cg, file), []byte(limit), 0o644); err != nil {
		undo()
		return nil, nil, fmt.Errorf("planted: throttle %s: %w", limit, err)
	}
	return []string{"-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(cg, "cgroup.procs")}, undo, nil
}

// names makes up function and program names.
type names struct {
	rng  *rand.Rand
	used map[string]bool
}

func newNames(rng *rand.Rand) *names { return &names{rng: rng, used: map[string]bool{}} }

var (
	verbs = []string{"poll", "drain", "flush", "refresh", "rebuild", "scan", "merge", "sync", "resolve", "compact", "replay",
		"reconcile", "probe", "fetch", "encode", "spool", "gather", "settle", "index", "rotate", "verify", "stage", "throttle", "expire"}
	nouns = []string{"config", "ledger", "quota", "shard", "cache", "session", "journal", "manifest", "upstream", "tenant",
		"bucket", "lease", "snapshot", "schema", "catalog", "invoice", "routing", "replica", "token", "inventory", "metrics",
		"backlog", "profile", "archive", "window", "cursor", "billing", "peer"}
	tails = []string{"until_ready", "forever", "loop", "pass", "batch", "all", "once", "step", "worker", "tick", "slowly", "again"}
)

func (n *names) pick(list []string) string { return list[n.rng.IntN(len(list))] }

// function is a made-up function name of about words words, unused so far.
func (n *names) function(words int) string {
	for {
		parts := []string{n.pick(verbs)}
		for i := 1; i < words; i++ {
			parts = append(parts, n.pick(nouns))
		}
		if words > 2 {
			parts = append(parts, n.pick(tails))
		}
		s := strings.Join(parts, "_")
		if !n.used[s] {
			n.used[s] = true
			return s
		}
	}
}

// program is a made-up executable name (at most 15 bytes, a whole comm).
func (n *names) program() string {
	suffix := []string{"d", "ctl", "er", "-agent", "srv", "mgr"}
	for {
		s := n.pick(nouns) + n.pick(suffix)
		if len(s) > 15 {
			s = s[:15]
		}
		if !n.used[s] {
			n.used[s] = true
			return s
		}
	}
}

// Rank is the rank of the first incident that names the culprit function
// (as its culprit's function or among its culprit's user frames), and how
// many incidents are ranked above it; 0 and len(ins) when none does.
func Rank(ins []incident.Incident, culprit string) (rank, above int) {
	for _, in := range ins {
		if Names(in, culprit) {
			return in.Rank, in.Rank - 1
		}
	}
	return 0, len(ins)
}

// Names says whether an incident names the function as its culprit's.
func Names(in incident.Incident, function string) bool {
	c := in.Culprit
	return c != nil && (c.Function == function || slices.Contains(c.User, function))
}
