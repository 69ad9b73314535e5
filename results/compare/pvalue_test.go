package compare

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPValuesAreProbabilities: over random inputs, ties and tiny samples
// included (where benchmath's U test printed p = 1.111), every p-value is
// within [0, 1], before and after Holm's adjustment.
func TestPValuesAreProbabilities(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	o := DefaultOptions()
	var ps []float64
	for i := 0; i < 2000; i++ {
		sample := func() []float64 {
			xs := make([]float64, 1+r.IntN(6))
			for k := range xs {
				xs[k] = float64(r.IntN(3)) // mostly ties
			}
			return xs
		}
		bs, hs := sample(), sample()
		p := uTest(bs, hs, o)
		require.False(t, math.IsNaN(p) || p < 0 || p > 1, "U(%v, %v) = %v", bs, hs, p)
		ps = append(ps, p)
	}
	for i, p := range holm(ps) {
		require.False(t, math.IsNaN(p) || p < ps[i] || p > 1, "holm(%v) = %v", ps[i], p)
	}
}

func TestHolm(t *testing.T) {
	// Four p-values: the smallest times 4, the next times 3, and so on,
	// never below the one before (0.04 times 1 becomes 0.06).
	require.InDeltaSlice(t, []float64{0.03, 0.06, 0.06, 0.02}, holm([]float64{0.01, 0.04, 0.03, 0.005}), 1e-12)
	require.Equal(t, []float64{1, 1}, holm([]float64{0.9, 0.6}))
	require.Empty(t, holm(nil))
}

// TestMinRuns: the fewest runs per side at which the U test's smallest
// p-value, 2/C(2n, n), reaches alpha.
func TestMinRuns(t *testing.T) {
	for _, tt := range []struct {
		alpha float64
		runs  int
	}{
		{0.05, 4},         // 2/70 = 0.029; with 3 runs 2/20 = 0.1
		{0.05 / 10, 6},    // 2/924 = 0.0022; with 5 runs 2/252 = 0.0079
		{0.05 / 50, 7},    // 2/3432 = 0.00058
		{0.05 / 100, 8},   // 2/12870 = 0.000155
		{0.05 / 400, 9},   // 2/48620 = 0.000041
		{0.05 / 2000, 10}, // 2/184756 = 0.0000108
	} {
		require.Equal(t, tt.runs, minRuns(tt.alpha), "alpha %g", tt.alpha)
		// And the U test agrees: that many runs, every head run above every base run.
		bs, hs := make([]float64, tt.runs), make([]float64, tt.runs)
		for i := range bs {
			bs[i], hs[i] = float64(i), float64(100+i)
		}
		require.LessOrEqual(t, uTest(bs, hs, DefaultOptions()), tt.alpha)
		require.Greater(t, uTest(bs[1:], hs[1:], DefaultOptions()), tt.alpha)
	}
}

func TestRunsNeeded(t *testing.T) {
	// Runs that agree within each side: the fewest the test allows.
	require.Equal(t, 4, runsNeeded([]float64{0, 0}, []float64{10, 10}, 0.05, 1))
	require.Equal(t, 8, runsNeeded([]float64{0}, []float64{10}, 0.05, 100), "one run a side: no spread to go by")
	// A shift of one standard deviation: 2 (z(0.975) + z(0.8))^2 / 0.864 = 18.2 runs per side.
	bs := []float64{9, 11, 9, 11, 9, 11, 9, 11}
	hs := []float64{10, 12, 10, 12, 10, 12, 10, 12}
	sd := math.Sqrt(variance(bs))
	shifted := make([]float64, len(hs))
	for i, h := range hs {
		shifted[i] = h - 1 + sd
	}
	require.Equal(t, 19, runsNeeded(bs, shifted, 0.05, 1))
	// Shared among more figures, it takes more.
	require.Greater(t, runsNeeded(bs, shifted, 0.05, 50), 19)
	// No shift of the means: no number of runs finds one.
	require.Equal(t, maxRuns+1, runsNeeded([]float64{1, 3}, []float64{2, 2}, 0.05, 1))
}

func TestUDirection(t *testing.T) {
	require.Equal(t, 1, uDirection([]float64{1, 2, 3}, []float64{2, 3, 4}))
	require.Equal(t, -1, uDirection([]float64{5, 5}, []float64{1, 9, 0}))
	require.Equal(t, 0, uDirection([]float64{1, 3}, []float64{2, 2}))
}
