package otlp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Sender is the local process an export came from, found by its socket.
type Sender struct {
	Pid  int    `json:"pid"`
	Comm string `json:"comm"`
}

func (s Sender) String() string { return fmt.Sprintf("pid %d (%s)", s.Pid, s.Comm) }

// senderOf finds the local process whose TCP socket is addr, the client's
// end of a loopback connection to the receiver: the socket's inode from
// /proc/net/tcp (or tcp6), then the process holding it among /proc/*/fd.
// The exporter's process is the spans' when the SDK exports itself; a
// collector forwarding spans is its own.
func senderOf(addr string) (Sender, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return Sender{}, err
	}
	ip := ap.Addr().Unmap()
	if !ip.IsLoopback() {
		return Sender{}, fmt.Errorf("%s is not a loopback address", addr)
	}
	var keys []string // local_address as /proc/net/tcp{,6} write it
	if ip.Is4() {
		b := ip.As4()
		keys = append(keys, fmt.Sprintf("%08X:%04X", binary.LittleEndian.Uint32(b[:]), ap.Port()))
		ip = netip.AddrFrom16(ip.As16())
	}
	b := ip.As16()
	var h strings.Builder
	for i := 0; i < 16; i += 4 {
		fmt.Fprintf(&h, "%08X", binary.LittleEndian.Uint32(b[i:i+4]))
	}
	keys = append(keys, fmt.Sprintf("%s:%04X", h.String(), ap.Port()))
	inode := ""
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if inode, err = socketInode(f, keys); err != nil || inode != "" {
			break
		}
	}
	if err != nil {
		return Sender{}, err
	}
	if inode == "" || inode == "0" {
		return Sender{}, fmt.Errorf("no local socket %s", addr)
	}
	want := "socket:[" + inode + "]"
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return Sender{}, err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name())); l == want {
				comm, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "comm"))
				return Sender{Pid: pid, Comm: string(bytes.TrimSpace(comm))}, nil
			}
		}
	}
	return Sender{}, errors.New("no process holds socket " + addr)
}

// socketInode is the inode of the socket whose local address is one of keys.
func socketInode(file string, keys []string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		for _, k := range keys {
			if fields[1] == k {
				return fields[9], nil
			}
		}
	}
	return "", sc.Err()
}
