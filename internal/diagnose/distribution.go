package diagnose

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// MinBandwidth is the narrowest kernel the default bandwidth rule picks, in
// units of ln(ratio): about a 1% performance change, below the run-to-run
// noise of any real measurement (the paper's runs vary by up to 10%, §4.2).
// It keeps a profile built from identical deviations from being a spike.
const MinBandwidth = 0.01

// ErrNoRatios: a distribution needs at least one performance ratio.
var ErrNoRatios = errors.New("no performance ratios")

// Deviation is Eq. 1 of Shen et al.: the performance deviation from t_old to
// t_new, (t_new - t_old) / max(t_new, t_old), in [-1, 1] for non-negative
// performance figures and antisymmetric: Deviation(a, b) = -Deviation(b, a).
// Performance figures are higher-is-better (a throughput; use the inverse of
// a latency).
func Deviation(old, new float64) float64 {
	return (new - old) / math.Max(new, old)
}

// ratioOfDeviation maps a deviation (Eq. 1) to the performance ratio
// t_new/t_old of §2.2, the other representation of a change profile; the map
// is increasing, so p-values (lower tails) carry over unchanged.
func ratioOfDeviation(d float64) float64 {
	if d >= 0 {
		return 1 / (1 - d)
	}
	return 1 + d
}

// ProfileOptions tunes how a change profile's distribution is estimated from
// its sampled ratios. Nil means the defaults.
type ProfileOptions struct {
	// Bandwidth is the standard deviation of the Gaussian kernel that
	// smooths the sampled ratios, in units of ln(ratio). Zero picks
	// Silverman's rule, 0.9 min(sd, IQR/1.34) n^(-1/5), at least
	// MinBandwidth. The bounding analysis by secant (Eq. 9) needs the
	// density this provides.
	Bandwidth float64
	// Empirical leaves the sample unsmoothed: Eq. 2 is then the fraction of
	// sampled deviations at or below δ, exactly as the paper states it for a
	// sampled profile. Such a profile has no density, so Bound refuses it;
	// BoundMonteCarlo and Convolve accept it.
	Empirical bool
	// MinPairs is the fewest run pairs a change needs for a profile.
	// Default 1; the paper sampled at least 288 per profile (§4.2).
	MinPairs int
}

func (o *ProfileOptions) withDefaults() (ProfileOptions, error) {
	r := ProfileOptions{MinPairs: 1}
	if o == nil {
		return r, nil
	}
	if o.Bandwidth < 0 || math.IsNaN(o.Bandwidth) || math.IsInf(o.Bandwidth, 0) || o.MinPairs < 0 {
		return r, fmt.Errorf("profile options: bad Bandwidth %v or MinPairs %d", o.Bandwidth, o.MinPairs)
	}
	if o.Bandwidth > 0 && o.Empirical {
		return r, errors.New("profile options: Bandwidth and Empirical are exclusive")
	}
	r.Bandwidth, r.Empirical = o.Bandwidth, o.Empirical
	if o.MinPairs > 0 {
		r.MinPairs = o.MinPairs
	}
	return r, nil
}

// Distribution is the distribution of performance ratios t_new/t_old under
// one execution condition change (or, from Convolve, several): π of Eq. 2
// and π_p of §2.2. It is held over y = ln(ratio) as a mixture of Gaussian
// kernels of one bandwidth, a kernel density estimate of the sampled ratios;
// bandwidth 0 is the sample itself, point masses.
//
// In y the product of ratios of §2.2 is a sum, x·π(x) of Eq. 9 is the
// density of y, and Eq. 3 is an ordinary convolution.
type Distribution struct {
	centers []float64 // ln(ratio), increasing
	cum     []float64 // cum[k]: total weight of centers[:k]; cum[len] = 1
	bw      float64
}

// NewDistribution estimates the distribution of the given performance
// ratios (all > 0 and finite), each weighing the same.
func NewDistribution(ratios []float64, opts *ProfileOptions) (*Distribution, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(ratios) == 0 {
		return nil, ErrNoRatios
	}
	logs := make([]float64, len(ratios))
	for i, x := range ratios {
		if !(x > 0) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("ratio %d is %v: must be positive and finite", i, x)
		}
		logs[i] = math.Log(x)
	}
	w := make([]float64, len(logs))
	for i := range w {
		w[i] = 1 / float64(len(w))
	}
	bw := o.Bandwidth
	switch {
	case o.Empirical:
		bw = 0
	case bw == 0:
		bw = silverman(logs)
	}
	return newMixture(logs, w, bw), nil
}

// newMixture builds a distribution from centres and weights summing to 1.
func newMixture(centers, weights []float64, bw float64) *Distribution {
	idx := make([]int, len(centers))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return centers[idx[a]] < centers[idx[b]] })
	d := &Distribution{centers: make([]float64, len(idx)), cum: make([]float64, len(idx)+1), bw: bw}
	for k, i := range idx {
		d.centers[k] = centers[i]
		d.cum[k+1] = d.cum[k] + weights[i]
	}
	// Rounding may leave the total a hair off 1; the tails must reach 0 and 1.
	for k := range d.cum {
		d.cum[k] /= d.cum[len(idx)]
	}
	return d
}

// silverman is Silverman's rule of thumb for a Gaussian kernel, floored at
// MinBandwidth.
func silverman(ys []float64) float64 {
	n := float64(len(ys))
	mean := 0.0
	for _, y := range ys {
		mean += y / n
	}
	v := 0.0
	for _, y := range ys {
		v += (y - mean) * (y - mean)
	}
	sd := 0.0
	if len(ys) > 1 {
		sd = math.Sqrt(v / (n - 1))
	}
	s := append([]float64(nil), ys...)
	sort.Float64s(s)
	iqr := quantileSorted(s, 0.75) - quantileSorted(s, 0.25)
	spread := sd
	if iqr > 0 && iqr/1.34 < spread {
		spread = iqr / 1.34
	}
	return math.Max(0.9*spread*math.Pow(n, -0.2), MinBandwidth)
}

// quantileSorted interpolates linearly between order statistics.
func quantileSorted(s []float64, q float64) float64 {
	pos := q * float64(len(s)-1)
	lo := int(pos)
	if lo+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[lo] + (pos-float64(lo))*(s[lo+1]-s[lo])
}

// Bandwidth is the kernel standard deviation in ln(ratio); 0 for an
// empirical (unsmoothed) distribution.
func (d *Distribution) Bandwidth() float64 { return d.bw }

// kernelReach is how many bandwidths away a kernel still counts: beyond it
// its mass is within 1e-300 of 0 or 1.
const kernelReach = 40

// window returns the index range of centres within kernelReach bandwidths
// of y; all centres before lo lie wholly below y.
func (d *Distribution) window(y float64) (lo, hi int) {
	lo = sort.SearchFloat64s(d.centers, y-kernelReach*d.bw)
	hi = sort.Search(len(d.centers), func(k int) bool { return d.centers[k] > y+kernelReach*d.bw })
	return lo, hi
}

// cdf is the probability that ln(ratio) <= y.
func (d *Distribution) cdf(y float64) float64 {
	if math.IsNaN(y) {
		return math.NaN()
	}
	lo, hi := d.window(y)
	p := d.cum[lo]
	if d.bw == 0 {
		return d.cum[hi]
	}
	for k := lo; k < hi; k++ {
		p += (d.cum[k+1] - d.cum[k]) * 0.5 * math.Erfc(-(y-d.centers[k])/(d.bw*math.Sqrt2))
	}
	return math.Min(p, 1)
}

// density is the density of ln(ratio) at y, 0 for an empirical distribution.
func (d *Distribution) density(y float64) float64 {
	if d.bw == 0 {
		return 0
	}
	lo, hi := d.window(y)
	f := 0.0
	for k := lo; k < hi; k++ {
		z := (y - d.centers[k]) / d.bw
		f += (d.cum[k+1] - d.cum[k]) * math.Exp(-z*z/2)
	}
	return f / (d.bw * math.Sqrt(2*math.Pi))
}

// PValue is Eq. 2: the probability of a deviation (Eq. 1) at or below
// deviation, ∫_{-1}^{δ} π(x) dx. Small values mean a degradation more
// extreme than the change usually causes. A NaN deviation gives NaN.
func (d *Distribution) PValue(deviation float64) float64 {
	switch {
	case deviation <= -1:
		return 0
	case deviation >= 1:
		return 1
	}
	return d.RatioPValue(ratioOfDeviation(deviation))
}

// RatioPValue is the p-value of §2.2 on the ratio representation,
// pval_p(δ) = ∫_0^δ π_p(x) dx, for δ = t_new/t_old. It equals PValue of
// the same change expressed as a deviation.
func (d *Distribution) RatioPValue(ratio float64) float64 {
	if ratio <= 0 {
		return 0
	}
	return d.cdf(math.Log(ratio))
}

// RatioDensity is π_p(x), the density of the ratio at x (0 when empirical).
func (d *Distribution) RatioDensity(ratio float64) float64 {
	if ratio <= 0 || math.IsInf(ratio, 1) {
		return 0
	}
	return d.density(math.Log(ratio)) / ratio
}
