package diagnose

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

var (
	// ErrNoDensity: the secant bound needs the densities of Eq. 9, which
	// an empirical (unsmoothed) distribution does not have.
	ErrNoDensity = errors.New("distribution has no density (it is empirical); smooth it or use BoundMonteCarlo")
	// ErrTooLarge: an exact convolution of empirical distributions would
	// hold more than maxComponents point masses.
	ErrTooLarge = errors.New("convolution too large")
)

// maxComponents caps the kernels of a convolved distribution. Beyond it,
// smoothed mixtures are merged onto a grid finer than the bandwidth.
const maxComponents = 1 << 16

// checkSynthesis validates the inputs shared by Convolve and the bounds.
func checkSynthesis(dists []*Distribution, ratio float64) error {
	if len(dists) == 0 {
		return errors.New("no change profiles to synthesise")
	}
	for i, d := range dists {
		if d == nil || len(d.centers) == 0 {
			return fmt.Errorf("profile %d: %w", i, ErrNoRatios)
		}
	}
	if !(ratio > 0) || math.IsInf(ratio, 0) {
		return fmt.Errorf("performance ratio %v: must be positive and finite", ratio)
	}
	return nil
}

// Convolve is the convolutional synthesis of Eq. 3: the distribution of the
// product of the ratios of several changes assumed independent, built by
// applying the operator pairwise. Its RatioPValue is then Eq. 4 under that
// assumption.
//
// Eq. 3 as printed, ∫ π1(x) π2(y/x) dx, lacks the Jacobian 1/x of the
// density of a product (without it the result integrates to E[x1], not 1).
// Convolve computes the product's true distribution, the sum of the log
// ratios: with Gaussian kernels the convolution is again a mixture, of
// kernels at the sums of centres with bandwidth sqrt(Σ h_i²).
func Convolve(dists []*Distribution) (*Distribution, error) {
	if err := checkSynthesis(dists, 1); err != nil {
		return nil, err
	}
	acc := dists[0]
	for _, d := range dists[1:] {
		n := len(acc.centers) * len(d.centers)
		centers := make([]float64, 0, n)
		weights := make([]float64, 0, n)
		for i, a := range acc.centers {
			wa := acc.cum[i+1] - acc.cum[i]
			for j, b := range d.centers {
				centers = append(centers, a+b)
				weights = append(weights, wa*(d.cum[j+1]-d.cum[j]))
			}
		}
		bw := math.Hypot(acc.bw, d.bw)
		next := newMixture(centers, weights, bw)
		if len(next.centers) > maxComponents {
			var err error
			if next, err = compress(next); err != nil {
				return nil, err
			}
		}
		acc = next
	}
	return acc, nil
}

// compress merges the kernels of a mixture: for an empirical one, equal
// points; for a smoothed one, all kernels within a grid cell of bw/32, at
// their weighted mean, which keeps the mean and moves the CDF by a small
// fraction of a percent at most.
func compress(d *Distribution) (*Distribution, error) {
	var centers, weights []float64
	cell := func(c float64) float64 { return c }
	if d.bw > 0 {
		step := d.bw / 32
		cell = func(c float64) float64 { return math.Floor(c / step) }
	}
	lastCell := math.NaN()
	for k, c := range d.centers {
		w := d.cum[k+1] - d.cum[k]
		if cc := cell(c); cc == lastCell {
			centers[len(centers)-1] += c * w
			weights[len(weights)-1] += w
			continue
		}
		lastCell = cell(c)
		centers = append(centers, c*w)
		weights = append(weights, w)
	}
	if len(centers) > maxComponents {
		return nil, fmt.Errorf("%w: %d distinct point masses, at most %d (smooth the profiles)", ErrTooLarge, len(centers), maxComponents)
	}
	for k := range centers {
		if weights[k] > 0 {
			centers[k] /= weights[k]
		}
	}
	if d.bw == 0 {
		// Equal points merged: keep each exactly, not as a rounded mean.
		k := 0
		for i, c := range d.centers {
			if i > 0 && c == d.centers[i-1] {
				continue
			}
			centers[k] = c
			k++
		}
	}
	return newMixture(centers, weights, d.bw), nil
}

// BoundResult is the conservative p-value of Lemma 1 with its witness.
type BoundResult struct {
	// PValue is min(1, Σ_i pval_{p_i}(x̂_i)), an upper bound of the
	// multi-parameter p-value of Eq. 4 whatever the dependence between the
	// parameters.
	PValue float64
	// Split holds the x̂_i, one per profile, with Π x̂_i equal to the ratio
	// (up to rounding), and PValues the pval_{p_i}(x̂_i).
	Split, PValues []float64
}

// evalSplit turns log ratios y (Σ y = ln δ) into a BoundResult.
func evalSplit(dists []*Distribution, y []float64) BoundResult {
	r := BoundResult{Split: make([]float64, len(y)), PValues: make([]float64, len(y))}
	for i, d := range dists {
		r.Split[i] = math.Exp(y[i])
		r.PValues[i] = d.cdf(y[i])
		r.PValue += r.PValues[i]
	}
	r.PValue = math.Min(r.PValue, 1)
	return r
}

// objective is Σ pval_i at log ratios y.
func objective(dists []*Distribution, y []float64) float64 {
	s := 0.0
	for i, d := range dists {
		s += d.cdf(y[i])
	}
	return s
}

// Bound is the bounding analysis of §2.2: it minimises Σ pval_{p_i}(x̂_i)
// subject to Π x̂_i = ratio (Eq. 6) by solving the Lagrange conditions
// (Eq. 7, 8), x̂_i π_{p_i}(x̂_i) equal for all i (Eq. 9), together with the
// constraint, by secant iteration; by Lemma 1 the minimum bounds the
// p-value of the multi-parameter change (Eq. 4) from above.
//
// In y = ln x, Eq. 9 says the densities of the log ratios are equal, say to
// λ, and the optimum is a minimum where every y_i sits where its density
// rises (there the objective is convex along the constraint). On each rising
// stretch of each profile's density y_i(λ) is a function; for every
// combination of stretches, one per profile, Bound solves Σ y_i(λ) = ln
// ratio for λ by the secant method, safeguarded as regula falsi (Illinois),
// and keeps the best solution. A unimodal profile has one stretch, so
// usually there is a single combination; beyond maxCombinations only the
// lowest stretches (the lower tails) are tried. Where no λ meets the
// constraint (a ratio too mild for every parameter to sit on a rising
// stretch) Bound moves the remainder onto the single parameter where it
// costs least. Every candidate satisfies the constraint, so the result is
// always a valid bound.
//
// Every distribution needs a density (a Bandwidth > 0): ErrNoDensity.
func Bound(dists []*Distribution, ratio float64) (BoundResult, error) {
	if err := checkSynthesis(dists, ratio); err != nil {
		return BoundResult{}, err
	}
	for i, d := range dists {
		if d.bw == 0 {
			return BoundResult{}, fmt.Errorf("profile %d: %w", i, ErrNoDensity)
		}
	}
	L := math.Log(ratio)
	if len(dists) == 1 {
		return evalSplit(dists, []float64{L}), nil
	}
	segs := make([][]segment, len(dists))
	combos := 1
	for i, d := range dists {
		segs[i] = d.risingSegments()
		combos *= len(segs[i])
		if combos > maxCombinations {
			combos = -1
			break
		}
	}
	if combos < 0 {
		for i := range segs {
			segs[i] = segs[i][:1]
		}
	}
	best := BoundResult{PValue: math.Inf(1)}
	pick := make([]segment, len(dists))
	var walk func(i int)
	walk = func(i int) {
		if i == len(dists) {
			if r, ok := solveEq9(dists, pick, L); ok && r.PValue < best.PValue {
				best = r
			}
			return
		}
		for _, s := range segs[i] {
			pick[i] = s
			walk(i + 1)
		}
	}
	walk(0)
	return best, nil
}

// maxCombinations caps the rising-stretch combinations Bound solves.
const maxCombinations = 4096

// segment is a stretch of y on which a density rises from fLo to fHi.
type segment struct{ lo, hi, fLo, fHi float64 }

// risingSegments finds the stretches where the density rises, on a grid of
// quarter bandwidths; the first starts far in the lower tail, where the
// density underflows to 0.
func (d *Distribution) risingSegments() []segment {
	first, last := d.centers[0], d.centers[len(d.centers)-1]
	start := first - kernelReach*d.bw
	var segs []segment
	prevY, prevF := first-3*d.bw, d.density(first-3*d.bw)
	rising := true
	for y := prevY + d.bw/4; y <= last+3*d.bw; y += d.bw / 4 {
		f := d.density(y)
		switch {
		case rising && f < prevF:
			segs = append(segs, segment{start, prevY, d.density(start), prevF})
			rising = false
		case !rising && f > prevF:
			start, rising = prevY, true
		}
		prevY, prevF = y, f
	}
	if rising {
		segs = append(segs, segment{start, prevY, d.density(start), prevF})
	}
	return segs
}

// at is the y on the segment where the density is f, by bisection; the
// nearer end if f is outside the segment's range.
func (s segment) at(d *Distribution, f float64) float64 {
	if f <= s.fLo {
		return s.lo
	}
	if f >= s.fHi {
		return s.hi
	}
	lo, hi := s.lo, s.hi
	for range 100 {
		mid := (lo + hi) / 2
		if mid <= lo || mid >= hi {
			break
		}
		if d.density(mid) >= f {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// solveEq9 solves Eq. 9 with the constraint on one combination of rising
// stretches. It reports false when that combination has no admissible λ.
func solveEq9(dists []*Distribution, segs []segment, L float64) (BoundResult, bool) {
	// λ ranges where every stretch has a point of density λ; below 1e-300
	// densities underflow and the p-values there are 0 to print.
	const uFloor = -690
	uLo, uHi := float64(uFloor), math.Inf(1)
	for _, s := range segs {
		if s.fLo > 0 {
			uLo = math.Max(uLo, math.Log(s.fLo))
		}
		uHi = math.Min(uHi, math.Log(s.fHi))
	}
	if !(uLo < uHi) {
		return BoundResult{}, false
	}
	ys := func(u float64) ([]float64, float64) {
		y := make([]float64, len(dists))
		g := -L
		for i, d := range dists {
			y[i] = segs[i].at(d, math.Exp(u))
			g += y[i]
		}
		return y, g
	}
	yLo, gLo := ys(uLo)
	yHi, gHi := ys(uHi)
	switch {
	case gLo >= 0:
		return bestFix(dists, yLo, L), true
	case gHi <= 0:
		return bestFix(dists, yHi, L), true
	}
	// Illinois: secant steps on g(u) = Σ y_i(e^u) - ln ratio inside the
	// bracket, halving the retained end's g when one end sticks.
	side := 0
	for range 200 {
		u := (uLo*gHi - uHi*gLo) / (gHi - gLo)
		if !(u > uLo && u < uHi) {
			u = (uLo + uHi) / 2
		}
		y, g := ys(u)
		if math.Abs(g) < 1e-12*math.Max(1, math.Abs(L)) {
			return bestFix(dists, y, L), true
		}
		if g < 0 {
			uLo, yLo, gLo = u, y, g
			if side == -1 {
				gHi /= 2
			}
			side = -1
		} else {
			uHi, yHi, gHi = u, y, g
			if side == 1 {
				gLo /= 2
			}
			side = 1
		}
		if uHi-uLo < 1e-13*math.Max(1, math.Abs(uLo)) {
			break
		}
	}
	lo, hi := bestFix(dists, yLo, L), bestFix(dists, yHi, L)
	if hi.PValue < lo.PValue {
		return hi, true
	}
	return lo, true
}

// bestFix makes y meet Σ y = L by moving the whole remainder onto one
// coordinate, the one where that raises (or lowers most) the objective least.
func bestFix(dists []*Distribution, y []float64, L float64) BoundResult {
	rest := L
	for _, v := range y {
		rest -= v
	}
	best, bestVal := -1, math.Inf(1)
	for i := range y {
		y[i] += rest
		if v := objective(dists, y); v < bestVal {
			best, bestVal = i, v
		}
		y[i] -= rest
	}
	y[best] += rest
	return evalSplit(dists, y)
}

// BoundOptions tunes BoundMonteCarlo. Nil means the defaults.
type BoundOptions struct {
	// Samples is the number of random splits tried. Default 20000.
	Samples int
	// Seed seeds the generator, so results repeat. Default 1.
	Seed uint64
}

// BoundMonteCarlo is the Monte Carlo alternative of §2.2 to Bound: it draws
// random sets of x̂_i with Π x̂_i = ratio and keeps the one with the smallest
// Σ pval_{p_i}(x̂_i) (Eq. 6). Half the draws split ln ratio at random across
// the parameters and scatter the parts by each profile's spread; the other
// half perturb the best split so far, more finely as the search goes on. It
// needs no density, so it accepts empirical distributions, and it makes no
// assumption on where the minimum lies. The result is a valid bound (Lemma
// 1) and, in expectation, slightly above the true minimum.
func BoundMonteCarlo(dists []*Distribution, ratio float64, opts *BoundOptions) (BoundResult, error) {
	if err := checkSynthesis(dists, ratio); err != nil {
		return BoundResult{}, err
	}
	samples, seed := 20000, uint64(1)
	if opts != nil {
		if opts.Samples < 0 {
			return BoundResult{}, fmt.Errorf("bound options: negative Samples %d", opts.Samples)
		}
		if opts.Samples > 0 {
			samples = opts.Samples
		}
		if opts.Seed != 0 {
			seed = opts.Seed
		}
	}
	L := math.Log(ratio)
	n := len(dists)
	if n == 1 {
		return evalSplit(dists, []float64{L}), nil
	}
	spread := make([]float64, n)
	for i, d := range dists {
		spread[i] = d.spread()
	}
	rng := rand.New(rand.NewPCG(seed, 0x6469616700000000))
	best := make([]float64, n)
	for i := range best {
		best[i] = L / float64(n)
	}
	bestVal := objective(dists, best)
	y := make([]float64, n)
	for s := range samples {
		if s%2 == 0 {
			// A random split of L (Dirichlet(1, ..., 1)), scattered.
			tot := 0.0
			for i := range y {
				y[i] = rng.ExpFloat64()
				tot += y[i]
			}
			scatter := 3 * rng.Float64()
			for i := range y {
				y[i] = L*y[i]/tot + scatter*spread[i]*rng.NormFloat64()
			}
		} else {
			// Around the best, at a scale that shrinks as the search goes on.
			scale := math.Pow(1e-4, float64(s)/float64(samples)) * rng.Float64()
			for i := range y {
				y[i] = best[i] + scale*spread[i]*rng.NormFloat64()
			}
		}
		project(y, spread, L)
		if v := objective(dists, y); v < bestVal {
			bestVal = v
			copy(best, y)
		}
	}
	return evalSplit(dists, best), nil
}

// project moves y onto Σ y = L, sharing the correction by spread.
func project(y, spread []float64, L float64) {
	rest, tot := L, 0.0
	for i, v := range y {
		rest -= v
		tot += spread[i]
	}
	for i := range y {
		y[i] += rest * spread[i] / tot
	}
}

// spread is the standard deviation of ln(ratio), kernels included, at
// least MinBandwidth.
func (d *Distribution) spread() float64 {
	mean, sq := 0.0, 0.0
	for k, c := range d.centers {
		w := d.cum[k+1] - d.cum[k]
		mean += w * c
		sq += w * c * c
	}
	v := sq - mean*mean + d.bw*d.bw
	return math.Max(math.Sqrt(math.Max(v, 0)), MinBandwidth)
}
