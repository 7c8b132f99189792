package findings

import (
	"fmt"
	"math"
)

// EWMA is an exponentially weighted moving average anomaly detector
// (Chopstix §2.2): it tracks a series' mean and variance with weight Alpha
// on the newest value and flags a value more than K standard deviations
// from the mean of the values before it.
type EWMA struct {
	// Alpha in (0, 1]: how fast the baseline follows the series.
	// Default 0.3.
	Alpha float64
	// K is how many standard deviations make an anomaly. Default 3.
	K float64
	// Warmup is how many values build the baseline before any is judged.
	// Default 5.
	Warmup int
	// MinRelative floors the standard deviation at this share of the
	// mean, so a flat baseline does not flag every small wobble.
	// Default 0.1.
	MinRelative float64
	// MinSigma floors the standard deviation in the series' own units:
	// a baseline that has not varied yet (a vital at zero since the
	// start) has a variance of 0, and without a floor any blip on it
	// would be infinitely many deviations away. 0: no floor.
	MinSigma float64
}

// Anomaly is a value the detector flagged.
type Anomaly struct {
	Index int
	Value float64
	// Mean and Sigma are the baseline before the value; Z is how many
	// (floored) standard deviations the value lies from it, signed.
	Mean, Sigma, Z float64
}

func (e EWMA) withDefaults() (EWMA, error) {
	if e.Alpha == 0 {
		e.Alpha = 0.3
	}
	if e.K == 0 {
		e.K = 3
	}
	if e.Warmup == 0 {
		e.Warmup = 5
	}
	if e.MinRelative == 0 {
		e.MinRelative = 0.1
	}
	if !(e.Alpha > 0 && e.Alpha <= 1) || e.K < 0 || e.Warmup < 1 || e.MinRelative < 0 || e.MinSigma < 0 {
		return e, fmt.Errorf("ewma: alpha %v must be in (0, 1], k %v, warmup %d, min relative %v and min sigma %v non-negative",
			e.Alpha, e.K, e.Warmup, e.MinRelative, e.MinSigma)
	}
	return e, nil
}

// Detect runs the detector over xs. NaN values (intervals where the
// series was not recorded) are skipped and leave the baseline as it was.
// The baseline is seeded with the first value and its variance with zero;
// a flagged value still updates it, so a lasting change becomes the new
// normal after a few intervals.
func (e EWMA) Detect(xs []float64) ([]Anomaly, error) {
	e, err := e.withDefaults()
	if err != nil {
		return nil, err
	}
	var out []Anomaly
	seen := 0
	var mean, variance float64
	for i, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			continue
		}
		if seen == 0 {
			mean, seen = x, 1
			continue
		}
		sigma := math.Max(math.Max(math.Sqrt(variance), e.MinRelative*math.Abs(mean)), e.MinSigma)
		d := x - mean
		if seen >= e.Warmup && math.Abs(d) > e.K*sigma && d != 0 {
			z := math.Inf(1)
			if sigma > 0 {
				z = d / sigma
			} else if d < 0 {
				z = math.Inf(-1)
			}
			out = append(out, Anomaly{Index: i, Value: x, Mean: mean, Sigma: sigma, Z: z})
		}
		// West's incremental form: the variance of the exponentially
		// weighted distribution after adding x.
		mean += e.Alpha * d
		variance = (1 - e.Alpha) * (variance + e.Alpha*d*d)
		seen++
	}
	return out, nil
}
