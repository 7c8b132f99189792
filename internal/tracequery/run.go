package tracequery

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/holter-dev/holter/internal/clock"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	duckdb "github.com/duckdb/duckdb-go/v2"
	"github.com/holter-dev/holter/internal/memlock"
	"golang.org/x/sys/unix"

	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/symbol"
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

// maxStreamRows bounds the events a streaming query holds between flushes;
// the rest are counted as lost.
const maxStreamRows = 1 << 20

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
	bootOff  int64 // add to a monotonic ns to get Unix ns
	started  time.Time
	last     time.Time

	mu       sync.Mutex
	events   [][]any
	userLost uint64

	db       *sql.DB
	funcs    bool // the user-space functions are registered in db
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
func Start(p *Plan) (*Session, error) { return startPhased(p, nil) }

func startPhased(p *Plan, phase func(string)) (*Session, error) {
	if phase == nil {
		phase = func(string) {}
	}
	if err := memlock.Raise(); err != nil {
		return nil, err
	}
	progs, err := p.Programs()
	if err != nil {
		return nil, err
	}
	phase(StartPhases[0])
	s := &Session{plan: p, started: time.Now()}
	s.last = s.started
	s.bootOff = clock.MonoToWall()
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

func (s *Session) attach(pr *Program, prog *ebpf.Program) error {
	pb := pr.Probe
	switch pb.Kind {
	case ProbeTracepoint:
		l, err := link.Tracepoint(pb.Group, pb.Event, prog, nil)
		if err != nil {
			return fmt.Errorf("attach %s: %w", pb, err)
		}
		s.links = append(s.links, l)
	case ProbeUprobe, ProbeUretprobe:
		ex, err := link.OpenExecutable(pb.Path)
		if err != nil {
			return fmt.Errorf("attach %s: %w", pb, err)
		}
		opts := &link.UprobeOptions{Address: pb.Address, RefCtrOffset: pb.RefCtr}
		sym := pb.Symbol
		if sym == "" {
			sym = "usdt"
		}
		var l link.Link
		if pb.Kind == ProbeUprobe {
			l, err = ex.Uprobe(sym, prog, opts)
		} else {
			l, err = ex.Uretprobe(sym, prog, opts)
		}
		if err != nil {
			return fmt.Errorf("attach %s: %w", pb, err)
		}
		s.links = append(s.links, l)
	case ProbePerf:
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{}))}
		cpus := []int{0}
		if pb.Freq > 0 {
			attr.Sample, attr.Bits = pb.Freq, unix.PerfBitFreq
			n, err := onlineCPUs()
			if err != nil {
				return err
			}
			cpus = n
		} else {
			attr.Sample = uint64(pb.Period.Nanoseconds())
		}
		for _, cpu := range cpus {
			fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if err != nil {
				return fmt.Errorf("attach %s: perf_event_open on CPU %d: %w", pb, cpu, err)
			}
			s.perfFDs = append(s.perfFDs, fd)
			l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
			if err != nil {
				return fmt.Errorf("attach %s on CPU %d: %w", pb, cpu, err)
			}
			s.links = append(s.links, l)
		}
	}
	return nil
}

func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("online CPUs: %w", err)
	}
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		var lo, hi int
		if n, _ := fmt.Sscanf(part, "%d-%d", &lo, &hi); n == 2 {
			for c := lo; c <= hi; c++ {
				cpus = append(cpus, c)
			}
		} else if _, err := fmt.Sscanf(part, "%d", &lo); err == nil {
			cpus = append(cpus, lo)
		}
	}
	return cpus, nil
}

// Close detaches and frees everything.
func (s *Session) Close() {
	for _, l := range s.links {
		l.Close()
	}
	s.links = nil
	for _, fd := range s.perfFDs {
		unix.Close(fd)
	}
	s.perfFDs = nil
	if s.ring != nil {
		s.ring.Close()
		s.wg.Wait()
	}
	if s.coll != nil {
		s.coll.Close()
	}
	if s.db != nil {
		s.db.Close()
	}
}

// Interval is one flushed interval's answer.
type Interval struct {
	Start, End time.Time
	Result     *store.Result
	// Counters are the interval's losses by name (map_full, stash_full,
	// unmatched, stack_lost, ring_lost, missed); zero ones are left out.
	Counters map[string]uint64
	Plan     *Plan `json:"-"`
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
		res, err = s.flushAggregate(ctx)
	} else {
		res, err = s.flushStream(ctx)
	}
	if err != nil {
		return nil, err
	}
	iv.Result = res
	var raw [8 * numCounters]byte
	if err := s.coll.Maps["counters"].Lookup(uint32(0), raw[:]); err == nil {
		for i := 0; i < numCounters; i++ {
			v := binary.LittleEndian.Uint64(raw[8*i:])
			if d := v - s.prev[i]; d > 0 && i != CounterUnmatched {
				iv.Counters[CounterNames[i]] = d
			} else if d > 0 {
				iv.Counters[CounterNames[i]] = d
			}
			s.prev[i] = v
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
		iv.Counters["ring_lost"] += s.userLost
		s.userLost = 0
	}
	s.mu.Unlock()
	return iv, nil
}

// swapGrace is how long a probe that read the old map selector may still
// be writing to the old map: probes cannot sleep, so this is generous.
const swapGrace = 5 * time.Millisecond

type group struct {
	keys  []byte
	count uint64
	sums  []int64
	mins  []int64
	has   []bool
	hist  []map[int64]uint64
	bits  [][]uint64
	samp  [][]int64
}

func (s *Session) flushAggregate(ctx context.Context) (*store.Result, error) {
	p := s.plan
	old := s.cur
	s.cur ^= 1
	if err := s.coll.Maps["ctl"].Put(uint32(0), s.cur); err != nil {
		return nil, fmt.Errorf("swap maps: %w", err)
	}
	time.Sleep(swapGrace)
	m := s.inner[old]
	groups := map[string]*group{}
	var order []string
	groupLen := 0
	for _, k := range p.Keys {
		if k.Bucket == nil {
			groupLen = k.Off + k.Size
		}
	}
	var key []byte
	var vals [][]byte
	var seen [][]byte
	it := m.Iterate()
	for it.Next(&key, &vals) {
		seen = append(seen, bytes.Clone(key))
		gk := string(key[:groupLen])
		g := groups[gk]
		if g == nil {
			g = newGroup(len(p.Aggs))
			g.keys = bytes.Clone(key[:groupLen])
			groups[gk] = g
			order = append(order, gk)
		}
		for _, v := range vals {
			cnt := binary.LittleEndian.Uint64(v)
			if cnt == 0 {
				continue
			}
			g.count += cnt
			for i, a := range p.Aggs {
				switch a.Kind {
				case AggSum, AggAvg:
					g.sums[i] += int64(binary.LittleEndian.Uint64(v[a.ValOff:]))
				case AggMin, AggMax:
					x := int64(binary.LittleEndian.Uint64(v[a.ValOff:]))
					if !g.has[i] || (a.Kind == AggMin && x < g.mins[i]) || (a.Kind == AggMax && x > g.mins[i]) {
						g.mins[i], g.has[i] = x, true
					}
				case AggHist, AggLHist, AggQuantile:
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
				}
			}
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read aggregation map: %w", err)
	}
	for _, k := range seen {
		m.Delete(k)
	}
	// Rows of the partials table: group keys, then aggregates.
	var rows [][]any
	for _, gk := range order {
		g := groups[gk]
		var row []any
		var pid uint32
		for _, k := range p.Keys {
			if id, ok := k.Expr.(*Ident); ok && id.Name == "pid" && k.Bucket == nil {
				pid = uint32(binary.LittleEndian.Uint64(g.keys[k.Off:]))
			}
		}
		for _, k := range p.Keys {
			if k.Bucket != nil {
				continue
			}
			row = append(row, s.decode(g.keys[k.Off:k.Off+k.Size], k.Type, k.Expr, pid))
		}
		for i, a := range p.Aggs {
			row = append(row, s.aggValue(a, g, i, pid))
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 && groupLen == 0 {
		// No GROUP BY: one row, as SQL gives for an empty input.
		row := []any{}
		for _, a := range p.Aggs {
			row = append(row, s.aggValue(a, newGroup(len(p.Aggs)), 0, 0))
		}
		rows = append(rows, row)
	}
	var cols []string
	var types []string
	for _, k := range p.Keys {
		if k.Bucket == nil {
			cols = append(cols, k.Col)
			types = append(types, duckType(k.Type))
		}
	}
	for _, a := range p.Aggs {
		cols = append(cols, a.Col)
		types = append(types, s.aggType(a))
	}
	return s.userPart(ctx, "partials", cols, types, rows)
}

// project is the user-space part of a plan whose UserSQL only picks and
// renames columns of the partials (Plan.Direct): the answer DuckDB would
// give, with the type names it would report, without starting DuckDB.
func (p *Plan) project(types []string, rows [][]any) *store.Result {
	res := &store.Result{Columns: p.Columns}
	for _, i := range p.Direct {
		res.Types = append(res.Types, duckTypeName(types[i]))
	}
	for _, r := range rows {
		out := make([]any, len(p.Direct))
		for j, i := range p.Direct {
			out[j] = r[i]
		}
		res.Rows = append(res.Rows, out)
	}
	return res
}

// duckTypeName is how DuckDB names a column type declared as decl.
func duckTypeName(decl string) string {
	if decl == bucketType {
		return `STRUCT("lo" BIGINT, "hi" BIGINT, "count" BIGINT)[]`
	}
	return decl
}

func newGroup(naggs int) *group {
	return &group{sums: make([]int64, naggs), mins: make([]int64, naggs), has: make([]bool, naggs),
		hist: make([]map[int64]uint64, naggs), bits: make([][]uint64, naggs), samp: make([][]int64, naggs)}
}

// aggValue is an aggregate's value, or in partials mode its mergeable
// state where the value does not merge (merge.go).
func (s *Session) aggValue(a *Agg, g *group, i int, pid uint32) any {
	if s.partials && hasState(a) {
		return stateOf(a, g, i)
	}
	return s.finish(a, g, i, pid)
}

func (s *Session) aggType(a *Agg) string {
	if s.partials && hasState(a) {
		return stateType
	}
	return aggDuckType(a)
}

func duckType(t Type) string {
	if t == TInt {
		return "BIGINT"
	}
	return "VARCHAR"
}

const bucketType = "STRUCT(lo BIGINT, hi BIGINT, count BIGINT)[]"

func aggDuckType(a *Agg) string {
	switch a.Kind {
	case AggAvg, AggQuantile:
		return "DOUBLE"
	case AggHist, AggLHist:
		return bucketType
	case AggSample:
		if a.ArgType == TStack {
			return "VARCHAR[]"
		}
		return "BIGINT[]"
	}
	return "BIGINT"
}

func (s *Session) decode(b []byte, t Type, expr Node, pid uint32) any {
	switch t {
	case TString:
		if i := bytes.IndexByte(b, 0); i >= 0 {
			b = b[:i]
		}
		return string(b)
	case TStack:
		id := int64(binary.LittleEndian.Uint64(b))
		user := false
		if n, ok := expr.(*Ident); ok && n.Name == "ustack" {
			user = true
		}
		return s.stack(id, user, pid)
	}
	v := int64(binary.LittleEndian.Uint64(b))
	if id, ok := expr.(*Ident); ok && id.Name == "time" {
		v += s.bootOff
	}
	return v
}

// stack resolves a stack id to folded frames, outermost first.
func (s *Session) stack(id int64, user bool, pid uint32) string {
	if id == -2 {
		return "" // no stack of this kind (e.g. no kernel stack in user mode)
	}
	if id < 0 {
		return "[lost]"
	}
	var addrs [maxStackDepth]uint64
	if err := s.coll.Maps["stacks"].Lookup(uint32(id), &addrs); err != nil {
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

func (s *Session) finish(a *Agg, g *group, i int, pid uint32) any {
	switch a.Kind {
	case AggCount:
		return int64(g.count)
	case AggSum:
		return g.sums[i]
	case AggMin, AggMax:
		if !g.has[i] {
			return nil
		}
		return g.mins[i]
	case AggAvg:
		if g.count == 0 {
			return nil
		}
		return float64(g.sums[i]) / float64(g.count)
	case AggHist, AggLHist:
		var bs []int64
		for b := range g.hist[i] {
			bs = append(bs, b)
		}
		sort.Slice(bs, func(x, y int) bool { return bs[x] < bs[y] })
		out := []any{}
		for _, b := range bs {
			lo, hi := bucketBounds(a, b)
			out = append(out, map[string]any{"lo": lo, "hi": hi, "count": int64(g.hist[i][b])})
		}
		return out
	case AggQuantile:
		return quantile(g.hist[i], a.Q)
	case AggDistinct:
		zeros := 0
		for _, w := range g.bits[i] {
			zeros += 64 - popcount(w)
		}
		if g.bits[i] == nil {
			return int64(0)
		}
		if zeros == 0 {
			zeros = 1 // saturated: the estimate is a lower bound
		}
		return int64(math.Round(-distinctBits * math.Log(float64(zeros)/distinctBits)))
	case AggSample:
		out := []any{}
		for _, v := range g.samp[i] {
			if a.ArgType == TStack {
				user := false
				if id, ok := a.Arg.(*Ident); ok && id.Name == "ustack" {
					user = true
				}
				out = append(out, s.stack(v, user, pid))
			} else {
				out = append(out, v)
			}
		}
		return out
	}
	return nil
}

func popcount(x uint64) int {
	n := 0
	for x != 0 {
		x &= x - 1
		n++
	}
	return n
}

// bucketBounds gives the value range [lo, hi) of a bucket.
func bucketBounds(a *Agg, b int64) (lo, hi int64) {
	switch a.Kind {
	case AggHist:
		if b == 0 {
			return math.MinInt64, 1
		}
		lo = int64(1) << (b - 1)
		if b >= 63 {
			return lo, math.MaxInt64
		}
		return lo, int64(1) << b
	case AggLHist:
		if b == 0 {
			return math.MinInt64, a.Min
		}
		if b > a.Buckets {
			return a.Min + a.Buckets*a.Step, math.MaxInt64
		}
		lo = a.Min + (b-1)*a.Step
		return lo, lo + a.Step
	}
	// log-linear
	if b < 4 {
		return b, b + 1
	}
	p, m := b/4+1, b%4
	lo = (4 + m) << (p - 2)
	return lo, (5 + m) << (p - 2)
}

// quantile interpolates linearly inside the log-linear bucket holding q.
func quantile(h map[int64]uint64, q float64) any {
	var total uint64
	var bs []int64
	for b, c := range h {
		total += c
		bs = append(bs, b)
	}
	if total == 0 {
		return nil
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i] < bs[j] })
	rank := q * float64(total)
	var cum float64
	qa := &Agg{Kind: AggQuantile}
	for _, b := range bs {
		c := float64(h[b])
		if cum+c >= rank {
			lo, hi := bucketBounds(qa, b)
			if b < 4 {
				return float64(lo)
			}
			return float64(lo) + (rank-cum)/c*float64(hi-lo)
		}
		cum += c
	}
	lo, _ := bucketBounds(qa, bs[len(bs)-1])
	return float64(lo)
}

func (s *Session) readRing() {
	defer s.wg.Done()
	p := s.plan
	for {
		rec, err := s.ring.Read()
		if err != nil {
			return
		}
		b := rec.RawSample
		if len(b) < p.KeySize {
			continue
		}
		row := make([]any, len(p.Emits))
		var pid uint32
		for _, e := range p.Emits {
			if e.Col == "pid" {
				pid = uint32(binary.LittleEndian.Uint64(b[e.Off:]))
			}
		}
		for i, e := range p.Emits {
			v := s.decode(b[e.Off:e.Off+e.Size], e.Type, e.Expr, pid)
			if e.Col == "time" {
				v = time.Unix(0, v.(int64)).UTC()
			}
			row[i] = v
		}
		s.mu.Lock()
		if len(s.events) < maxStreamRows {
			s.events = append(s.events, row)
		} else {
			s.userLost++
		}
		s.mu.Unlock()
	}
}

func (s *Session) flushStream(ctx context.Context) (*store.Result, error) {
	p := s.plan
	// Let the reader drain what the ring holds now.
	time.Sleep(swapGrace)
	s.mu.Lock()
	rows := s.events
	s.events = nil
	s.mu.Unlock()
	var cols, types []string
	for _, e := range p.Emits {
		cols = append(cols, e.Col)
		t := duckType(e.Type)
		if e.Col == "time" {
			t = "TIMESTAMP_NS"
		}
		types = append(types, t)
	}
	return s.userPart(ctx, "events", cols, types, rows)
}

// userPart runs the plan's user-space SQL over rows in an in-memory DuckDB.
func (s *Session) userPart(ctx context.Context, table string, cols, types []string, rows [][]any) (*store.Result, error) {
	if s.partials {
		if rows == nil {
			rows = [][]any{}
		}
		return &store.Result{Columns: cols, Types: types, Rows: rows}, nil
	}
	if table == "partials" && s.plan.Direct != nil && s.plan.UserSQL == s.plan.directSQL {
		return s.plan.project(types, rows), nil
	}
	if s.db == nil {
		c, err := duckdb.NewConnector("", func(e driver.ExecerContext) error {
			_, err := e.ExecContext(ctx, "SET threads=1; SET enable_external_access=false", nil)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("user-space engine: %w", err)
		}
		s.db = sql.OpenDB(c)
		s.db.SetMaxOpenConns(1)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if !s.funcs {
		if err := registerUserFuncs(conn); err != nil {
			return nil, fmt.Errorf("user-space engine: %w", err)
		}
		s.funcs = true
	}
	var defs []string
	for i := range cols {
		defs = append(defs, quoteIdent(cols[i])+" "+types[i])
	}
	if len(defs) == 0 {
		defs = []string{"_ BIGINT"}
	}
	if _, err := conn.ExecContext(ctx, "CREATE OR REPLACE TABLE "+table+" ("+strings.Join(defs, ", ")+")"); err != nil {
		return nil, fmt.Errorf("user-space table: %w", err)
	}
	if len(rows) > 0 {
		err = conn.Raw(func(dc any) error {
			a, err := duckdb.NewAppenderFromConn(dc.(driver.Conn), "", table)
			if err != nil {
				return err
			}
			for _, r := range rows {
				vals := make([]driver.Value, len(r))
				for i, v := range r {
					vals[i] = v
				}
				if err := a.AppendRow(vals...); err != nil {
					a.Close()
					return err
				}
			}
			return a.Close()
		})
		if err != nil {
			return nil, fmt.Errorf("user-space table: %w", err)
		}
	}
	rs, err := conn.QueryContext(ctx, s.plan.UserSQL)
	if err != nil {
		return nil, fmt.Errorf("user-space part of the query (%s): %w", s.plan.UserSQL, err)
	}
	defer rs.Close()
	res := &store.Result{Columns: s.plan.Columns}
	cts, _ := rs.ColumnTypes()
	for _, ct := range cts {
		res.Types = append(res.Types, ct.DatabaseTypeName())
	}
	for rs.Next() {
		vals := make([]any, len(cts))
		ptrs := make([]any, len(cts))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			return nil, err
		}
		for i, v := range vals {
			if u, ok := v.(uint64); ok && u <= math.MaxInt64 {
				vals[i] = int64(u)
			}
		}
		res.Rows = append(res.Rows, vals)
	}
	return res, rs.Err()
}
