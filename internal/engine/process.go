package engine

import (
	"bytes"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/holter-dev/holter/internal/symbol"
	"golang.org/x/sys/unix"
)

// Options says what database an engine process opens and how.
type Options struct {
	// Path is the database file; empty, an in-memory database.
	Path string
	// Config is DuckDB's configuration, given at open (before DuckDB
	// reads the file). threads is always 1: a query runs on the thread
	// that asks (server.go).
	Config map[string]string
	// Init are statements run once the database is open, before any
	// connection is made (settings, pragmas).
	Init []string
	// Functions are the sets of scalar functions the engine registers
	// ("store", "trace": functions.go).
	Functions []string
	// Linger is how long the process stays once no connection is open;
	// zero: until the Connector is closed. A Connect after it ended
	// starts a new one, which opens the database again.
	Linger time.Duration
	// CheckpointAbove is the size of the write-ahead log past which a
	// process ending for want of work checkpoints first, so that the
	// next one has little log to read; negative: never.
	CheckpointAbove int64
	// Logf is told when a process ends that was not asked to; nil
	// discards it.
	Logf func(format string, args ...any)
}

// Connector makes connections to an engine process, which it starts on
// the first and, with a Linger, ends when none has been open for that
// long. It is a driver.Connector: sql.OpenDB(c) is a database/sql pool
// over it, and closing that pool closes the Connector.
type Connector struct {
	o Options

	mu     sync.Mutex
	p      *proc
	closed bool
	// starting is closed when a process being started has started.
	starting chan struct{}
}

// proc is one engine process.
type proc struct {
	cmd    *exec.Cmd
	ctl    *os.File
	stderr *tail
	conns  int
	// exiting says it was asked to end (set under the Connector's lock,
	// read by the goroutine that waits for it); exited is closed when it
	// ended, with why set.
	exiting atomic.Bool
	exited  chan struct{}
	why     error
	linger  *time.Timer
	// cpu is the CPU time it used, once it ended.
	cpu time.Duration
	// truncSeen is the count of skipped log truncations it last told.
	truncSeen atomic.Uint64
}

// NewConnector starts an engine process on the database o describes and
// waits for it to open, so that a database that cannot be opened says so
// here.
func NewConnector(o Options) (*Connector, error) {
	c := &Connector{o: o}
	if c.o.Logf == nil {
		c.o.Logf = func(string, ...any) {}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.start()
	if err != nil {
		return nil, err
	}
	c.p = p
	c.idle(p)
	return c, nil
}

// Driver is this package's driver, which opens nothing by name.
func (c *Connector) Driver() driver.Driver { return engineDriver{} }

type engineDriver struct{}

func (engineDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("engine: connections are made by a Connector (sql.OpenDB)")
}

// Connect makes a connection to the engine process, starting one if none
// runs.
func (c *Connector) Connect(ctx context.Context) (driver.Conn, error) {
	p, err := c.acquire(ctx)
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		c.release(p)
		return nil, fmt.Errorf("engine: connection socket: %w", err)
	}
	// Non-blocking, so that the runtime's poller serves it and a read
	// can be given a deadline.
	unix.SetNonblock(fds[0], true)
	ours := os.NewFile(uintptr(fds[0]), "engine connection")
	err = sendControl(p.ctl, []byte{cConn}, fds[1])
	unix.Close(fds[1])
	if err != nil {
		ours.Close()
		c.release(p)
		return nil, c.gone(p, err)
	}
	return newConn(c, p, ours), nil
}

// acquire is the running process, started if need be, with a connection
// counted on it.
func (c *Connector) acquire(ctx context.Context) (*proc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.closed {
			return nil, ErrClosed
		}
		p := c.p
		if p != nil && !p.exiting.Load() && !p.ended() {
			p.conns++
			if p.linger != nil {
				p.linger.Stop()
				p.linger = nil
			}
			return p, nil
		}
		if p != nil {
			// The one before must be gone before another opens the
			// file: DuckDB locks it.
			c.mu.Unlock()
			select {
			case <-p.exited:
			case <-ctx.Done():
				c.mu.Lock()
				return nil, ctx.Err()
			}
			c.mu.Lock()
			if c.p == p {
				c.p = nil
			}
			continue
		}
		np, err := c.start()
		if err != nil {
			return nil, err
		}
		c.p = np
	}
}

// release uncounts a connection; with the last one gone the process's
// linger starts.
func (c *Connector) release(p *proc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.conns--
	if p.conns == 0 {
		c.idle(p)
	}
}

// idle starts p's linger; c.mu is held.
func (c *Connector) idle(p *proc) {
	if c.o.Linger <= 0 || p.conns > 0 || p.exiting.Load() {
		return
	}
	p.linger = time.AfterFunc(c.o.Linger, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if p.conns > 0 || p.exiting.Load() || c.p != p {
			return
		}
		p.exiting.Store(true)
		go p.end(c.o.CheckpointAbove, 30*time.Second)
	})
}

// gone is err from a connection whose process ended: the error says why.
func (c *Connector) gone(p *proc, err error) error {
	select {
	case <-p.exited:
		return &ExitedError{Why: p.why, Stderr: p.stderr.String()}
	case <-time.After(100 * time.Millisecond):
		return err
	}
}

// Close ends the engine process without a checkpoint, waiting for it to
// end (killing it after a while); connections still open fail.
func (c *Connector) Close() error {
	c.mu.Lock()
	c.closed = true
	p := c.p
	if p != nil && !p.exiting.Load() {
		p.exiting.Store(true)
		if p.linger != nil {
			p.linger.Stop()
		}
	} else if p != nil {
		c.mu.Unlock()
		<-p.exited
		return nil
	}
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.end(-1, 10*time.Second)
}

// end asks p to end, checkpointing a log larger than above, and waits for
// it to (killed after wait).
func (p *proc) end(above int64, wait time.Duration) error {
	var e encoder
	e.b = []byte{cExit}
	e.varint(above)
	var err error
	if serr := sendControl(p.ctl, e.b, -1); serr == nil {
		msg, _, rerr := recvWithin(p.ctl, wait)
		if rerr == nil && len(msg) > 0 && msg[0] == cExited {
			d := decoder{b: msg[1:]}
			if s := d.string(); s != "" {
				err = fmt.Errorf("engine: closing the database: %s", s)
			}
		}
	}
	select {
	case <-p.exited:
	case <-time.After(wait):
		p.cmd.Process.Kill()
		<-p.exited
	}
	return err
}

// recvWithin is recvControl bounded by a deadline.
func recvWithin(ctl *os.File, wait time.Duration) ([]byte, int, error) {
	ctl.SetReadDeadline(time.Now().Add(wait))
	defer ctl.SetReadDeadline(time.Time{})
	return recvControl(ctl)
}

func (p *proc) ended() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// start starts an engine process and waits until it has opened the
// database; c.mu is held.
func (c *Connector) start() (*proc, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("engine: control socket: %w", err)
	}
	unix.SetNonblock(fds[0], true)
	ctl := os.NewFile(uintptr(fds[0]), "engine control")
	theirs := os.NewFile(uintptr(fds[1]), "engine control")
	defer theirs.Close()
	// The process is this program, started again: its engine package's
	// init serves the socket (server.go).
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"holter-engine"}
	cmd.Env = childEnviron()
	cmd.ExtraFiles = []*os.File{theirs}
	p := &proc{cmd: cmd, ctl: ctl, stderr: &tail{max: 8 << 10}, exited: make(chan struct{})}
	// What the engine says on its standard error (DuckDB aborting says
	// why there) goes to this process's, and its end is kept for errors.
	cmd.Stderr = io.MultiWriter(os.Stderr, p.stderr)
	// The kernel ends the engine with the thread that started it, which
	// is spawn's and never ends: a program killed does not leave its
	// engine holding the database.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Once it has ended, a copy of its standard error held elsewhere does
	// not keep Wait waiting.
	cmd.WaitDelay = time.Second
	// Named at once, on the thread that started it: a recorder watching
	// (WatchPids) leaves out the engine's start from then on, not from
	// when a goroutine gets to run.
	if err := spawn(func() error {
		if err := cmd.Start(); err != nil {
			return err
		}
		live.Store(p, struct{}{})
		notifyPids()
		return nil
	}); err != nil {
		ctl.Close()
		return nil, fmt.Errorf("engine: start: %w", err)
	}
	go func() {
		err := cmd.Wait()
		ctl.Close()
		asked := p.exiting.Load()
		if cmd.ProcessState != nil {
			p.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			exitedCPU.Add(int64(p.cpu))
		}
		live.Delete(p)
		notifyPids()
		if err == nil && !asked {
			err = errors.New("exited unasked")
		}
		p.why = err
		close(p.exited)
		if !asked {
			c.o.Logf("the database engine (pid %d) ended: %v%s", cmd.Process.Pid, err, p.stderr.quoted())
		}
	}()
	var e encoder
	e.b = []byte{cOpen}
	encodeOptions(&e, &c.o)
	fail := func(err error) (*proc, error) {
		p.exiting.Store(true)
		ctl.Close()
		cmd.Process.Kill()
		<-p.exited
		return nil, err
	}
	if err := sendControl(ctl, e.b, -1); err != nil {
		return fail(fmt.Errorf("engine: open: %w", err))
	}
	msg, _, err := recvWithin(ctl, 5*time.Minute)
	if err != nil || len(msg) == 0 || msg[0] != cOpened {
		p.exiting.Store(true)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-p.exited
		}
		return nil, &ExitedError{Why: errors.Join(err, p.why), Stderr: p.stderr.String()}
	}
	d := decoder{b: msg[1:]}
	if oerr := decodeError(&d); oerr != nil {
		p.exiting.Store(true)
		<-p.exited
		return nil, oerr
	}
	p.noteTruncations(d.uvarint())
	return p, nil
}

var (
	spawnOnce sync.Once
	spawns    chan func()
)

// spawn runs start on a thread kept for starting engine processes. The
// thread never ends, for the parent-death signal is the starting
// thread's; and it runs at the program's own priority, which a process
// inherits from the thread that starts it (a query's or the online
// analysis' lowered one would otherwise be the commits' too).
func spawn(start func() error) error {
	spawnOnce.Do(func() {
		spawns = make(chan func())
		go func() {
			runtime.LockOSThread()
			if prio, err := unix.Getpriority(unix.PRIO_PROCESS, os.Getpid()); err == nil {
				// getpriority answers 20 - nice. Raising a thread's priority
				// needs CAP_SYS_NICE; without it the thread keeps its own.
				unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 20-prio)
			}
			for f := range spawns {
				f()
			}
		}()
	})
	done := make(chan error)
	spawns <- func() { done <- start() }
	return <-done
}

// childEnviron is this process's environment for an engine process: its
// mark, and none of the Go runtime's settings meant for the recorder (a
// trace of its collections, its heap's limit).
func childEnviron() []string {
	env := []string{childEnv + "=1"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GODEBUG", "GOGC", "GOMEMLIMIT", "GOTRACEBACK", childEnv:
			continue
		}
		env = append(env, kv)
	}
	return env
}

// tail keeps the last max bytes written to it: an engine's standard
// error, quoted when it ends badly.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}

func (t *tail) quoted() string {
	if s := t.String(); s != "" {
		return ": " + s
	}
	return ""
}

// ExitedError is a connection's failure because its engine process ended.
type ExitedError struct {
	Why    error
	Stderr string
}

func (e *ExitedError) Error() string {
	msg := "engine: the database process ended"
	if e.Why != nil {
		msg += ": " + e.Why.Error()
	}
	if e.Stderr != "" {
		msg += " (" + e.Stderr + ")"
	}
	return msg
}

// ErrClosed is returned for a connection to a closed Connector.
var ErrClosed = errors.New("engine: closed")

var (
	// live are the engine processes running; exitedCPU the CPU time of
	// those that ended.
	live        sync.Map
	exitedCPU   atomic.Int64
	truncations atomic.Uint64
)

// CPUTime is the CPU time the engine processes this process started have
// used, the running ones' included: a cost of the program that started
// them.
func CPUTime() time.Duration {
	total := time.Duration(exitedCPU.Load())
	// The kernel reports it in USER_HZ ticks, 100 a second on Linux.
	const tick = time.Second / 100
	live.Range(func(k, _ any) bool {
		p := k.(*proc)
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/stat")
		if err != nil {
			return true
		}
		// utime and stime (proc(5)).
		u, uerr := symbol.StatField(b, 14)
		st, serr := symbol.StatField(b, 15)
		if uerr == nil && serr == nil {
			total += time.Duration(u+st) * tick
		}
		return true
	})
	return total
}

// ResidentBytes is the resident memory of the engine processes running
// now.
func ResidentBytes() int64 {
	var total int64
	live.Range(func(k, _ any) bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(k.(*proc).cmd.Process.Pid) + "/statm")
		if f := strings.Fields(string(b)); err == nil && len(f) > 1 {
			pages, _ := strconv.ParseInt(f[1], 10, 64)
			total += pages * int64(os.Getpagesize())
		}
		return true
	})
	return total
}

// Pids are the engine processes running now.
func Pids() []int {
	var out []int
	live.Range(func(k, _ any) bool {
		out = append(out, k.(*proc).cmd.Process.Pid)
		return true
	})
	return out
}

var (
	watchMu sync.Mutex
	watcher func(pids []int)
)

// WatchPids has f told the engine processes running (Pids) each time one
// starts or ends, from then on, until WatchPids(nil): a recorder leaves
// them out of what it records, as it does itself. f runs with the engine
// just started, before it opens its database, and must not block.
func WatchPids(f func(pids []int)) {
	watchMu.Lock()
	watcher = f
	watchMu.Unlock()
	notifyPids()
}

func notifyPids() {
	watchMu.Lock()
	defer watchMu.Unlock()
	if watcher != nil {
		watcher(Pids())
	}
}

// WALTruncationsSkipped counts the truncations of a write-ahead log that
// the engine processes this process started reported done though the
// file system refused them (waltruncate.c says why), as far as they told.
func WALTruncationsSkipped() uint64 { return truncations.Load() }

// noteTruncations takes an engine process's count of skipped
// truncations, n.
func (p *proc) noteTruncations(n uint64) {
	for {
		seen := p.truncSeen.Load()
		if n <= seen {
			return
		}
		if p.truncSeen.CompareAndSwap(seen, n) {
			truncations.Add(n - seen)
			return
		}
	}
}
