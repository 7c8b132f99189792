package diagnose

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ErrBadRun: a run a catalog cannot use (no ID, a repeated ID, a performance
// figure that is not positive and finite, parameters that differ in name from
// the other runs').
var ErrBadRun = errors.New("bad run")

// Run is one measured execution: a point in the execution condition space
// (configuration, workload properties, software version, each a parameter
// name and a value) and its performance, higher is better.
type Run struct {
	ID     string
	Params map[string]string
	Perf   float64
}

// Change is a single-parameter execution condition change.
type Change struct {
	Param, From, To string
}

func (c Change) String() string { return fmt.Sprintf("%s: %s -> %s", c.Param, c.From, c.To) }

// Pair names the two runs a profile sample came from, the one before the
// change and the one after.
type Pair struct{ Old, New string }

// Profile is the change profile of §2.1 for one single-parameter change:
// the deviations (Eq. 1) measured on pairs of runs that differ in that
// parameter alone, and the Distribution estimated from them.
type Profile struct {
	Change Change
	// Deviations[i] is Deviation(Perf of Pairs[i].Old, Perf of Pairs[i].New).
	Deviations []float64
	Pairs      []Pair
	Distribution
}

// Catalog holds measured runs and the single-parameter change profiles built
// from them.
type Catalog struct {
	runs     []Run
	byID     map[string]int
	params   []string // sorted names, the same for every run
	profiles map[Change]*Profile
}

// NewCatalog checks the runs and builds a change profile (Eq. 1) for every
// change of one parameter observed between two runs whose other parameters
// are all equal. Each such pair gives a sample to the change in both
// directions (a -> b with deviation d, b -> a with -d, §2.1). Runs with
// identical conditions give no sample: they differ in no parameter.
func NewCatalog(runs []Run, opts *ProfileOptions) (*Catalog, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Catalog{byID: make(map[string]int, len(runs)), profiles: map[Change]*Profile{}}
	for i, r := range runs {
		if i == 0 {
			for p := range r.Params {
				c.params = append(c.params, p)
			}
			sort.Strings(c.params)
		}
		if err := c.checkRun(r); err != nil {
			return nil, fmt.Errorf("run %d: %w", i, err)
		}
		if _, dup := c.byID[r.ID]; dup {
			return nil, fmt.Errorf("run %d: %w: ID %q given twice", i, ErrBadRun, r.ID)
		}
		c.byID[r.ID] = i
		c.runs = append(c.runs, r)
	}

	type sample struct {
		devs  []float64
		ratio []float64
		pairs []Pair
	}
	samples := map[Change]*sample{}
	add := func(ch Change, old, new Run) {
		s := samples[ch]
		if s == nil {
			s = &sample{}
			samples[ch] = s
		}
		s.devs = append(s.devs, Deviation(old.Perf, new.Perf))
		s.ratio = append(s.ratio, new.Perf/old.Perf)
		s.pairs = append(s.pairs, Pair{Old: old.ID, New: new.ID})
	}
	// Runs that differ in p alone agree on every other parameter, so
	// grouping by the others finds the pairs without comparing all of them.
	for _, p := range c.params {
		groups := map[string][]int{}
		var keys []string
		for i, r := range c.runs {
			k := c.conditionKey(r, p)
			if _, ok := groups[k]; !ok {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], i)
		}
		for _, k := range keys {
			g := groups[k]
			for a := range g {
				for b := a + 1; b < len(g); b++ {
					ra, rb := c.runs[g[a]], c.runs[g[b]]
					va, vb := ra.Params[p], rb.Params[p]
					if va == vb {
						continue
					}
					add(Change{p, va, vb}, ra, rb)
					add(Change{p, vb, va}, rb, ra)
				}
			}
		}
	}
	for ch, s := range samples {
		if len(s.devs) < o.MinPairs {
			continue
		}
		d, err := NewDistribution(s.ratio, &o)
		if err != nil {
			return nil, fmt.Errorf("profile %v: %w", ch, err)
		}
		c.profiles[ch] = &Profile{Change: ch, Deviations: s.devs, Pairs: s.pairs, Distribution: *d}
	}
	return c, nil
}

// checkRun validates a run against the catalog's parameter names.
func (c *Catalog) checkRun(r Run) error {
	if r.ID == "" {
		return fmt.Errorf("%w: empty ID", ErrBadRun)
	}
	if !(r.Perf > 0) || math.IsInf(r.Perf, 0) {
		return fmt.Errorf("%w: %q has performance %v, must be positive and finite", ErrBadRun, r.ID, r.Perf)
	}
	if len(r.Params) != len(c.params) {
		return fmt.Errorf("%w: %q has %d parameters, the catalog has %d (%s)",
			ErrBadRun, r.ID, len(r.Params), len(c.params), strings.Join(c.params, ", "))
	}
	for _, p := range c.params {
		if _, ok := r.Params[p]; !ok {
			return fmt.Errorf("%w: %q lacks parameter %q", ErrBadRun, r.ID, p)
		}
	}
	return nil
}

// conditionKey encodes the run's parameters except skip, unambiguously.
func (c *Catalog) conditionKey(r Run, skip string) string {
	var b strings.Builder
	for _, p := range c.params {
		if p != skip {
			b.WriteString(strconv.Quote(r.Params[p]))
		}
	}
	return b.String()
}

// Runs returns the catalog's runs in the order given.
func (c *Catalog) Runs() []Run { return slices.Clone(c.runs) }

// Profile returns the change profile of ch, or nil if no pair of runs
// measured that change (or fewer than ProfileOptions.MinPairs).
func (c *Catalog) Profile(ch Change) *Profile { return c.profiles[ch] }

// Profiles returns every change profile, ordered by parameter, from and to.
func (c *Catalog) Profiles() []*Profile {
	ps := make([]*Profile, 0, len(c.profiles))
	for _, p := range c.profiles {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool {
		a, b := ps[i].Change, ps[j].Change
		if a.Param != b.Param {
			return a.Param < b.Param
		}
		if a.From != b.From {
			return a.From < b.From
		}
		return a.To < b.To
	})
	return ps
}
