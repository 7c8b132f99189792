package symbol

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// maxProcesses bounds the per-process cache of parsed memory maps.
	maxProcesses = 1024
	// maxELFFiles and maxELFBytes bound the cache of parsed ELF symbol
	// tables, by files and by their estimated size: one Go binary with
	// DuckDB linked in (holter, its tests) is some 6 MB of symbols (91 000
	// of them; 10 MB before their names were front-coded), and a cache
	// of two of them made a host running a few re-parse them in turn (5.9
	// GB allocated in 100 s). maxELFFiles also bounds the mapped files
	// known.
	maxELFFiles = 64
	maxELFBytes = 28 << 20
	// maxImages bounds the executables whose last process's layout is kept
	// to symbolize processes of theirs that are gone (ResolveImage).
	maxImages = 256
	// maxCodeSites bounds the places in mapped files whose code CodeBefore
	// keeps: return addresses and system call sites, a few per function
	// that makes system calls.
	maxCodeSites = 4096
	// defaultRereadInterval is the minimum time between two re-reads of the maps of one process
	// triggered by unmapped addresses. It keeps garbage frames (common with frame-pointer unwinding
	// through code built without frame pointers) from re-reading the maps on every stack.
	defaultRereadInterval = 50 * time.Millisecond
)

var (
	errProcessChanged = errors.New("process changed while reading")
	errInodeMismatch  = errors.New("file at mapped path is not the mapped file")
	errDeleted        = errors.New("mapped file is deleted")
	errUnopened       = errors.New("mapped file not opened")
)

// Resolver resolves user-space addresses of processes via /proc/PID/maps and the ELF symbol tables
// of the mapped files (executables and shared libraries). It is safe for concurrent use.
type Resolver struct {
	procRoot       string
	rereadInterval time.Duration
	revalidate     time.Duration // see process

	mu    sync.Mutex // guards procs, gone and elfs
	procs *lru[uint32, *process]
	// gone holds when pids were found not to exist: the samples of a
	// process that exited before they were read look it up once per
	// revalidate, not twice per sample (Resolve and Exe each failed to
	// open /proc/PID/stat), which short-lived processes made many.
	gone *lru[uint32, time.Time]
	elfs *lru[string, *elfEntry]
	// files are the ELF cache's keys of mapped files by the file's identity
	// in the maps (device, inode, path, deleted or not; "" for a file
	// without usable symbols): a new process mapping a file seen before is
	// symbolized without opening it, while the ELF cache still holds its
	// table. A file rewritten in place, which keeps its inode, keeps its
	// old symbols until it leaves the cache.
	files *lru[fileKey, fileEntry]
	// images are, per executable, the last process of it resolved while it
	// existed, with its layout (ResolveImage).
	images *lru[imageKey, *image]
	// code is the code before places in mapped files (CodeBefore).
	code *lru[codeSite, []byte]
	// frames are the frame sizes at places in mapped files (FrameSize),
	// 0 where there is none.
	frames *lru[codeSite, uint64]
	// elfBytes is the estimated size of the ELF cache's parsed tables.
	elfBytes int

	// parses counts ELF symbol tables parsed, opens the mapped files opened;
	// tests use them to check the caches.
	parses atomic.Int64
	opens  atomic.Int64
}

// fileKey identifies a mapped file as /proc/PID/maps does.
type fileKey struct {
	dev     string
	ino     uint64
	name    string
	deleted bool
}

// fileEntry is what was read of a mapped file: its ELF cache key ("" when
// it has no usable symbols) and the file's modification time and size
// then. /proc/PID/maps names a file by device and inode, which a file
// rewritten in place keeps (a program rebuilt at its path, a binary
// copied over another): with its modification time or size changed it is
// read again.
type fileEntry struct {
	key         string
	mtime, size int64
}

type imageKey struct{ dev, ino uint64 }

// codeSite is the code before an offset in a mapped file, n bytes of it.
type codeSite struct {
	file fileKey
	off  uint64
	n    int
}

// image is a process that ran an executable, kept with where its code sat.
type image struct {
	p      *process
	layout Image
}

// process is the cached view of one process, identified by pid and start time.
type process struct {
	pid   uint32
	start uint64 // field 22 of /proc/PID/stat
	// validated is when start was last checked against /proc; guarded by Resolver.mu.
	validated time.Time

	mu       sync.Mutex // guards the fields below and the lazy fields of maps
	loaded   bool
	exe      string
	maps     []*mapping // sorted by start
	lastRead time.Time
}

// elfEntry is one slot of the ELF cache; once makes concurrent users of the same file parse it once.
type elfEntry struct {
	once sync.Once
	obj  *elfObject
	err  error
	size int // the estimated bytes of obj; guarded by Resolver.mu
}

// NewResolver returns a Resolver reading process information below procRoot (normally "/proc").
func NewResolver(procRoot string) *Resolver {
	r := &Resolver{
		procRoot:       procRoot,
		rereadInterval: defaultRereadInterval,
		revalidate:     revalidateEvery,
		procs:          newLRU[uint32, *process](maxProcesses),
		gone:           newLRU[uint32, time.Time](maxProcesses),
		elfs:           newLRU[string, *elfEntry](maxELFFiles),
		files:          newLRU[fileKey, fileEntry](maxELFFiles),
		images:         newLRU[imageKey, *image](maxImages),
		code:           newLRU[codeSite, []byte](maxCodeSites),
		frames:         newLRU[codeSite, uint64](maxCodeSites),
	}
	r.elfs.onEvict = func(_ string, e *elfEntry) { r.elfBytes -= e.size }
	return r
}

// Resolve symbolizes addrs for process pid (the thread group id). It never fails: frames that cannot be
// resolved have an empty Func, and all frames of a process that no longer exists have neither Func nor
// Module. The result has one Frame per address, in the same order. A
// Frame's Func shares memory with the cache's names of its file: a caller
// that keeps it copies it (strings.Clone).
func (r *Resolver) Resolve(pid uint32, addrs []uint64) []Frame {
	return r.ResolveImage(pid, Image{}, addrs)
}

// placed is an address found in a mapping: addrs[i] of place's caller,
// at addr in the process whose mapping m is.
type placed struct {
	i    int
	m    *mapping
	addr uint64
}

// place finds the mappings addrs lie in, for ResolveImage and CodeBefore:
// in pid's own while it exists (its maps read again, at most once, for one
// of the first rereadFor addresses not mapped when they were read), else,
// for a process of img that is gone, in the last process of its program
// seen. It returns the process whose mappings those are, its lock held,
// or nil.
func (r *Resolver) place(pid uint32, img Image, addrs []uint64, rereadFor int) (*process, []placed) {
	if p := r.process(pid); p != nil {
		if found, ok := r.placeLive(p, addrs, rereadFor); ok {
			if img.Ino != 0 && img.MmapBase != 0 {
				r.remember(imageKey{img.Dev, img.Ino}, p, img)
			}
			p.mu.Lock()
			return p, found
		}
	}
	if img.Ino == 0 || img.MmapBase == 0 || len(addrs) == 0 {
		return nil, nil
	}
	r.mu.Lock()
	im, ok := r.images.get(imageKey{img.Dev, img.Ino})
	r.mu.Unlock()
	if !ok {
		return nil, nil
	}
	im.p.mu.Lock()
	var found []placed
	for i, a := range addrs {
		// In the executable's text by start_code, anywhere else by mmap_base.
		at := a - img.StartCode + im.layout.StartCode
		m := findMapping(im.p.maps, at)
		if m == nil || m.inode != img.Ino {
			at = a - img.MmapBase + im.layout.MmapBase
			m = findMapping(im.p.maps, at)
		}
		if m != nil {
			found = append(found, placed{i, m, at})
		}
	}
	return im.p, found
}

// placeLive is place in live process p (its lock taken and given back);
// false when p is gone or changed.
func (r *Resolver) placeLive(p *process, addrs []uint64, rereadFor int) ([]placed, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := r.ensureLoaded(p); err != nil {
		r.forget(p)
		return nil, false
	}
	var found []placed
	for i, a := range addrs {
		m := findMapping(p.maps, a)
		if m == nil && i < rereadFor && plausibleUserAddr(a) && time.Since(p.lastRead) >= r.rereadInterval {
			// The process may have mapped something since the maps were cached.
			rereadFor = 0
			if err := r.reload(p); err != nil {
				r.forget(p)
				return nil, false
			}
			m = findMapping(p.maps, a)
		}
		if m != nil {
			found = append(found, placed{i, m, a})
		}
	}
	return found, true
}

// Image is where a process's code sits, as the recorder's samples say it:
// the executable it runs (device and inode, as the kernel numbers them),
// the start of the executable's text (mm->start_code) and the base the
// kernel maps shared libraries down from (mm->mmap_base). Address-space
// randomisation moves both from one run to the next, but the libraries of
// one program keep their places below the base.
type Image struct {
	Dev, Ino  uint64
	StartCode uint64
	MmapBase  uint64
}

// ResolveImage symbolizes addrs of process pid, which runs img: as Resolve
// while the process exists; once it is gone, by the last process of the
// same executable resolved here while it existed, its layout moved onto
// this one's: an address in the executable's text by the difference of
// start_code, any other by that of mmap_base. So the samples of a process
// that exited before they were read, a short-lived one above all, are
// symbolized without reading anything, if a process of its program was
// seen before.
func (r *Resolver) ResolveImage(pid uint32, img Image, addrs []uint64) []Frame {
	frames := make([]Frame, len(addrs))
	for i, a := range addrs {
		frames[i].Addr = a
	}
	p, found := r.place(pid, img, addrs, len(addrs))
	if p == nil {
		return frames
	}
	defer p.mu.Unlock()
	for _, f := range found {
		frames[f.i] = r.resolveIn(p, f.m, f.addr)
		frames[f.i].Addr = addrs[f.i]
	}
	return frames
}

// CodeBefore returns, for each of addrs of process pid (which runs img, as
// for ResolveImage), the n bytes of code that end at it, read from the
// file mapped there; fewer where the mapping begins less than n bytes
// before it, and none for an address that is not in an executable mapping
// of a file, or whose file cannot be read. A return address's bytes end
// with the call that pushed it; a system call's return address, with the
// instruction that made it. Reading the files rather than the process
// serves processes that are gone. A live process's maps are read again,
// as ResolveImage does, when they do not hold the first address (a
// sample's own, in code): a short-lived process first seen while the
// dynamic loader was mapping its libraries had no C library yet, and its
// wrappers' callers were lost. The others (words on a stack, mostly no
// code) do not make them read again: under churn that was 12 % of the
// recorder's CPU.
func (r *Resolver) CodeBefore(pid uint32, img Image, addrs []uint64, n int) [][]byte {
	code := make([][]byte, len(addrs))
	p, found := r.place(pid, img, addrs, 1)
	if p == nil {
		return code
	}
	defer p.mu.Unlock()
	for _, f := range found {
		if f.m.exec && f.m.isFile() {
			code[f.i] = r.codeBefore(p, f.m, f.addr, n)
		}
	}
	return code
}

// codeBefore is CodeBefore of one address addr in mapping m of process p
// (whose lock is held).
func (r *Resolver) codeBefore(p *process, m *mapping, addr uint64, n int) []byte {
	n = int(min(uint64(n), addr-m.start))
	site := codeSite{fileKey{m.dev, m.inode, m.name, m.deleted}, addr - m.start + m.off, n}
	r.mu.Lock()
	b, ok := r.code.get(site)
	r.mu.Unlock()
	if ok {
		return b
	}
	f, err := r.openMapped(p.pid, m)
	if err != nil {
		return nil // not kept: another process may open it
	}
	defer f.Close()
	b = make([]byte, n)
	if _, err := f.ReadAt(b, int64(site.off)-int64(n)); err != nil {
		return nil
	}
	r.mu.Lock()
	r.code.add(site, b)
	r.mu.Unlock()
	return b
}

// FrameSize is, for code address addr of process pid (which runs img, as
// for ResolveImage), how far above the stack pointer the frame of the
// function that addr is in ends while it runs there, as the call frame
// information of the file mapped there says (.eh_frame, cfaAt): the
// return address into its caller is the word at the stack pointer plus
// the size minus 8. ok is false when the file has none for addr, or the
// function's frame is found through another register there (it keeps a
// frame pointer). Read from the file, as CodeBefore is, and kept per place
// in it.
func (r *Resolver) FrameSize(pid uint32, img Image, addr uint64) (size uint64, ok bool) {
	p, found := r.place(pid, img, []uint64{addr}, 1)
	if p == nil {
		return 0, false
	}
	defer p.mu.Unlock()
	if len(found) == 0 || !found[0].m.exec || !found[0].m.isFile() {
		return 0, false
	}
	m := found[0].m
	site := codeSite{fileKey{m.dev, m.inode, m.name, m.deleted}, found[0].addr - m.start + m.off, 0}
	r.mu.Lock()
	size, ok = r.frames.get(site)
	r.mu.Unlock()
	if ok {
		return size, size != 0
	}
	f, err := r.openMapped(p.pid, m)
	if err != nil {
		return 0, false // not kept: another process may open it
	}
	defer f.Close()
	size, err = cfaAt(f, site.off)
	if err != nil && !errors.Is(err, errNoCFI) {
		return 0, false // a read that failed: tried again
	}
	r.mu.Lock()
	r.frames.add(site, size)
	r.mu.Unlock()
	return size, size != 0
}

// remember makes live process p the image's reference, unless the one it
// has maps more: a process resolved while the dynamic loader was still
// mapping its libraries (a short-lived one's first samples) would leave
// the samples in those libraries of the program's later processes
// unresolved.
func (r *Resolver) remember(key imageKey, p *process, img Image) {
	p.mu.Lock()
	n := len(p.maps)
	p.mu.Unlock()
	r.mu.Lock()
	cur, ok := r.images.get(key)
	r.mu.Unlock()
	if ok && cur.p != p {
		cur.p.mu.Lock()
		more := len(cur.p.maps) > n
		cur.p.mu.Unlock()
		if more {
			return
		}
	}
	r.mu.Lock()
	r.images.add(key, &image{p: p, layout: img})
	r.mu.Unlock()
}

// ExeImage is Exe, or once pid is gone, the executable of the last process
// of img's resolved by ResolveImage; "" if unknown.
func (r *Resolver) ExeImage(pid uint32, img Image) string {
	if exe := r.Exe(pid); exe != "" || img.Ino == 0 {
		return exe
	}
	r.mu.Lock()
	im, ok := r.images.get(imageKey{img.Dev, img.Ino})
	r.mu.Unlock()
	if !ok {
		return ""
	}
	im.p.mu.Lock()
	defer im.p.mu.Unlock()
	return im.p.exe
}

// Exe returns the executable path of pid (readlink procRoot/PID/exe), "" if unknown; it is cached with
// the process.
func (r *Resolver) Exe(pid uint32) string {
	p := r.process(pid)
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := r.ensureLoaded(p); err != nil {
		r.forget(p)
		return ""
	}
	return p.exe
}

// plausibleUserAddr filters out addresses that can never be mapped in user space (NULL page, kernel
// half), so that they do not trigger a re-read of the maps.
func plausibleUserAddr(a uint64) bool {
	return a >= 4096 && a < 1<<63
}

func (r *Resolver) pidDir(pid uint32) string {
	return filepath.Join(r.procRoot, strconv.FormatUint(uint64(pid), 10))
}

// process returns the cache entry of the live process pid, replacing an entry left by an earlier
// process with the same pid. It returns nil if the process does not exist.
//
// The start time is checked against /proc at most once per revalidateEvery
// for a cached process: a recorder resolves stacks of the same few busy
// processes all the time, and three system calls per stack were its largest
// user-space cost. A pid reused within that window is resolved against the
// previous process's maps for at most that long.
func (r *Resolver) process(pid uint32) *process {
	now := time.Now()
	r.mu.Lock()
	if p, ok := r.procs.get(pid); ok && now.Sub(p.validated) < r.revalidate {
		r.mu.Unlock()
		return p
	}
	if at, ok := r.gone.get(pid); ok && now.Sub(at) < r.revalidate {
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	start, err := readStartTime(r.procRoot, pid)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.procs.remove(pid)
		if errors.Is(err, os.ErrNotExist) {
			r.gone.add(pid, now)
		}
		return nil
	}
	r.gone.remove(pid)
	if p, ok := r.procs.get(pid); ok && p.start == start {
		p.validated = now
		return p
	}
	p := &process{pid: pid, start: start, validated: now}
	r.procs.add(pid, p)
	return p
}

// revalidateEvery bounds how long a cached process is trusted without
// checking that its pid still names the same process.
const revalidateEvery = time.Second

// forget drops p from the process cache if it is still the cached entry for its pid.
func (r *Resolver) forget(p *process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.procs.get(p.pid); ok && cur == p {
		r.procs.remove(p.pid)
	}
}

// ensureLoaded reads the maps and executable of p on first use. p.mu must be held.
func (r *Resolver) ensureLoaded(p *process) error {
	if p.loaded {
		return nil
	}
	return r.reload(p)
}

// reload (re)reads the maps of p, keeping already loaded ELF objects of unchanged mappings.
// p.mu must be held.
func (r *Resolver) reload(p *process) error {
	maps, err := readMaps(r.procRoot, p.pid)
	if err != nil {
		return err
	}
	exe := p.exe
	if !p.loaded {
		exe = r.readExe(p.pid)
	}
	// The pid may have been recycled while the files were read.
	start, err := readStartTime(r.procRoot, p.pid)
	if err != nil {
		return err
	}
	if start != p.start {
		return fmt.Errorf("reload %d: %w", p.pid, errProcessChanged)
	}
	for _, m := range maps {
		if old := findMapping(p.maps, m.start); old != nil && old.sameAs(m) {
			m.loaded, m.key = old.loaded, old.key
		}
	}
	p.maps, p.exe, p.loaded, p.lastRead = maps, exe, true, time.Now()
	return nil
}

func (r *Resolver) readExe(pid uint32) string {
	exe, err := os.Readlink(filepath.Join(r.pidDir(pid), "exe"))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(exe, " (deleted)")
}

// resolveIn symbolizes addr, which lies in mapping m of process p. p.mu must be held.
func (r *Resolver) resolveIn(p *process, m *mapping, addr uint64) Frame {
	f := Frame{Addr: addr, Module: m.name}
	if !m.isFile() {
		return f
	}
	f.Offset = addr - m.start + m.off // the file's, until a symbol is found
	var obj *elfObject
	if m.loaded && m.key != "" {
		obj = r.cachedObject(m.key)
	}
	if obj == nil && (!m.loaded || m.key != "") {
		m.loaded = true
		fk := fileKey{m.dev, m.inode, m.name, m.deleted}
		r.mu.Lock()
		entry, known := r.files.get(fk)
		r.mu.Unlock()
		mtime, size, stamped := r.fileStamp(p.pid, m)
		if known && stamped && (entry.mtime != mtime || entry.size != size) {
			known = false // rewritten in place since it was read
		}
		key := entry.key
		switch {
		case known && key == "":
			// A file without usable symbols just stays unresolved.
		case known:
			if obj = r.cachedObject(key); obj != nil {
				m.key = key
				break
			}
			fallthrough
		default:
			var err error
			if obj, err = r.loadObject(p.pid, m); obj == nil {
				m.key = ""
			}
			// A file that could not be opened through this process (gone
			// by now, its mapping not reachable) may be through another:
			// only what was read is remembered for every process.
			if !errors.Is(err, errUnopened) {
				r.mu.Lock()
				r.files.add(fk, fileEntry{m.key, mtime, size})
				r.mu.Unlock()
			}
		}
	}
	if obj == nil {
		return f
	}
	va, ok := obj.vaddr(addr-m.start+m.off, m.exec)
	if !ok {
		return f
	}
	sym, ok := obj.lookup(va)
	if !ok {
		return f
	}
	f.Func, f.Offset = sym.name, va-sym.start
	return f
}

// loadObject returns the symbol information of the file behind m, from the ELF cache when a file with
// the same build id (or, lacking one, the same path, inode and mtime) was parsed before.
func (r *Resolver) loadObject(pid uint32, m *mapping) (*elfObject, error) {
	f, err := r.openMapped(pid, m)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnopened, err)
	}
	r.opens.Add(1)
	// A table whose names stay in the file (symTable.inFile) keeps it
	// open; the file is closed when the table is collected.
	keep := false
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("parse elf %s: %w", m.name, err)
	}
	id := gnuBuildID(ef)
	key := "build-id:" + id
	if id == "" {
		fi, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("stat %s: %w", m.name, err)
		}
		ino := m.inode
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		key = fmt.Sprintf("file:%s:%d:%d", m.name, ino, fi.ModTime().UnixNano())
	}

	r.mu.Lock()
	e, ok := r.elfs.get(key)
	if !ok {
		e = &elfEntry{}
		r.elfs.add(key, e)
	}
	r.mu.Unlock()

	e.once.Do(func() {
		r.parses.Add(1)
		symSrc, dbgFile := ef, (*os.File)(nil)
		if id != "" && !hasSymtab(ef) {
			if df, dbg := r.openDebugFile(pid, id); dbg != nil {
				symSrc, dbgFile = dbg, df
			}
		}
		e.obj, e.err = newELFObject(ef, id, symSrc)
		inFile := e.err == nil && e.obj.syms.inFile()
		switch {
		case dbgFile == nil:
			keep = inFile
		case !inFile:
			dbgFile.Close()
		}
		if e.err != nil {
			e.err = fmt.Errorf("symbols of %s: %w", m.name, e.err)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, cached := r.elfs.get(key); cached {
			e.size = e.obj.size()
			r.elfBytes += e.size
			r.trimELFs(key)
		}
	})
	m.key = key
	return e.obj, e.err
}

// trimELFs evicts the least recently used parsed tables, other than
// keep's, while the cache is over maxELFBytes. r.mu must be held.
func (r *Resolver) trimELFs(keep string) {
	for r.elfBytes > maxELFBytes {
		k, e, ok := r.elfs.oldest()
		if !ok || k == keep {
			return
		}
		r.elfs.remove(k)
		r.elfBytes -= e.size
	}
}

// openMapped opens the file behind m. It prefers /proc/PID/map_files (exactly the mapped file, even
// if deleted or in another mount namespace), then the path inside the process's root, then the plain
// path as seen by this process.
// fileStamp is the modification time and size of the file behind m in
// process pid, through its map_files link; false when it cannot be read
// (the process gone), and the cache is then trusted as it is.
func (r *Resolver) fileStamp(pid uint32, m *mapping) (mtime, size int64, ok bool) {
	fi, err := os.Stat(filepath.Join(r.pidDir(pid), "map_files", fmt.Sprintf("%x-%x", m.start, m.end)))
	if err != nil {
		return 0, 0, false
	}
	return fi.ModTime().UnixNano(), fi.Size(), true
}

func (r *Resolver) openMapped(pid uint32, m *mapping) (*os.File, error) {
	dir := r.pidDir(pid)
	if f, err := os.Open(filepath.Join(dir, "map_files", fmt.Sprintf("%x-%x", m.start, m.end))); err == nil {
		return f, nil
	}
	if m.deleted {
		// Whatever now lives at the path is not the mapped file.
		return nil, fmt.Errorf("open %s: %w", m.name, errDeleted)
	}
	if f, err := os.Open(filepath.Join(dir, "root", m.name)); err == nil {
		return f, nil
	}
	f, err := os.Open(m.name)
	if err != nil {
		return nil, fmt.Errorf("open mapped file: %w", err)
	}
	if m.inode != 0 {
		// The plain path may name a different file when the process lives in another mount namespace.
		if fi, err := f.Stat(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Ino != m.inode {
				f.Close()
				return nil, fmt.Errorf("open %s: %w", m.name, errInodeMismatch)
			}
		}
	}
	return f, nil
}

// openDebugFile looks for a separate debug file with a full symbol table for build id id, in the
// process's root and then in ours. Both returned values are nil when there is none.
func (r *Resolver) openDebugFile(pid uint32, id string) (*os.File, *elf.File) {
	if len(id) < 3 {
		return nil, nil
	}
	rel := filepath.Join("usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	for _, path := range []string{filepath.Join(r.pidDir(pid), "root", rel), "/" + rel} {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		ef, err := elf.NewFile(f)
		if err != nil || gnuBuildID(ef) != id || !hasSymtab(ef) {
			f.Close()
			continue
		}
		return f, ef
	}
	return nil, nil
}

// cachedObject is the ELF cache's parsed table under key, if it holds it.
func (r *Resolver) cachedObject(key string) *elfObject {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.elfs.get(key); ok && e.size > 0 {
		return e.obj
	}
	return nil
}
