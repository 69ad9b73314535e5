package report

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/kpsim/kpsim/dataplane"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// palette is Tableau 10: distinct, and readable by most colour-blind readers.
var palette = []color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0xe1, 0x57, 0x59, 0xff}, {0x76, 0xb7, 0xb2, 0xff},
	{0x59, 0xa1, 0x4f, 0xff}, {0xed, 0xc9, 0x48, 0xff}, {0xb0, 0x7a, 0xa1, 0xff}, {0xff, 0x9d, 0xa7, 0xff},
	{0x9c, 0x75, 0x5f, 0xff}, {0xba, 0xb0, 0xac, 0xff},
}

func colorOf(i int) color.RGBA { return palette[i%len(palette)] }

// failedColor marks failed syncs, in the sync timeline instead of their
// proxier's or run's colour: darker than the palette's red, so that a
// failure never reads as one more proxier or run.
var failedColor = color.RGBA{0xb0, 0x00, 0x20, 0xff}

func hexColor(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

// chart is one figure of a report: a rendered SVG, or the reason there is none.
type chart struct {
	ID      string
	Title   string
	Caption string
	SVG     []byte
	NoData  string
	Legend  []legendItem
}

type legendItem struct {
	Label string
	Color string
	Style string // "line", "box" or "cross"
	// A line's swatch is drawn as the chart draws it: its dashes (an SVG
	// dash array, "" for solid), width in points, and glyph ("" for none,
	// else a draw.GlyphDrawer's shape name as glyphName gives it).
	Dash  string
	Width float64
	Glyph string
}

// run is one results file as a report draws it.
type run struct {
	Label string
	File  *record.File
	Color color.RGBA
	// begin is when the run started; origin is the zero of its time axis:
	// begin, or the step the report is aligned at (named by from).
	begin, origin time.Time
	from          string
}

func (r *run) since(t time.Time) float64 { return t.Sub(r.origin).Seconds() }

const (
	chartWidth  = 10 * vg.Inch
	chartHeight = 3.6 * vg.Inch
)

// newPlot returns a plot with kpsim's fonts and labels. Liberation Sans is
// metric-compatible with Arial, which the page names as its fallback, so
// text measured here fits where a browser draws it.
func newPlot(xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	for _, v := range []*font.Variant{
		&p.Title.TextStyle.Font.Variant, &p.X.Label.TextStyle.Font.Variant, &p.Y.Label.TextStyle.Font.Variant,
		&p.X.Tick.Label.Font.Variant, &p.Y.Tick.Label.Font.Variant, &p.Legend.TextStyle.Font.Variant,
	} {
		*v = "Sans"
	}
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	p.X.Label.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.TextStyle.Font.Size = vg.Points(11)
	p.X.Tick.Label.Font.Size = vg.Points(9)
	p.Y.Tick.Label.Font.Size = vg.Points(9)
	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{0xe4}
	grid.Horizontal.Color = color.Gray{0xe4}
	p.Add(grid)
	return p
}

var svgProlog = regexp.MustCompile(`(?s)^<\?xml[^>]*>\s*(<!--.*?-->\s*)?`)

// render draws p as inline SVG, titled for screen readers and tests.
func render(p *plot.Plot, title string, height vg.Length) ([]byte, error) {
	f := frame(p)
	return renderWith(title, height, f.draw)
}

// framed is a plot ready to draw, with the label of a log y axis taken
// off it: gonum/plot reserves room for that label as if it were centred
// on the arithmetic middle of the range, which on a log axis is near the
// top, and pads the plot's top by up to half the label's length. The
// label is drawn beside the axis instead, in room of its own.
type framed struct {
	p     *plot.Plot
	label string
	room  vg.Length
}

func frame(p *plot.Plot) framed {
	f := framed{p: p}
	if _, log := p.Y.Scale.(plot.LogScale); log && p.Y.Label.Text != "" {
		sty := p.Y.Label.TextStyle
		f.label, p.Y.Label.Text = p.Y.Label.Text, ""
		f.room = sty.Height(f.label) + sty.FontExtents().Descent + p.Y.Label.Padding
	}
	return f
}

// area is the part of c the plot is drawn in.
func (f framed) area(c draw.Canvas) draw.Canvas { return draw.Crop(c, f.room, 0, 0, 0) }

func (f framed) draw(c draw.Canvas) {
	inner := f.area(c)
	f.p.Draw(inner)
	if f.label == "" {
		return
	}
	sty := f.p.Y.Label.TextStyle
	sty.Rotation += math.Pi / 2
	data := f.p.DataCanvas(inner)
	x := c.Min.X + sty.Height(f.label) - sty.FontExtents().Descent
	c.FillText(sty, vg.Point{X: x, Y: data.Center().Y}, f.label)
}

// renderWith draws a chart of the given height with drawing, as render does.
func renderWith(title string, height vg.Length, drawing func(draw.Canvas)) ([]byte, error) {
	c := vgsvg.New(chartWidth, height)
	drawing(draw.New(c))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, fmt.Errorf("render chart %q: %w", title, err)
	}
	out := svgProlog.ReplaceAll(b.Bytes(), nil)
	// Give the SVG an accessible title right after its opening tag.
	if i := bytes.Index(out, []byte(">")); i >= 0 {
		var t bytes.Buffer
		t.Write(out[:i+1])
		fmt.Fprintf(&t, "\n<title>%s</title>", htmlEscape(title))
		t.Write(out[i+1:])
		out = t.Bytes()
	}
	return out, nil
}

func htmlEscape(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&#34;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// useLogY switches to a log axis when values span more than a factor of 20,
// as sync times do (milliseconds normally, seconds in an incident).
func useLogY(p *plot.Plot, lo, hi float64) {
	if lo > 0 && hi/lo > 20 {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Label.Text += ", log scale"
	}
}

func addLine(p *plot.Plot, xys plotter.XYs, c color.RGBA, dashed bool) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(1.2)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	return nil
}

// seriesDashes tell apart lines drawn over one another: two services that
// fail together draw the same steps, and colour alone would show only the
// line drawn last. In points; nil is solid.
var seriesDashes = [][]vg.Length{nil, {6, 3}, {2, 2}, {8, 3, 2, 3}, {1, 2.5}, {10, 3, 2, 3, 2, 3}}

// seriesStyle is the line of the i-th of n series drawn over one another:
// its own dashes, and thinner than the series drawn before it, so that a
// line exactly over another leaves that one's edges showing on both sides.
func seriesStyle(c color.RGBA, i, n int) draw.LineStyle {
	d := seriesDashes[i%len(seriesDashes)]
	dashes := make([]vg.Length, len(d))
	for j, l := range d {
		dashes[j] = vg.Points(float64(l))
	}
	return draw.LineStyle{Color: c, Width: vg.Points(1.2 + 0.5*float64(min(n-1-i, 4))), Dashes: dashes}
}

// seriesGlyphs are the dots' shapes per series, filled and outlined in
// turn, so that dots at the same place stay apart; the cross is kept for
// failed syncs. Their names are what the legend's swatch draws.
var seriesGlyphs = []struct {
	name  string
	shape draw.GlyphDrawer
}{
	{"circle", draw.CircleGlyph{}}, {"triangle", draw.TriangleGlyph{}}, {"box", draw.BoxGlyph{}},
	{"ring", draw.RingGlyph{}}, {"pyramid", draw.PyramidGlyph{}}, {"square", draw.SquareGlyph{}},
}

// addSeries draws the i-th of n series as a line in its series style,
// with its points marked in the series' glyph when marks is set, and
// returns its legend entry. A series without points is only in the legend.
func addSeries(p *plot.Plot, xys plotter.XYs, label string, c color.RGBA, i, n int, marks bool) (legendItem, error) {
	sty := seriesStyle(c, i, n)
	glyph := ""
	if marks {
		g := seriesGlyphs[i%len(seriesGlyphs)]
		glyph = g.name
		if err := addGlyphs(p, xys, draw.GlyphStyle{Color: c, Radius: vg.Points(2.5), Shape: g.shape}); err != nil {
			return legendItem{}, err
		}
	}
	if len(xys) > 0 {
		l, err := plotter.NewLine(xys)
		if err != nil {
			return legendItem{}, err
		}
		l.LineStyle = sty
		p.Add(l)
	}
	return lineLegend(label, sty, glyph), nil
}

// lineLegend is the legend entry of a line drawn in sty, with glyph.
func lineLegend(label string, sty draw.LineStyle, glyph string) legendItem {
	dash := make([]string, len(sty.Dashes))
	for i, d := range sty.Dashes {
		dash[i] = strconv.FormatFloat(d.Points(), 'g', 4, 64)
	}
	c, _ := sty.Color.(color.RGBA)
	return legendItem{Label: label, Color: hexColor(c), Style: "line", Dash: strings.Join(dash, ","), Width: sty.Width.Points(), Glyph: glyph}
}

func addGlyphs(p *plot.Plot, xys plotter.XYs, g draw.GlyphStyle) error {
	if len(xys) == 0 {
		return nil
	}
	s, err := plotter.NewScatter(xys)
	if err != nil {
		return err
	}
	s.GlyphStyle = g
	p.Add(s)
	return nil
}

// timeAxis names the time axis by the clock the runs' timestamps were
// read from: on the modeled clock they are modeled instants, on which a
// sync lasts its modeled duration.
// When the runs are aligned at a step, it is seconds from that step.
func timeAxis(runs []*run) string {
	clock := runs[0].File.Clock
	for _, r := range runs[1:] {
		if r.File.Clock != clock {
			clock = "mixed"
		}
	}
	if from := runs[0].from; from != "" {
		switch clock {
		case "mixed":
			return "seconds from " + from + " (clocks differ between runs)"
		case record.ClockModeled:
			return "seconds from " + from + " (modeled time)"
		}
		return "seconds from " + from
	}
	switch clock {
	case "mixed":
		return "time since run start (s; clocks differ between runs)"
	case record.ClockModeled:
		return "modeled time since run start (s)"
	}
	return "time since run start (s)"
}

// phased reports whether a run's syncs record phases: kpsim's proxier does,
// a kube-proxy release reports each sync as one block.
func phased(f *record.File) bool {
	return slices.ContainsFunc(f.Syncs, func(s record.Sync) bool { return len(s.Phases) > 0 })
}

// notPhased is the message of a phase chart for runs that have no phases.
func notPhased(runs []*run) string {
	var who []string
	for _, r := range runs {
		name := r.File.Proxier
		if name == "" || name == record.ProxierKpsim {
			name = "kpsim's proxier"
		}
		if !slices.Contains(who, name) {
			who = append(who, name)
		}
	}
	return fmt.Sprintf("Not phased: %s recorded each sync as one block, without phases.", strings.Join(who, " and "))
}

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

func withAlpha(c color.RGBA, a uint8) color.RGBA {
	// Premultiplied: scale the channels with the alpha.
	return color.RGBA{uint8(uint16(c.R) * uint16(a) / 0xff), uint8(uint16(c.G) * uint16(a) / 0xff), uint8(uint16(c.B) * uint16(a) / 0xff), a}
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

// relabel keeps another ticker's tick positions and writes their labels
// with format: "10ms" reads better than "0.01", and far better than the
// "9.999999999999999e-05" a log axis produces by itself.
type relabel struct {
	inner  plot.Ticker
	format func(float64) string
}

func (r relabel) Ticks(min, max float64) []plot.Tick {
	ts := r.inner.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = r.format(ts[i].Value)
		}
	}
	return ts
}

// secondsAxis labels an axis of durations in their units.
func secondsAxis(a *plot.Axis) {
	a.Tick.Marker = relabel{inner: a.Tick.Marker, format: results.FormatSeconds}
}

// roundTicks are at every multiple of a round step in range, each
// labelled: the smallest step of 1, 2 or 5 times a power of ten, no finer
// than floor, that makes at most 10 of them. A floor of 1 labels only whole
// numbers: sync 2, not sync 1.5.
type roundTicks struct{ floor float64 }

func (r roundTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	if span <= 0 {
		return nil
	}
	unit := math.Pow(10, math.Floor(math.Log10(span/10)))
	step := 10 * unit
	for _, m := range []float64{1, 2, 5} {
		if span/(m*unit) <= 10 {
			step = m * unit
			break
		}
	}
	step = max(step, r.floor)
	// Rounded to the step's decimals, so that 3 steps of 0.1 read 0.3.
	scale := math.Pow(10, max(0, -math.Floor(math.Log10(step))))
	var out []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi; i++ {
		v := math.Round(i*step*scale)/scale + 0 // + 0: zero, never -0
		out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return out
}

// countAxis labels an axis of counts as whole numbers.
func countAxis(a *plot.Axis) {
	a.Tick.Marker = relabel{inner: a.Tick.Marker, format: func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }}
}

func noSyncs(runs []*run, need string) string {
	n := 0
	for _, r := range runs {
		n += len(r.File.Syncs)
	}
	switch n {
	case 0:
		return "No data: the run recorded no syncs."
	case 1:
		return fmt.Sprintf("No data: the run recorded a single sync (%s); %s.", results.FormatSeconds(runs[0].File.Syncs[0].Seconds), need)
	}
	return "No data: " + need + "."
}

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

// maxServiceLines bounds the per-service lines of the disruption chart;
// the rest are summed into one line.
const maxServiceLines = 6

// disruptionTimeline is failed probe attempts per second, per service (one
// run) or per run (several).
func disruptionTimeline(runs []*run, v timeView) (chart, error) {
	ch := chart{ID: "disruption-timeline", Title: "Failed probes per second",
		Caption: "Connection attempts through the dataplane that failed, per second. Any line above zero is broken service traffic; look at how long it lasts and which step it follows."}
	var probed, failed int
	basis := ""
	for _, r := range runs {
		if r.File.Probes != nil {
			probed += r.File.Probes.Attempts
			failed += len(r.File.Probes.Failures)
			basis = r.File.Probes.Basis
		}
	}
	ch.Title += " (" + results.BasisText(basis) + ")"
	v.name(&ch, runs)
	switch {
	case probed == 0:
		ch.NoData = "No data: this run made no probe attempts, so disruption was not measured."
		return ch, nil
	case failed == 0:
		ch.NoData = fmt.Sprintf("No failed probes: all %d attempts succeeded, so there is nothing to plot.", probed)
		return ch, nil
	}
	p := newPlot(timeAxis(runs), "failed attempts per second")
	type series struct {
		label  string
		times  []float64
		lo, hi float64 // the span of the run it belongs to
		color  color.RGBA
	}
	var all []series
	for _, r := range runs {
		pr := r.File.Probes
		if pr == nil || pr.Attempts == 0 {
			continue
		}
		lo, hi := timeSpan([]*run{r})
		// Nothing was probed before the first attempt ("probes on" may come
		// long after the start): no line there, rather than a zero that
		// reads as traffic that did not fail.
		var first time.Time
		for _, t := range pr.Targets {
			if !t.First.IsZero() && (first.IsZero() || t.First.Before(first)) {
				first = t.First
			}
		}
		if !first.IsZero() {
			lo = max(lo, r.since(first))
		}
		if len(runs) > 1 {
			s := series{label: r.Label, lo: lo, hi: hi, color: r.Color}
			for _, fl := range pr.Failures {
				s.times = append(s.times, r.since(fl.Time))
			}
			all = append(all, s)
			continue
		}
		// One line per service and probe kind: a service probed by
		// ClusterIP and by NodePort can fail one way only.
		byTarget := map[string][]float64{}
		for _, fl := range pr.Failures {
			name := fmt.Sprintf("target %d", fl.Target)
			if fl.Target >= 0 && fl.Target < len(pr.Targets) {
				t := pr.Targets[fl.Target]
				name = t.Service + " (" + probeKind(t) + ")"
			}
			byTarget[name] = append(byTarget[name], r.since(fl.Time))
		}
		names := make([]string, 0, len(byTarget))
		for n := range byTarget {
			names = append(names, n)
		}
		sort.Slice(names, func(i, j int) bool {
			if len(byTarget[names[i]]) != len(byTarget[names[j]]) {
				return len(byTarget[names[i]]) > len(byTarget[names[j]])
			}
			return names[i] < names[j]
		})
		var rest []float64
		for i, n := range names {
			if i >= maxServiceLines-1 && len(names) > maxServiceLines {
				rest = append(rest, byTarget[n]...)
				continue
			}
			all = append(all, series{label: n, times: byTarget[n], lo: lo, hi: hi, color: colorOf(i)})
		}
		if len(rest) > 0 {
			all = append(all, series{label: fmt.Sprintf("%d other services", len(names)-maxServiceLines+1), times: rest, lo: lo, hi: hi, color: colorOf(maxServiceLines - 1)})
		}
	}
	interval := 0.0
	for _, r := range runs {
		if r.File.Probes != nil {
			interval = math.Max(interval, r.File.Probes.Interval)
		}
	}
	lo, hi := v.lo, v.hi
	width := bucketWidth(hi-lo, interval)
	// Buckets on multiples of the width, so that zero (the run's start, or
	// the step the runs are aligned at) is a bucket's edge.
	base := math.Floor(lo/width) * width
	buckets := int(math.Ceil((hi-base)/width)) + 1
	top := 0.0
	for i, s := range all {
		pts := failureSteps(s.times, s.lo, s.hi, base, width, buckets)
		for _, pt := range pts {
			top = math.Max(top, pt.Y)
		}
		item, err := addSeries(p, pts, fmt.Sprintf("%s (%d failures)", s.label, len(s.times)), s.color, i, len(all), false)
		if err != nil {
			return ch, err
		}
		ch.Legend = append(ch.Legend, item)
	}
	setTimeRange(p, base, base+float64(buckets)*width)
	p.Y.Min, p.Y.Max = 0, top*1.1
	ch.Caption += fmt.Sprintf(" Counted in %s buckets; a rise after a bucket without failures is drawn at its first failure.", results.FormatSeconds(width))
	if len(all) > 1 {
		ch.Caption += " Lines that coincide are told apart by their dashes; each is drawn thinner than those under it."
	}
	ch.Caption += alignHint(runs)
	var err error
	ch.SVG, err = renderTimeChart(p, ch.Title, stepMarks(runs))
	return ch, err
}

// failureSteps draws the failures at times (of a series spanning lo to hi)
// per second, as steps: each of the buckets of width from base holds its
// rate across the bucket. A line spans only its own run, so that a short
// run does not read as failing nowhere for as long as the longest one ran,
// and begins where probing did. A bucket after one without failures rises
// at its first failure, not at its edge, which may be before the step that
// caused the failures.
func failureSteps(times []float64, lo, hi, base, width float64, buckets int) plotter.XYs {
	counts := make([]float64, buckets)
	first := make([]float64, buckets) // each bucket's first failure
	for _, t := range times {
		j := int(math.Floor((t - base) / width))
		if j >= 0 && j < buckets {
			if counts[j] == 0 || t < first[j] {
				first[j] = t
			}
			counts[j]++
		}
	}
	pts := make(plotter.XYs, 0, 2*buckets)
	for j, n := range counts {
		from, to := base+float64(j)*width, base+float64(j+1)*width
		if to <= lo || from > hi {
			continue
		}
		from = max(from, lo)
		if n > 0 && (j == 0 || counts[j-1] == 0) && first[j] > from {
			pts = append(pts, plotter.XY{X: from, Y: 0}, plotter.XY{X: first[j], Y: 0})
			from = first[j]
		}
		rate := n / width
		pts = append(pts, plotter.XY{X: from, Y: rate}, plotter.XY{X: to, Y: rate})
	}
	return pts
}

// probeKind names how a target was probed, as Kubernetes spells the
// service type, and from where: "NodePort from node".
func probeKind(t record.Target) string {
	kind := map[string]string{"clusterip": "ClusterIP", "nodeport": "NodePort", "loadbalancer": "LoadBalancer", "external": "external IP"}[t.Kind]
	if kind == "" {
		kind = results.OrDash(t.Kind)
	}
	from := t.From
	if from == "" {
		from = record.FromPod
	}
	return kind + " from " + from
}

// firstSuccesses are f's samples of the time to first success
// (results.FirstSuccesses): one per disruption window.
func firstSuccesses(f *record.File) []results.FirstSuccess {
	return results.FirstSuccesses(f, f.Summary.Disruption.Windows)
}

// target is the probe target a first success is of.
func target(f *record.File, fs results.FirstSuccess) record.Target {
	if p := f.Probes; p != nil && fs.Window.Target >= 0 && fs.Window.Target < len(p.Targets) {
		return p.Targets[fs.Window.Target]
	}
	return record.Target{Service: fs.Window.Service}
}

// reachability is the cumulative share of disruption windows that had
// recovered within a time of their first failed attempt: how long a node
// that just joined, or a proxier that just restarted, left services
// unreachable.
func reachability(runs []*run) (chart, error) {
	ch := chart{ID: "reachability", Title: "Time to first success after broken traffic",
		Caption: "Share of disruption windows (a target's run of failed attempts) whose target had succeeded again, by the time since the window's first failed attempt. Read the median where the curve crosses 0.5; a curve that stays below 1 means windows that never recovered before probing stopped."}
	basis, recorded, delayed, probed := "", 0, false, 0
	for _, r := range runs {
		if r.File.Probes != nil {
			basis = r.File.Probes.Basis
			probed += r.File.Probes.Attempts
		}
		for _, fs := range firstSuccesses(r.File) {
			recorded++
			delayed = delayed || fs.Never || fs.Seconds > 0
		}
	}
	ch.Title += " (" + results.BasisText(basis) + ")"
	switch {
	case probed == 0:
		ch.NoData = "No data: this run made no probe attempts."
		return ch, nil
	case recorded == 0:
		ch.NoData = "No data: no probed target failed, so nothing had to recover."
		return ch, nil
	case !delayed:
		ch.NoData = fmt.Sprintf("No delay: all %d windows recovered at once.", recorded)
		return ch, nil
	}
	p := newCDFPlot("time from the first failed attempt to the next success (s)", "share of disruption windows")
	secondsAxis(&p.X)
	for i, r := range runs {
		fss := firstSuccesses(r.File)
		if len(fss) == 0 {
			continue
		}
		var xs []float64
		for _, fs := range fss {
			if !fs.Never {
				xs = append(xs, fs.Seconds)
			}
		}
		// The curve is over every window: one that never recovered keeps
		// it below 1.
		pts := cdfPoints(xs, cdfSteps)
		share := float64(len(xs)) / float64(len(fss))
		for i := range pts {
			pts[i].Y *= share
		}
		label := fmt.Sprintf("%s (%d windows", r.Label, len(fss))
		if never := len(fss) - len(xs); never > 0 {
			label += fmt.Sprintf(", %d never recovered", never)
		}
		item, err := addSeries(p, pts, label+")", r.Color, i, len(runs), false)
		if err != nil {
			return ch, err
		}
		ch.Legend = append(ch.Legend, item)
	}
	p.X.Max *= 1.04 // as in the latency CDF
	var err error
	ch.SVG, err = render(p, ch.Title, chartHeight)
	return ch, err
}

// bucketWidth picks a round bucket for a timeline of span seconds: about
// 150 buckets, never finer than the probe interval (a finer bucket would
// show each attempt as a spike).
func bucketWidth(span, interval float64) float64 {
	for _, w := range []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300} {
		if w >= interval && span/w <= 150 {
			return w
		}
	}
	return math.Max(600, interval)
}

// opsChart is kernel write operations by kind, stacked by phase (one run)
// or grouped by run (several).
func opsChart(runs []*run, phases []string) (chart, error) {
	ch := chart{ID: "kernel-ops", Title: "Kernel write operations by kind (counted)",
		Caption: "Every write the proxier issued, by operation kind; one bar per kind split by the phase that issued it. Look for deletes matched by adds of the same kind: work undone and redone."}
	var kinds []dataplane.Op
	for _, op := range dataplane.AllOps() {
		if !op.IsWrite() {
			continue
		}
		for _, r := range runs {
			if r.File.Totals.Ops[op] != 0 || phaseOpsTotal(r.File, op) != 0 {
				kinds = append(kinds, op)
				break
			}
		}
	}
	if len(kinds) == 0 {
		ch.NoData = "No data: the run issued no kernel writes."
		return ch, nil
	}
	// Horizontal bars: operation names are long, and read best level. The
	// first kind goes on top, so the list reads in the usual order.
	slices.Reverse(kinds)
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.String()
	}
	p := newPlot("operations", "")
	countAxis(&p.X)
	rowH := vg.Points(22)
	height := rowH*vg.Length(len(kinds)) + vg.Inch
	groupW := rowH * 0.75
	if len(runs) == 1 && phased(runs[0].File) {
		r := runs[0]
		var below *plotter.BarChart
		for j, ph := range phases {
			vals := make(plotter.Values, len(kinds))
			for i, k := range kinds {
				for _, s := range r.File.Syncs {
					for _, sp := range s.Phases {
						if sp.Name == ph {
							vals[i] += float64(sp.Ops[k])
						}
					}
				}
			}
			b, err := plotter.NewBarChart(vals, groupW)
			if err != nil {
				return ch, err
			}
			b.Horizontal = true
			b.Color = colorOf(j)
			b.LineStyle.Width = 0
			if below != nil {
				b.StackOn(below)
			}
			below = b
			p.Add(b)
			ch.Legend = append(ch.Legend, legendItem{Label: ph, Color: hexColor(colorOf(j)), Style: "box"})
		}
	} else {
		w := groupW / vg.Length(len(runs))
		for i, r := range runs {
			vals := make(plotter.Values, len(kinds))
			for j, k := range kinds {
				vals[j] = float64(r.File.Totals.Ops[k])
			}
			b, err := plotter.NewBarChart(vals, w)
			if err != nil {
				return ch, err
			}
			b.Horizontal = true
			b.Color = r.Color
			b.LineStyle.Width = 0
			// Top to bottom in run order.
			b.Offset = (vg.Length(len(runs)-1)/2 - vg.Length(i)) * w
			p.Add(b)
			ch.Legend = append(ch.Legend, legendItem{Label: r.Label, Color: hexColor(r.Color), Style: "box"})
		}
		ch.Caption = "Every write each run issued, by operation kind, one bar per run. Look for kinds where one run issues far more: deletes and re-adds a better proxier avoids."
		if len(runs) == 1 {
			ch.Caption = "Every write the proxier issued, by operation kind. " + notPhased(runs) + " Look for deletes matched by adds of the same kind: work undone and redone."
		}
	}
	p.NominalY(names...)
	top := 0.0
	for _, r := range runs {
		for _, k := range kinds {
			top = math.Max(top, float64(max(r.File.Totals.Ops[k], phaseOpsTotal(r.File, k))))
		}
	}
	p.X.Min, p.X.Max = 0, top*1.05
	var err error
	ch.SVG, err = render(p, ch.Title, height)
	return ch, err
}

func phaseOpsTotal(f *record.File, op dataplane.Op) int64 {
	var n int64
	for _, s := range f.Syncs {
		for _, p := range s.Phases {
			n += p.Ops[op]
		}
	}
	return n
}

var nonSlug = regexp.MustCompile(`[^a-z0-9]+`)

func slug(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return nonSlug.ReplaceAllString(string(b), "-")
}
