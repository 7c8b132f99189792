// Package diagnose is the arithmetic of reference-driven performance anomaly
// identification (Shen, Zhong, Shao, SIGMETRICS 2009, seed 002), with no
// tie to the recorder or the store: callers hand it runs and metric samples.
//
// # Is the target anomalous? Change profiles and p-values (§2)
//
// An execution is a point in a space of conditions: parameters such as a
// scheduler, a concurrency level or a software version, each a name and a
// value (Run). Two runs that differ in one parameter alone measure the effect
// of that change; their performance deviation (Deviation, Eq. 1) is one
// sample of the change's profile. NewCatalog collects every such pair into a
// Profile per single-parameter Change. A profile's Distribution gives Eq. 2:
// the p-value of a degradation is the chance the change causes one at least
// as bad, so a small p-value means the target did worse than the change
// explains.
//
// Runs that differ in several parameters combine the profiles (§2.2), on
// performance ratios t_new/t_old whose product is the overall ratio:
//
//   - Bound, the bounding analysis: by Lemma 1, Σ pval_i(x̂_i) for any
//     x̂_i with Π x̂_i = δ bounds the p-value from above whatever the
//     dependence between parameters; Bound minimises it (Eq. 6) by solving
//     the Lagrange conditions (Eq. 7–9) with secant iteration.
//   - BoundMonteCarlo, the same minimum by random search.
//   - Convolve, the distribution of the product under independence (Eq. 3).
//
// Catalog.Score scores one reference-to-target pair, Catalog.BestReference
// picks a target's reference as the run giving the smallest p-value (§4.2),
// and Catalog.Anomalies reports the pairs at or below a threshold (0.05).
//
// Profiles are smoothed by default: a Gaussian kernel over ln(ratio) with
// Silverman's bandwidth. Eq. 9 needs densities, and an unsmoothed p-value is
// only a rank (the lowest of n samples always scores 1/n).
// ProfileOptions.Empirical keeps the raw sample for exact, by-hand p-values.
//
// # Which metric explains it? Earth mover's distance (§3.1)
//
// For an anomalous pair every low-level metric (inter-arrival delays per
// event type, delays between causally related events, event parameters,
// concurrency levels, §4.3) is a Sample in the target and in the reference.
// EMD measures how differently the metric is distributed, after scaling so
// that the larger of the two means is 1, and Rank orders the metrics by it,
// with shared-bin histograms for display: the top of the list is where to
// look for the cause.
//
// # Where this departs from the paper
//
//   - Eq. 3 as printed lacks the 1/x of a product's density; Convolve
//     computes the true distribution of the product.
//   - EMD scales by the larger absolute mean, so metrics that can be
//     negative are handled; for the paper's non-negative metrics it is the
//     larger mean.
//   - Bound solves Eq. 9 on every rising stretch of every profile's density
//     (not only the lower tails), because a multimodal profile can put the
//     minimum elsewhere; the result is always a valid bound.
package diagnose
