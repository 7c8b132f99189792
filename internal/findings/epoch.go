package findings

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/holter-dev/holter/internal/store"
)

// EpochWindow is the window Load reads for one committed epoch (From its
// start, To just after it), made from the epoch as the recorder committed
// it instead of read back from the store: the recorder's online analysis
// judges each epoch as it commits it, and so asks the store for none of
// it. It is Load's window in every figure (TestEpochWindowIsLoads), its
// groups in a fixed order. Their stacks are the ones the cache holds;
// FetchStacks reads the others.
func EpochWindow(e *store.Epoch, cpus int, stacks *Stacks) (*Window, error) {
	if len(e.Vitals) == 0 {
		return nil, fmt.Errorf("%w on host %s in epoch %d", ErrNoData, e.Host, e.Epoch)
	}
	if stacks == nil {
		stacks = NewStacks()
	}
	w := &Window{Host: e.Host, Timescale: Epoch, Intervals: []Interval{{e.StartNs, e.EndNs}}, Vitals: map[string]*VitalSeries{},
		Unavailable: map[string]string{}, CPUs: max(cpus, 1), Stacks: stacks}
	t := map[vitalAt]float64{}
	for _, v := range e.Vitals {
		w.Vitals[v.Name] = &VitalSeries{Events: []float64{float64(v.Events)}, Weight: []float64{float64(v.WeightSum)},
			Secondary: []float64{float64(v.Secondary)}}
		k := vitalAt{0, v.Name}
		t[k] = max(t[k], float64(v.Threshold))
	}
	for _, v := range Vitals {
		if w.Vitals[v] == nil {
			w.Unavailable[v] = "not recorded in this range"
		}
	}
	w.KernelCPU, w.FreeKB, w.KernelFirstKB, w.KernelLastKB = nans(1), nans(1), nans(1), nans(1)
	w.Groups = epochGroups(e.Samples)
	w.Groups = slices.DeleteFunc(w.Groups, func(g Group) bool { return w.Vitals[g.Vital] == nil })
	w.nameByLatest()
	w.scaleGroups(t)
	w.sumProcs()
	w.epochSingles(e)
	return w, nil
}

// FetchStacks reads the stacks the window's groups name that its cache
// lacks.
func (w *Window) FetchStacks(ctx context.Context, q Querier) error {
	ids := make([]uint64, 0, 2*len(w.Groups))
	for _, g := range w.Groups {
		ids = append(ids, g.KStack, g.UStack)
	}
	return w.Stacks.fetch(ctx, q, ids)
}

// represents is what each sample stands for (loadGroups' dw and de): its
// label's estimated count since the label's previous sample in the epoch,
// the samples of a label taken in the order of their estimates.
func represents(samples []store.Sample) (dw, de []float64) {
	order := make([]int, len(samples))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := &samples[a], &samples[b]
		return cmp.Or(cmp.Compare(x.Vital, y.Vital), cmp.Compare(x.LabelHash, y.LabelHash),
			cmp.Compare(x.EstCount, y.EstCount), cmp.Compare(x.TsNs, y.TsNs))
	})
	dw, de = make([]float64, len(samples)), make([]float64, len(samples))
	for n, i := range order {
		s, prev := &samples[i], 0.0
		if n > 0 {
			if p := &samples[order[n-1]]; p.Vital == s.Vital && p.LabelHash == s.LabelHash {
				prev = float64(p.EstCount)
			}
		}
		dw[i] = math.Max(float64(s.EstCount)-prev, 0)
		de[i] = dw[i] / math.Max(float64(s.Weight), 1)
	}
	return dw, de
}

// groupKey is what loadGroups groups samples by, but for the interval:
// an epoch window has one.
type groupKey struct {
	vital         string
	pid           uint32
	k, u          uint64
	ik, pre, fail bool
	nr            int64
	tp            uint32
}

// partial is a group being summed: loadGroups' g1 row, then its final one.
type partial struct {
	Group
	tids map[uint32]bool
	// commNs is the time of the sample the name is from; mret the least
	// return value of the failed calls (0: none).
	commNs int64
	mret   int64
}

// epochGroups is loadGroups over one epoch's samples: the same groups, by
// the same rules (its comment says which stacks and system call numbers
// are kept), their weights the represented ones.
func epochGroups(samples []store.Sample) []Group {
	dw, de := represents(samples)
	type procOf struct {
		vital string
		pid   uint32
	}
	weights, totals := map[procOf]float64{}, map[string]float64{}
	for i := range samples {
		s := &samples[i]
		weights[procOf{s.Vital, s.Pid}] += dw[i]
		totals[s.Vital] += dw[i]
	}
	// The ten heaviest processes of each vital, and those with 1% of it.
	procs := make([]procOf, 0, len(weights))
	for p := range weights {
		procs = append(procs, p)
	}
	slices.SortFunc(procs, func(a, b procOf) int {
		return cmp.Or(cmp.Compare(a.vital, b.vital), cmp.Compare(weights[b], weights[a]), cmp.Compare(a.pid, b.pid))
	})
	heavy, rank := map[procOf]bool{}, 0
	for n, p := range procs {
		if rank++; n > 0 && procs[n-1].vital != p.vital {
			rank = 1
		}
		if rank <= 10 || weights[p] >= 0.01*totals[p.vital] {
			heavy[p] = true
		}
	}
	first := map[groupKey]*partial{}
	for i := range samples {
		s := &samples[i]
		isHeavy := heavy[procOf{s.Vital, s.Pid}]
		key := groupKey{vital: s.Vital, pid: s.Pid, nr: -1}
		if isHeavy || s.Vital == "blck" || s.Vital == "kmem" {
			key.k = s.KStackID
		}
		if isHeavy {
			key.u = s.UStackID
		}
		key.ik, key.pre = sampleFlag(s, "in_kernel"), sampleFlag(s, "preempted")
		ret, hasRet := sampleInt(s, "ret")
		key.fail = s.Vital == "syscall" && hasRet && ret >= -4095 && ret <= -1
		if nr, ok := sampleInt(s, "syscall_nr"); key.fail || (ok && nr == 202) {
			key.nr = nr // a failed call without a number: NULL, read as 0
		}
		tp, _ := sampleInt(s, "target_pid")
		key.tp = uint32(tp)
		g := first[key]
		if g == nil {
			g = &partial{Group: Group{Vital: s.Vital, Pid: s.Pid, KStack: key.k, UStack: key.u, InKernel: key.ik, Preempted: key.pre,
				Failed: key.fail, Syscall: int(key.nr), Target: key.tp, FirstNs: s.TsNs, LastNs: s.TsNs}, tids: map[uint32]bool{}, commNs: math.MinInt64}
			first[key] = g
		}
		g.Weight += dw[i]
		g.Events += de[i]
		g.Samples++
		g.tids[s.Tid] = true
		g.FirstNs, g.LastNs = min(g.FirstNs, s.TsNs), max(g.LastNs, s.TsNs)
		if s.TsNs > g.commNs {
			g.Comm, g.Exe, g.commNs = s.Comm, s.Exe, s.TsNs
		}
		if key.fail {
			g.mret = min(g.mret, ret)
		}
	}
	// A process's twenty heaviest user stacks are kept; its other groups
	// are joined without one.
	byProc := map[procOf][]*partial{}
	for _, g := range first {
		byProc[procOf{g.Vital, g.Pid}] = append(byProc[procOf{g.Vital, g.Pid}], g)
	}
	final := map[groupKey]*partial{}
	for _, gs := range byProc {
		slices.SortFunc(gs, func(a, b *partial) int {
			return cmp.Or(cmp.Compare(b.Weight, a.Weight), cmp.Compare(a.UStack, b.UStack))
		})
		for rank, g := range gs {
			key := groupKey{g.Vital, g.Pid, g.KStack, g.UStack, g.InKernel, g.Preempted, g.Failed, int64(g.Syscall), g.Target}
			if rank >= 20 {
				key.u = 0
			}
			f := final[key]
			if f == nil {
				f = &partial{Group: g.Group, commNs: g.LastNs, mret: g.mret}
				f.UStack, f.Threads = key.u, len(g.tids)
				final[key] = f
				continue
			}
			f.Weight += g.Weight
			f.Events += g.Events
			f.Samples += g.Samples
			f.Threads = max(f.Threads, len(g.tids))
			f.FirstNs, f.LastNs = min(f.FirstNs, g.FirstNs), max(f.LastNs, g.LastNs)
			f.mret = min(f.mret, g.mret)
			if g.LastNs > f.commNs {
				f.Comm, f.Exe, f.commNs = g.Comm, g.Exe, g.LastNs
			}
		}
	}
	out := make([]Group, 0, len(final))
	for _, f := range final {
		f.Errno = -f.mret
		out = append(out, f.Group)
	}
	slices.SortFunc(out, compareGroups)
	return out
}

// compareGroups orders groups by interval, vital, process and the rest of
// what tells them apart.
func compareGroups(a, b Group) int {
	return cmp.Or(cmp.Compare(a.Interval, b.Interval), cmp.Compare(a.Vital, b.Vital), cmp.Compare(a.Pid, b.Pid),
		cmp.Compare(a.KStack, b.KStack), cmp.Compare(a.UStack, b.UStack), compareBool(a.InKernel, b.InKernel),
		compareBool(a.Preempted, b.Preempted), compareBool(a.Failed, b.Failed), cmp.Compare(a.Syscall, b.Syscall),
		cmp.Compare(a.Target, b.Target))
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// epochSingles fills in what loadSamples reads of single samples: the
// first exit of each process, the fatal signals and failed block requests
// (the first 1000 of each), and the least free memory and first and last
// kernel memory in use.
func (w *Window) epochSingles(e *store.Epoch) {
	exits := map[uint32]int{}
	firstKB, lastKB := int64(math.MaxInt64), int64(math.MinInt64)
	for i := range e.Samples {
		s := &e.Samples[i]
		ref := SampleRef{Epoch: e.Epoch, TsNs: s.TsNs, Vital: s.Vital, Pid: s.Pid}
		switch s.Vital {
		case "syscall":
			if nr, _ := sampleInt(s, "syscall_nr"); nr == 60 || nr == 231 {
				if k, ok := exits[s.Pid]; !ok {
					exits[s.Pid] = len(w.Exits)
					w.Exits = append(w.Exits, ref)
				} else {
					w.Exits[k].TsNs = min(w.Exits[k].TsNs, s.TsNs)
				}
			}
		case "signal":
			sig, _ := sampleInt(s, "signal")
			if handler, _ := sampleInt(s, "handler"); handler == 0 && slices.Contains(fatalSignals, sig) {
				tp, _ := sampleInt(s, "target_pid")
				w.Signals = append(w.Signals, SignalEvent{SampleRef: ref, Comm: s.Comm, Signal: sig, TargetPid: uint32(tp)})
			}
		case "blio":
			if code, _ := sampleInt(s, "error"); code != 0 {
				sector, _ := sampleInt(s, "sector")
				req, _ := sampleInt(s, "bytes_requested")
				done, _ := sampleInt(s, "bytes_completed")
				w.Unsatisfied = append(w.Unsatisfied, IORequest{SampleRef: ref, Comm: s.Comm, Dev: sampleText(s, "dev"), Op: sampleText(s, "op"),
					Sector: uint64(sector), Requested: uint64(req), Completed: uint64(done), Error: code})
			}
		case "kmem", "umem":
			if free, ok := sampleInt(s, "free_kb"); ok {
				w.FreeKB[0] = math.Min(nanInf(w.FreeKB[0]), float64(uint64(free)))
			}
			if kb, ok := sampleInt(s, "kernel_kb"); ok {
				if s.TsNs < firstKB {
					firstKB, w.KernelFirstKB[0] = s.TsNs, float64(uint64(kb))
				}
				if s.TsNs > lastKB {
					lastKB, w.KernelLastKB[0] = s.TsNs, float64(uint64(kb))
				}
			}
		}
	}
	w.sortSingles()
	w.Signals = w.Signals[:min(len(w.Signals), maxSingles)]
	w.Unsatisfied = w.Unsatisfied[:min(len(w.Unsatisfied), maxSingles)]
}

// sortSingles puts the exits, signals and block requests in the order
// they happened.
func (w *Window) sortSingles() {
	byTime := func(a, b SampleRef) int { return cmp.Or(cmp.Compare(a.TsNs, b.TsNs), cmp.Compare(a.Pid, b.Pid)) }
	slices.SortFunc(w.Exits, byTime)
	slices.SortStableFunc(w.Signals, func(a, b SignalEvent) int { return byTime(a.SampleRef, b.SampleRef) })
	slices.SortStableFunc(w.Unsatisfied, func(a, b IORequest) int { return byTime(a.SampleRef, b.SampleRef) })
}

// maxSingles bounds the fatal signals and failed block requests a window
// reads per stretch of samples.
const maxSingles = 1000

// nanInf is x, or +Inf for NaN: the start of a minimum.
func nanInf(x float64) float64 {
	if math.IsNaN(x) {
		return math.Inf(1)
	}
	return x
}

// sampleInt is a sample's numeric field; false when it has none (NULL).
func sampleInt(s *store.Sample, name string) (int64, bool) {
	v, ok := s.Fields[name]
	if !ok || v == nil {
		return 0, false
	}
	return toInt(v), true
}

// sampleFlag is a sample's boolean field, false when it has none.
func sampleFlag(s *store.Sample, name string) bool {
	b, _ := s.Fields[name].(bool)
	return b
}

// sampleText is a sample's text field, "" when it has none.
func sampleText(s *store.Sample, name string) string {
	x, _ := s.Fields[name].(string)
	return x
}
