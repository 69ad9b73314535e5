package compare

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFisherExact(t *testing.T) {
	// Fisher's lady tasting tea: 3 of 4 cups right each way, two-sided.
	require.InDelta(t, 0.4857, fisherExact(3, 1, 1, 3), 1e-4)
	require.InDelta(t, 1.0, fisherExact(2, 2, 2, 2), 1e-12)
	// The kernel restart: 0 of 329 attempts failed against 41 of 686.
	p := fisherExact(0, 329, 41, 686-41)
	require.Less(t, p, 1e-5)
	require.Greater(t, p, 0.0)
	require.Equal(t, 1.0, fisherExact(0, 10, 0, 20), "nothing failed on either side")
}

// TestPValuesAreProbabilities: over random inputs, ties and tiny samples
// included (where benchmath's U test printed p = 1.111), every p-value is
// within [0, 1].
func TestPValuesAreProbabilities(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	o := DefaultOptions()
	for i := 0; i < 2000; i++ {
		a, b, c, d := r.IntN(50), r.IntN(5000), r.IntN(50), r.IntN(5000)
		p := fisherExact(a, b, c, d)
		require.False(t, math.IsNaN(p) || p < 0 || p > 1, "fisher(%d,%d,%d,%d) = %v", a, b, c, d, p)

		sample := func() []float64 {
			xs := make([]float64, 1+r.IntN(6))
			for k := range xs {
				xs[k] = float64(r.IntN(3)) // mostly ties
			}
			return xs
		}
		bs, hs := sample(), sample()
		p, _ = uTest(bs, hs, o)
		require.False(t, math.IsNaN(p) || p < 0 || p > 1, "U(%v, %v) = %v", bs, hs, p)
	}
}
