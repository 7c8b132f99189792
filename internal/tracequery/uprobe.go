package tracequery

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// User functions by a binary's short name: uprobe.libc.malloc finds
// libc in the traced process's mappings (holter trace -p) or where the
// dynamic linker looks (ld.so.conf's directories, then the standard
// ones), uprobe.bash.readline finds bash on PATH; a path is taken as it
// is. holter trace --list 'uprobe.libc.mall*' lists a binary's functions.

// libDirs are where shared libraries are looked for, after ld.so.conf's.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib"}

// resolveBinary finds the file a uprobe source names.
func resolveBinary(name string, pid int) (string, error) {
	if filepath.IsAbs(name) {
		if _, err := os.Stat(name); err != nil {
			return "", err
		}
		return name, nil
	}
	if strings.Contains(name, "/") {
		return "", fmt.Errorf("give an absolute path, or a library or program name (libc, bash)")
	}
	lib := name
	if !strings.HasPrefix(lib, "lib") {
		lib = "lib" + lib
	}
	matches := func(base string) bool {
		return base == name || strings.HasPrefix(base, lib+".so") || strings.HasPrefix(base, lib+"-") && strings.Contains(base, ".so")
	}
	if pid != 0 {
		if path, ok := mappedFile(pid, matches); ok {
			return path, nil
		}
	}
	for _, dir := range append(ldConfDirs(), libDirs...) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		var found []string
		for _, e := range ents {
			if matches(e.Name()) && isELF(filepath.Join(dir, e.Name())) {
				found = append(found, e.Name())
			}
		}
		if len(found) > 0 {
			// The shortest name is the soname (libc.so.6 before
			// libc.so.6.debug, libfoo.so before libfoo.so.1.2).
			sort.Slice(found, func(i, j int) bool {
				return len(found[i]) < len(found[j]) || len(found[i]) == len(found[j]) && found[i] < found[j]
			})
			return filepath.Join(dir, found[0]), nil
		}
	}
	if path, err := exec.LookPath(name); err == nil {
		if abs, err := filepath.Abs(path); err == nil {
			return abs, nil
		}
	}
	return "", fmt.Errorf("no library %s (lib%s.so*) where the dynamic linker looks, nor a program %s on PATH", name, strings.TrimPrefix(name, "lib"), name)
}

// mappedFile finds a file process pid maps whose name matches.
func mappedFile(pid int, match func(base string) bool) (string, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") {
			continue
		}
		if path := fields[5]; match(filepath.Base(path)) {
			return fmt.Sprintf("/proc/%d/root%s", pid, path), true
		}
	}
	return "", false
}

// ldConfDirs are the directories /etc/ld.so.conf names.
func ldConfDirs() []string {
	var dirs []string
	var read func(path string, depth int)
	read = func(path string, depth int) {
		b, err := os.ReadFile(path)
		if err != nil || depth > 4 {
			return
		}
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			if i := strings.IndexByte(l, '#'); i >= 0 {
				l = strings.TrimSpace(l[:i])
			}
			switch {
			case l == "":
			case strings.HasPrefix(l, "include "):
				files, _ := filepath.Glob(strings.TrimSpace(strings.TrimPrefix(l, "include ")))
				for _, f := range files {
					read(f, depth+1)
				}
			case strings.HasPrefix(l, "/"):
				dirs = append(dirs, l)
			}
		}
	}
	read("/etc/ld.so.conf", 0)
	return dirs
}

func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = f.Read(magic[:])
	return err == nil && string(magic[:]) == "\x7fELF"
}

// functions lists the defined functions of an ELF file whose names match
// a glob pattern.
func functions(path, pattern string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[string]bool{}
	var out []string
	for _, syms := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		list, err := syms()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, err
		}
		for _, s := range list {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 {
				continue
			}
			name := s.Name
			if i := strings.IndexByte(name, '@'); i >= 0 {
				name = name[:i] // malloc@@GLIBC_2.2.5
			}
			if ok, _ := filepath.Match(pattern, name); ok && !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}
