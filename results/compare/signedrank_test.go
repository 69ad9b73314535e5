package compare

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSignedRank(t *testing.T) {
	tests := []struct {
		name string
		d    []float64
		p    float64
		n    int
	}{
		// Hollander & Wolfe's depression scores (x - y), the textbook
		// example: V = 40, two-sided exact p = 20/512.
		{"textbook", []float64{0.952, -0.147, 1.022, 0.43, 0.62, 0.59, 0.49, -0.08, 0.01}, 20.0 / 512, 9},
		{"five all up: 2 of 32 assignments as extreme", []float64{1, 2, 3, 4, 5}, 2.0 / 32, 5},
		{"six all down", []float64{-1, -2, -3, -4, -5, -6}, 2.0 / 64, 6},
		{"zeros dropped", []float64{0, 0, 1, 2, 3, 4, 5, 0}, 2.0 / 32, 5},
		// Ties share ranks 1.5, 1.5, 3: positive sum 1.5 of 6; sums as
		// small: {}, {1.5}, {1.5'}: 3 of 8, both tails 6 of 8.
		{"ties", []float64{1, -1, -2}, 6.0 / 8, 3},
		{"balanced", []float64{1, -1, 2, -2, 3, -3}, 1, 6},
		{"nothing", []float64{0, 0}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, n := signedRank(tt.d)
			require.InDelta(t, tt.p, p, 1e-12)
			require.Equal(t, tt.n, n)
			neg := make([]float64, len(tt.d))
			for i, x := range tt.d {
				neg[i] = -x
			}
			pNeg, _ := signedRank(neg)
			require.InDelta(t, p, pNeg, 1e-12, "the test is two-sided")
		})
	}
}

// TestSignedRankApproximation: past the exact limit the normal
// approximation takes over; just below it, both agree.
func TestSignedRankApproximation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, shift := range []float64{0, 0.1, 0.2} {
		d := make([]float64, exactSignedRankLimit)
		for i := range d {
			d[i] = rng.NormFloat64() + shift
		}
		exact, _ := signedRank(d)
		approx, _ := signedRank(append(d, 0.0001, -0.0001)) // two more, the smallest ranks: past the limit
		require.InDelta(t, exact, approx, 0.01, "shift %g", shift)
		if shift == 0.2 {
			require.Less(t, approx, 0.05)
		}
		require.False(t, math.IsNaN(approx))
	}
}
