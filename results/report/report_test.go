package report_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/report"
	"github.com/kpsim/kpsim/results/resultstest"
)

// figure is one chart of a rendered report, as a reader's browser sees it.
type figure struct {
	id, title, caption, noData, svgTitle string
	svgShapes                            int // path, line, circle, rect and text elements
	legend                               []string
	svgHeight                            string   // the chart's, in points
	texts                                []string // the chart's text elements
	strokes                              []string // the style of each path the chart strokes
}

func parseReport(t *testing.T, page []byte) (map[string]figure, *html.Node) {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(page))
	require.NoError(t, err)
	figs := map[string]figure{}
	var walk func(n *html.Node, fig *figure)
	walk = func(n *html.Node, fig *figure) {
		if n.Type == html.ElementNode {
			switch {
			case n.Data == "figure":
				f := figure{id: attr(n, "id")}
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					walk(c, &f)
				}
				require.NotContains(t, figs, f.id, "duplicate chart id")
				figs[f.id] = f
				return
			case fig != nil && n.Data == "h3":
				fig.title = text(n)
			case fig != nil && n.Data == "figcaption":
				fig.caption = text(n)
			case fig != nil && n.Data == "div" && attr(n, "class") == "nodata":
				fig.noData = text(n)
			case fig != nil && n.Data == "title":
				fig.svgTitle = text(n)
			case fig != nil && n.Data == "li":
				fig.legend = append(fig.legend, text(n))
			case fig != nil && n.Data == "svg" && attr(n, "class") != "swatch":
				fig.svgHeight = attr(n, "height")
			}
			if fig != nil && (n.Data == "path" || n.Data == "text" || n.Data == "line" || n.Data == "circle" || n.Data == "rect") {
				fig.svgShapes++
			}
			if fig != nil && n.Data == "text" {
				fig.texts = append(fig.texts, text(n))
			}
			if fig != nil && n.Data == "path" && strings.Contains(attr(n, "style"), "stroke:") {
				fig.strokes = append(fig.strokes, attr(n, "style"))
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, fig)
		}
	}
	walk(doc, nil)
	return figs, doc
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func text(n *html.Node) string {
	var b strings.Builder
	var f func(*html.Node)
	f = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			f(c)
		}
	}
	f(n)
	return strings.TrimSpace(b.String())
}

// selfContained fails if the page would fetch anything or run code.
func selfContained(t *testing.T, doc *html.Node) {
	t.Helper()
	var f func(*html.Node)
	f = func(n *html.Node) {
		if n.Type == html.ElementNode {
			require.NotContains(t, []string{"script", "link", "img", "iframe", "object", "embed"}, n.Data)
			for _, a := range n.Attr {
				if a.Key == "src" || a.Key == "href" || a.Key == "xlink:href" {
					require.True(t, strings.HasPrefix(a.Val, "#"), "external reference %s=%q", a.Key, a.Val)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			f(c)
		}
	}
	f(doc)
}

func renderHTML(t *testing.T, paths []string, files ...*record.File) []byte {
	t.Helper()
	r, err := report.New(paths, files)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, r.WriteHTML(&b))
	return b.Bytes()
}

func TestReportHTML(t *testing.T) {
	full := resultstest.Options{Name: "smoke", Seed: 1, Syncs: 30, Services: 300, Probes: true, Metrics: true, Noise: 0.1, DualStack: true, FirstSuccess: true}
	noProbes := full
	noProbes.Probes = false
	single := full
	single.Syncs, single.DualStack = 1, false
	exec := full
	exec.IPSetExec = true
	all := []string{"sync-timeline", "phase-stack", "phase-distribution", "programming-cdf", "disruption-timeline", "reachability", "kernel-ops"}

	tests := []struct {
		name   string
		paths  []string
		files  []*record.File
		charts []string
		noData map[string]string // chart id -> text its "no data" message must contain
		legend map[string][]string
	}{
		{name: "full run", paths: []string{"out/smoke.json"}, files: []*record.File{resultstest.File(full)}, charts: all,
			legend: map[string][]string{"sync-timeline": {"proxier 0 IPv4", "proxier 0 IPv6", "proxier 1 IPv4", "proxier 1 IPv6"},
				"phase-stack": resultstest.Phases, "reachability": {"smoke (6 windows, 1 never recovered)"}}},
		{name: "zero probes", paths: []string{"out/smoke.json"}, files: []*record.File{resultstest.File(noProbes)}, charts: all,
			noData: map[string]string{"disruption-timeline": "made no probe attempts", "reachability": "made no probe attempts"}},
		{name: "single sync", paths: []string{"out/smoke.json"}, files: []*record.File{resultstest.File(single)}, charts: all,
			noData: map[string]string{"sync-timeline": "single sync", "phase-distribution": "single sync",
				"programming-cdf": "no sync applied"}},
		{name: "two runs overlaid", paths: []string{"out/exec.json", "out/netlink.json"},
			files:  []*record.File{resultstest.File(exec), resultstest.File(full)},
			charts: []string{"sync-timeline", "phase-stack-ipset-exec", "phase-stack-ipset-netlink", "phase-distribution", "programming-cdf", "disruption-timeline", "reachability", "kernel-ops"},
			legend: map[string][]string{"sync-timeline": {"ipset=exec", "ipset=netlink"}, "phase-distribution": {"ipset=exec", "ipset=netlink"},
				"kernel-ops": {"ipset=exec", "ipset=netlink"}, "reachability": {"ipset=exec (6 windows, 1 never recovered)"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page := renderHTML(t, tt.paths, tt.files...)
			figs, doc := parseReport(t, page)
			selfContained(t, doc)
			require.Len(t, figs, len(tt.charts))
			for _, id := range tt.charts {
				f, ok := figs[id]
				require.True(t, ok, "chart %s missing", id)
				require.NotEmpty(t, f.title, id)
				require.NotEmpty(t, f.caption, id)
				if want, ok := tt.noData[id]; ok {
					require.Contains(t, f.noData, want, id)
					require.Zero(t, f.svgShapes, "%s: a no-data chart draws nothing", id)
					continue
				}
				require.Empty(t, f.noData, id)
				require.Equal(t, f.title, f.svgTitle, id)
				require.Greater(t, f.svgShapes, 20, "%s: SVG nearly empty", id)
				if strings.Contains(f.title, "(counted)") {
					continue
				}
				require.Regexp(t, `\((modeled|measured)\)`, f.title, "%s: every timing chart says its basis", id)
			}
			for id, want := range tt.legend {
				for _, w := range want {
					require.Contains(t, strings.Join(figs[id].legend, "\n"), w, id)
				}
			}
			s := string(page)
			for _, section := range []string{`id="environment"`, `id="headline"`, `id="phases"`, `id="kernel-operations"`, `id="disruption"`, `id="histograms"`} {
				require.Contains(t, s, section)
			}
			require.Contains(t, s, `<span class="basis modeled">modeled</span>`)
			require.Contains(t, s, "consistent")
		})
	}
}

func TestReportFlagsInconsistentHistogram(t *testing.T) {
	f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 2, Syncs: 10, Metrics: true})
	f.Metrics[0].Buckets[len(f.Metrics[0].Buckets)-1].Count = 0
	page := string(renderHTML(t, []string{"r.json"}, f))
	require.Contains(t, page, `<span class="bad">inconsistent</span>`)
	require.Contains(t, page, "cumulative count falls")

	r, err := report.New([]string{"r.json"}, []*record.File{f})
	require.NoError(t, err)
	var md bytes.Buffer
	require.NoError(t, r.WriteMarkdown(&md))
	require.Contains(t, md.String(), "1 of ")
	require.Contains(t, md.String(), "histograms are inconsistent")
}

func TestReportMarkdown(t *testing.T) {
	exec := resultstest.File(resultstest.Options{Name: "restart-stale-ipsets", Seed: 1, Syncs: 12, Probes: true, Metrics: true, IPSetExec: true})
	netlink := resultstest.File(resultstest.Options{Name: "restart-stale-ipsets", Seed: 1, Syncs: 12, Probes: true, Metrics: true})
	r, err := report.New([]string{"a.json", "b.json"}, []*record.File{exec, netlink})
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, r.WriteMarkdown(&b))
	md := b.String()
	for _, want := range []string{
		"### kpsim report: ipset=exec vs ipset=netlink",
		"|  | ipset=exec | ipset=netlink |",
		"| slowest sync |", "slowest phase ipset-entries", "_(modeled)_", "_(counted)_",
		"| net programming |", "| disruption |", "| deleted, re-added |",
		"| ipset-entries | p50", "**Disruption windows**", "all 18 exported histograms are internally consistent",
	} {
		require.Contains(t, md, want)
	}
	// The headline is the table of figures: a row for every figure either run has a line for.
	for _, fg := range results.Figures(exec, netlink) {
		if fg.Line == nil {
			continue
		}
		_, okExec := fg.Line(exec)
		_, okNetlink := fg.Line(netlink)
		if okExec || okNetlink {
			require.Contains(t, md, "| "+fg.Label+" |")
		}
	}
	require.NotContains(t, md, "<svg")
	require.NotContains(t, md, "![")
	// Every table row has as many cells as its header.
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "|  | ") {
			require.Equal(t, 4, strings.Count(line, "|"), line)
		}
	}

	_, err = report.New(nil, nil)
	require.Error(t, err)
}

// TestReportOfWrittenFile renders a file that went through Write and Read,
// so the report reads only what the JSON keeps.
func TestReportOfWrittenFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "smoke.json")
	require.NoError(t, results.Write(p, resultstest.File(resultstest.Options{Name: "smoke", Seed: 4, Syncs: 8, Probes: true})))
	f, err := results.Read(p)
	require.NoError(t, err)
	figs, _ := parseReport(t, renderHTML(t, []string{p}, f))
	require.Empty(t, figs["disruption-timeline"].noData)
	require.Greater(t, figs["disruption-timeline"].svgShapes, 20)
	if out := os.Getenv("KPSIM_REPORT_OUT"); out != "" {
		require.NoError(t, os.WriteFile(out, renderHTML(t, []string{p}, f), 0o644))
	}
}

// TestReportShowsFailedSyncs: failed syncs are crossed on the sync charts,
// the captions and the headline give the first error, and the phase
// distribution leaves them out as the summary does.
func TestReportShowsFailedSyncs(t *testing.T) {
	const full = "ipset add KUBE-CLUSTER-IP 10.96.0.10,tcp:80: set is full (maxelem 65536)"
	f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 12, Probes: true})
	for _, i := range []int{3, 4, 5} {
		f.Syncs[i].Error = full
	}
	results.Summarize(f)
	page := renderHTML(t, []string{"out/smoke.json"}, f)
	figs, _ := parseReport(t, page)
	for _, id := range []string{"sync-timeline", "phase-stack"} {
		require.Contains(t, figs[id].legend, "✕failed sync (3 of 12)", id)
		require.Contains(t, figs[id].caption, "the first (proxier 0 IPv4 #4) failed with: "+full, id)
	}
	require.Contains(t, figs["phase-distribution"].caption, "The 3 failed syncs are left out.")
	require.Contains(t, string(page), "<th>failed syncs</th><td>3")
	require.Contains(t, string(page), "first: proxier 0 IPv4 #4: "+full)

	// On the timeline a failed sync's bar and dot take the failure colour
	// too, under its cross (two strokes): four marks per failed sync.
	i := strings.Index(string(page), `id="sync-timeline"`)
	timeline := string(page)[i : i+strings.Index(string(page)[i:], "</figure>")]
	require.Equal(t, 4*3, strings.Count(timeline, "#B00020"))

	// Crosses are drawn: the timeline of the same run without failures has fewer shapes.
	ok := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 12, Probes: true})
	okFigs, _ := parseReport(t, renderHTML(t, []string{"out/smoke.json"}, ok))
	require.Greater(t, figs["sync-timeline"].svgShapes, okFigs["sync-timeline"].svgShapes)
	require.NotContains(t, okFigs["sync-timeline"].caption, "failed")

	r, err := report.New([]string{"out/smoke.json"}, []*record.File{f})
	require.NoError(t, err)
	var md bytes.Buffer
	require.NoError(t, r.WriteMarkdown(&md))
	require.Contains(t, md.String(), "| failed syncs | 3 _(counted)_<br>first: proxier 0 IPv4 #4: "+full)
	require.Contains(t, md.String(), "| syncs | 12, 3 failed: p50")
}

// kubeProxy is f as a kube-proxy release would record it: the same syncs,
// each one block without phases.
func kubeProxy(f *record.File) *record.File {
	g := *f
	g.Proxier = "kube-proxy@v1.37.1"
	g.Syncs = slices.Clone(f.Syncs)
	for i := range g.Syncs {
		g.Syncs[i].Phases = nil
	}
	results.Summarize(&g)
	return &g
}

// TestReportNotPhased: a proxier that does not record phases gets "not
// phased" where phases would be, not empty charts.
func TestReportNotPhased(t *testing.T) {
	kpsim := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 10, Probes: true})
	kp := kubeProxy(kpsim)
	const msg = "Not phased: kube-proxy@v1.37.1 recorded each sync as one block, without phases."

	figs, _ := parseReport(t, renderHTML(t, []string{"kp.json"}, kp))
	require.Equal(t, msg, figs["phase-stack"].noData)
	require.Equal(t, msg, figs["phase-distribution"].noData)
	require.Empty(t, figs["kernel-ops"].noData)
	require.Greater(t, figs["kernel-ops"].svgShapes, 20, "operations are still counted, by kind")
	require.Contains(t, figs["kernel-ops"].caption, msg)
	require.Greater(t, figs["sync-timeline"].svgShapes, 20)

	r, err := report.New([]string{"kp.json"}, []*record.File{kp})
	require.NoError(t, err)
	var md bytes.Buffer
	require.NoError(t, r.WriteMarkdown(&md))
	require.Contains(t, md.String(), "| phases | "+msg+" |")
	require.Contains(t, md.String(), "; not phased")

	// Side by side with kpsim's proxier: kpsim's phases are drawn, the
	// release is named as not phased.
	figs, _ = parseReport(t, renderHTML(t, []string{"kpsim.json", "kp.json"}, kpsim, kp))
	var stacks []figure
	for id, f := range figs {
		if strings.HasPrefix(id, "phase-stack-") {
			stacks = append(stacks, f)
		}
	}
	require.Len(t, stacks, 2)
	require.NotEqual(t, stacks[0].noData == "", stacks[1].noData == "", "one run phased, one not")
	require.Empty(t, figs["phase-distribution"].noData)
	require.Contains(t, figs["phase-distribution"].caption, msg)
}

// TestReportFirstSuccess: time to first success is charted as a
// distribution, listed slowest first, and headlined.
func TestReportFirstSuccess(t *testing.T) {
	f := resultstest.File(resultstest.Options{Name: "node-join", Seed: 1, Syncs: 6, Probes: true, FirstSuccess: true})
	page := renderHTML(t, []string{"join.json"}, f)
	figs, _ := parseReport(t, page)
	require.Empty(t, figs["reachability"].noData)
	require.Greater(t, figs["reachability"].svgShapes, 20)
	require.Equal(t, []string{"node-join (6 windows, 1 never recovered)"}, figs["reachability"].legend)
	s := string(page)
	require.Contains(t, s, `<h2 id="first-success">`)
	require.Regexp(t, `<td>default/svc-4:http</td><td>ClusterIP from pod</td><td>10.96.0.14:80/TCP</td><td class="num">0.00 s</td><td class="num">never</td>`, s)
	require.Regexp(t, `<th>first success</th><td>p50 900ms  p99 2.5s  max 2.5s`, s)
	table := s[strings.Index(s, `<h2 id="first-success">`):]
	require.Less(t, strings.Index(table, ">never<"), strings.Index(table, ">900ms<"), "never first, then the slowest")

	// Nothing broke: nothing had to recover, and it says so.
	f.Probes.Failures = nil
	results.Summarize(f)
	figs, _ = parseReport(t, renderHTML(t, []string{"join.json"}, f))
	require.Equal(t, "No data: no probed target failed, so nothing had to recover.", figs["reachability"].noData)
}

// TestReportModeledClock: a run on the modeled clock says so on its time
// axes and in its environment.
func TestReportModeledClock(t *testing.T) {
	f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 10, Probes: true, Modeled: true})
	page := string(renderHTML(t, []string{"smoke.json"}, f))
	require.Contains(t, page, "modeled time since run start (s)")
	require.Contains(t, page, "<th>clock</th><td>modeled: timestamps are modeled instants")
	require.Contains(t, page, "of modeled time")
	wall := string(renderHTML(t, []string{"smoke.json"}, resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 10, Probes: true})))
	require.NotContains(t, wall, "modeled time since run start")
	require.Contains(t, wall, "time since run start (s)")
}

// twoWays is a run in which one service is probed twice, by ClusterIP from
// a pod and by NodePort from the node, and both probes fail alike: the
// same failures at the same instants.
func twoWays() *record.File {
	f := resultstest.File(resultstest.Options{Name: "restart-stale-ipsets", Seed: 1, Syncs: 12, Probes: true})
	pr := f.Probes
	pr.Targets[3].Service, pr.Targets[3].Kind, pr.Targets[3].From = pr.Targets[1].Service, "nodeport", record.FromNode
	var same []record.Failure
	for _, fl := range pr.Failures {
		if fl.Target == 1 {
			fl.Target = 3
			same = append(same, fl)
		}
	}
	pr.Failures = slices.DeleteFunc(pr.Failures, func(fl record.Failure) bool { return fl.Target == 3 })
	pr.Failures = append(pr.Failures, same...)
	slices.SortStableFunc(pr.Failures, func(a, b record.Failure) int { return a.Time.Compare(b.Time) })
	results.Summarize(f)
	return f
}

// TestIdenticalLinesStayVisible: two services that fail alike draw the
// same line; each is drawn with its own dashes and width, so that the one
// underneath still shows, and the legend draws each as the chart does.
func TestIdenticalLinesStayVisible(t *testing.T) {
	page := renderHTML(t, []string{"incident.json"}, twoWays())
	figs, doc := parseReport(t, page)
	fig := figs["disruption-timeline"]
	require.Len(t, fig.legend, 2)
	// The series' colours are the palette's first two, as the chart
	// writes them.
	styleOf := func(color string) string {
		var found []string
		for _, s := range fig.strokes {
			if strings.Contains(s, "stroke:"+color+";") {
				found = append(found, s)
			}
		}
		require.Len(t, found, 1, "one line of %s: %v", color, fig.strokes)
		return found[0]
	}
	dashes := regexp.MustCompile(`stroke-dasharray:([0-9.,]+)`)
	width := regexp.MustCompile(`stroke-width:([0-9.]+)`)
	under, over := styleOf("#4E79A7"), styleOf("#F28E2B")
	require.NotEqual(t, dashes.FindString(under), dashes.FindString(over), "the lines' dashes differ")
	wu, err := strconv.ParseFloat(width.FindStringSubmatch(under)[1], 64)
	require.NoError(t, err)
	wo, err := strconv.ParseFloat(width.FindStringSubmatch(over)[1], 64)
	require.NoError(t, err)
	require.Greater(t, wu, wo, "the line drawn first is the wider, showing either side of the one over it")

	// The legend's swatches are drawn as the lines are.
	var swatches []string
	var walk func(n *html.Node, in bool)
	walk = func(n *html.Node, in bool) {
		in = in || (n.Type == html.ElementNode && n.Data == "figure" && attr(n, "id") == "disruption-timeline")
		if in && n.Type == html.ElementNode && n.Data == "line" {
			swatches = append(swatches, attr(n, "stroke-width")+" "+attr(n, "stroke-dasharray"))
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, in)
		}
	}
	walk(doc, false)
	require.Len(t, swatches, 2)
	require.NotEqual(t, swatches[0], swatches[1])
	require.Contains(t, swatches[1], strings.Join(strings.Split(dashes.FindStringSubmatch(over)[1], ","), ","))
}

// TestCoincidingSyncsStayVisible: two runs whose syncs coincide draw each
// sync's bar over the other's; each run's bars have their own dashes and
// width, as its legend entry draws them, and the caption says so.
func TestCoincidingSyncsStayVisible(t *testing.T) {
	o := resultstest.Options{Name: "smoke", Seed: 1, Syncs: 10, Modeled: true}
	page := renderHTML(t, []string{"a.json", "b.json"}, resultstest.File(o), resultstest.File(o))
	figs, doc := parseReport(t, page)
	fig := figs["sync-timeline"]
	require.Contains(t, fig.caption, "Bars that coincide are told apart by their dashes")
	var swatches []*html.Node
	var walk func(n *html.Node, in bool)
	walk = func(n *html.Node, in bool) {
		in = in || (n.Type == html.ElementNode && n.Data == "figure" && attr(n, "id") == "sync-timeline")
		if in && n.Type == html.ElementNode && n.Data == "line" {
			swatches = append(swatches, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, in)
		}
	}
	walk(doc, false)
	require.Len(t, swatches, 2)
	require.NotEqual(t, attr(swatches[0], "stroke-dasharray"), attr(swatches[1], "stroke-dasharray"))
	require.NotEqual(t, attr(swatches[0], "stroke"), attr(swatches[1], "stroke"))
	for _, sw := range swatches {
		style := "stroke:" + strings.ToUpper(attr(sw, "stroke")) + ";stroke-width:" + attr(sw, "stroke-width")
		if d := attr(sw, "stroke-dasharray"); d != "" {
			style += ";stroke-dasharray:" + d
		}
		bars := 0
		for _, s := range fig.strokes {
			if strings.HasSuffix(s, style) {
				bars++
			}
		}
		require.Equal(t, o.Syncs, bars, "every bar of the run is drawn as its legend entry (%s)", style)
	}
}

// TestDisruptionNamesTheProbe: a service probed two ways is listed once
// per probe, each named, in the table (HTML and Markdown) and the chart.
func TestDisruptionNamesTheProbe(t *testing.T) {
	f := twoWays()
	svc := f.Probes.Targets[1].Service
	page := string(renderHTML(t, []string{"incident.json"}, f))
	require.Contains(t, page, "<th>probe</th>")
	require.Contains(t, page, "<td>"+svc+"</td><td>ClusterIP from pod</td>")
	require.Contains(t, page, "<td>"+svc+"</td><td>NodePort from node</td>")
	figs, _ := parseReport(t, []byte(page))
	legend := strings.Join(figs["disruption-timeline"].legend, "\n")
	require.Contains(t, legend, svc+" (ClusterIP from pod)")
	require.Contains(t, legend, svc+" (NodePort from node)")

	r, err := report.New([]string{"incident.json"}, []*record.File{f})
	require.NoError(t, err)
	var md bytes.Buffer
	require.NoError(t, r.WriteMarkdown(&md))
	require.Contains(t, md.String(), "| run | service | probe | start (s since run start) | length | failed attempts |")
	require.Contains(t, md.String(), " | "+results.EscapeMarkdown(svc)+" | NodePort from node | ")
	require.Contains(t, md.String(), " | "+results.EscapeMarkdown(svc)+" | ClusterIP from pod | ")
}

// TestDisruptionLinesBeginWithTheProbes: before the first probe attempt
// nothing was probed, and no line is drawn there.
func TestDisruptionLinesBeginWithTheProbes(t *testing.T) {
	// The failed-probes chart, where the first line is the first service's.
	page := func(f *record.File) string {
		s := string(renderHTML(t, []string{"incident.json"}, f))
		return s[strings.Index(s, `id="disruption-timeline"`):]
	}
	start := regexp.MustCompile(`<path d="M([0-9.]+),[0-9.]+[^"]*" style="fill:none;stroke:#4E79A7;stroke-width`)
	x := func(f *record.File) float64 {
		m := start.FindStringSubmatch(page(f))
		require.NotNil(t, m)
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return v
	}
	f := twoWays()
	whole := x(f)
	restart := f.Steps[slices.IndexFunc(f.Steps, func(st record.Step) bool { return st.Kind == "restart-proxier" })].Start
	for i := range f.Probes.Targets {
		f.Probes.Targets[i].First = restart.Add(-time.Second)
	}
	require.Greater(t, x(f), whole+100, "the line begins a second before the restart, not at the run's start")
}

// TestReportLeadsWithTheQuestion: a scenario that names its question's
// segment gets that segment's headline first (the restart's syncs, not the
// cold start's), then the whole run's.
func TestReportLeadsWithTheQuestion(t *testing.T) {
	f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 10, Probes: true, Modeled: true})
	resultstest.Ask(f, "restart")
	page := string(renderHTML(t, []string{"smoke.json"}, f))
	q := strings.Index(page, `<h2 id="question">Headline: the scenario's question, restart (from step 3, restart proxier, at `)
	whole := strings.Index(page, `<h2 id="headline">The whole run</h2>`)
	require.Positive(t, q)
	require.Less(t, q, whole)
	restart := results.View(f, "restart")
	require.Contains(t, page[q:whole], fmt.Sprintf("<th>kernel writes</th><td>%d", restart.Totals.Ops.Writes()))
	require.Contains(t, page[whole:], fmt.Sprintf("<th>kernel writes</th><td>%d", f.Totals.Ops.Writes()))

	r, err := report.New([]string{"smoke.json"}, []*record.File{f})
	require.NoError(t, err)
	var md bytes.Buffer
	require.NoError(t, r.WriteMarkdown(&md))
	require.Contains(t, md.String(), "**The scenario's question: restart (from step 3")
}
