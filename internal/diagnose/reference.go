package diagnose

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

var (
	// ErrNoProfile: the catalog has no profile for a change between the
	// reference and the target.
	ErrNoProfile = errors.New("no change profile")
	// ErrSameCondition: reference and target differ in no parameter, so no
	// change profile says what to expect.
	ErrSameCondition = errors.New("reference and target have the same execution condition")
	// ErrNoReference: no run of the catalog can serve as the target's
	// reference.
	ErrNoReference = errors.New("no usable reference")
)

// DefaultThreshold is the p-value at or below which a reference-to-target
// degradation counts as an anomaly, the customary 0.05 the paper uses
// (§2.3, §4.2).
const DefaultThreshold = 0.05

// Synthesis says how the profiles of a multi-parameter change combine into
// one p-value (§2.2).
type Synthesis int

const (
	// Bounding is the bounding analysis, Lemma 1 minimised by secant
	// iteration (Bound): conservative, whatever the dependence between the
	// parameters. The default, as in the paper's evaluation.
	Bounding Synthesis = iota
	// BoundingMonteCarlo is the bounding analysis by random search
	// (BoundMonteCarlo).
	BoundingMonteCarlo
	// Convolution assumes the parameters' effects independent (Eq. 3,
	// Convolve); it gives smaller p-values and, in the paper, more false
	// positives (§4.2, Fig. 9).
	Convolution
)

func (s Synthesis) String() string {
	switch s {
	case Bounding:
		return "bounding"
	case BoundingMonteCarlo:
		return "bounding-montecarlo"
	case Convolution:
		return "convolution"
	}
	return fmt.Sprintf("Synthesis(%d)", int(s))
}

// ScoreOptions tunes scoring. Nil means the defaults.
type ScoreOptions struct {
	Synthesis Synthesis
	// MonteCarlo tunes BoundingMonteCarlo.
	MonteCarlo *BoundOptions
	// MaxChanges, if positive, keeps BestReference and Anomalies to
	// references that differ from the target in at most this many
	// parameters (the paper takes "nearby" conditions as references, §4.2).
	MaxChanges int
}

// Score is the anomaly measure of one reference-to-target pair.
type Score struct {
	Reference, Target string
	// Ratio is the target's performance over the reference's, the δ of
	// §2.2; Deviation is the same as Eq. 1.
	Ratio, Deviation float64
	// Changes are the single-parameter changes from reference to target,
	// in parameter name order.
	Changes []Change
	// PValue is Eq. 2 for one change, and for several the p-value the
	// Synthesis gives; small means anomalous.
	PValue    float64
	Synthesis Synthesis
	// Split is the bounding analysis' witness x̂_i, one per change, whose
	// product is Ratio; nil for a single change and for Convolution.
	Split []float64
}

// changes lists the single-parameter changes from reference to target.
func (c *Catalog) changes(reference, target Run) ([]Change, error) {
	for _, r := range []Run{reference, target} {
		if err := c.checkRun(r); err != nil {
			return nil, err
		}
	}
	var chs []Change
	for _, p := range c.params {
		if a, b := reference.Params[p], target.Params[p]; a != b {
			chs = append(chs, Change{Param: p, From: a, To: b})
		}
	}
	if len(chs) == 0 {
		return nil, fmt.Errorf("%w: %q and %q", ErrSameCondition, reference.ID, target.ID)
	}
	return chs, nil
}

// Score measures how anomalous the target's performance is against the
// reference's (§2): with one differing parameter by Eq. 2 on that change's
// profile, with several by the chosen Synthesis of their profiles. The runs
// need not be in the catalog (online, the target is the latest interval,
// §3.2), but they must have its parameters.
func (c *Catalog) Score(reference, target Run, opts *ScoreOptions) (Score, error) {
	var o ScoreOptions
	if opts != nil {
		o = *opts
	}
	chs, err := c.changes(reference, target)
	if err != nil {
		return Score{}, fmt.Errorf("score %q against %q: %w", target.ID, reference.ID, err)
	}
	dists := make([]*Distribution, len(chs))
	for i, ch := range chs {
		p := c.profiles[ch]
		if p == nil {
			return Score{}, fmt.Errorf("score %q against %q: %w for %v", target.ID, reference.ID, ErrNoProfile, ch)
		}
		dists[i] = &p.Distribution
	}
	s := Score{
		Reference: reference.ID, Target: target.ID,
		Ratio:     target.Perf / reference.Perf,
		Deviation: Deviation(reference.Perf, target.Perf),
		Changes:   chs, Synthesis: o.Synthesis,
	}
	if len(dists) == 1 {
		s.PValue = dists[0].RatioPValue(s.Ratio)
		return s, nil
	}
	var b BoundResult
	switch o.Synthesis {
	case Bounding:
		b, err = Bound(dists, s.Ratio)
	case BoundingMonteCarlo:
		b, err = BoundMonteCarlo(dists, s.Ratio, o.MonteCarlo)
	case Convolution:
		var d *Distribution
		if d, err = Convolve(dists); err == nil {
			b.PValue = d.RatioPValue(s.Ratio)
		}
	default:
		err = fmt.Errorf("unknown synthesis %v", o.Synthesis)
	}
	if err != nil {
		return Score{}, fmt.Errorf("score %q against %q: %w", target.ID, reference.ID, err)
	}
	s.PValue, s.Split = b.PValue, b.Split
	return s, nil
}

// BestReference scores the target against every other run of the catalog
// that can serve as its reference and returns the score with the smallest
// p-value, the highest anomaly likelihood, as the paper chooses a target's
// reference (§4.2). Ties go to the earlier run. Runs with the target's ID,
// with its exact condition, beyond MaxChanges or with a change no profile
// covers are passed over; if none is left the error is ErrNoReference.
func (c *Catalog) BestReference(target Run, opts *ScoreOptions) (Score, error) {
	var o ScoreOptions
	if opts != nil {
		o = *opts
	}
	if err := c.checkRun(target); err != nil {
		return Score{}, fmt.Errorf("best reference for %q: %w", target.ID, err)
	}
	best := Score{PValue: math.Inf(1)}
	for _, ref := range c.runs {
		if ref.ID == target.ID {
			continue
		}
		chs, err := c.changes(ref, target)
		if err != nil || (o.MaxChanges > 0 && len(chs) > o.MaxChanges) {
			continue
		}
		s, err := c.Score(ref, target, &o)
		if errors.Is(err, ErrNoProfile) {
			continue
		}
		if err != nil {
			return Score{}, err
		}
		if s.PValue < best.PValue {
			best = s
		}
	}
	if math.IsInf(best.PValue, 1) {
		return Score{}, fmt.Errorf("%w for %q", ErrNoReference, target.ID)
	}
	return best, nil
}

// AnomalyOptions tunes Anomalies. Nil means the defaults.
type AnomalyOptions struct {
	ScoreOptions
	// Threshold is the p-value at or below which a pair is reported.
	// Default DefaultThreshold.
	Threshold float64
}

// Anomalies takes every run of the catalog in turn as the target, picks its
// reference by BestReference, and returns the pairs whose p-value is at or
// below the threshold, most anomalous first (the runs serve as references
// to each other, §3, §4.2). Runs without a usable reference are left out.
func (c *Catalog) Anomalies(opts *AnomalyOptions) ([]Score, error) {
	o := AnomalyOptions{Threshold: DefaultThreshold}
	if opts != nil {
		o = *opts
		if o.Threshold == 0 {
			o.Threshold = DefaultThreshold
		}
	}
	if !(o.Threshold > 0 && o.Threshold <= 1) {
		return nil, fmt.Errorf("anomalies: threshold %v outside (0, 1]", o.Threshold)
	}
	var found []Score
	for _, t := range c.runs {
		s, err := c.BestReference(t, &o.ScoreOptions)
		if errors.Is(err, ErrNoReference) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if s.PValue <= o.Threshold {
			found = append(found, s)
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].PValue < found[j].PValue })
	return found, nil
}
