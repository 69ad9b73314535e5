package report

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
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

// TestLayoutLabels: labels that collide go to further lanes, never
// dropped; no two labels in a lane overlap; a label that would run off the
// right edge ends at its step instead; lanes are as few as the most labels
// overlapping at one point need.
func TestLayoutLabels(t *testing.T) {
	const lo, hi, gap = 0, 500, 4
	// Eight steps within 3 points of one another (a restart a moment
	// after "probes on"), one apart from them, and two at the right edge.
	xs := []vg.Length{100, 100, 101, 102, 102, 103, 103, 103, 300, 495, 498}
	widths := []vg.Length{60, 40, 80, 30, 30, 50, 20, 90, 60, 70, 40}
	placed, lanes := layoutLabels(xs, widths, lo, hi, gap)
	require.Len(t, placed, len(xs), "every label is placed")
	require.Equal(t, 8, lanes, "the eight labels at one point need eight lanes, and no more")
	for i, p := range placed {
		require.GreaterOrEqual(t, p.left, vg.Length(lo), "label %d", i)
		require.LessOrEqual(t, p.left+widths[i], vg.Length(hi), "label %d", i)
		if p.right {
			require.Equal(t, xs[i], p.left+widths[i], "label %d ends at its step", i)
		} else {
			require.Equal(t, xs[i], p.left, "label %d begins at its step", i)
		}
		for j := range i {
			q := placed[j]
			if p.lane != q.lane {
				continue
			}
			apart := p.left >= q.left+widths[j]+gap || q.left >= p.left+widths[i]+gap
			require.True(t, apart, "labels %d [%v, %v] and %d [%v, %v] overlap in lane %d",
				i, p.left, p.left+widths[i], j, q.left, q.left+widths[j], p.lane)
		}
	}
	require.True(t, placed[9].right && placed[10].right, "the labels at the right edge end at their steps")
	require.Zero(t, placed[8].lane, "a label clear of the others stays in the first lane")

	// Labels apart from one another share one lane.
	_, lanes = layoutLabels([]vg.Length{0, 100, 200}, []vg.Length{90, 90, 90}, lo, hi, gap)
	require.Equal(t, 1, lanes)
	_, lanes = layoutLabels(nil, nil, lo, hi, gap)
	require.Zero(t, lanes)
}
