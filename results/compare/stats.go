package compare

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// holm adjusts p-values for testing them all at once (Holm's step-down
// method): the chance that any adjusted p-value falls below alpha when no
// figure changed is at most alpha, however the figures depend on each
// other. Each adjusted p-value is at least its own, and the order of the
// p-values is kept.
func holm(ps []float64) []float64 {
	order := make([]int, len(ps))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpFloat(ps[a], ps[b]) })
	out := make([]float64, len(ps))
	running := 0.0
	for k, i := range order {
		running = math.Max(running, math.Min(1, float64(len(ps)-k)*ps[i]))
		out[i] = running
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// maxRuns bounds the runs a verdict asks for: beyond it, more runs are not
// the way to decide (the change is within the noise).
const maxRuns = 1000

// minRuns is the fewest runs per side with which the U test can reach p
// <= alpha at all: when every head run lies beyond every base run, its
// two-sided p-value is 2/C(2n, n), the smallest it can be.
func minRuns(alpha float64) int {
	for n := 1; n <= maxRuns; n++ {
		lg2n, _ := math.Lgamma(float64(2*n + 1))
		lgn, _ := math.Lgamma(float64(n + 1))
		if math.Log(2)-(lg2n-2*lgn) <= math.Log(alpha) {
			return n
		}
	}
	return maxRuns + 1
}

// power is the chance with which RunsNeeded's runs detect the change.
const power = 0.8

// uEfficiency is the U test's asymptotic efficiency relative to the t test
// at its worst over all distributions (Hodges and Lehmann: 108/125): a
// sample size the t test's formula gives, divided by it, is enough for the
// U test whatever the runs' distribution.
const uEfficiency = 108.0 / 125

// runsNeeded is how many runs per side would detect, with 80% power, a
// shift of the size the runs showed (the difference of their means) given
// their spread (the pooled standard deviation), at alpha shared among
// tested figures as Holm's first step shares it; never fewer than
// minRuns. Without spread to go by (one run a side, or runs that agree
// within each side) it is minRuns; maxRuns+1 means more than maxRuns.
func runsNeeded(bs, hs []float64, alpha float64, tested int) int {
	a := alpha / float64(max(1, tested))
	least := minRuns(a)
	shift := math.Abs(stat.Mean(hs, nil) - stat.Mean(bs, nil))
	if shift == 0 {
		return maxRuns + 1
	}
	df := len(bs) + len(hs) - 2
	if df <= 0 {
		return least
	}
	pooled := (float64(len(bs)-1)*variance(bs) + float64(len(hs)-1)*variance(hs)) / float64(df)
	if pooled == 0 {
		return least
	}
	z := distuv.UnitNormal.Quantile(1-a/2) + distuv.UnitNormal.Quantile(power)
	n := 2 * z * z * pooled / (shift * shift) / uEfficiency
	if n > maxRuns {
		return maxRuns + 1
	}
	return max(least, int(math.Ceil(n)))
}

func variance(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	return stat.Variance(xs, nil)
}

// uDirection is which side's runs are larger, pair by pair (the sign of
// the U statistic against its middle): +1 head, -1 base, 0 neither.
func uDirection(bs, hs []float64) int {
	s := 0
	for _, b := range bs {
		for _, h := range hs {
			s += sign(b, h)
		}
	}
	return sign(0, float64(s))
}

// pooledSame reports whether every run on both sides has the same value.
func pooledSame(bs, hs []float64) bool {
	all := append(slices.Clone(bs), hs...)
	return !slices.ContainsFunc(all, func(v float64) bool { return v != all[0] })
}
