package testutil

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size MiB on a new directory for the test: a
// file system to fill.
func Tmpfs(t testing.TB, size int) string {
	t.Helper()
	RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("holter-test", dir, "tmpfs", 0, fmt.Sprintf("size=%dm", size)); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// Fill writes a file in dir until its file system is full but for keep
// bytes (rounded to its blocks), and returns the file.
func Fill(t testing.TB, dir string, keep int64) string {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for left := int64(fs.Bavail)*fs.Bsize - keep; left > 0; left -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), left)]); err != nil {
			break
		}
	}
	return filler
}

// ExtFS is an ext4 file system on a loop device, mounted with
// errors=remount-ro: Break makes the kernel remount it read-only as it
// does on an I/O error, with files open for writing (which a plain
// read-only remount refuses: EBUSY).
type ExtFS struct {
	Dir   string
	img   string
	loop  string
	loops []string
	t     testing.TB
}

// NewExtFS makes and mounts an ext4 file system of size MiB.
func NewExtFS(t testing.TB, size int) *ExtFS {
	t.Helper()
	RequireRoot(t)
	for _, tool := range []string{"mkfs.ext4", "losetup", "e2fsck"} {
		RequireTool(t, tool)
	}
	img := filepath.Join(t.TempDir(), "ext4.img")
	run := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, int64(size)<<20); err != nil {
		t.Fatal(err)
	}
	run("mkfs.ext4", "-q", img)
	fs := &ExtFS{Dir: t.TempDir(), img: img, t: t}
	t.Cleanup(func() {
		unix.Unmount(fs.Dir, unix.MNT_DETACH)
		for _, l := range fs.loops {
			exec.Command("losetup", "-d", l).Run()
		}
	})
	fs.attach()
	fs.mount()
	return fs
}

// attach puts the image on a loop device of its own.
func (fs *ExtFS) attach() {
	fs.t.Helper()
	out, err := exec.Command("losetup", "--find", "--show", fs.img).CombinedOutput()
	if err != nil {
		fs.t.Fatalf("losetup %s: %v\n%s", fs.img, err, out)
	}
	fs.loop = strings.TrimSpace(string(out))
	fs.loops = append(fs.loops, fs.loop)
}

func (fs *ExtFS) mount() {
	fs.t.Helper()
	if err := unix.Mount(fs.loop, fs.Dir, "ext4", 0, "errors=remount-ro"); err != nil {
		fs.t.Fatalf("mount %s: %v", fs.loop, err)
	}
}

// Break reports an error in the file system to the kernel, which remounts
// it read-only: from now on writes fail with EROFS.
func (fs *ExtFS) Break() {
	fs.t.Helper()
	ctl := filepath.Join("/sys/fs/ext4", filepath.Base(fs.loop), "trigger_fs_error")
	if err := os.WriteFile(ctl, []byte("1"), 0o200); err != nil {
		fs.t.Fatalf("trigger an ext4 error: %v", err)
	}
}

// Repair unmounts the file system, checks it and mounts it again:
// writable again. What still holds the broken mount (a bound Unix
// socket, the recorder's, pins it; an open file would too) keeps it,
// detached: the image is then checked and mounted through a loop device
// of its own, a new superblock, while the old one, read-only with its
// journal aborted, writes nothing more.
func (fs *ExtFS) Repair() {
	fs.t.Helper()
	if err := unix.Unmount(fs.Dir, 0); err != nil {
		if err := unix.Unmount(fs.Dir, unix.MNT_DETACH); err != nil {
			fs.t.Fatalf("unmount %s: %v", fs.Dir, err)
		}
		fs.attach()
	}
	// e2fsck exits 1 when it fixed something: the error Break reported.
	if out, err := exec.Command("e2fsck", "-fy", fs.loop).CombinedOutput(); err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() > 1 {
			fs.t.Fatalf("e2fsck %s: %v\n%s", fs.loop, err, out)
		}
	}
	fs.mount()
}

// DirHashes is every file of dir by its SHA-256: compare two to tell that
// nothing in dir changed, byte for byte.
func DirHashes(t testing.TB, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fmt.Sprintf("%x", sha256.Sum256(b))
	}
	return out
}
