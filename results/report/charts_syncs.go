package report

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// syncTimeline is sync duration against time since the run started, with
// the scenario's steps marked.
func syncTimeline(runs []*run, basis string, v timeView) (chart, error) {
	ch := chart{ID: "sync-timeline", Title: "Sync duration over time (" + basis + ")",
		Caption: "Each mark is a sync at its start, its horizontal bar how long it ran; vertical dashed lines mark the scenario's steps, labelled above the plot. Look for spikes right after a step (a restart, a burst of changes) and for a floor that rises over the run."}
	v.name(&ch, runs)
	lo, hi := math.Inf(1), 0.0
	enough := false
	for _, r := range runs {
		enough = enough || len(r.File.Syncs) > 1
		for _, s := range r.File.Syncs {
			if s.Seconds > 0 {
				lo = math.Min(lo, s.Seconds)
			}
			hi = math.Max(hi, s.Seconds)
		}
	}
	if !enough {
		ch.NoData = noSyncs(runs, "a timeline needs at least two syncs")
		return ch, nil
	}
	p := newPlot(timeAxis(runs), "sync duration")
	useLogY(p, lo, hi)
	secondsAxis(&p.Y)
	// Headroom above the slowest sync keeps its dot off the frame.
	yLo, yHi := 0.0, hi*1.1
	if _, log := p.Y.Scale.(plot.LogScale); log {
		yLo, yHi = lo*0.8, hi*1.5
	}
	p.Y.Min, p.Y.Max = yLo, yHi
	// One colour and mark per proxier generation and family (one run), or
	// per run, listed in that order. Syncs are not joined by lines: the
	// time between two syncs is not a duration of anything.
	type bar struct {
		r *run
		s record.Sync
	}
	type series struct {
		label string
		color color.RGBA
		bars  []bar
	}
	var all []series
	index := map[string]int{}
	key := func(i int, s record.Sync) string {
		if len(runs) > 1 {
			return strconv.Itoa(i) // two runs' labels may be alike
		}
		return fmt.Sprintf("proxier %d %s", s.Proxier, s.Family)
	}
	for i, r := range runs {
		for _, s := range r.File.Syncs {
			if _, ok := index[key(i, s)]; !ok {
				index[key(i, s)] = len(all)
				se := series{label: key(i, s), color: colorOf(len(all))}
				if len(runs) > 1 {
					se.label, se.color = r.Label, r.Color
				}
				all = append(all, se)
			}
		}
	}
	// The shortest run last, on top: on a shared axis its syncs are the
	// fewest and the most crowded.
	var drawn []int // series in the order drawn
	for _, i := range drawOrder(runs) {
		for _, s := range runs[i].File.Syncs {
			j := index[key(i, s)]
			if len(all[j].bars) == 0 {
				drawn = append(drawn, j)
			}
			all[j].bars = append(all[j].bars, bar{runs[i], s})
		}
	}
	legend := make([]legendItem, len(all))
	var failed plotter.XYs
	for k, j := range drawn {
		// Each series in its own dashes, and thinner than those drawn
		// before it: bars of two runs (or families) that coincide both show.
		sty := seriesStyle(all[j].color, k, len(drawn))
		g := seriesGlyphs[j%len(seriesGlyphs)]
		legend[j] = lineLegend(all[j].label, sty, g.name)
		for _, b := range all[j].bars {
			st := sty
			if b.s.Failed() {
				st.Color = failedColor
			}
			x, y := b.r.since(b.s.Start), math.Max(b.s.Seconds, lo)
			l, err := plotter.NewLine(plotter.XYs{{X: x, Y: y}, {X: x + b.s.Seconds, Y: y}})
			if err != nil {
				return ch, err
			}
			l.LineStyle = st
			p.Add(l)
			if err := addGlyphs(p, plotter.XYs{{X: x, Y: y}}, draw.GlyphStyle{Color: st.Color, Radius: vg.Points(2.5), Shape: g.shape}); err != nil {
				return ch, err
			}
			if b.s.Failed() {
				failed = append(failed, plotter.XY{X: x, Y: y})
			}
		}
	}
	if len(drawn) > 1 {
		ch.Caption += " Bars that coincide are told apart by their dashes; each series is drawn thinner than those under it."
	}
	if err := addCrosses(p, failed); err != nil {
		return ch, err
	}
	// A little room after the last event, so that it is not on the frame.
	setTimeRange(p, v.lo, v.hi+(v.hi-v.lo)*0.02)
	ch.Legend = legend
	if item, note, ok := failedLegend(runs); ok {
		ch.Legend = append(ch.Legend, item)
		ch.Caption += " " + note
	}
	ch.Caption += alignHint(runs)
	var err error
	ch.SVG, err = renderTimeChart(p, ch.Title, stepMarks(runs))
	return ch, err
}

// setTimeRange sets a time axis's range, once the data is added (adding
// widens the axis to whatever the data holds, and a zoom is narrower). Its
// ticks are round seconds, every one labelled, zero among them when in
// range: on an axis aligned at a step, zero is the step. (The default
// ticker leaves some ticks unlabelled, and labelling zero besides made a
// range of -3.4 to 1.3 s read "-3, , -1, 0, 1".)
func setTimeRange(p *plot.Plot, lo, hi float64) {
	p.X.Min, p.X.Max = lo, hi
	p.X.Tick.Marker = roundTicks{}
}

// drawOrder is the runs from the longest to the shortest, so that the
// shortest is drawn last, on top of the others.
func drawOrder(runs []*run) []int {
	order := make([]int, len(runs))
	for i := range order {
		order[i] = i
	}
	length := func(i int) float64 { lo, hi := timeSpan(runs[i : i+1]); return hi - lo }
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(length(b), length(a)) })
	return order
}

// alignHint is a caption sentence for runs of very different lengths on
// one axis, where the short one is squeezed into a corner: it names a step
// they all have to align them at. Empty when they are aligned already,
// or close enough in length.
func alignHint(runs []*run) string {
	if len(runs) < 2 || runs[0].from != "" {
		return ""
	}
	short, long := math.Inf(1), 0.0
	for _, r := range runs {
		lo, hi := timeSpan([]*run{r})
		short, long = math.Min(short, hi-lo), math.Max(long, hi-lo)
	}
	if short*4 > long {
		return ""
	}
	hint := fmt.Sprintf(" The runs differ in length (%s and %s) on one axis", results.FormatSeconds(short), results.FormatSeconds(long))
	if k := commonStep(runs); k != "" {
		return hint + fmt.Sprintf("; align them at a step they share with --align %s.", k)
	}
	return hint + "; align them at a step they share with --align."
}

// commonStep is a step kind every run has other than the first step (which
// is at the start anyway), preferring a restart: the event runs are
// usually compared at.
func commonStep(runs []*run) string {
	var kinds []string
	for i, r := range runs {
		var have []string
		for j, st := range r.File.Steps {
			if j > 0 && !slices.Contains(have, st.Kind) {
				have = append(have, st.Kind)
			}
		}
		if i == 0 {
			kinds = have
			continue
		}
		kinds = slices.DeleteFunc(kinds, func(k string) bool { return !slices.Contains(have, k) })
	}
	if i := slices.IndexFunc(kinds, func(k string) bool { return strings.Contains(k, "restart") }); i >= 0 {
		return kinds[i]
	}
	if len(kinds) > 0 {
		return kinds[0]
	}
	return ""
}

// addCrosses marks failed syncs.
func addCrosses(p *plot.Plot, xys plotter.XYs) error {
	return addGlyphs(p, xys, draw.GlyphStyle{Color: failedColor, Radius: vg.Points(5), Shape: draw.CrossGlyph{}})
}

// failedLegend is the legend entry and caption sentence of the failed
// syncs of runs, naming the first error so that a reader sees why they
// failed without opening the file; ok is false when none failed.
func failedLegend(runs []*run) (item legendItem, note string, ok bool) {
	n, total := 0, 0
	var first *record.Sync
	for _, r := range runs {
		total += len(r.File.Syncs)
		n += r.File.Summary.FailedSyncs
		if first == nil {
			first = results.FirstFailure(r.File)
		}
	}
	if first == nil {
		return legendItem{}, "", false
	}
	item = legendItem{Label: fmt.Sprintf("failed sync (%d of %d)", n, total), Color: hexColor(failedColor), Style: "cross"}
	return item, fmt.Sprintf("Crosses mark the %d failed syncs; the first (%s) failed with: %s", n, first.Key(), first.Error), true
}

// stepText names a step without repeating its kind ("sleep: sleep 300ms").
func stepText(st record.Step) string {
	switch {
	case st.Label == "":
		return st.Kind
	case strings.HasPrefix(st.Label, st.Kind):
		return st.Label
	}
	return st.Kind + ": " + st.Label
}
