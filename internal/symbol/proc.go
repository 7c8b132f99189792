package symbol

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unique"
)

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end, off uint64
	dev             string // major:minor, as maps shows it
	inode           uint64
	exec            bool
	name            string // file path without " (deleted)", pseudo name such as "[vdso]", or "" for anonymous memory
	deleted         bool
	// interned are the one copies of dev and name that every process's
	// mappings of a file share (unique.Make), kept while this one is: a
	// mapping otherwise keeps its whole maps line alive, and the cached
	// processes' maps repeat the same few hundred libraries.
	interned [2]unique.Handle[string]

	// Lazily filled by the resolver under the owning process lock: the
	// ELF cache's key for the file ("" when it has no usable symbols).
	// The mapping holds the key, not the symbols, so that the processes
	// cached do not keep alive what the ELF cache let go.
	loaded bool
	key    string
}

// isFile reports whether the mapping is backed by a regular file that may hold symbols.
func (m *mapping) isFile() bool { return strings.HasPrefix(m.name, "/") }

// sameAs reports whether two mappings describe the same file image at the same place.
func (m *mapping) sameAs(o *mapping) bool {
	return m.start == o.start && m.end == o.end && m.off == o.off && m.inode == o.inode && m.name == o.name
}

// readStartTime returns field 22 (starttime, in clock ticks since boot) of procRoot/PID/stat.
func readStartTime(procRoot string, pid uint32) (uint64, error) {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read stat: %w", err)
	}
	return parseStartTime(data)
}

func parseStartTime(data []byte) (uint64, error) { return StatField(data, 22) }

// StatField returns numeric field n (1-based, as in proc(5); n >= 3) of a
// /proc/PID/stat line: 4 is the parent's pid, 22 the start time.
func StatField(data []byte, n int) (uint64, error) {
	// The command name (field 2) is in parentheses and may itself contain spaces and parentheses,
	// so fields are counted from the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, errors.New("malformed stat: no command name")
	}
	fields := strings.Fields(string(data[i+1:]))
	idx := n - 3 // fields after ')' start at field 3 (state)
	if idx < 0 || len(fields) <= idx {
		return 0, errors.New("malformed stat: too few fields")
	}
	v, err := strconv.ParseUint(fields[idx], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("malformed stat field %d: %w", n, err)
	}
	return v, nil
}

// readMaps parses procRoot/PID/maps; the result is sorted by start address.
func readMaps(procRoot string, pid uint32) ([]*mapping, error) {
	f, err := os.Open(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "maps"))
	if err != nil {
		return nil, fmt.Errorf("open maps: %w", err)
	}
	defer f.Close()
	maps, err := parseMaps(f)
	if err != nil {
		return nil, fmt.Errorf("read maps of %d: %w", pid, err)
	}
	return maps, nil
}

func parseMaps(r io.Reader) ([]*mapping, error) {
	var maps []*mapping
	br := bufio.NewReaderSize(r, 1<<16)
	for {
		line, err := br.ReadString('\n')
		if line = strings.TrimRight(line, "\n"); line != "" {
			m, perr := parseMapsLine(line)
			if perr != nil {
				return nil, perr
			}
			maps = append(maps, m)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(maps, func(i, j int) bool { return maps[i].start < maps[j].start })
	return maps, nil
}

// parseMapsLine parses "7f12a000-7f12b000 r-xp 00001000 fd:01 1234   /usr/lib/libc.so.6".
func parseMapsLine(line string) (*mapping, error) {
	rest := line
	next := func() string {
		rest = strings.TrimLeft(rest, " ")
		var f string
		f, rest, _ = strings.Cut(rest, " ")
		return f
	}
	rng, perms, off, dev, ino := next(), next(), next(), next(), next()
	lo, hi, ok := strings.Cut(rng, "-")
	if !ok || len(perms) < 3 {
		return nil, fmt.Errorf("malformed maps line %q", line)
	}
	m := &mapping{exec: perms[2] == 'x'}
	var err error
	if m.start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return nil, fmt.Errorf("maps start address: %w", err)
	}
	if m.end, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return nil, fmt.Errorf("maps end address: %w", err)
	}
	if m.off, err = strconv.ParseUint(off, 16, 64); err != nil {
		return nil, fmt.Errorf("maps offset: %w", err)
	}
	if m.inode, err = strconv.ParseUint(ino, 10, 64); err != nil {
		return nil, fmt.Errorf("maps inode: %w", err)
	}
	name := strings.TrimLeft(rest, " ")
	if n, ok := strings.CutSuffix(name, " (deleted)"); ok && strings.HasPrefix(name, "/") {
		name, m.deleted = n, true
	}
	m.interned = [2]unique.Handle[string]{unique.Make(dev), unique.Make(name)}
	m.dev, m.name = m.interned[0].Value(), m.interned[1].Value()
	return m, nil
}

// findMapping returns the mapping containing addr in the sorted slice maps, or nil.
func findMapping(maps []*mapping, addr uint64) *mapping {
	i := sort.Search(len(maps), func(i int) bool { return maps[i].start > addr }) - 1
	if i < 0 || addr >= maps[i].end {
		return nil
	}
	return maps[i]
}
