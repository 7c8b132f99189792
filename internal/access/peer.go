package access

import (
	"fmt"
	"net"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PeerOf asks the kernel who connected c.
func PeerOf(c *net.UnixConn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	var p Peer
	var opErr error
	err = raw.Control(func(fd uintptr) {
		var cred *unix.Ucred
		if cred, opErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); opErr != nil {
			return
		}
		p = Peer{Pid: cred.Pid, Uid: cred.Uid, Gid: cred.Gid}
		p.Groups, opErr = peerGroups(int(fd))
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	return p, nil
}

// peerGroups reads SO_PEERGROUPS, which x/sys/unix has no call for: the
// kernel answers ERANGE with the size it needs when the buffer is short.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 32)
	for {
		size := uint32(4 * len(buf))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch {
		case errno == unix.ERANGE && int(size/4) > len(buf):
			buf = make([]uint32, size/4)
		case errno != 0:
			return nil, os.NewSyscallError("getsockopt SO_PEERGROUPS", errno)
		default:
			return buf[:size/4], nil
		}
	}
}
