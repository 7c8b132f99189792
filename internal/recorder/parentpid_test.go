package recorder

import (
	"os"
	"path/filepath"
	"testing"
)

// parentPid reads the parent past the comm's last parenthesis, whatever
// the comm holds, and says so when the process is gone or its stat is
// cut short.
func TestParentPid(t *testing.T) {
	root := t.TempDir()
	for pid, stat := range map[string]string{
		"10": "10 (a) b (c) S 7 10 10 0 -1 4194560\n",
		"11": "11 (x y) R 1 11\n",
		"12": "12 (cut) S\n",
		"13": "13 no parentheses 5\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		pid  uint32
		want uint32
		ok   bool
	}{{10, 7, true}, {11, 1, true}, {12, 0, false}, {13, 0, false}, {14, 0, false}} {
		got, ok := parentPid(root, c.pid)
		if got != c.want || ok != c.ok {
			t.Errorf("parentPid(%d) = %d, %v; want %d, %v", c.pid, got, ok, c.want, c.ok)
		}
	}
	if ppid, ok := parentPid("/proc", uint32(os.Getpid())); !ok || int(ppid) != os.Getppid() {
		t.Errorf("parentPid(self) = %d, %v; want %d", ppid, ok, os.Getppid())
	}
}
