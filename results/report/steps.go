package report

import (
	"cmp"
	"fmt"
	"image/color"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/kpsim/kpsim/record"
)

// stepMark is one scenario step as a time chart marks it: a dashed line
// across the plot and a label above it.
type stepMark struct {
	x      float64 // on the chart's time axis
	text   string
	color  color.RGBA
	dashes []vg.Length
}

// stepGrey marks the steps of a single run: its colours belong to the data.
var stepGrey = color.RGBA{0x77, 0x77, 0x77, 0xff}

// stepDashes tell the runs' step markers apart where colours alone would
// not (two runs stepping at the same instant draw one line over the other).
var stepDashes = [][]vg.Length{
	{vg.Points(4), vg.Points(3)},
	{vg.Points(1.5), vg.Points(2)},
	{vg.Points(8), vg.Points(3), vg.Points(2), vg.Points(3)},
}

// stepMarks are every run's steps: grey for a single run, in each run's
// colour and dash when several are overlaid, so that each run keeps its
// own steps on a shared axis.
func stepMarks(runs []*run) []stepMark {
	var out []stepMark
	for i, r := range runs {
		c := stepGrey
		if len(runs) > 1 {
			c = r.Color
		}
		for _, st := range r.File.Steps {
			out = append(out, stepMark{x: r.since(st.Start), text: stepText(st), color: c, dashes: stepDashes[i%len(stepDashes)]})
		}
	}
	return out
}

// Label lanes: rows of step labels above a time chart's plot.
const (
	laneHeight = vg.Length(12) // an 8 pt label and its leading
	laneTick   = vg.Length(3)  // the tick at the step, and its gap to the text
	laneGap    = vg.Length(4)  // the least space between two labels in a lane
	lanePad    = vg.Length(4)  // between the plot and the first lane
)

// placedLabel is where layoutLabels put a label: its lane (0 first) and
// its left edge. A label begins at its step unless that would
// run it off the right edge; then it ends there (right is set).
type placedLabel struct {
	lane  int
	left  vg.Length
	right bool
}

// layoutLabels places labels of the given widths, anchored at xs, in as
// few lanes as keep any two of them apart by gap, within [lo, hi]. Every
// label is placed: colliding ones go to a further lane, never dropped.
// Labels are taken in the order of their anchors, each into the first
// lane whose last label ends gap before it begins, which is greedy
// interval colouring: it uses as many lanes as the most labels that
// overlap at one point need.
func layoutLabels(xs, widths []vg.Length, lo, hi, gap vg.Length) (out []placedLabel, lanes int) {
	out = make([]placedLabel, len(xs))
	order := make([]int, len(xs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(xs[a], xs[b]) })
	var ends []vg.Length // the right edge of each lane's last label
	for _, i := range order {
		p := placedLabel{left: xs[i]}
		if p.left+widths[i] > hi {
			p.left, p.right = xs[i]-widths[i], true
		}
		p.left = max(p.left, lo)
		p.lane = slices.IndexFunc(ends, func(end vg.Length) bool { return end+gap <= p.left })
		if p.lane < 0 {
			p.lane = len(ends)
			ends = append(ends, 0)
		}
		ends[p.lane] = p.left + widths[i]
		out[i] = p
	}
	return out, len(ends)
}

// renderTimeChart draws a chart whose x axis is time with the steps
// marked: a dashed line each across the plot, and each step's label in
// lanes above it. The chart grows by a lane for every label that would
// collide with another, so that no step goes unlabelled (a restart a
// second after "probes on" is the step the reader looks for). The plot's
// y range must be set.
func renderTimeChart(p *plot.Plot, title string, marks []stepMark) ([]byte, error) {
	// A zoomed view leaves out the steps outside it.
	marks = slices.DeleteFunc(slices.Clone(marks), func(m stepMark) bool { return m.x < p.X.Min || m.x > p.X.Max })
	for _, m := range marks {
		l, err := plotter.NewLine(plotter.XYs{{X: m.x, Y: p.Y.Min}, {X: m.x, Y: p.Y.Max}})
		if err != nil {
			return nil, err
		}
		l.Color = withAlpha(m.color, 0xb0)
		l.Width = vg.Points(1)
		l.Dashes = m.dashes
		p.Add(l)
	}
	sty := stepTextStyle(p)
	f := frame(p)
	// The x axis maps time to the same place whatever the chart's height.
	scratch := draw.New(vgsvg.New(chartWidth, chartHeight))
	data := p.DataCanvas(f.area(scratch))
	toX, _ := p.Transforms(&data)
	xs := make([]vg.Length, len(marks))
	widths := make([]vg.Length, len(marks))
	for i, m := range marks {
		xs[i] = toX(m.x)
		widths[i] = laneTick + sty.Width(m.text)
	}
	placed, lanes := layoutLabels(xs, widths, 0, chartWidth, laneGap)
	band := vg.Length(0)
	if lanes > 0 {
		band = lanePad + vg.Length(lanes)*laneHeight
	}
	return renderWith(title, chartHeight+band, func(c draw.Canvas) {
		f.draw(draw.Crop(c, 0, 0, 0, -band))
		top := c.Max.Y - band
		for i, m := range marks {
			pl := placed[i]
			// The first lane on top: steps at one instant read down in
			// the order they ran.
			bottom := top + lanePad + vg.Length(lanes-1-pl.lane)*laneHeight
			tick := draw.LineStyle{Color: m.color, Width: vg.Points(1.5)}
			c.StrokeLine2(tick, xs[i], bottom, xs[i], bottom+laneHeight-2)
			s := sty
			s.Color = textColor(m.color)
			at := pl.left + laneTick
			if pl.right {
				at = pl.left
			}
			c.FillText(s, vg.Point{X: at, Y: bottom + 2}, m.text)
		}
	})
}

// stepTextStyle is the step labels' font, from the plot's own so that it
// measures as it draws.
func stepTextStyle(p *plot.Plot) text.Style {
	s := p.X.Label.TextStyle
	s.Font.Size = vg.Points(8)
	s.Rotation = 0
	s.XAlign, s.YAlign = draw.XLeft, draw.YBottom
	return s
}

// textColor darkens a marker's colour for its label: the palette's light
// colours (orange, yellow) are hard to read as 8 pt text on white.
func textColor(c color.RGBA) color.RGBA {
	return color.RGBA{uint8(uint16(c.R) * 3 / 4), uint8(uint16(c.G) * 3 / 4), uint8(uint16(c.B) * 3 / 4), 0xff}
}

// timeSpan is the extent of the runs on the time axis: from the earliest
// run's start (before zero when runs are aligned at a later step) to the
// last end of a run, step or sync.
func timeSpan(runs []*run) (lo, hi float64) {
	for i, r := range runs {
		b, e := r.since(r.begin), r.since(r.File.End)
		for _, st := range r.File.Steps {
			e = max(e, r.since(st.End))
		}
		for _, s := range r.File.Syncs {
			e = max(e, r.since(s.Start)+s.Seconds)
		}
		if r.File.End.IsZero() && len(r.File.Syncs) == 0 {
			e = b
		}
		if i == 0 {
			lo, hi = b, e
		}
		lo, hi = min(lo, b), max(hi, e)
	}
	return lo, hi
}

// timeView is the stretch of time a time chart draws: all of every run,
// or, zoomed, the stretch where every run has data.
type timeView struct {
	lo, hi float64
	zoom   bool
}

// timeViews are the views each time chart is drawn in: all of the runs;
// and, when they are aligned at a step and one of them is a sliver of
// that (a fix that restarts in a second beside an incident that took a
// minute), a zoom on the stretch where every run has data, so that the
// short run shows at a readable width and the long one keeps its whole
// story in the first view.
func timeViews(runs []*run) []timeView {
	lo, hi := timeSpan(runs)
	views := []timeView{{lo: lo, hi: hi}}
	if len(runs) < 2 || runs[0].from == "" {
		return views
	}
	zlo, zhi := lo, hi
	for _, r := range runs {
		b, e := timeSpan([]*run{r})
		zlo, zhi = max(zlo, b), min(zhi, e)
	}
	if zhi <= zlo || (zhi-zlo)*4 > hi-lo {
		return views
	}
	pad := (zhi - zlo) * 0.05
	return append(views, timeView{lo: zlo - pad, hi: zhi + pad, zoom: true})
}

// name gives a chart drawn in a zoomed view its own id and title.
func (v timeView) name(ch *chart, runs []*run) {
	if !v.zoom {
		return
	}
	ch.ID += "-zoom"
	ch.Title = strings.Replace(ch.Title, " (", fmt.Sprintf(", around %s where every run has data (", runs[0].from), 1)
	ch.Caption += fmt.Sprintf(" Zoomed to %s to %s, where every run has data; the chart above shows all of each run.",
		strconv.FormatFloat(v.lo, 'f', 1, 64), strconv.FormatFloat(v.hi, 'f', 1, 64)+" s")
}

// matchStep is the index of the first step that q names, or -1: by kind
// first (restart-proxier, or one of its words: restart), then by a word of
// the label or a phrase in it ("probes on"), so that "restart" finds the
// restart and not a "rolling restarts" churn before it.
func matchStep(steps []record.Step, q string) int {
	words := func(s string) []string {
		return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	}
	rules := []func(record.Step) bool{
		func(st record.Step) bool { return strings.ToLower(st.Kind) == q },
		func(st record.Step) bool { return slices.Contains(words(st.Kind), q) },
		func(st record.Step) bool { return slices.Contains(words(st.Label), q) },
		func(st record.Step) bool { return strings.Contains(strings.ToLower(st.Label), q) },
	}
	for _, rule := range rules {
		if j := slices.IndexFunc(steps, rule); j >= 0 {
			return j
		}
	}
	return -1
}

// AlignAt puts each run's zero at its first step that step names, by kind
// or label (case-insensitive: "restart" finds restart-proxier), so
// that runs of different lengths are drawn at a readable width and their
// events line up. A run with no such step is an error that lists the
// steps it has.
func (r *Report) AlignAt(step string) error {
	q := strings.ToLower(strings.TrimSpace(step))
	if q == "" {
		return fmt.Errorf("want a step kind or a word of a step's label")
	}
	found := make([]record.Step, len(r.runs))
	for i, rn := range r.runs {
		j := matchStep(rn.File.Steps, q)
		if j < 0 {
			have := make([]string, len(rn.File.Steps))
			for k, st := range rn.File.Steps {
				have[k] = stepText(st)
			}
			list := "none"
			if len(have) > 0 {
				list = strings.Join(have, "; ")
			}
			return fmt.Errorf("run %q has no step whose kind or label matches %q; its steps: %s", rn.Label, step, list)
		}
		found[i] = rn.File.Steps[j]
	}
	// The axis names the step the runs share: by its kind where that is
	// the run's only step of the kind (restart-proxier), else by its text
	// (probes on, probes off); by the query when the runs differ.
	names := make([]string, len(found))
	for i, rn := range r.runs {
		names[i] = found[i].Kind
		n := 0
		for _, st := range rn.File.Steps {
			if st.Kind == found[i].Kind {
				n++
			}
		}
		if n > 1 {
			names[i] = stepText(found[i])
		}
	}
	from := names[0]
	if slices.ContainsFunc(names, func(n string) bool { return n != from }) {
		from = fmt.Sprintf("each run's first step matching %q", step)
	}
	for i, rn := range r.runs {
		rn.origin, rn.from = found[i].Start, from
	}
	return nil
}
