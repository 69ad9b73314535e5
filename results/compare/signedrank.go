package compare

import (
	"math"
	"sort"
)

// exactSignedRankLimit is the largest number of non-zero differences whose
// p-value is computed exactly; the work grows as n³ (n ranks, sums up to
// n²), a few million steps at 200. Above it the normal approximation is
// within a few thousandths.
const exactSignedRankLimit = 200

// signedRank is the two-sided Wilcoxon signed-rank test of the hypothesis
// that the differences d are symmetric about zero: for paired samples, that
// neither side tends to be larger. It returns the p-value and n, the number
// of differences that counted.
//
// Differences of exactly zero are dropped (Wilcoxon's rule: a pair that
// did not change says nothing about the direction of a change), so n may be
// smaller than len(d); with n = 0 the p-value is 1. Tied magnitudes share
// their mean rank. The p-value is exact up to exactSignedRankLimit
// differences: the share of the 2ⁿ sign assignments, given the ranks (ties
// included), whose positive rank sum is at least as far from its mean as
// the one observed. Above that, the normal approximation with the variance
// of the actual ranks (which corrects for ties) and a continuity correction.
func signedRank(d []float64) (p float64, n int) {
	type diff struct{ abs, sign float64 }
	var ds []diff
	for _, x := range d {
		if x != 0 && !math.IsNaN(x) {
			ds = append(ds, diff{math.Abs(x), math.Copysign(1, x)})
		}
	}
	n = len(ds)
	if n == 0 {
		return 1, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].abs < ds[j].abs })
	// Ranks doubled, so that mean ranks of ties (k + 0.5) stay integers.
	ranks := make([]int, n)
	for i := 0; i < n; {
		j := i
		for j < n && ds[j].abs == ds[i].abs {
			j++
		}
		for k := i; k < j; k++ {
			ranks[k] = i + j + 1 // 2 × the mean of ranks i+1 .. j
		}
		i = j
	}
	w, total := 0, 0 // doubled positive rank sum, doubled sum of all ranks
	for i, r := range ranks {
		total += r
		if ds[i].sign > 0 {
			w += r
		}
	}
	// The null distribution is symmetric about total/2: take the tail on
	// the observed side, and count both tails.
	far := min(w, total-w)
	if n > exactSignedRankLimit {
		var variance float64
		for _, r := range ranks {
			variance += float64(r) * float64(r) / 4
		}
		z := (float64(total)/2 - float64(far) - 1) / math.Sqrt(variance) // continuity: half a rank, doubled
		return min(1, math.Erfc(max(z, 0)/math.Sqrt2)), n
	}
	// dist[s] is the probability that the positive ranks sum to s.
	dist := make([]float64, total+1)
	dist[0] = 1
	reach := 0
	for _, r := range ranks {
		reach += r
		for s := reach; s >= r; s-- {
			dist[s] = (dist[s] + dist[s-r]) / 2
		}
		for s := r - 1; s >= 0; s-- {
			dist[s] /= 2
		}
	}
	tail := 0.0
	for s := 0; s <= far; s++ {
		tail += dist[s]
	}
	return min(1, 2*tail), n
}
