package report

import (
	"fmt"
	"image/color"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/kpsim/kpsim/record"
)

// phaseStack is one run's syncs as stacked bars, one segment per phase.
func phaseStack(r *run, phases []string, multi bool, basis string) (chart, error) {
	ch := chart{ID: "phase-stack", Title: "Phases of each sync (" + basis + ")",
		Caption: "One bar per sync, in start order, split into its phases. Look for the phase that makes up the tall bars: that is where a slow sync spends its time."}
	if multi {
		ch.Caption += " Each run has its own scale."
	}
	if multi {
		ch.ID += "-" + slug(r.Label)
		ch.Title = "Phases of each sync: " + r.Label + " (" + basis + ")"
	}
	if len(r.File.Syncs) == 0 {
		ch.NoData = "No data: the run recorded no syncs."
		return ch, nil
	}
	if !phased(r.File) {
		ch.NoData = notPhased([]*run{r})
		return ch, nil
	}
	n := len(r.File.Syncs)
	p := newPlot("sync (in start order)", "duration")
	secondsAxis(&p.Y)
	p.X.Tick.Marker = roundTicks{floor: 1}
	width := (chartWidth - vg.Inch) / vg.Length(n+1) * 0.8
	width = vg.Length(math.Min(float64(width), float64(vg.Points(24))))
	width = vg.Length(math.Max(float64(width), float64(vg.Points(0.5))))
	var below *plotter.BarChart
	for j, ph := range phases {
		vals := make(plotter.Values, n)
		for i, s := range r.File.Syncs {
			for _, sp := range s.Phases {
				if sp.Name == ph {
					vals[i] += sp.Seconds
				}
			}
		}
		b, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return ch, err
		}
		b.Color = colorOf(j)
		b.LineStyle.Width = 0
		b.XMin = 1
		if below != nil {
			b.StackOn(below)
		}
		below = b
		p.Add(b)
		ch.Legend = append(ch.Legend, legendItem{Label: ph, Color: hexColor(colorOf(j)), Style: "box"})
	}
	p.X.Min, p.X.Max = 0.5, float64(n)+0.5
	p.Y.Min = 0
	// A failed sync's bar is what it did before it failed; a cross above
	// it says so.
	top := 0.0
	for _, s := range r.File.Syncs {
		top = math.Max(top, phaseTotal(&s))
	}
	var failed plotter.XYs
	for i, s := range r.File.Syncs {
		if s.Failed() {
			failed = append(failed, plotter.XY{X: float64(i + 1), Y: phaseTotal(&s) + top*0.05})
		}
	}
	if err := addCrosses(p, failed); err != nil {
		return ch, err
	}
	if item, note, ok := failedLegend([]*run{r}); ok {
		p.Y.Max = top * 1.1
		ch.Legend = append(ch.Legend, item)
		ch.Caption += " " + note
	}
	var err error
	ch.SVG, err = render(p, ch.Title, chartHeight)
	return ch, err
}

func phaseTotal(s *record.Sync) float64 {
	t := 0.0
	for _, p := range s.Phases {
		t += p.Seconds
	}
	return t
}

// phaseBoxes is the distribution of each phase's duration, one box per
// phase (and per run when several are overlaid).
func phaseBoxes(runs []*run, phases []string, basis string) (chart, error) {
	ch := chart{ID: "phase-distribution", Title: "Distribution of each phase's duration (" + basis + ")",
		Caption: "Box: middle half of the syncs; line: median; whiskers: 1.5x the box; dots: outliers. Look for a phase whose box sits high or whose outliers reach seconds."}
	enough, failed := false, 0
	lo, hi := math.Inf(1), 0.0
	for _, r := range runs {
		enough = enough || r.File.Summary.Sync.N > 1
		failed += r.File.Summary.FailedSyncs
		for _, s := range r.File.Syncs {
			if !s.Finished() {
				continue
			}
			for _, p := range s.Phases {
				if p.Seconds > 0 {
					lo = math.Min(lo, p.Seconds)
				}
				hi = math.Max(hi, p.Seconds)
			}
		}
	}
	if failed > 0 {
		// As in the summary and the phase table: a failed sync stopped part
		// way, and its phases are not durations of a sync's work.
		ch.Caption += fmt.Sprintf(" The %d failed syncs are left out.", failed)
	}
	if enough && len(phases) == 0 {
		ch.NoData = notPhased(runs)
		return ch, nil
	}
	if !enough || hi == 0 {
		ch.NoData = noSyncs(runs, "a distribution needs at least two syncs that succeeded")
		return ch, nil
	}
	p := newPlot("phase", "duration")
	useLogY(p, lo, hi)
	secondsAxis(&p.Y)
	boxW := (chartWidth - vg.Inch) / vg.Length(len(phases)) * 0.7 / vg.Length(len(runs))
	boxW = vg.Length(math.Min(float64(boxW), float64(vg.Points(40))))
	for i, r := range runs {
		if !phased(r.File) {
			ch.Caption += " " + notPhased([]*run{r})
			continue
		}
		for j, ph := range phases {
			var vals plotter.Values
			for _, s := range r.File.Syncs {
				if s.Failed() {
					continue
				}
				for _, sp := range s.Phases {
					if sp.Name == ph {
						// A log axis cannot place zero; draw it at the floor.
						vals = append(vals, math.Max(sp.Seconds, lo))
					}
				}
			}
			if len(vals) == 0 {
				continue
			}
			b, err := plotter.NewBoxPlot(boxW, float64(j), vals)
			if err != nil {
				return ch, err
			}
			b.Offset = (vg.Length(i) - vg.Length(len(runs)-1)/2) * boxW * 1.15
			c := r.Color
			if len(runs) == 1 {
				c = colorOf(0)
			}
			b.FillColor = withAlpha(c, 0x60)
			b.BoxStyle.Color = c
			b.MedianStyle.Color = c
			b.MedianStyle.Width = vg.Points(2)
			b.WhiskerStyle.Color = c
			b.GlyphStyle.Color = c
			b.GlyphStyle.Radius = vg.Points(1.5)
			p.Add(b)
		}
		if len(runs) > 1 {
			ch.Legend = append(ch.Legend, legendItem{Label: r.Label, Color: hexColor(r.Color), Style: "box"})
		}
	}
	p.NominalX(phases...)
	if len(phases) > 6 {
		p.X.Tick.Label.Rotation = math.Pi / 8
		p.X.Tick.Label.XAlign = -1
		p.X.Tick.Label.YAlign = -0.5
	}
	var err error
	ch.SVG, err = render(p, ch.Title, chartHeight)
	return ch, err
}

// programmingCDF is the cumulative distribution of network programming latency.
func programmingCDF(runs []*run, basis string) (chart, error) {
	ch := chart{ID: "programming-cdf", Title: "Network programming latency, cumulative (" + basis + ")",
		Caption: "Share of EndpointSlice changes in the kernel within a given time of being made. Read p99 where the curve crosses 0.99; a long flat tail means a few changes waited for a slow sync (scale tests hold p99 to 20-30 s)."}
	changes := 0
	for _, r := range runs {
		changes += len(programmedSeconds(r.File))
	}
	if changes == 0 {
		ch.NoData = "No data: no sync applied an EndpointSlice change that carried a trigger time."
		return ch, nil
	}
	p := newCDFPlot("latency from change to kernel (s)", "share of changes")
	for i, r := range runs {
		xs := programmedSeconds(r.File)
		if len(xs) == 0 {
			continue
		}
		// Runs with the same latencies draw the same curve: each its own
		// dashes, so that both show.
		item, err := addSeries(p, cdfPoints(xs, cdfSteps), fmt.Sprintf("%s (%d changes)", r.Label, len(xs)), r.Color, i, len(runs), false)
		if err != nil {
			return ch, err
		}
		ch.Legend = append(ch.Legend, item)
	}
	// Room right of the slowest sample, so that its step is not the frame.
	p.X.Max *= 1.04
	if err := addLine(p, plotter.XYs{{X: 0, Y: 0.99}, {X: p.X.Max, Y: 0.99}}, color.RGBA{0x99, 0x99, 0x99, 0xff}, true); err != nil {
		return ch, err
	}
	var err error
	ch.SVG, err = render(p, ch.Title, chartHeight)
	return ch, err
}

// newCDFPlot is a plot of shares from 0 to 1 against a quantity from 0.
func newCDFPlot(xLabel, yLabel string) *plot.Plot {
	p := newPlot(xLabel, yLabel)
	p.Y.Min, p.Y.Max = 0, 1.02
	p.X.Min = 0
	return p
}

// cdfSteps bounds the steps drawn per CDF.
const cdfSteps = 2000

// cdfPoints is the empirical CDF of xs as a staircase of at most maxSteps
// steps: a run with 100,000 changes would otherwise draw a path no browser
// wants to render. Every step drawn is exact, and the last (the slowest
// sample, reaching 1) is always drawn. xs is sorted in place.
func cdfPoints(xs []float64, maxSteps int) plotter.XYs {
	sort.Float64s(xs)
	stride := max(1, (len(xs)+maxSteps-1)/maxSteps)
	pts := plotter.XYs{{X: 0, Y: 0}}
	y := 0.0
	for i := stride - 1; len(xs) > 0; i += stride {
		i = min(i, len(xs)-1)
		next := float64(i+1) / float64(len(xs))
		pts = append(pts, plotter.XY{X: xs[i], Y: y}, plotter.XY{X: xs[i], Y: next})
		y = next
		if i == len(xs)-1 {
			break
		}
	}
	return pts
}

func programmedSeconds(f *record.File) []float64 {
	var xs []float64
	for _, s := range f.Syncs {
		for _, p := range s.Programmed {
			xs = append(xs, p.Seconds)
		}
	}
	return xs
}
