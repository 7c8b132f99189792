package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// tracedProcess is the process holter trace -c or -p follows: the trace
// keeps its events only, and ends when it exits.
type tracedProcess struct {
	pid     int
	exited  chan struct{}
	cmd     *exec.Cmd // -c: the command, held at a gate until the probes attach
	gate    *os.File
	once    sync.Once
	waitErr error
}

// startGated starts command (split into words as a shell would) held
// before its exec until release: a shell that waits on a pipe and then
// execs it, so that the pid the probes filter on is the command's own
// from its first instruction. It returns once the shell has started and
// says so, so that its own start (dash asks getppid for $PPID) happens
// before the probes attach: what they count of the shell is then the
// end of its wait and the exec, as with bpftrace -c.
func startGated(command string, stdout, stderr io.Writer) (*tracedProcess, error) {
	words, err := splitWords(command)
	if err != nil {
		return nil, usagef("-c: %v", err)
	}
	if len(words) == 0 {
		return nil, usagef("-c needs a command")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	defer readyR.Close()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `printf . >&4; exec 4>&-; read -r _ <&3; exec 3<&-; exec "$@"`, "sh"}, words...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{r, readyW}
	err = cmd.Start()
	r.Close()
	readyW.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("-c: %w", err)
	}
	if _, err := readyR.Read(make([]byte, 1)); err != nil {
		w.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("-c: the shell that holds the command did not start: %w", err)
	}
	p := &tracedProcess{pid: cmd.Process.Pid, exited: make(chan struct{}), cmd: cmd, gate: w}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// watchProcess follows a running process until it exits.
func watchProcess(pid int) (*tracedProcess, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("no process %d", pid)
		}
		return nil, fmt.Errorf("follow process %d: %w", pid, err)
	}
	p := &tracedProcess{pid: pid, exited: make(chan struct{})}
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
				break
			}
		}
		close(p.exited)
	}()
	return p, nil
}

// release lets a gated command exec.
func (p *tracedProcess) release() {
	p.once.Do(func() {
		if p.gate != nil {
			p.gate.Write([]byte("\n"))
			p.gate.Close()
		}
	})
}

// kill ends a command still running when the trace ends first.
func (p *tracedProcess) kill() {
	if p.cmd == nil {
		return
	}
	select {
	case <-p.exited:
	default:
		p.release()
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// wait waits for a command to end; its failure is its own, not the
// trace's, and is not returned.
func (p *tracedProcess) wait() error {
	if p.cmd != nil {
		<-p.exited
	}
	return nil
}

// splitWords splits a command line into words as a shell does with
// quotes and backslashes (no expansions).
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated %c in %q", c, s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
