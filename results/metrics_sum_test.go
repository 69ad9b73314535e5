package results

import "testing"

// TestSumsAgree: a histogram's sum agrees with its raw samples up to a
// nanosecond per sample (a release's samples are differences of its running
// sum), not beyond.
func TestSumsAgree(t *testing.T) {
	xs := make([]float64, 25)
	for i := range xs {
		xs[i] = 0.0963516734
	}
	total := sum(xs)
	for _, tc := range []struct {
		off  float64
		want bool
	}{{0, true}, {1e-8, true}, {-2e-8, true}, {1e-6, false}} {
		if got := sumsAgree(total+tc.off, xs); got != tc.want {
			t.Errorf("off by %g: sumsAgree = %v, want %v", tc.off, got, tc.want)
		}
	}
}
