// Package report turns results files into a report a person reads: a
// self-contained HTML page with charts, or Markdown tables for a
// pull-request comment. Several files are overlaid in one report.
package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kpsim/kpsim/dataplane"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// Report is what `kpsim report` shows for one or more results files: the
// same sections whether it is written as HTML or Markdown.
type Report struct {
	runs   []*run
	phases []string
}

// New prepares a report of files (read from paths, which name them).
// The files' summaries are recomputed, so a report never trusts a stored
// headline over the raw samples.
func New(paths []string, files []*record.File) (*Report, error) {
	if len(files) == 0 || len(paths) != len(files) {
		return nil, fmt.Errorf("report: want one path per file and at least one file, got %d paths and %d files", len(paths), len(files))
	}
	labels := RunLabels(paths, files)
	r := &Report{}
	for i, f := range files {
		results.Summarize(f)
		start := f.Start
		if start.IsZero() && len(f.Syncs) > 0 {
			start = f.Syncs[0].Start
		}
		r.runs = append(r.runs, &run{Label: labels[i], File: f, Color: colorOf(i), begin: start, origin: start})
	}
	r.phases = results.PhaseNames(r.files())
	return r, nil
}

// durationBasis is the runs' common basis for durations, or "mixed".
func (r *Report) durationBasis() string {
	return results.BasisText(results.CommonBasis(r.files()))
}

func (r *Report) files() []*record.File {
	fs := make([]*record.File, len(r.runs))
	for i, rn := range r.runs {
		fs[i] = rn.File
	}
	return fs
}

func (r *Report) charts() ([]chart, error) {
	basis := r.durationBasis()
	var out []chart
	add := func(c chart, err error) error {
		if err != nil {
			return fmt.Errorf("chart %s: %w", c.ID, err)
		}
		out = append(out, c)
		return nil
	}
	views := timeViews(r.runs)
	// Each time chart in every view, the zoom right below the whole: a
	// zoom with nothing to draw says nothing the whole has not said.
	timeCharts := func(draw func(timeView) (chart, error)) error {
		for _, v := range views {
			c, err := draw(v)
			if v.zoom && err == nil && c.NoData != "" {
				continue
			}
			if err := add(c, err); err != nil {
				return err
			}
		}
		return nil
	}
	if err := timeCharts(func(v timeView) (chart, error) { return syncTimeline(r.runs, basis, v) }); err != nil {
		return nil, err
	}
	for _, rn := range r.runs {
		if err := add(phaseStack(rn, r.phases, len(r.runs) > 1, basis)); err != nil {
			return nil, err
		}
	}
	for _, f := range []func() (chart, error){
		func() (chart, error) { return phaseBoxes(r.runs, r.phases, basis) },
		func() (chart, error) { return programmingCDF(r.runs, basis) },
	} {
		if err := add(f()); err != nil {
			return nil, err
		}
	}
	if err := timeCharts(func(v timeView) (chart, error) { return disruptionTimeline(r.runs, v) }); err != nil {
		return nil, err
	}
	for _, f := range []func() (chart, error){
		func() (chart, error) { return reachability(r.runs) },
		func() (chart, error) { return opsChart(r.runs, r.phases) },
	} {
		if err := add(f()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// row is a labelled table row, one cell per run: a value, the basis it
// was obtained on, and a note.
type row struct {
	Label string
	Cells []results.Line
}

func (r *Report) rowOf(label string, f func(*run) results.Line) row {
	rw := row{Label: label}
	for _, rn := range r.runs {
		rw.Cells = append(rw.Cells, f(rn))
	}
	return rw
}

// scenarioInfo is the part of the recorded scenario a reader needs first.
type scenarioInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Seed        *int64 `json:"seed"`
}

func scenarioOf(f *record.File) scenarioInfo {
	var s scenarioInfo
	if len(f.Scenario) > 0 {
		_ = json.Unmarshal(f.Scenario, &s) // a scenario we cannot read leaves the fields empty
	}
	return s
}

func (r *Report) environment() []row {
	text := func(get func(*run) string) func(*run) results.Line {
		return func(rn *run) results.Line { return results.Line{Text: results.OrDash(get(rn))} }
	}
	rows := []row{
		r.rowOf("scenario", text(func(rn *run) string { return scenarioOf(rn.File).Name })),
		r.rowOf("what it asks", text(func(rn *run) string { return scenarioOf(rn.File).Description })),
		r.rowOf("seed", text(func(rn *run) string {
			if s := scenarioOf(rn.File).Seed; s != nil {
				return fmt.Sprint(*s)
			}
			return ""
		})),
		r.rowOf("proxier under test", text(func(rn *run) string { return rn.File.Proxier })),
		r.rowOf("proxier settings", text(func(rn *run) string {
			s := proxierSettings(rn.File)
			keys := make([]string, 0, len(s))
			for k := range s {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = k + "=" + s[k]
			}
			return strings.Join(parts, " ")
		})),
		r.rowOf("backend", text(func(rn *run) string { return rn.File.Backend })),
		r.rowOf("durations", func(rn *run) results.Line { return results.Line{Text: "", Basis: results.BasisText(rn.File.Basis)} }),
		r.rowOf("clock", text(func(rn *run) string {
			switch rn.File.Clock {
			case record.ClockModeled:
				return "modeled: timestamps are modeled instants, a sync lasts its modeled duration, a seed repeats the run"
			case record.ClockWall:
				return "wall"
			}
			return rn.File.Clock
		})),
		r.rowOf("cost profile", text(func(rn *run) string {
			if p := rn.File.CostProfile; p != nil {
				return fmt.Sprintf("%s (time scale %g; from %s)", p.Name, p.TimeScale, p.Source)
			}
			return ""
		})),
		r.rowOf("started", text(func(rn *run) string {
			if rn.File.Start.IsZero() {
				return ""
			}
			ran := results.FormatSeconds(rn.File.End.Sub(rn.File.Start).Seconds())
			if rn.File.Clock == record.ClockModeled {
				ran += " of modeled time"
			}
			return rn.File.Start.UTC().Format(time.RFC3339) + ", ran " + ran
		})),
		r.rowOf("kpsim", text(func(rn *run) string {
			return strings.TrimSpace(rn.File.Kpsim.Version + " " + rn.File.Kpsim.Commit)
		})),
		r.rowOf("machine", text(func(rn *run) string {
			e := rn.File.Environment
			return fmt.Sprintf("%s %s, %s, %d CPUs, %s", e.OS, e.Kernel, e.CPU, e.CPUs, e.GoVersion)
		})),
	}
	for _, rn := range r.runs {
		if rn.File.Interrupted || rn.File.Error != "" {
			rows = append(rows, r.rowOf("ended early", text(func(rn *run) string {
				switch {
				case rn.File.Error != "":
					return "failed: " + rn.File.Error
				case rn.File.Interrupted:
					return "interrupted before the timeline finished"
				}
				return ""
			})))
			break
		}
	}
	return rows
}

// headline is one row per figure of the table (results.Figures) that any
// of the runs has something to say about.
func (r *Report) headline() []row { return r.rows(results.Figures(r.files()...)) }

// question is the segment every run's scenario asks about, with each run's
// account of it ("restart (from step 6, ..., at 41.8s)"); "" when the runs
// name none or not the same one.
func (r *Report) question() (name string, titles []string) {
	for i, rn := range r.runs {
		q := rn.File.Summary.Question
		if q == "" || (i > 0 && q != name) {
			return "", nil
		}
		name = q
		seg, _ := results.SegmentNamed(rn.File, q)
		titles = append(titles, results.SegmentTitle(rn.File, seg.Segment))
	}
	return name, titles
}

// questionHeadline is the headline of the segment the runs' scenario asks
// about: its figures lead, the whole run's follow.
func (r *Report) questionHeadline() (title string, rows []row) {
	q, titles := r.question()
	if q == "" {
		return "", nil
	}
	figs := slices.DeleteFunc(results.SegmentFigures(q, r.files()...), func(fg results.Figure) bool { return fg.RunOnly })
	title = titles[0]
	if len(slices.Compact(slices.Clone(titles))) > 1 {
		title = q
	}
	return title, r.rows(figs)
}

func (r *Report) rows(figs []results.Figure) []row {
	var rows []row
	for _, fg := range figs {
		if fg.Line == nil {
			continue
		}
		said := false
		rw := r.rowOf(fg.Label, func(rn *run) results.Line {
			l, ok := fg.Line(rn.File)
			if !ok {
				return results.Line{Text: "-"}
			}
			said = true
			return l
		})
		if said {
			rows = append(rows, rw)
		}
	}
	return rows
}

// phaseRows are per-phase quantiles: one row per phase and statistic.
func (r *Report) phaseTable() (header []string, rows []row) {
	header = []string{"phase"}
	for _, rn := range r.runs {
		header = append(header, rn.Label)
	}
	for _, ph := range append([]string{"whole sync"}, r.phases...) {
		rows = append(rows, r.rowOf(ph, func(rn *run) results.Line {
			d := rn.File.Summary.Sync
			if ph != "whole sync" {
				if !phased(rn.File) {
					return results.Line{Text: "not phased"}
				}
				d = rn.File.Summary.Phases[ph]
			}
			if d.N == 0 {
				return results.Line{Text: "-"}
			}
			return results.Line{Text: fmt.Sprintf("p50 %s · p99 %s · max %s", results.FormatSeconds(d.P50), results.FormatSeconds(d.P99), results.FormatSeconds(d.Max))}
		}))
	}
	if len(r.phases) == 0 {
		rows = append(rows, r.rowOf("phases", func(rn *run) results.Line { return results.Line{Text: notPhased([]*run{rn})} }))
	}
	return header, rows
}

// opsRows count every operation kind (reads too) that any run issued.
func (r *Report) opsRows() []row {
	var rows []row
	for _, op := range dataplane.AllOps() {
		used := false
		for _, rn := range r.runs {
			used = used || rn.File.Totals.Ops[op] != 0
		}
		if !used {
			continue
		}
		label := op.String()
		switch {
		case op == dataplane.OpIPTablesRestoreBytes:
			label += " (payload size)"
		case !op.IsWrite():
			label += " (read)"
		}
		rows = append(rows, r.rowOf(label, func(rn *run) results.Line {
			c := results.Line{Text: fmt.Sprint(rn.File.Totals.Ops[op])}
			if n := rn.File.Totals.Readded[op]; n != 0 {
				c.Note = fmt.Sprintf("%d re-added after a delete", n)
			}
			return c
		}))
	}
	return rows
}

// maxWindows bounds the disruption windows listed per run.
const maxWindows = 15

type windowRow struct {
	Run, Service, Probe, Start, Length string
	Failures                           int
}

// timeOrigin names what the tables' times are counted from.
func (r *Report) timeOrigin() string {
	if from := r.runs[0].from; from != "" {
		return "s from " + from
	}
	return "s since run start"
}

func (r *Report) windows() (rows []windowRow, more int) {
	for _, rn := range r.runs {
		ws := append([]record.Window(nil), rn.File.Summary.Disruption.Windows...)
		sort.SliceStable(ws, func(i, j int) bool { return ws[i].End.Sub(ws[i].Start) > ws[j].End.Sub(ws[j].Start) })
		for i, w := range ws {
			if i == maxWindows {
				more += len(ws) - maxWindows
				break
			}
			// A service probed several ways (ClusterIP, NodePort) has a
			// window per target: the probe tells them apart.
			probe := "-"
			if pr := rn.File.Probes; pr != nil && w.Target >= 0 && w.Target < len(pr.Targets) {
				probe = probeKind(pr.Targets[w.Target])
			}
			rows = append(rows, windowRow{Run: rn.Label, Service: results.OrDash(w.Service), Probe: probe, Start: fmt.Sprintf("%.2f s", rn.since(w.Start)),
				Length: results.FormatSeconds(w.End.Sub(w.Start).Seconds()), Failures: w.Failures})
		}
	}
	return rows, more
}

type reachRow struct {
	Run, Service, Kind, Address, Broke, After string
}

// slowestReached lists, per run, the disruption windows whose target took
// longest to succeed again (those that never did first), up to maxWindows
// of them.
func (r *Report) slowestReached() (rows []reachRow, more int) {
	for _, rn := range r.runs {
		fss := firstSuccesses(rn.File)
		sort.SliceStable(fss, func(i, j int) bool {
			if fss[i].Never != fss[j].Never {
				return fss[i].Never
			}
			return fss[i].Seconds > fss[j].Seconds
		})
		for i, fs := range fss {
			if i == maxWindows {
				more += len(fss) - maxWindows
				break
			}
			after := results.FormatSeconds(fs.Seconds)
			if fs.Never {
				after = "never"
			}
			t := target(rn.File, fs)
			rows = append(rows, reachRow{Run: rn.Label, Service: t.Service, Kind: probeKind(t), Address: t.Address + "/" + string(t.Protocol),
				Broke: fmt.Sprintf("%.2f s", rn.since(fs.Window.Start)), After: after})
		}
	}
	return rows, more
}

type histRow struct {
	Run, Metric, Labels, Samples string
	Count                        uint64
	Consistent                   bool
	Checks, Problems             []string
}

func (r *Report) histograms() []histRow {
	var out []histRow
	for _, rn := range r.runs {
		for i, c := range results.CheckHistograms(rn.File) {
			out = append(out, histRow{Run: rn.Label, Metric: c.Name, Labels: c.LabelText(), Samples: results.OrDash(c.Samples),
				Count: rn.File.Metrics[i].Count, Consistent: c.Consistent, Checks: c.Checks, Problems: c.Problems})
		}
	}
	return out
}

type htmlRun struct {
	Label, Color, Scenario string
}

type htmlChart struct {
	chart
	SVGHTML template.HTML
}

// WriteHTML writes the report as one self-contained HTML page: inline
// CSS and SVG, no scripts, nothing fetched.
func (r *Report) WriteHTML(w io.Writer) error {
	charts, err := r.charts()
	if err != nil {
		return err
	}
	data := struct {
		Title       string
		Runs        []htmlRun
		Environment []row
		Headline    []row
		Question    string
		QHeadline   []row
		Charts      []htmlChart
		PhaseHeader []string
		Phases      []row
		Ops         []row
		Windows     []windowRow
		MoreWindows int
		TimeOrigin  string
		Reached     []reachRow
		MoreReached int
		Histograms  []histRow
		Generated   string
	}{Title: "kpsim report: " + strings.Join(r.labels(), " vs "), Environment: r.environment(), Headline: r.headline(),
		Ops: r.opsRows(), Histograms: r.histograms()}
	for _, rn := range r.runs {
		js, _ := json.MarshalIndent(json.RawMessage(rn.File.Scenario), "", "  ")
		if len(rn.File.Scenario) == 0 {
			js = []byte("(not recorded)")
		}
		data.Runs = append(data.Runs, htmlRun{Label: rn.Label, Color: hexColor(rn.Color), Scenario: string(js)})
	}
	for _, c := range charts {
		// The SVG is drawn by gonum/plot from numbers, with every text
		// escaped by its writer; it is trusted markup.
		data.Charts = append(data.Charts, htmlChart{chart: c, SVGHTML: template.HTML(c.SVG)})
	}
	data.Question, data.QHeadline = r.questionHeadline()
	data.PhaseHeader, data.Phases = r.phaseTable()
	data.Windows, data.MoreWindows = r.windows()
	data.TimeOrigin = r.timeOrigin()
	data.Reached, data.MoreReached = r.slowestReached()
	var b bytes.Buffer
	if err := reportTemplate.Execute(&b, data); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	_, err = w.Write(b.Bytes())
	return err
}

func (r *Report) labels() []string {
	out := make([]string, len(r.runs))
	for i, rn := range r.runs {
		out[i] = rn.Label
	}
	return out
}

var reportTemplate = template.Must(template.New("report").Parse(`{{template "head" .}}
<p class="note">Runs:{{range .Runs}} <span style="color:{{.Color}}">&#9632;</span> {{.Label}}{{end}}.
Durations are <span class="basis modeled">modeled</span> on the in-memory kernel on the modeled clock (kernel time and the proxier's own time priced by the cost profile), <span class="basis modeled kernel + measured proxier">modeled kernel + measured proxier</span> on it at a time scale above 0, and <span class="basis measured">measured</span> on a real kernel; kernel operations are <span class="basis counted">counted</span>.</p>

<h2 id="environment">Scenario and environment</h2>
<table>
<tr><th></th>{{range .Runs}}<th>{{.Label}}</th>{{end}}</tr>
{{range .Environment}}<tr><th>{{.Label}}</th>{{range .Cells}}<td>{{template "cell" .}}</td>{{end}}</tr>
{{end}}</table>
<details><summary>Scenario as run (after defaults)</summary>
{{range .Runs}}<h3>{{.Label}}</h3><pre>{{.Scenario}}</pre>{{end}}
</details>

{{if .Question}}<h2 id="question">Headline: the scenario's question, {{.Question}}</h2>
<table>
<tr><th></th>{{range .Runs}}<th>{{.Label}}</th>{{end}}</tr>
{{range .QHeadline}}<tr><th>{{.Label}}</th>{{range .Cells}}<td>{{template "cell" .}}</td>{{end}}</tr>
{{end}}</table>
{{end}}
<h2 id="headline">{{if .Question}}The whole run{{else}}Headline{{end}}</h2>
<table>
<tr><th></th>{{range .Runs}}<th>{{.Label}}</th>{{end}}</tr>
{{range .Headline}}<tr><th>{{.Label}}</th>{{range .Cells}}<td>{{template "cell" .}}</td>{{end}}</tr>
{{end}}</table>

<h2 id="charts">Charts</h2>
{{range .Charts}}{{template "chart" .}}{{end}}

<h2 id="phases">Phases</h2>
<table>
<tr>{{range .PhaseHeader}}<th>{{.}}</th>{{end}}</tr>
{{range .Phases}}<tr><th>{{.Label}}</th>{{range .Cells}}<td>{{template "cell" .}}</td>{{end}}</tr>
{{end}}</table>

<h2 id="kernel-operations">Kernel operations <span class="basis counted">counted</span></h2>
{{if .Ops}}<table>
<tr><th>operation</th>{{range .Runs}}<th>{{.Label}}</th>{{end}}</tr>
{{range .Ops}}<tr><th>{{.Label}}</th>{{range .Cells}}<td class="num">{{template "cell" .}}</td>{{end}}</tr>
{{end}}</table>{{else}}<p class="nodata">No data: no kernel operations were recorded.</p>{{end}}

<h2 id="disruption">Disruption windows</h2>
{{if .Windows}}<p class="note">Consecutive failed probes of one target form a window; it ends one probe interval after its last failure. Longest first.</p>
<table>
<tr><th>run</th><th>service</th><th>probe</th><th>start ({{.TimeOrigin}})</th><th>length</th><th>failed attempts</th></tr>
{{range .Windows}}<tr><td>{{.Run}}</td><td>{{.Service}}</td><td>{{.Probe}}</td><td class="num">{{.Start}}</td><td class="num">{{.Length}}</td><td class="num">{{.Failures}}</td></tr>
{{end}}</table>{{if .MoreWindows}}<p class="note">and {{.MoreWindows}} shorter windows.</p>{{end}}
{{else}}<p class="nodata">No data: no probe failed (or no probes ran).</p>{{end}}

<h2 id="first-success">Time to first success</h2>
{{if .Reached}}<p class="note">For each disruption window, the time from its first failed attempt to its target's next success; windows that never recovered first, then the slowest.</p>
<table>
<tr><th>run</th><th>service</th><th>probe</th><th>address</th><th>broke at ({{.TimeOrigin}})</th><th>first success after</th></tr>
{{range .Reached}}<tr><td>{{.Run}}</td><td>{{.Service}}</td><td>{{.Kind}}</td><td>{{.Address}}</td><td class="num">{{.Broke}}</td><td class="num">{{.After}}</td></tr>
{{end}}</table>{{if .MoreReached}}<p class="note">and {{.MoreReached}} faster recoveries.</p>{{end}}
{{else}}<p class="nodata">No data: no probed target failed, so nothing had to recover.</p>{{end}}

<h2 id="histograms">Histogram consistency</h2>
<p class="note">Each histogram the run exported, as it stood at the end. Checked: cumulative buckets never decrease; the +Inf bucket (the count) covers every finite bucket; and where kpsim kept the raw samples the histogram observed, the count, the sum and every bucket agree with them.</p>
{{if .Histograms}}<table>
<tr><th>run</th><th>histogram</th><th>observations</th><th>compared with raw samples</th><th>verdict</th></tr>
{{range .Histograms}}<tr><td>{{.Run}}</td><td><code>{{.Metric}}{{if .Labels}}{{"{"}}{{.Labels}}{{"}"}}{{end}}</code></td><td class="num">{{.Count}}</td><td>{{.Samples}}</td>
<td>{{if .Consistent}}<span class="ok" title="{{range .Checks}}{{.}}&#10;{{end}}">consistent</span>{{else}}<span class="bad">inconsistent</span>{{range .Problems}}<div class="note bad">{{.}}</div>{{end}}{{end}}</td></tr>
{{end}}</table>{{else}}<p class="nodata">No data: the run recorded no histograms (metrics were off).</p>{{end}}
</body>
</html>
{{define "head"}}<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
{{template "style"}}</head>
<body>
<h1>{{.Title}}</h1>{{end}}{{define "style"}}<style>
body { font-family: "Liberation Sans", Arimo, Arial, Helvetica, sans-serif; color: #222; margin: 2em auto; max-width: 1000px; padding: 0 1em; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.3em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
h3 { font-size: 1.05em; margin: 0 0 0.3em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f5f5f5; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #666; font-size: 0.88em; }
.basis { display: inline-block; font-size: 0.75em; border-radius: 3px; padding: 0 0.4em; margin-left: 0.3em; border: 1px solid; }
.basis.modeled { color: #8a5a00; border-color: #e0b060; background: #fff6e0; }
.basis.measured { color: #14602a; border-color: #7cc08a; background: #eaf7ed; }
.basis.counted { color: #334e7a; border-color: #9ab0d6; background: #eef3fb; }
/* modeled kernel + measured proxier: its classes are both */
.basis.modeled.measured { color: #5a5a14; border-color: #c0b870; background: #f7f5e6; }
figure { margin: 1.5em 0; padding: 0.8em; border: 1px solid #e4e4e4; border-radius: 4px; }
figure svg { width: 100%; height: auto; display: block; }
figure svg text { font-family: "Liberation Sans", Arimo, Arial, Helvetica, sans-serif !important; }
figcaption { color: #444; font-size: 0.92em; margin-top: 0.4em; }
.nodata { padding: 2em 1em; text-align: center; color: #555; background: #fafafa; border: 1px dashed #ccc; }
ul.legend { list-style: none; padding: 0; margin: 0.3em 0 0; display: flex; flex-wrap: wrap; gap: 0.3em 1.2em; font-size: 0.88em; }
ul.legend span { display: inline-block; width: 1.4em; height: 0.7em; margin-right: 0.35em; vertical-align: middle; }
figure ul.legend svg.swatch { width: 30px; height: 12px; display: inline-block; vertical-align: middle; margin-right: 0.35em; }
ul.legend span.cross { width: auto; height: auto; font-weight: bold; }
.ok { color: #14602a; font-weight: bold; }
.bad { color: #b00020; font-weight: bold; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
</style>
{{end}}{{define "chart"}}<figure class="chart" id="{{.ID}}">
<h3>{{.Title}}</h3>
{{if .NoData}}<div class="nodata">{{.NoData}}</div>{{else}}{{.SVGHTML}}
{{if .Legend}}<ul class="legend">{{range .Legend}}<li>{{if eq .Style "cross"}}<span class="cross" style="color:{{.Color}}">&#10005;</span>{{else if eq .Style "line"}}{{template "swatch" .}}{{else}}<span class="{{.Style}}" style="background:{{.Color}};border-color:{{.Color}}"></span>{{end}}{{.Label}}</li>{{end}}</ul>{{end}}{{end}}
<figcaption>{{.Caption}}</figcaption>
</figure>
{{end}}{{define "swatch"}}<svg class="swatch" width="30" height="12" viewBox="0 0 30 12" aria-hidden="true"><line x1="1" y1="6" x2="29" y2="6" stroke="{{.Color}}" stroke-width="{{.Width}}"{{if .Dash}} stroke-dasharray="{{.Dash}}"{{end}}/>
{{- if eq .Glyph "circle" "ring"}}<circle cx="15" cy="6" r="3.2" fill="{{if eq .Glyph "ring"}}#fff{{else}}{{.Color}}{{end}}" stroke="{{.Color}}"/>
{{- else if eq .Glyph "box" "square"}}<rect x="12" y="3" width="6" height="6" fill="{{if eq .Glyph "square"}}#fff{{else}}{{.Color}}{{end}}" stroke="{{.Color}}"/>
{{- else if eq .Glyph "pyramid" "triangle"}}<polygon points="15,2 18.8,9.5 11.2,9.5" fill="{{if eq .Glyph "triangle"}}#fff{{else}}{{.Color}}{{end}}" stroke="{{.Color}}"/>{{end}}</svg>{{end}}{{define "cell"}}{{.Text}}{{if .Basis}}<span class="basis {{.Basis}}">{{.Basis}}</span>{{end}}{{if .Note}}<div class="note">{{.Note}}</div>{{end}}{{end}}
`))
