package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// The report's charts, one file per kind: charts_syncs.go (each sync over
// the run's time), charts_phases.go (a sync's phases, and how soon a change
// was programmed), charts_traffic.go (probe failures and reachability),
// charts_ops.go (kernel operations per phase). This file holds what they
// share: the plot and its frame, axes, series and legends.

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

func withAlpha(c color.RGBA, a uint8) color.RGBA {
	// Premultiplied: scale the channels with the alpha.
	return color.RGBA{uint8(uint16(c.R) * uint16(a) / 0xff), uint8(uint16(c.G) * uint16(a) / 0xff), uint8(uint16(c.B) * uint16(a) / 0xff), a}
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
