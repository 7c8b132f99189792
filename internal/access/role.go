package access

import (
	"fmt"
	"os/user"
	"slices"
	"strconv"
)

// Role is what a caller may do; each role may do what the ones before it may.
type Role int

const (
	None Role = iota
	Reader
	Admin
	Root
)

func (r Role) String() string {
	switch r {
	case Reader:
		return "reader"
	case Admin:
		return "admin"
	case Root:
		return "root"
	}
	return "none"
}

// Peer is who is at the other end of a Unix socket, as the kernel recorded
// it when that end connected.
type Peer struct {
	Pid    int32
	Uid    uint32
	Gid    uint32
	Groups []uint32 // supplementary groups
}

func (p Peer) inGroup(gids []uint32) bool {
	return slices.Contains(gids, p.Gid) || slices.ContainsFunc(p.Groups, func(g uint32) bool { return slices.Contains(gids, g) })
}

// Groups are the groups whose members use the socket beside root; the
// zero value admits root alone.
type Groups struct {
	Admin  []uint32
	Reader []uint32
}

// RoleOf is the role of a socket peer.
func (g Groups) RoleOf(p Peer) Role {
	switch {
	case p.Uid == 0:
		return Root
	case p.inGroup(g.Admin):
		return Admin
	case p.inGroup(g.Reader):
		return Reader
	}
	return None
}

// LookupGroup resolves a group name, or a numeric gid, to the gids it
// names: none for "" or a name this host does not have, since a group
// that does not exist has no members to admit.
func LookupGroup(name string) ([]uint32, error) {
	if name == "" {
		return nil, nil
	}
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return []uint32{uint32(n)}, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		if _, ok := err.(user.UnknownGroupError); ok {
			return nil, nil
		}
		return nil, fmt.Errorf("look up group %s: %w", name, err)
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("group %s has gid %q", name, g.Gid)
	}
	return []uint32{uint32(n)}, nil
}
