package report

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/plotter"
)

func TestWholeTicks(t *testing.T) {
	tests := []struct {
		min, max float64
		want     []string
	}{
		{0.5, 4.5, []string{"1", "2", "3", "4"}},
		{0.5, 16.5, []string{"2", "4", "6", "8", "10", "12", "14", "16"}},
		{0.5, 40.5, []string{"5", "10", "15", "20", "25", "30", "35", "40"}},
		{0.5, 700.5, []string{"100", "200", "300", "400", "500", "600", "700"}},
	}
	for _, tt := range tests {
		var got []string
		for _, tk := range (wholeTicks{}).Ticks(tt.min, tt.max) {
			got = append(got, tk.Label)
		}
		require.Equal(t, tt.want, got)
	}
}

func TestBucketWidth(t *testing.T) {
	require.Equal(t, 0.1, bucketWidth(1.7, 0.1))   // never finer than the probe interval
	require.Equal(t, 1.0, bucketWidth(133, 0.1))   // about 150 buckets
	require.Equal(t, 0.25, bucketWidth(10, 0.25))  // interval wins
	require.Equal(t, 600.0, bucketWidth(1e6, 0.1)) // beyond the table
}

func TestCDFPoints(t *testing.T) {
	require.Equal(t, plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 0}, {X: 1, Y: 0.5}, {X: 3, Y: 0.5}, {X: 3, Y: 1}},
		cdfPoints([]float64{3, 1}, 10))
	require.Equal(t, plotter.XYs{{X: 0, Y: 0}}, cdfPoints(nil, 10))

	xs := make([]float64, 100001)
	for i := range xs {
		xs[i] = float64((i * 7919) % len(xs))
	}
	pts := cdfPoints(xs, 2000)
	require.LessOrEqual(t, len(pts), 2*2000+3)
	last := pts[len(pts)-1]
	require.Equal(t, plotter.XY{X: 100000, Y: 1}, last)
	for i := 1; i < len(pts); i++ {
		require.GreaterOrEqual(t, pts[i].X, pts[i-1].X)
		require.GreaterOrEqual(t, pts[i].Y, pts[i-1].Y)
	}
}
