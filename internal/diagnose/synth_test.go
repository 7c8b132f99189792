package diagnose

import (
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// dist builds a distribution from ratios, failing the test on error.
func dist(t *testing.T, opts *ProfileOptions, ratios ...float64) *Distribution {
	t.Helper()
	d, err := NewDistribution(ratios, opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// smallProfiles are small smoothed profiles of differing shapes: a change
// that usually helps, one that is neutral and noisy, one that is skewed.
func smallProfiles(t *testing.T) []*Distribution {
	return []*Distribution{
		dist(t, &ProfileOptions{Bandwidth: 0.05}, 1.1, 1.3, 1.2, 0.95, 1.5),
		dist(t, &ProfileOptions{Bandwidth: 0.08}, 0.9, 1.0, 1.1, 1.0),
		dist(t, &ProfileOptions{Bandwidth: 0.12}, 1.0, 1.02, 0.98, 0.7, 1.05, 1.0),
	}
}

// bruteForce minimises Σ pval_i(x̂_i) subject to Π x̂_i = ratio (Eq. 6)
// by enumerating a grid of log splits: every y_1..y_{n-1} on the grid in
// [-span, span], y_n taking the rest. n is 2 or 3.
func bruteForce(ds []*Distribution, ratio, span, step float64) float64 {
	L := math.Log(ratio)
	best := math.Inf(1)
	switch len(ds) {
	case 2:
		for y1 := -span; y1 <= span; y1 += step {
			best = math.Min(best, ds[0].cdf(y1)+ds[1].cdf(L-y1))
		}
	case 3:
		for y1 := -span; y1 <= span; y1 += step {
			f1 := ds[0].cdf(y1)
			if f1 >= best {
				break // cdf only grows with y1
			}
			for y2 := -span; y2 <= span; y2 += step {
				best = math.Min(best, f1+ds[1].cdf(y2)+ds[2].cdf(L-y1-y2))
			}
		}
	}
	return best
}

func TestBoundAgainstBruteForce(t *testing.T) {
	ps := smallProfiles(t)
	for _, c := range []struct {
		name  string
		ds    []*Distribution
		ratio float64
		step  float64
	}{
		{"two, mild", ps[:2], 0.8, 1e-4},
		{"two, strong", ps[:2], 0.5, 1e-4},
		{"two, extreme", ps[:2], 0.2, 1e-4},
		{"two, other pair", ps[1:], 0.6, 1e-4},
		{"three", ps, 0.5, 4e-3},
		{"three, mild", ps, 0.75, 4e-3},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := Bound(c.ds, c.ratio)
			if err != nil {
				t.Fatal(err)
			}
			brute := bruteForce(c.ds, c.ratio, 2.5, c.step)
			// The grid can only miss the minimum (brute >= true minimum),
			// by at most a step times the density.
			if b.PValue > brute+1e-9 || b.PValue < brute-0.01*c.step*100 {
				t.Errorf("Bound %.6g, brute force %.6g", b.PValue, brute)
			}
			checkWitness(t, c.ds, c.ratio, b)
		})
	}
}

// checkWitness checks that a bound's split meets the constraint and sums to
// its p-value.
func checkWitness(t *testing.T, ds []*Distribution, ratio float64, b BoundResult) {
	t.Helper()
	prod, sum := 1.0, 0.0
	for i, x := range b.Split {
		prod *= x
		if !near(b.PValues[i], ds[i].RatioPValue(x), 1e-12) {
			t.Errorf("pval %d = %v at %v, profile says %v", i, b.PValues[i], x, ds[i].RatioPValue(x))
		}
		sum += b.PValues[i]
	}
	if !near(prod, ratio, 1e-9) {
		t.Errorf("Π x̂ = %v, want %v", prod, ratio)
	}
	if !near(math.Min(sum, 1), b.PValue, 1e-12) {
		t.Errorf("Σ pval = %v, PValue %v", sum, b.PValue)
	}
}

func TestBoundEquation9(t *testing.T) {
	// At an interior optimum the Lagrange condition holds: x̂_i π_i(x̂_i)
	// are equal (Eq. 9).
	ps := smallProfiles(t)
	b, err := Bound(ps, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	var lambdas []float64
	for i, x := range b.Split {
		lambdas = append(lambdas, x*ps[i].RatioDensity(x))
	}
	for _, l := range lambdas[1:] {
		if !near(l, lambdas[0], 1e-6) {
			t.Fatalf("x̂ π(x̂) = %v, not equal", lambdas)
		}
	}
}

func TestBoundSingle(t *testing.T) {
	d := smallProfiles(t)[0]
	b, err := Bound([]*Distribution{d}, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	if b.PValue != d.RatioPValue(0.9) || b.Split[0] != 0.9 {
		t.Errorf("one profile: %+v, want Eq. 2 = %v", b, d.RatioPValue(0.9))
	}
}

func TestBoundErrors(t *testing.T) {
	emp := dist(t, &ProfileOptions{Empirical: true}, 1, 2)
	sm := dist(t, nil, 1, 2)
	if _, err := Bound([]*Distribution{sm, emp}, 0.5); !errors.Is(err, ErrNoDensity) {
		t.Errorf("empirical profile: %v, want ErrNoDensity", err)
	}
	for _, r := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, err := Bound([]*Distribution{sm, sm}, r); err == nil {
			t.Errorf("ratio %v accepted", r)
		}
		if _, err := BoundMonteCarlo([]*Distribution{sm, sm}, r, nil); err == nil {
			t.Errorf("Monte Carlo: ratio %v accepted", r)
		}
	}
	if _, err := Bound(nil, 0.5); err == nil {
		t.Error("no profiles accepted")
	}
	if _, err := NewDistribution([]float64{1, 0}, nil); err == nil {
		t.Error("ratio 0 accepted")
	}
	if _, err := NewDistribution(nil, nil); !errors.Is(err, ErrNoRatios) {
		t.Errorf("no ratios: %v", err)
	}
}

// exactEmpiricalBound minimises Eq. 6 exactly for two empirical profiles:
// Σ pval is a step function of y_1, constant between the breakpoints (the
// atoms of the first profile and ln δ minus the atoms of the second), so
// checking every breakpoint and a point between each two finds the minimum.
func exactEmpiricalBound(a, b *Distribution, ratio float64) float64 {
	L := math.Log(ratio)
	var pts []float64
	pts = append(pts, a.centers...)
	for _, c := range b.centers {
		pts = append(pts, L-c)
	}
	sort.Float64s(pts)
	cands := []float64{pts[0] - 1, pts[len(pts)-1] + 1}
	for i, p := range pts {
		cands = append(cands, p)
		if i+1 < len(pts) {
			cands = append(cands, (p+pts[i+1])/2)
		}
	}
	best := math.Inf(1)
	for _, y := range cands {
		best = math.Min(best, a.cdf(y)+b.cdf(L-y))
	}
	return best
}

func TestBoundMonteCarloEmpirical(t *testing.T) {
	emp := &ProfileOptions{Empirical: true}
	a := dist(t, emp, 0.9, 1.0, 1.1, 1.2, 0.8, 1.3, 1.05, 0.7)
	b := dist(t, emp, 1.0, 0.95, 1.1, 1.4, 0.85)
	for _, ratio := range []float64{0.9, 0.75, 0.6, 0.5, 0.3} {
		exact := exactEmpiricalBound(a, b, ratio)
		mc, err := BoundMonteCarlo([]*Distribution{a, b}, ratio, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !near(mc.PValue, math.Min(exact, 1), 1e-12) {
			t.Errorf("ratio %v: Monte Carlo %v, exact %v", ratio, mc.PValue, exact)
		}
		checkWitness(t, []*Distribution{a, b}, ratio, mc)
	}
}

func TestBoundMonteCarloAgreesWithSecant(t *testing.T) {
	ps := smallProfiles(t)
	for _, ratio := range []float64{0.8, 0.5, 0.3} {
		sec, err := Bound(ps, ratio)
		if err != nil {
			t.Fatal(err)
		}
		mc, err := BoundMonteCarlo(ps, ratio, &BoundOptions{Samples: 40000, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		// Monte Carlo only finds feasible points: never below the minimum.
		if mc.PValue < sec.PValue-1e-9 || mc.PValue > sec.PValue*1.02+1e-6 {
			t.Errorf("ratio %v: Monte Carlo %v, secant %v", ratio, mc.PValue, sec.PValue)
		}
	}
}

func TestConvolveByHand(t *testing.T) {
	// Two independent changes, each halving or keeping performance with
	// equal chance: the product is 1/4 w.p. 1/4, 1/2 w.p. 1/2, 1 w.p. 1/4.
	emp := &ProfileOptions{Empirical: true}
	h := dist(t, emp, 0.5, 1)
	c, err := Convolve([]*Distribution{h, h})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct{ ratio, want float64 }{
		{0.2, 0}, {0.25, 0.25}, {0.3, 0.25}, {0.5, 0.75}, {0.99, 0.75}, {1, 1},
	} {
		if got := c.RatioPValue(x.ratio); !near(got, x.want, 1e-12) {
			t.Errorf("P[x1 x2 <= %v] = %v, want %v", x.ratio, got, x.want)
		}
	}
	// Gaussian kernels convolve to a Gaussian of summed variances: ln x1 ~
	// N(ln 1.2, 0.3²), ln x2 ~ N(ln 0.9, 0.4²), so ln(x1 x2) ~ N(ln 1.08,
	// 0.5²) and P[x1 x2 <= 1.08 e^-1] = Φ(-2).
	g1 := dist(t, &ProfileOptions{Bandwidth: 0.3}, 1.2)
	g2 := dist(t, &ProfileOptions{Bandwidth: 0.4}, 0.9)
	c, err = Convolve([]*Distribution{g1, g2})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RatioPValue(1.08 * math.Exp(-1)); !near(got, 0.022750131948179195, 1e-12) {
		t.Errorf("P = %v, want Φ(-2)", got)
	}
}

func TestConvolveAgainstSimulation(t *testing.T) {
	// Independent draws from three profiles; the product's empirical CDF
	// must match the convolution. The three profiles have 40·40·50 = 80000
	// kernels together, beyond maxComponents, so compression is exercised.
	rng := rand.New(rand.NewPCG(3, 4))
	var ds []*Distribution
	for _, n := range []int{40, 40, 50} {
		r := make([]float64, n)
		for i := range r {
			r[i] = math.Exp(0.2 * rng.NormFloat64() * (1 + rng.Float64()))
		}
		ds = append(ds, dist(t, nil, r...))
	}
	c, err := Convolve(ds)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.centers) > maxComponents {
		t.Fatalf("%d kernels after compression", len(c.centers))
	}
	const draws = 200000
	logs := make([]float64, draws)
	for i := range logs {
		for _, d := range ds {
			logs[i] += d.draw(rng)
		}
	}
	sort.Float64s(logs)
	for _, q := range []float64{0.01, 0.05, 0.25, 0.5, 0.9} {
		y := logs[int(q*draws)]
		// Binomial error at 200000 draws is below 0.0011 (3 sd at q=0.5).
		if got := c.cdf(y); math.Abs(got-q) > 0.0035 {
			t.Errorf("convolution CDF %v at the simulated %v-quantile", got, q)
		}
	}
}

// draw samples a log ratio from the distribution.
func (d *Distribution) draw(rng *rand.Rand) float64 {
	u := rng.Float64()
	k := sort.SearchFloat64s(d.cum[1:], u)
	k = min(k, len(d.centers)-1)
	return d.centers[k] + d.bw*rng.NormFloat64()
}

func TestBoundIsConservative(t *testing.T) {
	// Lemma 1 holds whatever the dependence: the bound is above the exact
	// p-value of independent parameters (the convolution) and of perfectly
	// dependent ones (x_i all driven by one uniform, the comonotone
	// coupling).
	ps := smallProfiles(t)
	for _, ds := range [][]*Distribution{ps[:2], ps[1:], ps} {
		conv, err := Convolve(ds)
		if err != nil {
			t.Fatal(err)
		}
		for _, ratio := range []float64{0.9, 0.7, 0.5, 0.3} {
			b, err := Bound(ds, ratio)
			if err != nil {
				t.Fatal(err)
			}
			indep := conv.RatioPValue(ratio)
			como := comonotonePValue(ds, ratio)
			if b.PValue < indep || b.PValue < como {
				t.Errorf("%d profiles, ratio %v: bound %v below independent %v or comonotone %v",
					len(ds), ratio, b.PValue, indep, como)
			}
		}
	}
	// And it is not trivially 1: a strong degradation is anomalous.
	if b, _ := Bound(ps[:2], 0.5); b.PValue > 0.05 {
		t.Errorf("bound at ratio 0.5 is %v", b.PValue)
	}
}

// comonotonePValue is P[Σ q_i(U) <= ln δ] for U uniform, q_i the quantile
// function: the largest u with Σ q_i(u) <= ln δ, found by bisection.
func comonotonePValue(ds []*Distribution, ratio float64) float64 {
	L := math.Log(ratio)
	sum := func(u float64) float64 {
		s := 0.0
		for _, d := range ds {
			s += d.quantile(u)
		}
		return s
	}
	lo, hi := 0.0, 1.0
	for range 60 {
		mid := (lo + hi) / 2
		if sum(mid) <= L {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

func (d *Distribution) quantile(u float64) float64 {
	lo, hi := d.centers[0]-kernelReach*d.bw, d.centers[len(d.centers)-1]+kernelReach*d.bw
	for range 100 {
		mid := (lo + hi) / 2
		if d.cdf(mid) < u {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}
