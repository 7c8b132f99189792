package sketch

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// SimConfig describes a coverage simulation: many independent epochs, each a
// stream of Events events of weight 1, in random order, drawn from Labels
// background labels with Zipf(ZipfS) frequencies, plus one rare label with
// exactly RareEvents events at uniformly random positions. Every epoch hashes
// with a fresh random seed, as the kernel does. Zero fields take the defaults
// shown.
type SimConfig struct {
	Epochs     int     // number of epochs (default 1000)
	Events     int     // M, all events of an epoch, rare ones included (default 100000)
	Labels     int     // D, background labels (default 200)
	ZipfS      float64 // exponent s of the background distribution, P(k) ∝ k^-s, k = 1..D (default 1.1)
	RareEvents int     // events of the rare label (default Events/1000, at least 1)
	Shift      uint    // t = 1<<Shift (default DefaultShift)
	Rows       int     // rows of the counter array, 1..4 (default Rows)
	Width      int     // counters per row, a power of two <= 65536 (default Width)
	Seed       uint64  // the simulation is a deterministic function of its config
	Workers    int     // goroutines (default GOMAXPROCS); does not change the result
}

// SimResult is the outcome of Simulate.
type SimResult struct {
	Config          SimConfig // with the defaults filled in
	Epochs          int
	Misses          int     // epochs in which the rare label was never sampled
	MissRate        float64 // Misses / Epochs
	MissUpper99     float64 // one-sided 99% (Clopper–Pearson) upper confidence bound of the miss probability
	MeanSamples     float64 // samples per epoch, all labels
	MeanRareSamples float64 // samples per epoch of the rare label
}

func (c SimConfig) withDefaults() (SimConfig, error) {
	if c.Epochs == 0 {
		c.Epochs = 1000
	}
	if c.Events == 0 {
		c.Events = 100000
	}
	if c.Labels == 0 {
		c.Labels = 200
	}
	if c.ZipfS == 0 {
		c.ZipfS = 1.1
	}
	if c.RareEvents == 0 {
		c.RareEvents = max(1, c.Events/1000)
	}
	if c.Shift == 0 {
		c.Shift = DefaultShift
	}
	if c.Rows == 0 {
		c.Rows = Rows
	}
	if c.Width == 0 {
		c.Width = Width
	}
	if c.Workers <= 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	switch {
	case c.Epochs < 0:
		return c, errors.New("sketch: negative Epochs")
	case c.Events < 0 || c.Labels < 0 || c.RareEvents < 0:
		return c, errors.New("sketch: negative Events, Labels or RareEvents")
	case c.RareEvents > c.Events:
		return c, fmt.Errorf("sketch: %d rare events do not fit in %d events", c.RareEvents, c.Events)
	case c.Rows < 1 || c.Rows > 4:
		return c, fmt.Errorf("sketch: %d rows, want 1..4", c.Rows)
	case c.Width < 1 || c.Width > 1<<16 || c.Width&(c.Width-1) != 0:
		return c, fmt.Errorf("sketch: width %d, want a power of two <= 65536", c.Width)
	case !(c.ZipfS > 0) || math.IsInf(c.ZipfS, 0):
		return c, fmt.Errorf("sketch: Zipf exponent %v, want > 0", c.ZipfS)
	}
	return c, nil
}

// counterArray is an HCA of any geometry. *HCA implements it at the kernel's
// geometry; flatHCA at any other.
type counterArray interface {
	Reset(seed uint64)
	addHash(hsh uint64, weight uint32, shift uint) (sampled bool, est uint32)
}

// flatHCA is an HCA with rows and width chosen at run time, for simulating
// other geometries. At Rows x Width it behaves exactly like HCA (tested).
type flatHCA struct {
	c     []uint32 // row r at c[r*width : (r+1)*width]
	seen  []uint64 // the seen array, as HCA's
	rows  int
	width int
	mask  uint64
	seed  uint64
}

func newFlatHCA(rows, width int) *flatHCA {
	return &flatHCA{c: make([]uint32, rows*width), seen: make([]uint64, SeenWords), rows: rows, width: width, mask: uint64(width - 1)}
}

func (f *flatHCA) Reset(seed uint64) {
	clear(f.c)
	clear(f.seen)
	f.seed = seed
}

func (f *flatHCA) addHash(hsh uint64, weight uint32, shift uint) (sampled bool, est uint32) {
	old := uint32(math.MaxUint32)
	for r := range f.rows {
		c := &f.c[r*f.width+int((hsh>>(16*r))&f.mask)]
		old = min(old, *c)
		*c += weight
	}
	first := seenFirst(f.seen, hsh)
	if sameLevel(old, weight) {
		return first, old + weight
	}
	sampled, est = decide(old, weight, shift)
	return sampled || first, est
}

// aliasTable samples from a discrete distribution in constant time (Walker's
// alias method) with one 64-bit random number per draw.
type aliasTable struct {
	prob  []uint32 // keep column i with probability prob[i] / 2^32
	alias []int32  // else take alias[i]
}

func newAliasTable(w []float64) aliasTable {
	n := len(w)
	var sum float64
	for _, x := range w {
		sum += x
	}
	scaled := make([]float64, n)
	var small, large []int
	for i, x := range w {
		scaled[i] = x * float64(n) / sum
		if scaled[i] < 1 {
			small = append(small, i)
		} else {
			large = append(large, i)
		}
	}
	t := aliasTable{prob: make([]uint32, n), alias: make([]int32, n)}
	for i := range t.alias {
		t.alias[i] = int32(i)
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		t.prob[s] = uint32(min(math.Round(scaled[s]*(1<<32)), math.MaxUint32))
		t.alias[s] = int32(l)
		scaled[l] -= 1 - scaled[s]
		if scaled[l] < 1 {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	// Whatever is left has probability 1 up to rounding: never take the alias.
	for _, i := range append(small, large...) {
		t.prob[i] = math.MaxUint32
		t.alias[i] = int32(i)
	}
	return t
}

// aliasColumn is column i of an aliasTable with the values to draw in place
// of the indices: keep with probability prob / 2^32, else alias.
type aliasColumn struct {
	prob        uint32
	keep, alias uint64
}

// columns returns the table with the value v[i] for index i, in cols.
func (t *aliasTable) columns(cols []aliasColumn, v []uint64) []aliasColumn {
	cols = cols[:0]
	for i, p := range t.prob {
		cols = append(cols, aliasColumn{prob: p, keep: v[i], alias: v[t.alias[i]]})
	}
	return cols
}

// drawValue draws a value from the columns of an alias table with the random
// number u: the high 32 bits choose the column, the low 32 bits the side.
func drawValue(cols []aliasColumn, u uint64) uint64 {
	c := &cols[(u>>32)*uint64(len(cols))>>32]
	keep, v := c.keep, c.alias
	if uint32(u) < c.prob {
		v = keep
	}
	return v
}

// zipfWeights returns k^-s for k = 1..n.
func zipfWeights(n int, s float64) []float64 {
	w := make([]float64, n)
	for k := range w {
		w[k] = math.Pow(float64(k+1), -s)
	}
	return w
}

// Labels of the simulation: they look like the kernel's (an address, a zero
// word, an executable-and-user word) but any distinct values would do.
func simLabel(k int) Label {
	return Label{0xffffffff81000000 + uint64(k)<<8, 0, 1000<<40 ^ 4242}
}

var simRareLabel = Label{0x00007f0000001200, 0, 1000<<40 ^ 4343}

type epochResult struct {
	samples     int
	rareSamples int
}

// simulator holds what the epochs of one simulation share.
type simulator struct {
	cfg    SimConfig
	bg     aliasTable
	labels []Label
}

// simWorker runs epochs on its own counter array and generator.
type simWorker struct {
	*simulator
	a      counterArray
	hashes []uint64
	cols   []aliasColumn // the background distribution over label hashes
	pos    []int         // positions of the rare events in the epoch
	taken  []bool        // scratch for drawing pos
	rng    *rand.PCG
}

func (s *simulator) newWorker() *simWorker {
	w := &simWorker{simulator: s, hashes: make([]uint64, len(s.labels)), rng: rand.NewPCG(0, 0)}
	if s.cfg.Rows == Rows && s.cfg.Width == Width {
		w.a = new(HCA)
	} else {
		w.a = newFlatHCA(s.cfg.Rows, s.cfg.Width)
	}
	return w
}

// epoch runs epoch number e of the simulation.
func (w *simWorker) epoch(e int) epochResult {
	cfg := &w.cfg
	w.rng.Seed(cfg.Seed, uint64(e))
	rng := rand.New(w.rng)
	seed := rng.Uint64()
	w.a.Reset(seed)
	for k, l := range w.labels {
		w.hashes[k] = Hash(seed, l)
	}
	w.cols = w.bg.columns(w.cols, w.hashes)
	rare := Hash(seed, simRareLabel)

	// Distinct positions of the rare events (Floyd's sampling), in order.
	M, R := cfg.Events, cfg.RareEvents
	if len(w.taken) != M {
		w.taken = make([]bool, M)
	}
	w.pos = w.pos[:0]
	for j := M - R; j < M; j++ {
		p := rng.IntN(j + 1)
		if w.taken[p] {
			p = j
		}
		w.taken[p] = true
		w.pos = append(w.pos, p)
	}
	for _, p := range w.pos {
		w.taken[p] = false
	}
	slices.Sort(w.pos)
	w.pos = append(w.pos, M) // sentinel

	return runEpoch(w, rare, w.a.addHash)
}

// Simulate runs the coverage simulation described by cfg. Epochs are spread
// over cfg.Workers goroutines; each epoch draws its randomness from its own
// generator seeded with (cfg.Seed, epoch number), so the result does not
// depend on scheduling.
func Simulate(cfg SimConfig) (SimResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return SimResult{}, err
	}
	s := &simulator{cfg: cfg, labels: make([]Label, cfg.Labels)}
	s.bg = newAliasTable(zipfWeights(cfg.Labels, cfg.ZipfS))
	for k := range s.labels {
		s.labels[k] = simLabel(k)
	}

	var next atomic.Int64
	var mu sync.Mutex
	var total epochResult
	misses := 0
	var wg sync.WaitGroup
	for range min(cfg.Workers, max(cfg.Epochs, 1)) {
		wg.Go(func() {
			w := s.newWorker()
			var sum epochResult
			miss := 0
			for {
				e := int(next.Add(1) - 1)
				if e >= cfg.Epochs {
					break
				}
				r := w.epoch(e)
				sum.samples += r.samples
				sum.rareSamples += r.rareSamples
				if r.rareSamples == 0 {
					miss++
				}
			}
			mu.Lock()
			total.samples += sum.samples
			total.rareSamples += sum.rareSamples
			misses += miss
			mu.Unlock()
		})
	}
	wg.Wait()

	res := SimResult{Config: cfg, Epochs: cfg.Epochs, Misses: misses}
	if cfg.Epochs > 0 {
		n := float64(cfg.Epochs)
		res.MissRate = float64(misses) / n
		res.MissUpper99 = BinomialUpper(misses, cfg.Epochs, 0.01)
		res.MeanSamples = float64(total.samples) / n
		res.MeanRareSamples = float64(total.rareSamples) / n
	}
	return res, nil
}

// BinomialUpper is the one-sided Clopper–Pearson upper confidence bound, at
// confidence 1-alpha (0 < alpha < 0.5), of the probability p of a
// binomial(n, p) variable observed at k: the p for which P[X <= k] = alpha.
func BinomialUpper(k, n int, alpha float64) float64 {
	if n <= 0 || k >= n {
		return 1
	}
	if k < 0 {
		return 0
	}
	lo, hi := float64(k)/float64(n), 1.0
	for range 100 {
		mid := (lo + hi) / 2
		if binomialCDF(k, n, mid) > alpha {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// binomialCDF is P[X <= k] for X ~ binomial(n, p), 0 < p < 1.
func binomialCDF(k, n int, p float64) float64 {
	if p <= 0 {
		return 1
	}
	if p >= 1 {
		return 0
	}
	lp, lq := math.Log(p), math.Log1p(-p)
	lgn, _ := math.Lgamma(float64(n + 1))
	var sum float64
	for i := 0; i <= k; i++ {
		a, _ := math.Lgamma(float64(i + 1))
		b, _ := math.Lgamma(float64(n - i + 1))
		sum += math.Exp(lgn - a - b + float64(i)*lp + float64(n-i)*lq)
	}
	return sum
}

// runEpoch feeds one epoch's events to add: background events drawn from
// the Zipf table, and the rare label at the positions in w.pos (sorted,
// ending with the sentinel cfg.Events).
func runEpoch(w *simWorker, rare uint64, add func(hsh uint64, weight uint32, shift uint) (bool, uint32)) epochResult {
	var res epochResult
	shift := w.cfg.Shift
	M := w.cfg.Events
	i := 0
	for _, p := range w.pos {
		for ; i < p; i++ {
			if ok, _ := add(drawValue(w.cols, w.rng.Uint64()), 1, shift); ok {
				res.samples++
			}
		}
		if p < M {
			if ok, _ := add(rare, 1, shift); ok {
				res.samples++
				res.rareSamples++
			}
			i++
		}
	}
	return res
}

// String summarises the result on one line.
func (r SimResult) String() string {
	c := r.Config
	return fmt.Sprintf("shift=%d D=%d s=%.2f M=%d rare=%d rows=%d width=%d: %d epochs, %d misses (rate %.2e, 99%% upper bound %.2e), %.1f samples/epoch, %.3f rare samples/epoch",
		c.Shift, c.Labels, c.ZipfS, c.Events, c.RareEvents, c.Rows, c.Width, r.Epochs, r.Misses, r.MissRate, r.MissUpper99, r.MeanSamples, r.MeanRareSamples)
}
