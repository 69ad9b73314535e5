package report

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// TestRoundTicks: every tick is labelled, at a round step; whole numbers
// only where counts are ticked, and on a time axis zero is a tick whenever
// it is in range (the step an aligned axis is at).
func TestRoundTicks(t *testing.T) {
	tests := []struct {
		floor    float64
		min, max float64
		want     []string
	}{
		{1, 0.5, 4.5, []string{"1", "2", "3", "4"}},
		{1, 0.5, 16.5, []string{"2", "4", "6", "8", "10", "12", "14", "16"}},
		{1, 0.5, 40.5, []string{"5", "10", "15", "20", "25", "30", "35", "40"}},
		{1, 0.5, 700.5, []string{"100", "200", "300", "400", "500", "600", "700"}},
		{0, -3.4, 1.3, []string{"-3", "-2.5", "-2", "-1.5", "-1", "-0.5", "0", "0.5", "1"}},
		{0, -43.5, 57.9, []string{"-40", "-20", "0", "20", "40"}},
		{0, 0, 1.55, []string{"0", "0.2", "0.4", "0.6", "0.8", "1", "1.2", "1.4"}},
		{0, 40.93, 41.27, []string{"40.95", "41", "41.05", "41.1", "41.15", "41.2", "41.25"}},
		{0, 1, 1, nil},
	}
	for _, tt := range tests {
		var got []string
		for _, tk := range (roundTicks{floor: tt.floor}).Ticks(tt.min, tt.max) {
			got = append(got, tk.Label)
		}
		require.Equal(t, tt.want, got, "%v to %v", tt.min, tt.max)
	}
}

func TestBucketWidth(t *testing.T) {
	require.Equal(t, 0.1, bucketWidth(1.7, 0.1))   // never finer than the probe interval
	require.Equal(t, 1.0, bucketWidth(133, 0.1))   // about 150 buckets
	require.Equal(t, 0.25, bucketWidth(10, 0.25))  // interval wins
	require.Equal(t, 600.0, bucketWidth(1e6, 0.1)) // beyond the table
}

// TestFailureSteps: failures are drawn per second, bucket by bucket, from
// where probing began; after a bucket without failures a line rises at the
// first failure, which may be after the bucket's edge (and after the step,
// mid-bucket, that caused it), never before.
func TestFailureSteps(t *testing.T) {
	tests := []struct {
		name        string
		times       []float64
		lo, hi      float64
		base, width float64
		buckets     int
		want        plotter.XYs
	}{
		{"a failure mid-bucket", []float64{41.3, 41.8}, 40, 43, 40, 1, 3,
			plotter.XYs{{X: 40, Y: 0}, {X: 41, Y: 0}, {X: 41, Y: 0}, {X: 41.3, Y: 0}, {X: 41.3, Y: 2}, {X: 42, Y: 2}, {X: 42, Y: 0}, {X: 43, Y: 0}}},
		{"failing on, from the bucket's edge", []float64{40.5, 41.3}, 40, 42, 40, 1, 2,
			plotter.XYs{{X: 40, Y: 0}, {X: 40.5, Y: 0}, {X: 40.5, Y: 1}, {X: 41, Y: 1}, {X: 41, Y: 1}, {X: 42, Y: 1}}},
		{"probing began mid-bucket", []float64{41.5}, 40.8, 42, 40, 1, 2,
			plotter.XYs{{X: 40.8, Y: 0}, {X: 41, Y: 0}, {X: 41, Y: 0}, {X: 41.5, Y: 0}, {X: 41.5, Y: 1}, {X: 42, Y: 1}}},
		{"a failure on the edge", []float64{41}, 40, 42, 40, 0.5, 4,
			plotter.XYs{{X: 40, Y: 0}, {X: 40.5, Y: 0}, {X: 40.5, Y: 0}, {X: 41, Y: 0}, {X: 41, Y: 2}, {X: 41.5, Y: 2}, {X: 41.5, Y: 0}, {X: 42, Y: 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, failureSteps(tt.times, tt.lo, tt.hi, tt.base, tt.width, tt.buckets))
		})
	}
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
