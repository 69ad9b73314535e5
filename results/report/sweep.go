package report

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
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
	"github.com/kpsim/kpsim/results/sweep"
)

// SweepReport is what `kpsim report` shows for a sweep index: each swept
// figure against each axis, one line per proxier, kernel and mode (per
// whatever else varies between the cells), and every cell with what
// became of it. Figures are read from the table every report and
// comparison reads (results.Figures).
type SweepReport struct {
	ix    *sweep.Index
	files map[string][]*record.File
}

// NewSweep prepares the report of a loaded index; the results files'
// summaries are recomputed, as New does.
func NewSweep(l *sweep.Loaded) *SweepReport {
	for _, fs := range l.Files {
		for _, f := range fs {
			results.Summarize(f)
		}
	}
	return &SweepReport{ix: l.Index, files: l.Files}
}

// sweepFigure is a figure of the table, by name, drawn against an axis;
// for a distribution, the quantile drawn.
type sweepFigure struct {
	name  string
	q     *results.Quantile
	label string
	about string
}

// sweepFigures are what a sweep is usually run to see: how long syncs get,
// how long traffic breaks, and how much the proxier asks of the kernel.
var sweepFigures = []sweepFigure{
	{"sync", &results.P99, "sync p99", "the 99th percentile of the cell's sync durations (failed syncs left out)"},
	{"disruption/seconds", nil, "disruption", "the time during which at least one probed service failed"},
	{"ops/writes", nil, "kernel writes", "every kernel write the proxier issued in the run"},
}

// measure is a sweep figure of one cell: the median over its runs (each
// run of a cell has the same seed; on the modeled clock they agree).
type measure struct {
	value       float64
	runs        []float64
	unit, basis string
}

// measure reads sf from the cell's runs; ok is false when no run has
// anything to say about it (disruption without probes). A scenario that
// names its question's segment (restart-stale-ipsets: the restart) is
// measured over that segment: a sweep is run to see how the question's
// answer grows, not the cold start that led up to it.
func (r *SweepReport) measure(cell string, sf sweepFigure) (m measure, ok bool) {
	for _, f := range r.files[cell] {
		figs, name := results.Figures(f), sf.name
		if q := f.Summary.Question; q != "" {
			figs, name = results.SegmentFigures(q, f), q+"/"+sf.name
		}
		for _, fg := range figs {
			if fg.Name != name {
				continue
			}
			b := fg.Basis(f)
			if b == "" {
				break
			}
			v := 0.0
			switch {
			case fg.Dist != nil && sf.q != nil:
				v = sf.q.Of(fg.Dist(f))
			case fg.Value != nil:
				v = fg.Value(f)
			}
			m.runs = append(m.runs, v)
			m.unit = fg.Unit
			if m.basis == "" || m.basis == b {
				m.basis = b
			} else {
				m.basis = "mixed"
			}
		}
	}
	if len(m.runs) == 0 {
		return m, false
	}
	m.value = results.NewDist(m.runs).P50
	return m, true
}

// question is the segment the cells' scenario asks about, as their
// results name it ("" for the whole run).
func (r *SweepReport) question(cells []*sweep.IndexCell) string {
	for _, c := range cells {
		for _, f := range r.files[c.Name] {
			if q := f.Summary.Question; q != "" {
				return q
			}
		}
	}
	return ""
}

// dimension is one thing that tells cells apart other than the plotted
// axis: a cell's value of it, as a legend shows it.
type dimension func(c *sweep.IndexCell) string

// dimensions of the cells drawn against axis key: the mode, the proxier,
// the backend and kernel, the other axes, the fixed overrides.
func dimensions(cells []*sweep.IndexCell, key string) []dimension {
	dims := []dimension{
		func(c *sweep.IndexCell) string { return c.Mode },
		func(c *sweep.IndexCell) string { return c.Proxier },
		func(c *sweep.IndexCell) string { return strings.TrimSpace(c.Backend + " " + c.Kernel) },
	}
	var others []string
	for _, c := range cells {
		for _, a := range c.Axes {
			if a.Key != key && !slices.Contains(others, a.Key) {
				others = append(others, a.Key)
			}
		}
	}
	for _, k := range others {
		dims = append(dims, func(c *sweep.IndexCell) string {
			return k[strings.LastIndex(k, ".")+1:] + "=" + axisValue(c, k)
		})
	}
	return append(dims, func(c *sweep.IndexCell) string { return strings.Join(c.Set, " ") })
}

// series is the cells of one line of an axis chart.
type series struct {
	label string
	cells []*sweep.IndexCell
}

// seriesOf groups the cells by every dimension and labels each group by
// the dimensions that vary between the groups ("legacy+exec", "kpsim on
// sim" when nothing does).
func seriesOf(cells []*sweep.IndexCell, key string) []series {
	dims := dimensions(cells, key)
	var varying []dimension
	for _, d := range dims {
		seen := map[string]bool{}
		for _, c := range cells {
			seen[d(c)] = true
		}
		if len(seen) > 1 {
			varying = append(varying, d)
		}
	}
	var out []series
	index := map[string]int{}
	for _, c := range cells {
		var id, label []string
		for _, d := range dims {
			id = append(id, d(c))
		}
		for _, d := range varying {
			label = append(label, results.OrDash(d(c)))
		}
		k := strings.Join(id, "\x00")
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			text := strings.Join(label, " · ")
			if text == "" {
				text = c.Proxier + " on " + strings.TrimSpace(c.Backend+" "+c.Kernel)
			}
			out = append(out, series{label: text})
		}
		out[i].cells = append(out[i].cells, c)
	}
	return out
}

// axisCells are the cells that sweep axis a: its scenario's, with a value
// for its key, left-out cells aside (they were never meant to run).
func (r *SweepReport) axisCells(a sweep.Axis) []*sweep.IndexCell {
	var out []*sweep.IndexCell
	for i := range r.ix.Cells {
		c := &r.ix.Cells[i]
		if c.Scenario == a.Scenario && axisValue(c, a.Key) != "" {
			out = append(out, c)
		}
	}
	return out
}

func axisValue(c *sweep.IndexCell, key string) string {
	for _, a := range c.Axes {
		if a.Key == key {
			return a.Value
		}
	}
	return ""
}

// axisPositions places an axis's values: at their numbers when every value
// is one, otherwise in the spec's order (numeric is false).
func axisPositions(a sweep.Axis) (pos map[string]float64, numeric bool) {
	pos = map[string]float64{}
	for _, v := range a.Values {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			for i, v := range a.Values {
				pos[v] = float64(i)
			}
			return pos, false
		}
		pos[v] = x
	}
	return pos, true
}

// nonNegative keeps another ticker's ticks at 0 and above: the band below
// zero holds the marks of cells without a result, not values.
type nonNegative struct{ inner plot.Ticker }

func (n nonNegative) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, t := range n.inner.Ticks(min, max) {
		if t.Value >= 0 {
			out = append(out, t)
		}
	}
	return out
}

// valueTicks marks exactly the swept values on a numeric axis.
type valueTicks []float64

func (t valueTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, v := range t {
		if v >= min && v <= max {
			out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		}
	}
	return out
}

// axisChart draws one figure against one axis.
func (r *SweepReport) axisChart(a sweep.Axis, sf sweepFigure) (chart, error) {
	ch := chart{ID: "sweep-" + slug(a.Scenario+"-"+a.Key+"-"+sf.label),
		Title:   fmt.Sprintf("%s against %s (%s)", upperFirst(sf.label), a.Key, a.Scenario),
		Caption: fmt.Sprintf("Each point is one cell: %s, the median of its runs, at the cell's %s.", sf.about, a.Key)}
	cells := r.axisCells(a)
	pos, numeric := axisPositions(a)
	var noResult, noValue []string
	var basis, unit string
	type point struct {
		x    float64
		m    measure
		cell *sweep.IndexCell
	}
	lines := make([][]point, 0)
	all := seriesOf(cells, a.Key)
	top := 0.0
	for _, s := range all {
		var pts []point
		for _, c := range s.cells {
			if c.Status != sweep.StatusOK {
				noResult = append(noResult, fmt.Sprintf("%s (%s)", c.Name, c.Status))
				continue
			}
			m, ok := r.measure(c.Name, sf)
			if !ok {
				noValue = append(noValue, c.Name)
				continue
			}
			unit = m.unit
			switch {
			case basis == "":
				basis = m.basis
			case basis != m.basis:
				basis = "mixed"
			}
			for _, v := range m.runs {
				top = math.Max(top, v)
			}
			pts = append(pts, point{pos[axisValue(c, a.Key)], m, c})
		}
		slices.SortStableFunc(pts, func(p, q point) int { return cmpFloat(p.x, q.x) })
		lines = append(lines, pts)
	}
	if basis != "" {
		ch.Title = strings.TrimSuffix(ch.Title, ")") + ", " + basis + ")"
	}
	if segment := r.question(cells); segment != "" {
		ch.Title = strings.TrimSuffix(ch.Title, ")") + ", " + segment + " segment)"
		ch.Caption += fmt.Sprintf(" The scenario asks about its %s segment: the value is that segment's, not the whole run's.", segment)
	}
	if len(noValue) > 0 {
		ch.Caption += fmt.Sprintf(" %d cells have no %s (for disruption: no probes ran): %s.", len(noValue), sf.label, strings.Join(noValue, ", "))
	}
	if unit == "" {
		ch.NoData = fmt.Sprintf("No data: no cell that swept %s has a %s to draw.", a.Key, sf.label)
		if len(noResult) > 0 {
			ch.NoData += " Without results: " + strings.Join(noResult, ", ") + "."
		}
		return ch, nil
	}
	yLabel := sf.label
	if unit != results.UnitSeconds {
		yLabel += " (" + unit + ")"
	}
	p := newPlot(a.Key, yLabel)
	if unit == results.UnitSeconds {
		secondsAxis(&p.Y)
	} else {
		countAxis(&p.Y)
	}
	varied := 0 // cells whose runs differ
	for i, pts := range lines {
		xys := make(plotter.XYs, len(pts))
		var spread plotter.XYs
		for j, pt := range pts {
			xys[j] = plotter.XY{X: pt.x, Y: pt.m.value}
			lo, hi := slices.Min(pt.m.runs), slices.Max(pt.m.runs)
			if lo == hi {
				continue
			}
			varied++
			for _, v := range pt.m.runs {
				spread = append(spread, plotter.XY{X: pt.x, Y: v})
			}
			// The runs' range, a bar through the median.
			bar, err := plotter.NewLine(plotter.XYs{{X: pt.x, Y: lo}, {X: pt.x, Y: hi}})
			if err != nil {
				return ch, err
			}
			bar.LineStyle = draw.LineStyle{Color: withAlpha(colorOf(i), 0xa0), Width: vg.Points(1.5)}
			p.Add(bar)
		}
		c := colorOf(i)
		label := all[i].label
		if len(xys) == 0 {
			label += " (no result)"
		}
		// Modes that agree on a figure (no disruption in either) draw one
		// line over another: each keeps its own dashes and marks.
		item, err := addSeries(p, xys, label, c, i, len(lines), true)
		if err != nil {
			return ch, err
		}
		if err := addGlyphs(p, spread, draw.GlyphStyle{Color: withAlpha(c, 0x70), Radius: vg.Points(1.5), Shape: draw.RingGlyph{}}); err != nil {
			return ch, err
		}
		ch.Legend = append(ch.Legend, item)
	}
	if varied > 0 {
		ch.Caption += fmt.Sprintf(" Where a cell's runs differ (%d %s: a kube-proxy release, whose runs are samples, or the wall clock), each run is a ring and a bar spans their range.",
			varied, results.Plural(varied, "cell", "cells"))
	}
	p.Y.Min, p.Y.Max = 0, top*1.1
	if top == 0 {
		// Nothing to scale by: an axis of one unit, not of a nanosecond.
		p.Y.Max = 1
		ch.Caption += " Every cell's value is 0."
	}
	// Cells without results are crossed out at their value, below the
	// zero line, where no value is drawn: a gap in a line is never silent,
	// and never reads as a zero.
	var crosses plotter.XYs
	for _, s := range all {
		for _, c := range s.cells {
			if c.Status != sweep.StatusOK {
				crosses = append(crosses, plotter.XY{X: pos[axisValue(c, a.Key)], Y: -p.Y.Max * 0.04})
			}
		}
	}
	if len(crosses) > 0 {
		p.Y.Min = -p.Y.Max * 0.08
		p.Y.Tick.Marker = nonNegative{p.Y.Tick.Marker}
	}
	if err := addCrosses(p, crosses); err != nil {
		return ch, err
	}
	if len(noResult) > 0 {
		ch.Legend = append(ch.Legend, legendItem{Label: fmt.Sprintf("no result (%d cells)", len(noResult)), Color: hexColor(failedColor), Style: "cross"})
		ch.Caption += fmt.Sprintf(" Crosses below the zero line mark the %d cells without a result: %s.", len(noResult), strings.Join(noResult, ", "))
	}
	if numeric {
		ticks := make(valueTicks, 0, len(a.Values))
		for _, v := range a.Values {
			ticks = append(ticks, pos[v])
		}
		lo, hi := slices.Min(ticks), slices.Max(ticks)
		pad := math.Max((hi-lo)*0.04, math.Abs(hi)*0.02+1e-9)
		p.X.Min, p.X.Max = lo-pad, hi+pad
		p.X.Tick.Marker = ticks
	} else {
		p.NominalX(a.Values...)
		p.X.Min, p.X.Max = -0.5, float64(len(a.Values))-0.5
	}
	var err error
	ch.SVG, err = render(p, ch.Title, chartHeight)
	return ch, err
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func (r *SweepReport) charts() ([]chart, error) {
	var out []chart
	for _, a := range r.ix.Axes {
		for _, sf := range sweepFigures {
			c, err := r.axisChart(a, sf)
			if err != nil {
				return nil, fmt.Errorf("chart %s: %w", c.ID, err)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// cellRow is one cell of the sweep in the cells table.
type cellRow struct {
	Name, Settings, Status, Why string
	Runs                        int
	Values                      []results.Line
}

// settingsText is what a cell runs, as a reader names it.
func settingsText(c *sweep.IndexCell) string {
	parts := []string{c.Scenario}
	for _, a := range c.Axes {
		parts = append(parts, a.String())
	}
	if c.Mode != "" {
		parts = append(parts, "mode "+c.Mode)
	}
	parts = append(parts, c.Set...)
	parts = append(parts, c.Proxier, strings.TrimSpace(c.Backend+" "+c.Kernel))
	return strings.Join(parts, " · ")
}

func (r *SweepReport) rows() []cellRow {
	out := make([]cellRow, len(r.ix.Cells))
	for i := range r.ix.Cells {
		c := &r.ix.Cells[i]
		row := cellRow{Name: c.Name, Settings: settingsText(c), Status: c.Status, Why: c.Error, Runs: len(r.files[c.Name])}
		for _, sf := range sweepFigures {
			m, ok := r.measure(c.Name, sf)
			if !ok {
				row.Values = append(row.Values, results.Line{Text: "-"})
				continue
			}
			l := results.Line{Text: results.FormatValue(m.value, m.unit), Basis: m.basis}
			if len(m.runs) > 1 && slices.Min(m.runs) != slices.Max(m.runs) {
				l.Note = fmt.Sprintf("runs %s to %s", results.FormatValue(slices.Min(m.runs), m.unit), results.FormatValue(slices.Max(m.runs), m.unit))
			}
			row.Values = append(row.Values, l)
		}
		out[i] = row
	}
	return out
}

func (r *SweepReport) builds() string {
	parts := make([]string, len(r.ix.Kpsim))
	for i, b := range r.ix.Kpsim {
		parts[i] = strings.TrimSpace(b.Version + " " + b.Commit)
	}
	return strings.Join(parts, "; ")
}

func figureLabels() []string {
	out := make([]string, len(sweepFigures))
	for i, sf := range sweepFigures {
		out[i] = sf.label
	}
	return out
}

// WriteHTML writes the sweep's report as one self-contained HTML page, in
// the style of a run's report.
func (r *SweepReport) WriteHTML(w io.Writer) error {
	charts, err := r.charts()
	if err != nil {
		return err
	}
	data := struct {
		Title, Description, Summary, Builds, Spec string
		Notes                                     []string
		Charts                                    []htmlChart
		Figures                                   []string
		Rows                                      []cellRow
	}{Title: "kpsim sweep: " + r.ix.Sweep, Description: r.ix.Description, Summary: r.ix.Summary(), Builds: r.builds(),
		Spec: r.ix.Spec, Notes: r.ix.Notes, Figures: figureLabels(), Rows: r.rows()}
	for _, c := range charts {
		// Drawn by gonum/plot from numbers, every text escaped by its writer.
		data.Charts = append(data.Charts, htmlChart{chart: c, SVGHTML: template.HTML(c.SVG)})
	}
	var b bytes.Buffer
	if err := sweepTemplate.Execute(&b, data); err != nil {
		return fmt.Errorf("write sweep report: %w", err)
	}
	_, err = w.Write(b.Bytes())
	return err
}

// WriteMarkdown writes the sweep's tables for a pull-request comment or a
// job summary: each figure against each axis, one column per line of the
// chart, and every cell that did not run.
func (r *SweepReport) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### kpsim sweep: %s\n\n%s\n\n", results.EscapeMarkdown(r.ix.Sweep), r.ix.Summary())
	for _, a := range r.ix.Axes {
		all := seriesOf(r.axisCells(a), a.Key)
		about := results.EscapeMarkdown(a.Scenario)
		if q := r.question(r.axisCells(a)); q != "" {
			about += ", " + results.EscapeMarkdown(q) + " segment"
		}
		for _, sf := range sweepFigures {
			fmt.Fprintf(&b, "**%s against %s** (%s)\n\n| %s |", upperFirst(sf.label), results.EscapeMarkdown(a.Key), about, results.EscapeMarkdown(a.Key))
			for _, s := range all {
				fmt.Fprintf(&b, " %s |", results.EscapeMarkdown(s.label))
			}
			b.WriteString("\n|---:|" + strings.Repeat("---:|", len(all)) + "\n")
			for _, v := range a.Values {
				fmt.Fprintf(&b, "| %s |", results.EscapeMarkdown(v))
				for _, s := range all {
					text := "-"
					for _, c := range s.cells {
						if axisValue(c, a.Key) != v {
							continue
						}
						if m, ok := r.measure(c.Name, sf); ok && c.Status == sweep.StatusOK {
							text = results.FormatValue(m.value, m.unit)
						} else if c.Status != sweep.StatusOK {
							text = c.Status
						}
					}
					fmt.Fprintf(&b, " %s |", text)
				}
				b.WriteString("\n")
			}
			b.WriteString("\n")
		}
	}
	var without []string
	for _, c := range r.ix.Cells {
		if c.Status != sweep.StatusOK {
			without = append(without, fmt.Sprintf("- `%s`: %s: %s", c.Name, c.Status, results.EscapeMarkdown(c.Error)))
		}
	}
	if len(without) > 0 {
		fmt.Fprintf(&b, "**Cells without results**\n\n%s\n\n", strings.Join(without, "\n"))
	}
	for _, n := range r.ix.Notes {
		fmt.Fprintf(&b, "> note: %s\n\n", results.EscapeMarkdown(n))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

var sweepTemplate = template.Must(template.Must(reportTemplate.Clone()).New("sweep").Parse(`{{template "head" .}}
{{if .Description}}<p>{{.Description}}</p>{{end}}
<p class="note">{{.Summary}}. Spec {{.Spec}}; kpsim {{.Builds}}.
Durations are <span class="basis modeled">modeled</span> on the in-memory kernel and <span class="basis measured">measured</span> on a real kernel; kernel operations are <span class="basis counted">counted</span>.</p>
{{range .Notes}}<p class="note">Note: {{.}}</p>{{end}}

<h2 id="charts">Against the swept axes</h2>
{{range .Charts}}{{template "chart" .}}{{else}}<p class="nodata">No data: the sweep has no axis to draw against; the cells are listed below.</p>{{end}}

<h2 id="cells">Cells</h2>
<p class="note">Every cell of the plan, whatever became of it: ok, failed (and why), or missing (no job left a record). Values are the median of the cell's runs.</p>
<table>
<tr><th>cell</th><th>settings</th><th>status</th><th>runs</th>{{range .Figures}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr><td><code>{{.Name}}</code></td><td>{{.Settings}}</td><td>{{if eq .Status "ok"}}<span class="ok">ok</span>{{else}}<span class="bad">{{.Status}}</span>{{end}}{{if .Why}}<div class="note">{{.Why}}</div>{{end}}</td><td class="num">{{.Runs}}</td>{{range .Values}}<td class="num">{{template "cell" .}}</td>{{end}}</tr>
{{end}}</table>
</body>
</html>
`))
