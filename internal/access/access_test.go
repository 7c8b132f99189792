package access

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestRoleOf(t *testing.T) {
	g := Groups{Admin: []uint32{100}, Reader: []uint32{200}}
	for _, c := range []struct {
		p    Peer
		want Role
	}{
		{Peer{Uid: 0, Gid: 0}, Root},
		{Peer{Uid: 1000, Gid: 1000}, None},
		{Peer{Uid: 1000, Gid: 100}, Admin},
		{Peer{Uid: 1000, Gid: 1000, Groups: []uint32{5, 200}}, Reader},
		{Peer{Uid: 1000, Gid: 200, Groups: []uint32{100}}, Admin},
		{Peer{Uid: 1000, Gid: 0}, None}, // the root group is no admin group
	} {
		if got := g.RoleOf(c.p); got != c.want {
			t.Errorf("%+v: %s, want %s", c.p, got, c.want)
		}
	}
	if got := (Groups{}).RoleOf(Peer{Uid: 1, Gid: 0, Groups: []uint32{0}}); got != None {
		t.Errorf("no groups configured, a member of gid 0: %s, want none", got)
	}
}

func TestLookupGroup(t *testing.T) {
	if g, err := LookupGroup("64000"); err != nil || len(g) != 1 || g[0] != 64000 {
		t.Errorf("numeric: %v %v", g, err)
	}
	if g, err := LookupGroup("root"); err != nil || len(g) != 1 || g[0] != 0 {
		t.Errorf("root: %v %v", g, err)
	}
	if g, err := LookupGroup("holter-no-such-group"); err != nil || g != nil {
		t.Errorf("a group the host lacks: %v %v, want none", g, err)
	}
	if g, err := LookupGroup(""); err != nil || g != nil {
		t.Errorf("none: %v %v", g, err)
	}
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, AdminTokenFile)
	first, err := LoadOrCreateToken(path, nil)
	if err != nil || len(first.Value) < minTokenLen || first.Made == "" {
		t.Fatalf("first start: %+v %v", first, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode())
	}
	again, err := LoadOrCreateToken(path, nil)
	if err != nil || again.Value != first.Value || again.Made != "" {
		t.Errorf("restart: %+v %v, want the same token %s", again, err, first.Value)
	}
	if got, err := ReadToken(path); err != nil || got != first.Value {
		t.Errorf("ReadToken: %q %v", got, err)
	}
	os.Chmod(path, 0o644)
	replaced, err := LoadOrCreateToken(path, nil)
	if err != nil || replaced.Value == first.Value || !strings.Contains(replaced.Made, "readable by others") {
		t.Errorf("a token others could read: %+v %v, want a new one", replaced, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("replaced token file mode %v, want 0600", fi.Mode())
	}
	os.WriteFile(path, []byte("short\n"), 0o600)
	if tok, err := LoadOrCreateToken(path, nil); err != nil || tok.Value == "short" || tok.Made == "" {
		t.Errorf("a short token: %+v %v, want a new one", tok, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}

	if os.Geteuid() == 0 {
		rpath := filepath.Join(dir, ReaderTokenFile)
		tok, err := LoadOrCreateToken(rpath, []uint32{64702})
		fi, _ := os.Stat(rpath)
		if err != nil || tok.Value == "" || fi.Mode().Perm() != 0o640 || fi.Sys().(*syscall.Stat_t).Gid != 64702 {
			t.Errorf("reader token file: %v, mode %v", err, fi.Mode())
		}
		// The group changed: members of the old one may have read it.
		again, err := LoadOrCreateToken(rpath, []uint32{64703})
		if err != nil || again.Value == tok.Value || !strings.Contains(again.Made, "readable by group 64702") {
			t.Errorf("reader token of a group no longer configured: %+v %v", again, err)
		}
	}

	given := filepath.Join(dir, "given")
	os.WriteFile(given, []byte("two words\n"), 0o600)
	if _, err := ReadToken(given); err == nil {
		t.Error("a token file of two words was read")
	}
	os.WriteFile(given, []byte("\n"), 0o600)
	if _, err := ReadToken(given); err == nil {
		t.Error("an empty token file was read")
	}
}

func TestShareDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	os.Mkdir(dir, 0o750)
	os.WriteFile(filepath.Join(dir, "holter.duckdb"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "kept"), []byte("x"), 0o640)
	os.Mkdir(filepath.Join(dir, "spool"), 0o755)
	if err := ShareDir(dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"": 0o751, "holter.duckdb": 0o640, "kept": 0o640, "spool": 0o750} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %04o", name, fi.Mode(), err, want)
		}
	}
}
