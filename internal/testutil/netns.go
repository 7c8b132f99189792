package testutil

import (
	"fmt"
	"os/exec"
	"testing"
)

// Netns is a network namespace joined to the root namespace by a veth
// pair: a separate "host" for fleet tests, reaching the root namespace at
// HostIP and reached at IP.
type Netns struct {
	Name   string
	IP     string // the namespace's address
	HostIP string // the root namespace's end of the veth
}

// NewNetns makes namespace name with the /24 subnet 10.213.N.0, N in
// 1..254, and removes it when the test ends.
func NewNetns(t testing.TB, name string, n int) *Netns {
	t.Helper()
	RequireRoot(t)
	RequireTool(t, "ip")
	ns := &Netns{Name: name, IP: fmt.Sprintf("10.213.%d.2", n), HostIP: fmt.Sprintf("10.213.%d.1", n)}
	host, peer := fmt.Sprintf("hv%d-%s", n, name), fmt.Sprintf("nv%d", n)
	if len(host) > 15 {
		host = host[:15]
	}
	exec.Command("ip", "netns", "del", name).Run() // left by a killed run
	exec.Command("ip", "link", "del", host).Run()
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", name).Run()
		exec.Command("ip", "link", "del", host).Run()
	})
	for _, args := range [][]string{
		{"netns", "add", name},
		{"link", "add", host, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", name},
		{"addr", "add", ns.HostIP + "/24", "dev", host},
		{"link", "set", host, "up"},
		{"-n", name, "addr", "add", ns.IP + "/24", "dev", peer},
		{"-n", name, "link", "set", peer, "up"},
		{"-n", name, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	return ns
}

// Command runs name with args inside the namespace.
func (ns *Netns) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}
