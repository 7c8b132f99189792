package tracequery

import (
	"math"
	"math/rand/v2"
	"sort"
)

// kmeans(value, k) clusters the groups of an interval (or of a sliding
// window) by their histograms of value (Fay §5.2.2: processes by their
// system-call histograms, to find the odd one). The probe counts events
// per group and value, as for a histogram; user space makes each group's
// counts a vector of shares (so that busy and quiet groups with the same
// mix are alike), runs k-means (Lloyd's iterations from k-means++ seeds,
// ten seeded restarts, the least within-cluster sum of squares kept: the
// same answer for the same input), and gives each group its cluster,
// numbered from the largest (0) to the smallest, the cluster's size and
// the group's distance to its centre. A group alone in its cluster, far
// from the others, is the odd one. On separated clusters this is the
// optimal clustering (TestKMeansMatchesExhaustiveSearch); otherwise
// Lloyd's iterations may stop at a local optimum.

// kmeansType is the DuckDB type of kmeans' value.
const kmeansType = `STRUCT("cluster" BIGINT, "members" BIGINT, "distance" DOUBLE)`

// clusterGroups sets each group's result of aggregate i.
func clusterGroups(a *Agg, i int, gs []*group) {
	dims := map[int64]int{}
	var keys []int64
	for _, g := range gs {
		for v := range g.hist[i] {
			if _, ok := dims[v]; !ok {
				dims[v] = 0
				keys = append(keys, v)
			}
		}
	}
	sort.Slice(keys, func(x, y int) bool { return keys[x] < keys[y] })
	for j, v := range keys {
		dims[v] = j
	}
	var points [][]float64
	var members []*group
	for _, g := range gs {
		var total uint64
		for _, c := range g.hist[i] {
			total += c
		}
		if total == 0 {
			g.result[i] = nil
			continue
		}
		p := make([]float64, len(keys))
		for v, c := range g.hist[i] {
			p[dims[v]] = float64(c) / float64(total)
		}
		points = append(points, p)
		members = append(members, g)
	}
	assign, dist := kmeans(points, a.K)
	sizes := map[int]int{}
	for _, c := range assign {
		sizes[c]++
	}
	// Number the clusters by size, largest first (ties by first member).
	var ids []int
	first := map[int]int{}
	for j, c := range assign {
		if _, ok := first[c]; !ok {
			first[c] = j
			ids = append(ids, c)
		}
	}
	sort.SliceStable(ids, func(x, y int) bool {
		if sizes[ids[x]] != sizes[ids[y]] {
			return sizes[ids[x]] > sizes[ids[y]]
		}
		return first[ids[x]] < first[ids[y]]
	})
	label := map[int]int{}
	for n, c := range ids {
		label[c] = n
	}
	for j, g := range members {
		g.result[i] = map[string]any{"cluster": int64(label[assign[j]]), "members": int64(sizes[assign[j]]), "distance": dist[j]}
	}
}

// kmeans clusters points into at most k clusters: each point's cluster
// and its distance to the cluster's centre.
func kmeans(points [][]float64, k int) ([]int, []float64) {
	n := len(points)
	if n == 0 {
		return nil, nil
	}
	k = min(k, distinctPoints(points))
	best, bestCost := []int(nil), math.Inf(1)
	rng := rand.New(rand.NewPCG(1, 2))
	for restart := 0; restart < 10; restart++ {
		assign, cost := lloyd(points, seeds(points, k, rng))
		if cost < bestCost-1e-12 {
			best, bestCost = assign, cost
		}
	}
	centres := centresOf(points, best, k)
	dist := make([]float64, n)
	for j, p := range points {
		dist[j] = math.Sqrt(sqDist(p, centres[best[j]]))
	}
	return best, dist
}

func distinctPoints(points [][]float64) int {
	seen := 0
	for j, p := range points {
		dup := false
		for _, q := range points[:j] {
			if sqDist(p, q) == 0 {
				dup = true
				break
			}
		}
		if !dup {
			seen++
		}
	}
	return seen
}

// seeds picks k centres by k-means++: each next one with probability
// proportional to its squared distance from the nearest chosen.
func seeds(points [][]float64, k int, rng *rand.Rand) [][]float64 {
	centres := [][]float64{points[rng.IntN(len(points))]}
	d := make([]float64, len(points))
	for len(centres) < k {
		var total float64
		for j, p := range points {
			d[j] = math.Inf(1)
			for _, c := range centres {
				d[j] = min(d[j], sqDist(p, c))
			}
			total += d[j]
		}
		if total == 0 {
			break
		}
		r := rng.Float64() * total
		pick := len(points) - 1
		for j := range points {
			if r -= d[j]; r <= 0 && d[j] > 0 {
				pick = j
				break
			}
		}
		centres = append(centres, points[pick])
	}
	return centres
}

// lloyd iterates assignment and update from the given centres until the
// assignment holds still; it returns the assignment and its cost.
func lloyd(points [][]float64, centres [][]float64) ([]int, float64) {
	k := len(centres)
	assign := make([]int, len(points))
	for j := range assign {
		assign[j] = -1
	}
	var cost float64
	for iter := 0; iter < 100; iter++ {
		moved := false
		cost = 0
		for j, p := range points {
			bi, bd := 0, math.Inf(1)
			for c, ctr := range centres {
				if d := sqDist(p, ctr); d < bd {
					bi, bd = c, d
				}
			}
			if assign[j] != bi {
				assign[j], moved = bi, true
			}
			cost += bd
		}
		if !moved {
			break
		}
		centres = centresOf(points, assign, k)
	}
	return assign, cost
}

func centresOf(points [][]float64, assign []int, k int) [][]float64 {
	dim := len(points[0])
	centres := make([][]float64, k)
	counts := make([]int, k)
	for c := range centres {
		centres[c] = make([]float64, dim)
	}
	for j, p := range points {
		c := assign[j]
		counts[c]++
		for d, v := range p {
			centres[c][d] += v
		}
	}
	for c := range centres {
		if counts[c] == 0 {
			centres[c] = points[0] // an empty cluster keeps a real point
			continue
		}
		for d := range centres[c] {
			centres[c][d] /= float64(counts[c])
		}
	}
	return centres
}

func sqDist(a, b []float64) float64 {
	var s float64
	for i := range a {
		d := a[i] - b[i]
		s += d * d
	}
	return s
}
