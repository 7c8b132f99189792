package symbol

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unsafe"
)

// ErrAddressesHidden is returned by LoadKernel when every address in the kallsyms file is zero, which is
// what the kernel shows to readers without CAP_SYSLOG or when kernel.kptr_restrict forbids it.
var ErrAddressesHidden = errors.New("kallsyms addresses are hidden (need root and kernel.kptr_restrict < 2)")

// coreModule is the Module reported for symbols of the core kernel image.
const coreModule = "vmlinux"

// maxKernelTail bounds the extent of a symbol that is the last one of its module (or of the whole table),
// since kallsyms gives no sizes and there is no following symbol to end it.
const maxKernelTail = 64 << 10

// Kernel resolves kernel addresses from a kallsyms file (normally /proc/kallsyms; root sees real addresses).
// It is immutable after LoadKernel and safe for concurrent use.
//
// A kernel has some 10^5 symbols and the recorder keeps the table for as
// long as it runs, so it is held as columns rather than as a struct per
// symbol: 14 bytes a symbol, and the text symbols' names coded as the
// words they are made of (nameWords), half the bytes of the names.
type Kernel struct {
	addr []uint64 // sorted, one entry per address
	// name i is the words coded in names[nameEnd[i-1]:nameEnd[i]];
	// empty for a data symbol, which only ends the text symbol before it.
	names   []byte
	nameEnd []uint32
	words   nameWords
	module  []uint16 // index in modules
	modules []string
}

// nameWords codes symbol names as sequences of words, a word being a run
// of underscores or a run of anything else ("__x64_sys_read" is "__",
// "x64", "_", "sys", "_", "read"): a kernel's 120 000 function names of
// 3 MB are made of some 11 000 distinct words, and each word in a name
// takes one byte (the 128 most frequent) or two.
type nameWords struct {
	text string   // the words, one after another
	end  []uint32 // word i is text[end[i-1]:end[i]]
}

// splitWords calls f with each word of name.
func splitWords(name string, f func(string)) {
	for len(name) > 0 {
		under := name[0] == '_'
		n := 1
		for n < len(name) && (name[n] == '_') == under {
			n++
		}
		f(name[:n])
		name = name[n:]
	}
}

// newNameWords numbers the words of names, the most frequent first.
func newNameWords(names []string) (nameWords, map[string]uint32) {
	count := map[string]int{}
	for _, n := range names {
		splitWords(n, func(w string) { count[w]++ })
	}
	words := make([]string, 0, len(count))
	for w := range count {
		words = append(words, w)
	}
	sort.Slice(words, func(i, j int) bool {
		if count[words[i]] != count[words[j]] {
			return count[words[i]] > count[words[j]]
		}
		return words[i] < words[j]
	})
	var nw nameWords
	var text strings.Builder
	ids := make(map[string]uint32, len(words))
	nw.end = make([]uint32, len(words))
	for i, w := range words {
		text.WriteString(w)
		nw.end[i] = uint32(text.Len())
		ids[w] = uint32(i)
	}
	nw.text = text.String()
	return nw, ids
}

func (nw *nameWords) word(i uint64) string {
	start := uint32(0)
	if i > 0 {
		start = nw.end[i-1]
	}
	return nw.text[start:nw.end[i]]
}

// decode is the name coded in b, made in one allocation.
func (nw *nameWords) decode(b []byte) string {
	size := 0
	for rest := b; len(rest) > 0; {
		i, n := binary.Uvarint(rest)
		if n <= 0 || i >= uint64(len(nw.end)) {
			return "" // not written by newKernel
		}
		size += len(nw.word(i))
		rest = rest[n:]
	}
	out := make([]byte, 0, size)
	for len(b) > 0 {
		i, n := binary.Uvarint(b)
		out = append(out, nw.word(i)...)
		b = b[n:]
	}
	return unsafe.String(unsafe.SliceData(out), len(out))
}

// ksym is one symbol as parsed.
type ksym struct {
	addr   uint64
	name   string
	module string
	text   bool
	rank   int8 // preference among symbols sharing an address; lower wins
}

// LoadKernel reads and indexes a kallsyms file.
func LoadKernel(path string) (*Kernel, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open kallsyms: %w", err)
	}
	defer f.Close()
	k, err := parseKallsyms(f)
	if err != nil {
		return nil, fmt.Errorf("load kallsyms %s: %w", path, err)
	}
	return k, nil
}

func parseKallsyms(r io.Reader) (*Kernel, error) {
	modules := map[string]string{coreModule: coreModule}
	var syms []ksym
	nonzero := false
	br := bufio.NewReaderSize(r, 1<<16)
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadString('\n')
		if line != "" {
			s, ok, perr := parseKallsymsLine(strings.TrimRight(line, "\n"), modules)
			if perr != nil {
				return nil, fmt.Errorf("line %d: %w", lineNo, perr)
			}
			if ok {
				if s.addr != 0 {
					nonzero = true
				}
				syms = append(syms, s)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
	}
	if len(syms) == 0 {
		return nil, errors.New("no symbols")
	}
	if !nonzero {
		return nil, ErrAddressesHidden
	}

	sort.SliceStable(syms, func(i, j int) bool {
		if syms[i].addr != syms[j].addr {
			return syms[i].addr < syms[j].addr
		}
		return syms[i].rank < syms[j].rank
	})
	// Keep the preferred symbol per address.
	out := syms[:0]
	for _, s := range syms {
		if len(out) > 0 && out[len(out)-1].addr == s.addr {
			continue
		}
		out = append(out, s)
	}
	syms = out
	return newKernel(syms)
}

// newKernel packs symbols sorted by address, one per address, into a
// Kernel. Only text symbols are ever returned; the others only end them:
// their names are not kept.
func newKernel(syms []ksym) (*Kernel, error) {
	size := 0
	for _, s := range syms {
		if s.text {
			size += len(s.name)
		}
	}
	if size > math.MaxUint32 {
		return nil, fmt.Errorf("%d bytes of symbol names", size)
	}
	k := &Kernel{addr: make([]uint64, len(syms)), nameEnd: make([]uint32, len(syms)), module: make([]uint16, len(syms))}
	var text []string
	for _, s := range syms {
		if s.text {
			text = append(text, s.name)
		}
	}
	words, ids := newNameWords(text)
	k.words = words
	names := make([]byte, 0, size/2)
	modIndex := map[string]uint16{}
	for i, s := range syms {
		k.addr[i] = s.addr
		if s.text {
			splitWords(s.name, func(w string) { names = binary.AppendUvarint(names, uint64(ids[w])) })
		}
		if uint64(len(names)) > math.MaxUint32 {
			return nil, fmt.Errorf("%d bytes of coded symbol names", len(names))
		}
		k.nameEnd[i] = uint32(len(names))
		m, ok := modIndex[s.module]
		if !ok {
			if len(k.modules) > math.MaxUint16 {
				return nil, fmt.Errorf("more than %d modules", math.MaxUint16+1)
			}
			m = uint16(len(k.modules))
			modIndex[s.module] = m
			k.modules = append(k.modules, s.module)
		}
		k.module[i] = m
	}
	k.names = slices.Clip(names)
	return k, nil
}

// end is where symbol i ends (exclusive): at the next symbol of its
// module, or at the next one of any module that starts within
// maxKernelTail of it, else maxKernelTail past it.
func (k *Kernel) end(i int) uint64 {
	end := k.addr[i] + maxKernelTail
	if end < k.addr[i] { // overflow at the top of the address space
		end = ^uint64(0)
	}
	if i+1 < len(k.addr) {
		if next := k.addr[i+1]; k.module[i+1] == k.module[i] || next < end {
			end = next
		}
	}
	return end
}

// name is symbol i's name, empty for a data symbol.
func (k *Kernel) name(i int) string {
	start := uint32(0)
	if i > 0 {
		start = k.nameEnd[i-1]
	}
	return k.words.decode(k.names[start:k.nameEnd[i]])
}

// parseKallsymsLine parses "ffffffff81000000 T name" or "ffffffffc0001000 t name\t[module]".
// ok is false for lines that are well formed but carry nothing useful (blank lines).
func parseKallsymsLine(line string, modules map[string]string) (ksym, bool, error) {
	if strings.TrimSpace(line) == "" {
		return ksym{}, false, nil
	}
	addrStr, rest, ok := strings.Cut(line, " ")
	if !ok {
		return ksym{}, false, errors.New("missing symbol type")
	}
	addr, err := strconv.ParseUint(addrStr, 16, 64)
	if err != nil {
		return ksym{}, false, fmt.Errorf("bad address: %w", err)
	}
	typ, name, ok := strings.Cut(rest, " ")
	if !ok || len(typ) != 1 || name == "" {
		return ksym{}, false, errors.New("malformed symbol")
	}
	module := coreModule
	if n, mod, ok := strings.Cut(name, "\t"); ok {
		name = n
		mod = strings.TrimSpace(mod)
		mod = strings.TrimSuffix(strings.TrimPrefix(mod, "["), "]")
		if mod != "" {
			if m, seen := modules[mod]; seen {
				mod = m
			} else {
				modules[mod] = mod
			}
			module = mod
		}
	}
	s := ksym{addr: addr, name: name, module: module, rank: 100}
	switch typ[0] {
	case 'T':
		s.text, s.rank = true, 0
	case 'W':
		s.text, s.rank = true, 1
	case 't':
		s.text, s.rank = true, 2
	case 'w':
		s.text, s.rank = true, 3
	}
	return s, true, nil
}

// Resolve returns the text symbol containing addr. Addresses outside any text symbol give a Frame with
// only Addr set.
func (k *Kernel) Resolve(addr uint64) Frame {
	f := Frame{Addr: addr}
	if k == nil {
		return f
	}
	i := sort.Search(len(k.addr), func(i int) bool { return k.addr[i] > addr }) - 1
	if i < 0 {
		return f
	}
	if addr >= k.end(i) {
		return f
	}
	name := k.name(i)
	if name == "" {
		return f
	}
	f.Func = name
	f.Offset = addr - k.addr[i]
	f.Module = k.modules[k.module[i]]
	return f
}
