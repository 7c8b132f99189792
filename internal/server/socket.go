package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/holter-dev/holter/internal/access"
)

// Socket is a Unix socket the API is served on, to callers whose role
// its peer credentials give (access.Groups.RoleOf), at most Cap.
type Socket struct {
	Path string
	// Group may connect beside root: the file is mode 0660 with this
	// group; without one, 0600.
	Group []uint32
	Cap   access.Role
}

// MaxSocketPath is the longest path of a Unix socket (sun_path less its
// terminating zero).
const MaxSocketPath = 107

// peerConn is a socket connection and the role of its peer, read when it
// was accepted.
type peerConn struct {
	net.Conn
	role access.Role
}

type socketListener struct {
	net.Listener
	groups access.Groups
	cap    access.Role
}

func (l socketListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	// A peer whose credentials cannot be read has no role: the guard
	// answers it 403.
	pc := &peerConn{Conn: c}
	if uc, ok := c.(*net.UnixConn); ok {
		if p, err := access.PeerOf(uc); err == nil {
			pc.role = min(l.groups.RoleOf(p), l.cap)
		}
	}
	return pc, nil
}

// connKey holds a socket connection in the context of its requests.
type connKey struct{}

func connContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*peerConn); ok {
		return context.WithValue(ctx, connKey{}, pc)
	}
	return ctx
}

// socketRole is the role of a request that came over a socket, and
// whether it did.
func socketRole(ctx context.Context) (access.Role, bool) {
	pc, ok := ctx.Value(connKey{}).(*peerConn)
	if !ok {
		return access.None, false
	}
	return pc.role, true
}

// listenSocket binds s.Path, replacing a socket file nothing answers on
// any more (its server was killed), and sets its mode and group.
func listenSocket(s Socket, groups access.Groups) (net.Listener, error) {
	if len(s.Path) > MaxSocketPath {
		return nil, fmt.Errorf("api socket %s: longer than the %d bytes a Unix socket's path may have (give a shorter --data)", s.Path, MaxSocketPath)
	}
	if fi, err := os.Lstat(s.Path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("api socket %s: a file that is not a socket is there", s.Path)
		}
		c, err := net.DialTimeout("unix", s.Path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("api socket %s: a server answers there already", s.Path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("api socket %s: %w", s.Path, err)
		}
		if err := os.Remove(s.Path); err != nil {
			return nil, fmt.Errorf("api socket %s: remove the stale one: %w", s.Path, err)
		}
	}
	ln, err := net.Listen("unix", s.Path)
	if err != nil {
		return nil, fmt.Errorf("api socket: %w", err)
	}
	mode := os.FileMode(0o600)
	if len(s.Group) > 0 {
		if err := os.Chown(s.Path, -1, int(s.Group[0])); err != nil {
			ln.Close()
			return nil, fmt.Errorf("api socket: %w", err)
		}
		mode = 0o660
	}
	if err := os.Chmod(s.Path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api socket: %w", err)
	}
	return socketListener{Listener: ln, groups: groups, cap: s.Cap}, nil
}
