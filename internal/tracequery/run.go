package tracequery

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/clock"
	"github.com/holter-dev/holter/internal/memlock"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/symbol"
	"github.com/holter-dev/holter/internal/sysname"
)

// VerifierError is a probe the kernel verifier refused, told in terms of
// the query; Log is the verifier's own account.
type VerifierError struct {
	Query  string
	Source string
	Reason string
	Log    []string
	Err    error
}

func (e *VerifierError) Error() string {
	return fmt.Sprintf("the kernel verifier refused the probe compiled for %s (%s): %s (--verbose shows the verifier log)", e.Source, e.Query, e.Reason)
}

func (e *VerifierError) Unwrap() error { return e.Err }

// maxHeldRows bounds the rows a session holds between flushes (events for
// DuckDB, for ORDER BY, or for a coordinator); the rest are counted as
// dropped.
const maxHeldRows = 1 << 16

// Session is a running query: its loaded probes and maps.
type Session struct {
	plan     *Plan
	coll     *ebpf.Collection
	inner    [2]*ebpf.Map // the aggregation maps, of coll
	cur      uint64
	links    []link.Link
	perfFDs  []int
	ring     *ringbuf.Reader
	prev     [numCounters]uint64
	prevMiss uint64
	evicted  uint64 // evictions reported so far
	started  time.Time
	last     time.Time

	mu       sync.Mutex
	held     [][]any // rows held until the next flush
	agg      *groups // the evaluator's aggregation of events
	userLost uint64  // rows dropped: held over maxHeldRows
	onRow    func([]any) error
	rowErr   error
	rows     int64         // rows handed to onRow
	done     chan struct{} // closed when LIMIT rows have been handed over
	doneOnce sync.Once

	duck     duckEngine
	partials bool // hand back partial rows; the user-space part runs elsewhere
	kernel   *symbol.Kernel
	users    *symbol.Resolver
	wg       sync.WaitGroup
}

// StartPhases are the steps of Start, in order, as RunOptions.Phase names
// them: the programs generated, the programs loaded (verified) with their
// maps, the probes attached.
var StartPhases = []string{"generated", "loaded", "attached"}

// Start loads and attaches the plan's probes.
func Start(p *Plan) (*Session, error) { return startPhased(p, nil, nil) }

// startPhased starts the plan; onRow, for a per-event plan, gets each
// row as its event arrives.
func startPhased(p *Plan, phase func(string), onRow func([]any) error) (*Session, error) {
	if phase == nil {
		phase = func(string) {}
	}
	if err := memlock.Raise(); err != nil {
		return nil, err
	}
	p.BootOffset = clock.MonoToWall()
	progs, err := p.Programs()
	if err != nil {
		return nil, err
	}
	phase(StartPhases[0])
	s := &Session{plan: p, started: time.Now(), onRow: onRow, done: make(chan struct{})}
	s.last = s.started
	if p.user != nil && p.user.aggregate {
		s.agg = newGroups(len(p.Aggs), p.Opts.MapSize)
	}
	spec := &ebpf.CollectionSpec{Maps: p.Maps(), Programs: map[string]*ebpf.ProgramSpec{}}
	for _, pr := range progs {
		spec.Programs[pr.Name] = pr.Spec
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		s.Close()
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			reason := "rejected"
			if len(ve.Log) > 0 {
				reason = ve.Log[len(ve.Log)-1]
			}
			return nil, &VerifierError{Query: p.Query.Text, Source: p.Source.Name, Reason: reason, Log: ve.Log, Err: err}
		}
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("load probes: %w (holter trace needs root or CAP_BPF+CAP_PERFMON)", err)
		}
		return nil, fmt.Errorf("load probes: %w", err)
	}
	s.coll = coll
	if p.Mode == ModeAggregate {
		for i, name := range aggMaps {
			s.inner[i] = coll.Maps[name]
		}
	}
	phase(StartPhases[1])
	if p.Mode == ModeStream {
		if s.ring, err = ringbuf.NewReader(coll.Maps["events"]); err != nil {
			s.Close()
			return nil, fmt.Errorf("ring buffer: %w", err)
		}
		s.wg.Add(1)
		go s.readRing()
	}
	// Attach the end first, so that no begin waits for an end not yet there.
	for i := len(progs) - 1; i >= 0; i-- {
		if err := s.attach(progs[i], coll.Programs[progs[i].Name]); err != nil {
			s.Close()
			return nil, err
		}
	}
	phase(StartPhases[2])
	return s, nil
}

// Detach stops the probes and lets the session take in all they sent:
// what the ring buffer holds when the last probe detaches is read (and
// rows handed over) before Detach returns, so the last interval misses
// nothing.
func (s *Session) Detach() {
	s.detachProbes()
	if s.ring != nil && s.ring.Flush() == nil {
		s.wg.Wait()
	}
}

func (s *Session) detachProbes() {
	for _, l := range s.links {
		l.Close()
	}
	s.links = nil
	for _, fd := range s.perfFDs {
		unix.Close(fd)
	}
	s.perfFDs = nil
}

// Close detaches and frees everything.
func (s *Session) Close() {
	s.detachProbes()
	if s.ring != nil {
		s.ring.Close()
		s.wg.Wait()
		s.ring = nil
	}
	if s.coll != nil {
		s.coll.Close()
		s.coll = nil
	}
	s.duck.close()
}

// Done is closed once a per-event plan with LIMIT has handed over its
// rows.
func (s *Session) Done() <-chan struct{} { return s.done }

// Interval is one flushed interval's answer.
type Interval struct {
	Start, End time.Time
	Result     *store.Result
	// Counters are the interval's losses by name (map_full, evicted,
	// unmatched, stack_lost, ring_lost, div_zero, dropped, missed); zero
	// ones are left out.
	Counters map[string]uint64
	// Events says whether anything reached the interval (a group, an
	// event or a row).
	Events bool
	Plan   *Plan `json:"-"`
}

// Flush ends the current interval: it swaps the probes to the other map,
// reads and clears the finished one, merges per-CPU partials and runs the
// user-space part of the query over them.
func (s *Session) Flush(ctx context.Context) (*Interval, error) {
	iv := &Interval{Start: s.last, End: time.Now(), Counters: map[string]uint64{}, Plan: s.plan}
	s.last = iv.End
	var res *store.Result
	var err error
	if s.plan.Mode == ModeAggregate {
		res, iv.Events, err = s.flushAggregate(ctx)
	} else {
		res, iv.Events, err = s.flushStream(ctx)
	}
	if err != nil {
		return nil, err
	}
	iv.Result = res
	s.readCounters(iv)
	return iv, nil
}

func (s *Session) readCounters(iv *Interval) {
	var raw [8 * numCounters]byte
	if err := s.coll.Maps["counters"].Lookup(uint32(0), raw[:]); err == nil {
		var now [numCounters]uint64
		for i := 0; i < numCounters; i++ {
			now[i] = binary.LittleEndian.Uint64(raw[8*i:])
			if d := now[i] - s.prev[i]; d > 0 && CounterNames[i] != "" {
				iv.Counters[CounterNames[i]] = d
			}
		}
		s.prev = now
		if m, ok := s.coll.Maps["stash"]; ok {
			// An LRU map evicts silently: what was put and neither taken
			// by its end nor still there was evicted.
			present := uint64(0)
			var k []byte
			it := m.Iterate()
			var v []byte
			for it.Next(&k, &v) {
				present++
			}
			var put, taken uint64
			var perCPU [][]byte
			if err := s.coll.Maps["pairs"].Lookup(uint32(0), &perCPU); err == nil {
				for _, c := range perCPU {
					put += binary.LittleEndian.Uint64(c[8*pairPut:])
					taken += binary.LittleEndian.Uint64(c[8*pairTaken:])
				}
			}
			if put > taken+present {
				if ev := put - taken - present; ev > s.evicted {
					iv.Counters["evicted"] = ev - s.evicted
					s.evicted = ev
				}
			}
		}
	}
	var miss uint64
	for _, p := range s.coll.Programs {
		if st, err := p.Stats(); err == nil {
			miss += st.RecursionMisses
		}
	}
	if d := miss - s.prevMiss; d > 0 {
		iv.Counters["missed"] = d
	}
	s.prevMiss = miss
	s.mu.Lock()
	if s.userLost > 0 {
		iv.Counters["dropped"] += s.userLost
		s.userLost = 0
	}
	if s.agg != nil && s.agg.full > 0 {
		iv.Counters["map_full"] += s.agg.full
		s.agg.full = 0
	}
	s.mu.Unlock()
}

// swapGrace is how long a probe that read the old map selector may still
// be writing to the old map: probes cannot sleep, so this is generous.
const swapGrace = 5 * time.Millisecond

func (s *Session) flushAggregate(ctx context.Context) (*store.Result, bool, error) {
	p := s.plan
	old := s.cur
	s.cur ^= 1
	if err := s.coll.Maps["ctl"].Put(uint32(0), s.cur); err != nil {
		return nil, false, fmt.Errorf("swap maps: %w", err)
	}
	time.Sleep(swapGrace)
	m := s.inner[old]
	gs := newGroups(len(p.Aggs), 0)
	decoded := map[string][]any{}
	var key []byte
	var vals [][]byte
	var seen [][]byte
	it := m.Iterate()
	for it.Next(&key, &vals) {
		seen = append(seen, bytes.Clone(key))
		gk := string(key[:p.groupLen()])
		keys, ok := decoded[gk]
		if !ok {
			keys = s.decodeKeys(key)
			decoded[gk] = keys
		}
		g := gs.get(keys)
		g.pid = s.keyPid(key)
		for _, v := range vals {
			s.addCPU(g, key, v)
		}
	}
	if err := it.Err(); err != nil {
		return nil, false, fmt.Errorf("read aggregation map: %w", err)
	}
	for _, k := range seen {
		m.Delete(k)
	}
	events := len(seen) > 0
	if len(gs.order) == 0 && p.groupLen() == 0 {
		// No GROUP BY: one row, as SQL gives for an empty input.
		gs.get([]any{})
	}
	return s.finishGroups(ctx, gs, events)
}

// finishGroups turns an interval's groups into its answer (or, for a
// coordinator, its partial rows).
func (s *Session) finishGroups(ctx context.Context, gs *groups, events bool) (*store.Result, bool, error) {
	p := s.plan
	if s.partials {
		rows := finishAll(p.Aggs, gs.order, func(a *Agg, g *group, i int) any {
			if hasState(a) {
				return stateOf(a, g, i)
			}
			return g.finish(a, i, s.stack)
		})
		cols, types := partialColumns(p)
		if rows == nil {
			rows = [][]any{}
		}
		return &store.Result{Columns: cols, Types: types, Rows: rows}, events, nil
	}
	rows := finishAll(p.Aggs, gs.order, func(a *Agg, g *group, i int) any { return g.finish(a, i, s.stack) })
	res, err := s.userPart(ctx, rows)
	return res, events, err
}

// groupLen is the bytes of the map key that are group keys (the rest are
// buckets).
func (p *Plan) groupLen() int {
	n := 0
	for _, k := range p.Keys {
		if k.Bucket == nil {
			n = k.Off + k.Size
		}
	}
	return n
}

// keyPid is the pid part of a map key, if the query groups by pid.
func (s *Session) keyPid(key []byte) uint32 {
	for _, k := range s.plan.Keys {
		if id, ok := k.Expr.(*Ident); ok && (id.Name == "pid" || id.Name == "task.pid") && k.Bucket == nil {
			return uint32(binary.LittleEndian.Uint64(key[k.Off:]))
		}
	}
	return 0
}

// decodeKeys decodes a map key's group keys.
func (s *Session) decodeKeys(key []byte) []any {
	p := s.plan
	pid := s.keyPid(key)
	var out []any
	for _, k := range p.Keys {
		if k.Bucket == nil {
			out = append(out, s.decode(key[k.Off:k.Off+k.Size], k.Type, k.Expr, pid))
		}
	}
	return out
}

// addCPU adds one CPU's value of a map cell to its group.
func (s *Session) addCPU(g *group, key, v []byte) {
	p := s.plan
	cnt := binary.LittleEndian.Uint64(v)
	if cnt == 0 {
		return
	}
	g.count += cnt
	for i, a := range p.Aggs {
		switch a.Kind {
		case AggSum, AggAvg:
			g.sums[i] += int64(binary.LittleEndian.Uint64(v[a.ValOff:]))
		case AggMin, AggMax:
			g.extreme(a, i, int64(binary.LittleEndian.Uint64(v[a.ValOff:])))
		case AggHist, AggLHist, AggQuantile, AggKMeans:
			k := p.Keys[a.BucketKey]
			b := int64(binary.LittleEndian.Uint64(key[k.Off:]))
			if g.hist[i] == nil {
				g.hist[i] = map[int64]uint64{}
			}
			g.hist[i][b] += cnt
		case AggDistinct:
			if g.bits[i] == nil {
				g.bits[i] = make([]uint64, distinctBits/64)
			}
			for w := range g.bits[i] {
				g.bits[i][w] |= binary.LittleEndian.Uint64(v[a.ValOff+8*w:])
			}
		case AggSample:
			for j := 0; j < sampleSlots && uint64(1)<<j <= cnt; j++ {
				g.samp[i] = append(g.samp[i], int64(binary.LittleEndian.Uint64(v[a.ValOff+8*j:])))
			}
		case AggTopK:
			if g.top[i] == nil {
				g.top[i] = newTopSummary(a.K)
			}
			g.top[i].merge(s.topOfCPU(a, v[a.ValOff:], g.pid))
		}
	}
}

// topOfCPU reads one CPU's topk slots.
func (s *Session) topOfCPU(a *Agg, v []byte, pid uint32) *topSummary {
	t := newTopSummary(a.K)
	size := topSlotSize(a)
	for j := 0; j < a.K; j++ {
		slot := v[j*size : (j+1)*size]
		c := binary.LittleEndian.Uint64(slot)
		if c == 0 {
			continue
		}
		val := s.decode(slot[16:16+max(a.KeySize, 8)], a.ArgType, a.Arg, pid)
		t.entries = append(t.entries, topEntry{val, c, binary.LittleEndian.Uint64(slot[8:])})
		t.n += c - binary.LittleEndian.Uint64(slot[8:])
	}
	return t
}

// decode turns a value the probe wrote into user space's.
func (s *Session) decode(b []byte, t Type, expr Node, pid uint32) any {
	if c, ok := expr.(*Call); ok && c.Name != "str" && c.Name != "kstack" && c.Name != "ustack" && c.Name != "coalesce" {
		switch c.Name {
		case "ntop":
			return ntop(b)
		case "ksym":
			return s.ksym(binary.LittleEndian.Uint64(b))
		case "usym":
			return s.usym(binary.LittleEndian.Uint64(b), pid)
		}
	}
	switch t {
	case TString:
		if i := bytes.IndexByte(b, 0); i >= 0 {
			b = b[:i]
		}
		return string(b)
	case TStack:
		return s.stack(int64(binary.LittleEndian.Uint64(b)), isUserStack(expr), pid)
	case TBytes:
		return bytes.Clone(b[:s.plan.kernelSize(expr)])
	case TPtr:
		return fmt.Sprintf("0x%x", binary.LittleEndian.Uint64(b))
	case TSyscall:
		return sysname.Syscall(int64(binary.LittleEndian.Uint64(b)))
	case TLabel:
		return labelOf(expr, int64(binary.LittleEndian.Uint64(b)))
	}
	return int64(binary.LittleEndian.Uint64(b))
}

// labelOf is the string a CASE of string constants gives for the branch
// the probe took (the ELSE after the WHENs).
func labelOf(expr Node, branch int64) any {
	c, ok := expr.(*Case)
	if !ok {
		return nil
	}
	if branch >= 0 && branch < int64(len(c.Whens)) {
		return c.Whens[branch].Then.(*String).Val
	}
	if e, ok := c.Else.(*String); ok {
		return e.Val
	}
	return nil
}

// ntop writes 4 or 16 bytes (or a 32-bit integer, in 8) as an IP address.
func ntop(b []byte) any {
	switch len(b) {
	case 4:
		return netip.AddrFrom4([4]byte(b)).String()
	case 16:
		return netip.AddrFrom16([16]byte(b)).Unmap().String()
	case 8:
		return netip.AddrFrom4([4]byte(b[:4])).String()
	}
	return fmt.Sprintf("%x", b)
}

func (s *Session) ksym(addr uint64) string {
	if s.kernel == nil {
		s.kernel, _ = symbol.LoadKernel("/proc/kallsyms")
	}
	if s.kernel == nil {
		return fmt.Sprintf("%#x", addr)
	}
	if f := s.kernel.Resolve(addr); f.Func != "" {
		return f.Func
	}
	return fmt.Sprintf("%#x", addr)
}

func (s *Session) usym(addr uint64, pid uint32) string {
	if s.users == nil {
		s.users = symbol.NewResolver("/proc")
	}
	if fs := s.users.Resolve(pid, []uint64{addr}); len(fs) == 1 && fs[0].Func != "" {
		return fs[0].Func
	}
	return fmt.Sprintf("%#x", addr)
}

// stack resolves a stack id to folded frames, outermost first.
func (s *Session) stack(id int64, user bool, pid uint32) string {
	if id == -2 {
		return "" // no stack of this kind (e.g. no kernel stack in user mode)
	}
	if id < 0 || s.coll == nil {
		return "[lost]"
	}
	depth, name := maxStackDepth, "stacks"
	if id >= stackDepthTag {
		// Stacks of a set depth live in a map of their own.
		depth = int(id / stackDepthTag)
		id %= stackDepthTag
		name = fmt.Sprintf("stacks%d", depth)
	}
	addrs := make([]uint64, depth)
	if err := s.coll.Maps[name].Lookup(uint32(id), addrs); err != nil {
		return "[lost]"
	}
	n := 0
	for n < len(addrs) && addrs[n] != 0 {
		n++
	}
	var frames []symbol.Frame
	if user {
		if s.users == nil {
			s.users = symbol.NewResolver("/proc")
		}
		frames = s.users.Resolve(pid, addrs[:n])
	} else {
		if s.kernel == nil {
			s.kernel, _ = symbol.LoadKernel("/proc/kallsyms")
		}
		for _, a := range addrs[:n] {
			if s.kernel == nil {
				frames = append(frames, symbol.Frame{Addr: a})
				continue
			}
			frames = append(frames, s.kernel.Resolve(a))
		}
	}
	parts := make([]string, len(frames))
	for i, f := range frames {
		name := f.Func
		if name == "" {
			name = fmt.Sprintf("%#x", f.Addr)
		}
		parts[len(frames)-1-i] = name
	}
	return strings.Join(parts, ";")
}

// readRing reads the events a streaming probe sends and takes each as
// the plan says: to its row at once (per event), into the evaluator's
// groups, or held for the flush.
func (s *Session) readRing() {
	defer s.wg.Done()
	p := s.plan
	u := p.user
	var rec ringbuf.Record
	for {
		if err := s.ring.ReadInto(&rec); err != nil {
			return
		}
		b := rec.RawSample
		if len(b) < p.KeySize {
			continue
		}
		row := s.decodeEvent(b)
		if s.partials || u.duck != "" {
			s.hold(row)
			continue
		}
		if u.where != nil {
			if ok, _ := truth(u.where(row, nil)); !ok {
				continue
			}
		}
		switch {
		case u.aggregate:
			s.mu.Lock()
			s.aggregateEvent(row)
			s.mu.Unlock()
		case p.PerEvent && s.onRow != nil:
			s.deliver(u.project(row))
		default:
			s.hold(row)
		}
	}
}

func (s *Session) hold(row []any) {
	s.mu.Lock()
	if len(s.held) < maxHeldRows {
		s.held = append(s.held, row)
	} else {
		s.userLost++
	}
	s.mu.Unlock()
}

// deliver hands a per-event row over, until LIMIT rows have gone.
func (s *Session) deliver(out []any) {
	lim := s.plan.user.limit
	s.mu.Lock()
	over := lim >= 0 && s.rows >= lim || s.rowErr != nil
	s.mu.Unlock()
	if over {
		return
	}
	err := s.onRow(out)
	s.mu.Lock()
	if err != nil {
		s.rowErr = err
	} else {
		s.rows++
	}
	stop := err != nil || lim >= 0 && s.rows >= lim
	s.mu.Unlock()
	if stop {
		s.doneOnce.Do(func() { close(s.done) })
	}
}

// RowErr is the error handing a row over gave, if any.
func (s *Session) RowErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rowErr
}

// decodeEvent decodes an event record into the events table's row.
func (s *Session) decodeEvent(b []byte) []any {
	p := s.plan
	row := make([]any, len(p.Emits))
	var pid uint32
	for _, e := range p.Emits {
		if e.Col == "pid" {
			pid = uint32(binary.LittleEndian.Uint64(b[e.Off:]))
		}
	}
	for i, e := range p.Emits {
		row[i] = s.decode(b[e.Off:e.Off+e.Size], e.Type, e.Expr, pid)
	}
	return row
}

// aggregateEvent adds an event to the evaluator's groups.
func (s *Session) aggregateEvent(row []any) {
	u := s.plan.user
	keys := make([]any, len(u.keys))
	for i, k := range u.keys {
		keys[i] = k(row, nil)
	}
	g := s.agg.get(keys)
	if g == nil {
		return
	}
	g.count++
	for i, a := range s.plan.Aggs {
		var v any
		if u.args[i] != nil {
			v = u.args[i](row, nil)
		}
		w := int64(1)
		if u.weights[i] != nil {
			w, _ = u.weights[i](row, nil).(int64)
		}
		g.add(a, i, v, w)
	}
}

func (s *Session) flushStream(ctx context.Context) (*store.Result, bool, error) {
	p := s.plan
	u := p.user
	// Let the reader drain what the ring holds now.
	time.Sleep(swapGrace)
	s.mu.Lock()
	rows := s.held
	s.held = nil
	gs := s.agg
	if gs != nil {
		s.agg = newGroups(len(p.Aggs), p.Opts.MapSize)
		s.agg.full, gs.full = gs.full, 0
	}
	delivered := s.rows
	s.mu.Unlock()
	if s.partials {
		cols, types := partialColumns(p)
		if rows == nil {
			rows = [][]any{}
		}
		return &store.Result{Columns: cols, Types: types, Rows: rows}, len(rows) > 0, nil
	}
	if u.duck != "" {
		table, cols, types := p.inputTable()
		res, err := s.duckRun(ctx, table, cols, types, rows)
		return res, len(rows) > 0, err
	}
	if gs != nil {
		events := len(gs.order) > 0
		if len(gs.order) == 0 && len(u.keys) == 0 {
			gs.get([]any{})
		}
		return s.finishGroups(ctx, gs, events)
	}
	if p.PerEvent && s.onRow != nil {
		// The rows went out as they came.
		return &store.Result{Columns: p.Columns, Types: u.duckTypes(p), Rows: [][]any{}}, delivered > 0, nil
	}
	res, err := s.userPart(ctx, rows)
	return res, len(rows) > 0, err
}

// userPart runs the user-space part over an interval's input rows.
func (s *Session) userPart(ctx context.Context, rows [][]any) (*store.Result, error) {
	p := s.plan
	if p.user.duck != "" || p.UserSQL != p.plannedSQL {
		// DuckDB runs it: the evaluator cannot, or the part was changed
		// after planning.
		table, cols, types := p.inputTable()
		return s.duckRun(ctx, table, cols, types, rows)
	}
	return &store.Result{Columns: p.Columns, Types: p.user.duckTypes(p), Rows: p.user.finish(rows)}, nil
}

func (s *Session) duckRun(ctx context.Context, table string, cols, types []string, rows [][]any) (*store.Result, error) {
	res, err := s.duck.run(ctx, table, cols, types, rows, s.plan.UserSQL, s.plan.Columns)
	if err != nil {
		return nil, fmt.Errorf("user-space part of the query: %w", s.plan.duckError(err))
	}
	return res, nil
}

// project computes an event's output row.
func (u *userPart) project(row []any) []any {
	out := make([]any, len(u.items))
	for i, f := range u.items {
		out[i] = f(row, out)
	}
	return out
}

// finish computes the output over input rows: SELECT, HAVING, DISTINCT,
// ORDER BY, LIMIT.
func (u *userPart) finish(rows [][]any) [][]any {
	type pair struct{ in, out []any }
	var kept []pair
	seen := map[string]bool{}
	for _, r := range rows {
		out := u.project(r)
		if u.having != nil {
			if ok, _ := truth(u.having(r, out)); !ok {
				continue
			}
		}
		if u.distinct {
			id := keyID(out)
			if seen[id] {
				continue
			}
			seen[id] = true
		}
		kept = append(kept, pair{r, out})
	}
	if len(u.order) > 0 {
		sort.SliceStable(kept, func(i, j int) bool {
			for _, o := range u.order {
				a, b := o.fn(kept[i].in, kept[i].out), o.fn(kept[j].in, kept[j].out)
				c := orderCompare(a, b)
				if c == 0 {
					continue
				}
				if o.desc {
					return c > 0
				}
				return c < 0
			}
			return false
		})
	}
	if u.limit >= 0 && int64(len(kept)) > u.limit {
		kept = kept[:u.limit]
	}
	out := make([][]any, len(kept))
	for i, k := range kept {
		out[i] = k.out
	}
	return out
}

// orderCompare orders values as DuckDB's ORDER BY: NULLs last.
func orderCompare(a, b any) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	if ab, ok := a.(bool); ok {
		bb, _ := b.(bool)
		switch {
		case ab == bb:
			return 0
		case !ab:
			return -1
		}
		return 1
	}
	c, _ := compareValues(a, b)
	return c
}

// duckTypes are the output's type names, as DuckDB would report them.
func (u *userPart) duckTypes(p *Plan) []string {
	var out []string
	for i, t := range u.outTypes {
		var a *Agg
		if c, ok := p.Query.Select[i].Expr.(*Call); ok {
			a = p.aggOf(c)
		}
		name := duckTypeOf(t, a)
		switch t {
		case TBuckets:
			name = `STRUCT("lo" BIGINT, "hi" BIGINT, "count" BIGINT)[]`
		case TNull:
			name = `"NULL"`
		case TAny:
			name = "VARCHAR"
		}
		out = append(out, name)
	}
	return out
}
