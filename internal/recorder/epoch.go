package recorder

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/holter-dev/holter/internal/clock"
	"github.com/holter-dev/holter/internal/engine"
	"github.com/holter-dev/holter/internal/findings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/sketch"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/symbol"
)

// drainGrace lets BPF programs that read the old generation just before the
// switch finish their update before the old copy is read.
const drainGrace = 2 * time.Millisecond

// epochState collects one epoch while it is open.
type epochState struct {
	gen    uint64
	number int64
	start  time.Time
	// taiToWall converts the kernel's sample times (TAI) to UTC.
	taiToWall int64
	userNs    int64
	samples   []store.Sample
	cap       sampleCap
	// unresolved are samples to symbolize again when the epoch closes.
	unresolved []unresolved
	stacks     map[uint64]store.Stack
	// names are the frames' and modules' names the epoch's stacks hold,
	// one copy of each (addStack).
	names map[string]string
	exes  map[string]store.Executable
	// end is when the epoch closed; result, what closing read of it (its
	// totals), completed by finish.
	end    time.Time
	result *store.Epoch
}

func (r *Recorder) newEpoch(gen uint64, number int64, start time.Time) *epochState {
	return &epochState{
		gen: gen, number: number, start: start,
		taiToWall: clock.TAIToWall(),
		userNs:    userCPUTime(),
		cap:       newSampleCap(r.day.allowance()),
		stacks:    map[uint64]store.Stack{},
		names:     map[string]string{},
		exes:      map[string]store.Executable{},
	}
}

// threadCPUTime is the CPU time of the calling OS thread.
func threadCPUTime() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// userCPUTime is the CPU time of the recorder's process and of the
// database engine processes it started (commits, analysis, queries).
func userCPUTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano() + int64(engine.CPUTime())
}

// closeEpoch switches the kernel to the next generation, drains the
// samples of the finished one (and of prev, the one before, if it still
// takes its late ones) and reads its sketches and totals; finish completes
// it lateGrace later.
func (r *Recorder) closeEpoch(ep, prev *epochState) (*epochState, error) {
	end := time.Now()
	next := r.newEpoch(ep.gen+1, ep.number+1, end)
	if err := r.advance(next.gen); err != nil {
		return nil, err
	}
	time.Sleep(drainGrace)
	// The ring holds records in the order they were reserved: once one of
	// the next generation comes, the finished one's are all read, and the
	// rest are left to the next epoch's reading (under a storm they can
	// come as fast as they are read).
	r.reader.SetDeadline(time.Now())
	for {
		rec, err := r.reader.Read()
		if err != nil {
			break // deadline: the ring is empty
		}
		if sampleGen(rec.RawSample) == next.gen {
			r.consume(next, rec.RawSample)
			break
		}
		r.consume(epochOf(ep, prev, rec.RawSample), rec.RawSample)
	}

	ep.cap.carry(&next.cap)
	copyIdx := uint32(ep.gen & 1)
	res := &store.Epoch{
		Host: r.cfg.Host, Epoch: ep.number,
		StartNs: ep.start.UnixNano(), EndNs: end.UnixNano(),
		MonitorUserNs: next.userNs - ep.userNs,
	}
	ep.end = end
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	if err := r.objs.maps.BoostTaken.Update(copyIdx, uint64(0), ebpf.UpdateExist); err != nil {
		return nil, fmt.Errorf("clear the boosts' sample count: %w", err)
	}
	for _, v := range AllVitals() {
		if _, ok := r.attached[v]; !ok {
			continue
		}
		sv, c, err := r.readAndClear(copyIdx, v)
		if err != nil {
			return nil, err
		}
		sv.LostRecursion = r.recursionMisses(v)
		r.budget.done[v] = r.budget.done[v].add(c)
		res.MonitorBPFNs += int64(c.runs) * int64(r.runPrice(v)+r.clock.windowCost())
		res.Vitals = append(res.Vitals, sv)
		r.setVitalStatus(v, func(s *VitalStatus) {
			s.Events += sv.Events
			s.Samples += sv.Samples
			s.Lost += sv.Lost()
			s.NoStack += sv.NoStack
		})
	}
	wall := float64(end.Sub(ep.start)) * float64(r.ncpu)
	r.mu.Lock()
	r.status.MonitorCPU = 100 * float64(res.MonitorBPFNs+res.MonitorUserNs) / wall
	r.mu.Unlock()
	ep.result = res
	return next, nil
}

// lateGrace is how long a closed epoch still takes its samples, before
// it is committed. A block request's sample is decided when it is
// submitted and sent when it completes, filed in the epoch it was
// submitted in: a request that completes after that epoch closed (a disk
// busy with others' writes, a device that stalls) was counted late and
// dropped. So was a sample reserved in the ring, on another CPU, just
// after the first of the next epoch's, which the drain at the close left
// for the next epoch. Bounded by half an epoch, so that an epoch is
// committed before the next closes.
func (r *Recorder) lateGrace() time.Duration {
	return min(maxLateGrace, r.cfg.Epoch/2)
}

const maxLateGrace = 2 * time.Second

// epochOf is the epoch a ring record goes to: the closed one, prev, while
// it takes its late samples, if it is of its generation; else ep.
func epochOf(ep, prev *epochState, raw []byte) *epochState {
	if prev != nil && sampleGen(raw) == prev.gen {
		return prev
	}
	return ep
}

// finish completes a closed epoch's result with its samples, once it has
// taken the late ones (lateGrace), and spends them from the day's storage
// budget; cur is the epoch open now, whose cap the budget sets.
func (r *Recorder) finish(ep, cur *epochState) *store.Epoch {
	r.resolveLate(ep)
	ep.cap.fold(ep.samples)
	usedStacks(ep.samples, ep.stacks, ep.exes)
	r.day.spend(ep.samples, ep.stacks, ep.end.Sub(ep.start))
	if cur != nil {
		cur.cap.max = r.day.allowance()
	}
	res := ep.result
	res.Samples = ep.samples
	res.StorageBank = r.day.bank()
	for i := range res.Vitals {
		v, _ := vitalByName(res.Vitals[i].Name)
		res.Vitals[i].Capped = ep.cap.dropped[v]
		r.setVitalStatus(v, func(s *VitalStatus) { s.Capped += ep.cap.dropped[v] })
	}
	for _, st := range ep.stacks {
		res.Stacks = append(res.Stacks, st)
	}
	for _, x := range ep.exes {
		res.Executables = append(res.Executables, x)
	}
	if r.day.perDay > 0 {
		r.mu.Lock()
		r.status.StorageBank, r.status.StorageSpent = int64(max(r.day.tokens, 0)), int64(r.day.spent)
		r.mu.Unlock()
	}
	return res
}

// readAndClear reads one vital's finished copy and zeroes it for reuse two
// epochs later; it also returns what the budget counts of it.
func (r *Recorder) readAndClear(copyIdx uint32, v Vital) (store.Vital, counts, error) {
	key := copyIdx*uint32(numVitals) + uint32(v)
	per := make([]vitalsHlStats, r.ncpu)
	if err := r.objs.maps.Stats.Lookup(key, &per); err != nil {
		return store.Vital{}, counts{}, fmt.Errorf("read %s totals: %w", v, err)
	}
	out := store.Vital{Name: v.String(), Threshold: 1 << r.budget.shift[v]}
	var c counts
	for _, s := range per {
		c = c.add(counts{s.Runs, s.Samples, s.Sketched})
		out.Events += s.Events
		out.WeightSum += s.Weight
		out.Samples += s.Samples
		out.LostRingbuf += s.LostRingbuf
		out.LostState += s.LostState
		out.NoStack += s.NoStack
		out.Secondary += s.Secondary
	}
	var h vitalsHca
	if err := r.objs.maps.Hcas.Lookup(key, &h); err != nil {
		return store.Vital{}, counts{}, fmt.Errorf("read %s sketch: %w", v, err)
	}
	twin := sketch.HCA{Counters: h.C, Seen: h.Seen}
	out.DistinctLabels = twin.DistinctEstimate()

	if err := r.objs.maps.Stats.Update(key, make([]vitalsHlStats, r.ncpu), ebpf.UpdateExist); err != nil {
		return store.Vital{}, counts{}, fmt.Errorf("clear %s totals: %w", v, err)
	}
	if err := r.objs.maps.Hcas.Update(key, &vitalsHca{}, ebpf.UpdateExist); err != nil {
		return store.Vital{}, counts{}, fmt.Errorf("clear %s sketch: %w", v, err)
	}
	return out, c, nil
}

// recursionMisses is how many events v's programs were not run for since
// the last call: the kernel runs a program once at a time on a CPU, and an
// event that comes in an interrupt of its run (a page freed by an interrupt
// while the free's program runs) is skipped and counted. r.ctlMu is held.
func (r *Recorder) recursionMisses(v Vital) uint64 {
	a := r.attached[v]
	if a == nil {
		return 0
	}
	var n uint64
	for _, p := range a.progs {
		st, err := p.Stats()
		if err != nil {
			continue // before Linux 5.12: not counted
		}
		if last := r.recursion[p]; st.RecursionMisses >= last {
			n += st.RecursionMisses - last
		}
		r.recursion[p] = st.RecursionMisses
	}
	return n
}

// sampleSize is the longest record; a record is as long as its stacks
// (struct hl_sample in bpf/sketch.h), at least sampleHeader. A stack has
// at most maxStack frames, and spWords words at the user stack pointer
// may follow the user stack's.
const (
	sampleSize   = int(unsafe.Sizeof(vitalsHlSample{}))
	sampleHeader = int(unsafe.Offsetof(vitalsHlSample{}.Stack))
	maxStack     = len(vitalsIoStacks{}.Ustack)
	spWords      = len(vitalsIoStacks{}.SpWords)
	// spMended in sp_bytes says the programs mended the user stack's
	// frame-pointer walk (bpf/sketch.h mend_ustack).
	spMended = 1 << 31
)

func sampleGen(raw []byte) uint64 {
	if len(raw) < 16 {
		return ^uint64(0)
	}
	return *(*uint64)(unsafe.Pointer(&raw[8]))
}

// consume decodes one ring-buffer record into ep, symbolizing its stacks
// now, while the process most likely still exists.
func (r *Recorder) consume(ep *epochState, raw []byte) {
	if len(raw) < sampleHeader {
		r.countLate()
		return
	}
	var s vitalsHlSample
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&s)), sampleSize), raw)
	nk, nu := frames(s.KstackBytes), frames(s.UstackBytes)
	nw := min(int(s.SpBytes&^spMended)/8, spWords)
	if sampleHeader+8*(nk+nu+nw) > len(raw) {
		r.countLate()
		return
	}
	if s.Gen != ep.gen || s.Vital >= uint32(numVitals) {
		r.countLate()
		return
	}
	comm := cString(s.Comm[:])
	if r.ownChild(s.Pid, comm) {
		return
	}
	v := Vital(s.Vital)
	img := symbol.Image{Dev: uint64(s.ExeDev), Ino: s.ExeIno, StartCode: s.StartCode, MmapBase: s.MmapBase}
	// A blck sample's kernel stack, and a syscall sample's call, say
	// whether it waited for work, which the cap keeps only as its label's
	// first, and a syscall sample whether its call failed, which the cap
	// samples against the other failed calls: read before admitting it.
	var kst *store.Stack
	if nk > 0 && v == Blck {
		st := r.kernelStack(untilLoop(s.Stack[:nk]))
		kst = &st
	}
	kind := anySample
	switch {
	case kst != nil && findings.WaitsForWork(&findings.Stack{Frames: kst.Frames}),
		v == Syscall && findings.CallWaitsForWork(int(int32(s.F[0]))):
		kind = waitsForWork
	case v == Syscall && findings.FailedCall(int(int32(s.F[0])), int64(s.F[2])):
		kind = failedCall
	}
	if !ep.cap.admit(v, s.Label, uint64(s.Est), kind) {
		return
	}
	out := store.Sample{
		TsNs:      int64(s.Ts) + ep.taiToWall,
		Vital:     v.String(),
		LabelHash: s.Label,
		Weight:    uint64(s.Weight),
		EstCount:  uint64(s.Est),
		Pid:       s.Pid,
		Tid:       s.Tid,
		Uid:       s.Uid,
		Comm:      comm,
		Exe:       r.exe(ep, s.Pid, img),
		Fields:    sampleFields(v, &s),
	}
	if v == Kmem || v == Umem {
		mem := r.meminfo.get()
		out.Fields["free_kb"] = mem.free
		if v == Kmem && mem.kernel > 0 {
			out.Fields["kernel_kb"] = mem.kernel
		}
	}
	if nk > 0 && kst == nil {
		st := r.kernelStack(untilLoop(s.Stack[:nk]))
		kst = &st
	}
	if kst != nil {
		out.KStackID = ep.addStack(*kst)
	}
	if nu > 0 {
		addrs, words := untilLoop(s.Stack[nk:nk+nu]), s.Stack[nk+nu:nk+nu+nw]
		if st := r.userStack(s.Pid, img, addrs, words, s.SpBytes&spMended != 0); len(st.Frames) > 0 {
			out.UStackID = ep.addStack(st)
		}
		if out.Exe == "[exited]" && img.Ino != 0 {
			ep.unresolved = append(ep.unresolved, unresolved{sampleKeyOf(&out), s.Pid, img, slices.Clone(addrs), slices.Clone(words), s.SpBytes&spMended != 0})
		}
	}
	ep.samples = ep.cap.added(append(ep.samples, out))
}

// unresolved is a sample of a process that was gone when it was read,
// before any process of its program was seen: resolveLate tries it again
// when the epoch closes.
type unresolved struct {
	sample sampleKey
	pid    uint32
	img    symbol.Image
	addrs  []uint64
	words  []uint64 // at the user stack pointer
	mended bool     // addrs were mended (spMended)
}

// sampleKey tells an epoch's samples apart: the cap may have moved or
// dropped one since it was taken.
type sampleKey struct {
	ts       int64
	tid      uint32
	label    uint64
	vital    string
	estCount uint64
}

func sampleKeyOf(s *store.Sample) sampleKey {
	return sampleKey{s.TsNs, s.Tid, s.LabelHash, s.Vital, s.EstCount}
}

// resolveLate symbolizes the epoch's unresolved samples by the processes
// of their programs seen since (a burst of short-lived processes often has
// one that lives long enough to be read).
func (r *Recorder) resolveLate(ep *epochState) {
	if len(ep.unresolved) == 0 {
		return
	}
	at := make(map[sampleKey]int, len(ep.unresolved))
	for _, u := range ep.unresolved {
		at[u.sample] = -1
	}
	for i := range ep.samples {
		if k := sampleKeyOf(&ep.samples[i]); at[k] == -1 {
			at[k] = i
		}
	}
	for _, u := range ep.unresolved {
		i, ok := at[u.sample]
		if !ok || i < 0 {
			continue // the cap dropped it
		}
		exe := r.exe(ep, u.pid, u.img)
		if exe == "[exited]" {
			continue
		}
		s := &ep.samples[i]
		s.Exe = exe
		if st := r.userStack(u.pid, u.img, u.addrs, u.words, u.mended); len(st.Frames) > 0 {
			s.UStackID = ep.addStack(st)
		}
	}
	ep.unresolved = nil
}

// untilLoop cuts a frame-pointer chain where it starts repeating one
// address, as it does at the bottom of threads whose start code sets up no
// frame.
func untilLoop(addrs []uint64) []uint64 {
	for i := 1; i < len(addrs); i++ {
		if addrs[i] == addrs[i-1] {
			return addrs[:i]
		}
	}
	return addrs
}

func (r *Recorder) countLate() {
	r.mu.Lock()
	r.status.LateSamples++
	r.mu.Unlock()
}

func frames(nbytes int32) int {
	if nbytes <= 0 {
		return 0
	}
	return min(int(nbytes)/8, maxStack)
}

func cString(b []int8) string {
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), len(b))
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf)
}

func (r *Recorder) exe(ep *epochState, pid uint32, img symbol.Image) string {
	if img.Ino == 0 {
		return "[kernel]"
	}
	path := r.procs.ExeImage(pid, img)
	if path == "" {
		return "[exited]"
	}
	if _, ok := ep.exes[path]; !ok {
		id, _ := symbol.BuildID(path)
		ep.exes[path] = store.Executable{Path: path, BuildID: id}
	}
	return path
}

// addStack keeps st for the epoch. Its frames' names are copied, once
// each for the epoch: the symbol caches pack a file's names into one
// string (and a memory map's into its line), which a name kept would keep
// alive after the cache let the file go; and an epoch's thousands of
// stacks repeat a few hundred modules and functions.
func (ep *epochState) addStack(st store.Stack) uint64 {
	if _, ok := ep.stacks[st.ID]; !ok {
		for i := range st.Frames {
			st.Frames[i] = ep.name(st.Frames[i])
			st.Modules[i] = ep.name(st.Modules[i])
		}
		ep.stacks[st.ID] = st
	}
	return st.ID
}

// name is the epoch's copy of s.
func (ep *epochState) name(s string) string {
	if c, ok := ep.names[s]; ok {
		return c
	}
	c := strings.Clone(s)
	ep.names[c] = c
	return c
}

func (r *Recorder) kernelStack(addrs []uint64) store.Stack {
	fr := make([]symbol.Frame, len(addrs))
	for i, a := range addrs {
		if r.kernel != nil {
			fr[i] = r.kernel.Resolve(a)
		} else {
			fr[i] = symbol.Frame{Addr: a}
		}
	}
	return makeStack("kernel", trimBPFFrames(fr))
}

// trimBPFFrames drops the frames of the BPF machinery (the program itself,
// then bpf_trace_run*) that top every stack taken from inside a program.
func trimBPFFrames(fr []symbol.Frame) []symbol.Frame {
	for len(fr) > 1 && (fr[0].Func == "" || strings.HasPrefix(fr[0].Func, "bpf_") || strings.HasPrefix(fr[0].Func, "__bpf_")) {
		fr = fr[1:]
	}
	return fr
}

// makeStack keeps function names (offsets would split identical stacks)
// and identifies the stack by a hash of what it shows.
func makeStack(kind string, fr []symbol.Frame) store.Stack {
	text := make([]string, len(fr))
	for i, f := range fr {
		text[i] = f.Func
		if f.Func == "" {
			text[i] = fmt.Sprintf("0x%x", f.Addr)
		}
	}
	return buildStack(kind, text, fr)
}

// userStack is the user stack of process pid (running img) whose
// frame-pointer walk is addrs, with its wrapper's caller (wrapperCaller;
// words are the words at its stack pointer), symbolized (userFrames).
func (r *Recorder) userStack(pid uint32, img symbol.Image, addrs, words []uint64, mended bool) store.Stack {
	if mended {
		addrs = r.calledFrames(pid, img, addrs)
	}
	return userFrames(r.procs.ResolveImage(pid, img, r.wrapperCaller(pid, img, addrs, words)), img)
}

// userFrames is a user stack's frames as text that does not change from
// one process of a program to the next, so that a thousand runs of one
// program make one stack, not a thousand: a frame without a symbol is
// named by its file and its offset in it ("libfoo.so+0x1a2b"), or, when
// its process is gone and its mapping unknown, by its offset from the
// program's code ("[exe]+0x1a2b") or from its libraries' mmap base
// ("[mmap]-0x1a2b"), as labels are. A walk that reaches an address no
// user code can have (a frame-pointer chain through code built without
// them) stops there.
func userFrames(fr []symbol.Frame, img symbol.Image) store.Stack {
	text := make([]string, 0, len(fr))
	for _, f := range fr {
		a := f.Addr
		if f.Func == "" && f.Module == "" && (a < 1<<16 || a >= 1<<47) {
			break
		}
		switch {
		case f.Func != "":
			text = append(text, f.Func)
		case strings.HasPrefix(f.Module, "/"):
			text = append(text, fmt.Sprintf("%s+0x%x", path.Base(f.Module), f.Offset))
		case f.Module == "" && img.StartCode != 0 && a >= img.StartCode && a-img.StartCode < 1<<32:
			text = append(text, fmt.Sprintf("[exe]+0x%x", a-img.StartCode))
		case f.Module == "" && img.MmapBase != 0 && a < img.MmapBase && img.MmapBase-a < 1<<40:
			text = append(text, fmt.Sprintf("[mmap]-0x%x", img.MmapBase-a))
		default:
			text = append(text, fmt.Sprintf("0x%x", a))
		}
	}
	return buildStack("user", text, fr[:len(text)])
}

// buildStack is a stack of frames named text, in fr's modules, with its
// id a hash of them.
func buildStack(kind string, text []string, fr []symbol.Frame) store.Stack {
	st := store.Stack{Kind: kind, Frames: text, Modules: make([]string, len(fr))}
	h := fnv.New64a()
	h.Write([]byte(kind))
	for i, f := range fr {
		st.Modules[i] = f.Module
		h.Write([]byte{0})
		h.Write([]byte(text[i]))
		h.Write([]byte{1})
		h.Write([]byte(f.Module))
	}
	st.ID = h.Sum64()
	if st.ID == 0 {
		st.ID = 1
	}
	return st
}

// sampleFields names the vital-specific fields (bpf/*.bpf.h document f[]).
func sampleFields(v Vital, s *vitalsHlSample) map[string]any {
	f := s.F
	switch v {
	case CPU:
		return map[string]any{"ip": f[0], "in_kernel": f[1] != 0}
	case Sched:
		return map[string]any{"prio": int32(f[0]), "delay_ns": int64(f[1]), "site": f[2], "preempted": f[3] != 0}
	case Blck:
		return map[string]any{"prio": int32(f[0]), "delay_ns": int64(f[1]), "site": f[2], "sleep_state": uint32(f[3])}
	case Syscall:
		m := map[string]any{"syscall_nr": int32(f[0]), "arg0": f[1], "ret": int64(f[2])}
		if f[4] != 0 { // timed: the call blocked
			m["latency_ns"] = int64(f[3])
		}
		return m
	case Signal:
		return map[string]any{"signal": int32(f[0]), "target_pid": uint32(f[1]), "si_code": int32(f[2]),
			"handler": f[3], "result": int32(f[4]), "target_tid": uint32(f[5])}
	case Lock:
		return map[string]any{"lock_addr": f[0], "lock_flags": uint32(f[1]), "delay_ns": int64(f[2]), "ret": int64(int32(f[3]))}
	case Kmem:
		return map[string]any{"alloc_order": int32(f[0]), "gfp": uint32(f[1]), "migrate_type": int32(f[2])}
	case Umem:
		return map[string]any{"address": f[0], "ip": f[1], "fault_code": f[2]}
	case Sock:
		dir := "send"
		if f[0] != 0 {
			dir = "recv"
		}
		return map[string]any{"direction": dir, "family": sockFamily(f[1]), "protocol": ipProtocol(f[2]),
			"peer": peerAddress(f[1], f[3], f[4]), "peer_port": int32(f[5]), "local_port": int32(f[6]), "bytes": f[7]}
	case Blio:
		m := map[string]any{
			"dev": fmt.Sprintf("%d:%d", f[0]>>20, f[0]&0xfffff), "sector": f[1],
			"bytes_requested": f[2], "bytes_completed": f[3], "op": BlockOp(f[4]),
			"latency_ns": int64(f[5]), "error": int32(f[6]), "queue_ns": int64(f[7]),
		}
		if f[4]&blioMerged != 0 {
			// A bio merged into a queued request (bpf/blio.bpf.h): its
			// completion is the request's, not followed.
			m["op"] = BlockOp(f[4] &^ blioMerged)
			m["bytes_completed"], m["latency_ns"], m["queue_ns"], m["error"] = nil, nil, nil, nil
		}
		return m
	}
	return nil
}

// BlockOp names a block request operation (REQ_OP_*).
// blioMerged in a blio sample's op says the bio was merged into a request
// already queued (BLIO_MERGED in bpf/blio.bpf.h).
const blioMerged = 1 << 16

func BlockOp(op uint64) string {
	switch op {
	case 0:
		return "read"
	case 1:
		return "write"
	case 2:
		return "flush"
	case 3:
		return "discard"
	case 5:
		return "secure_erase"
	case 9:
		return "write_zeroes"
	case 34:
		return "drv_in"
	case 35:
		return "drv_out"
	}
	return fmt.Sprintf("op%d", op)
}

func sockFamily(f uint64) string {
	switch f {
	case unix.AF_UNIX:
		return "unix"
	case unix.AF_INET:
		return "inet"
	case unix.AF_INET6:
		return "inet6"
	case unix.AF_NETLINK:
		return "netlink"
	}
	return fmt.Sprintf("family%d", f)
}

func ipProtocol(p uint64) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	case unix.IPPROTO_ICMPV6:
		return "icmpv6"
	case 0:
		return ""
	}
	return fmt.Sprintf("proto%d", p)
}

// peerAddress renders the peer of an inet socket; the BPF side copies the
// address bytes as they are in memory (network order).
func peerAddress(family, a, b uint64) string {
	switch family {
	case unix.AF_INET:
		var ip [4]byte
		binary.LittleEndian.PutUint32(ip[:], uint32(a))
		return netip.AddrFrom4(ip).String()
	case unix.AF_INET6:
		var ip [16]byte
		binary.LittleEndian.PutUint64(ip[:8], a)
		binary.LittleEndian.PutUint64(ip[8:], b)
		return netip.AddrFrom16(ip).Unmap().String()
	}
	return ""
}
