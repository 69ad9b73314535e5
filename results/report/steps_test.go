package report_test

import (
	"bytes"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results/report"
	"github.com/kpsim/kpsim/results/resultstest"
)

// svgText is a text element of a chart: where it is drawn and its fill.
type svgText struct {
	x, y       float64
	text, fill string
}

var fillStyle = regexp.MustCompile(`fill:(#[0-9A-Fa-f]{6})`)

// chartTexts are the text elements of the chart with the given id.
func chartTexts(t *testing.T, page []byte, id string) []svgText {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(page))
	require.NoError(t, err)
	var out []svgText
	var walk func(n *html.Node, in bool)
	walk = func(n *html.Node, in bool) {
		if n.Type == html.ElementNode {
			in = in || (n.Data == "figure" && attr(n, "id") == id)
			if in && n.Data == "text" {
				x, err := strconv.ParseFloat(attr(n, "x"), 64)
				require.NoError(t, err)
				y, err := strconv.ParseFloat(attr(n, "y"), 64)
				require.NoError(t, err)
				st := svgText{x: x, y: y, text: text(n)}
				if m := fillStyle.FindStringSubmatch(attr(n, "style")); m != nil {
					st.fill = m[1]
				}
				out = append(out, st)
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, in)
		}
	}
	walk(doc, false)
	require.NotEmpty(t, out, "chart %s has no text", id)
	return out
}

// crowded is a synthetic incident whose steps crowd the restart as the
// restart-stale-ipsets scenario's do: probes on, a one-second sleep, the
// restart, waiting for the sync; "probes on" used to hide the restart.
func crowded(o resultstest.Options) *record.File {
	f := resultstest.File(o)
	i := slices.IndexFunc(f.Steps, func(st record.Step) bool { return st.Kind == "restart-proxier" })
	at := f.Steps[i].Start
	before := []record.Step{
		{Kind: "probes", Label: "probes on", Start: at.Add(-time.Second), End: at.Add(-time.Second)},
		{Kind: "sleep", Label: "sleep 1s", Start: at.Add(-time.Second), End: at},
	}
	f.Steps[i].Label = "restart proxier (36% known at first sync)"
	after := record.Step{Kind: "wait-synced", Start: at, End: at.Add(2 * time.Second)}
	f.Steps = slices.Concat(f.Steps[:i], before, f.Steps[i:i+1], []record.Step{after}, f.Steps[i+1:])
	for j := range f.Steps {
		f.Steps[j].Index = j
	}
	return f
}

func stepTexts(f *record.File) []string {
	var out []string
	for _, st := range f.Steps {
		switch {
		case st.Label == "" || st.Label == st.Kind:
			out = append(out, st.Kind)
		case strings.HasPrefix(st.Label, st.Kind):
			out = append(out, st.Label)
		default:
			out = append(out, st.Kind+": "+st.Label)
		}
	}
	return out
}

// TestTimeChartsLabelEveryStep: on both time charts every step is
// labelled, steps at one instant in lanes of their own, and the chart
// grows to hold the lanes.
func TestTimeChartsLabelEveryStep(t *testing.T) {
	f := crowded(resultstest.Options{Name: "restart-stale-ipsets", Seed: 1, Syncs: 12, Probes: true})
	page := renderHTML(t, []string{"incident.json"}, f)
	figs, _ := parseReport(t, page)
	want := stepTexts(f)
	require.Contains(t, want, "restart-proxier: restart proxier (36% known at first sync)")
	for _, id := range []string{"sync-timeline", "disruption-timeline"} {
		var labels []svgText
		for _, tx := range chartTexts(t, page, id) {
			if slices.Contains(want, tx.text) {
				labels = append(labels, tx)
			}
		}
		var got []string
		for _, l := range labels {
			got = append(got, l.text)
		}
		require.ElementsMatch(t, want, got, "%s: one label per step, none dropped", id)
		// Labels drawn at one place would be one over another.
		for i, a := range labels {
			for _, b := range labels[:i] {
				require.False(t, a.y == b.y && abs(a.x-b.x) < 1, "%s: %q and %q drawn at one place", id, a.text, b.text)
			}
		}
		// The restart and the wait for its sync at one instant: two lanes
		// above the plot at least, each 12 pt.
		height, err := strconv.ParseFloat(strings.TrimSuffix(figs[id].svgHeight, "pt"), 64)
		require.NoError(t, err)
		require.GreaterOrEqual(t, height, 259.2+2*12, "%s grows by its lanes", id)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestOverlayKeepsEachRunsSteps: two runs overlaid each mark their own
// steps, labelled in the run's colour.
func TestOverlayKeepsEachRunsSteps(t *testing.T) {
	a := crowded(resultstest.Options{Name: "restart-stale-ipsets", Seed: 1, Syncs: 12, Probes: true, IPSetExec: true})
	b := crowded(resultstest.Options{Name: "restart-stale-ipsets", Seed: 1, Syncs: 12, Probes: true})
	page := renderHTML(t, []string{"a.json", "b.json"}, a, b)
	restart := "restart-proxier: restart proxier (36% known at first sync)"
	for _, id := range []string{"sync-timeline", "disruption-timeline"} {
		var fills []string
		for _, tx := range chartTexts(t, page, id) {
			if tx.text == restart {
				fills = append(fills, tx.fill)
			}
		}
		require.Len(t, fills, 2, "%s: each run's restart is labelled", id)
		require.NotEqual(t, fills[0], fills[1], "%s: each in its run's colour", id)
	}
}

// TestAlignAt: aligned at the restart, both runs count from it, the axis
// says so, a run much shorter than the whole gets a zoom, and a word no
// step has is an error naming the steps there are.
func TestAlignAt(t *testing.T) {
	long := crowded(resultstest.Options{Name: "restart-stale-ipsets", Seed: 1, Syncs: 60, Probes: true, IPSetExec: true})
	short := crowded(resultstest.Options{Name: "restart-stale-ipsets", Seed: 1, Syncs: 4, Probes: true})
	paths := []string{"incident.json", "fix.json"}
	r, err := report.New(paths, []*record.File{long, short})
	require.NoError(t, err)

	var unaligned bytes.Buffer
	require.NoError(t, r.WriteHTML(&unaligned))
	figs, _ := parseReport(t, unaligned.Bytes())
	require.NotContains(t, figs, "sync-timeline-zoom", "no zoom without --align: the axis is the runs' own")
	require.Contains(t, figs["sync-timeline"].caption, "--align restart-proxier", "a shared axis that squeezes one run says how to align")

	require.NoError(t, r.AlignAt("restart"))
	var b bytes.Buffer
	require.NoError(t, r.WriteHTML(&b))
	page := b.Bytes()
	figs, _ = parseReport(t, page)
	for _, id := range []string{"sync-timeline", "sync-timeline-zoom", "disruption-timeline", "disruption-timeline-zoom"} {
		require.Contains(t, figs, id)
		texts := chartTexts(t, page, id)
		axis := slices.IndexFunc(texts, func(tx svgText) bool { return tx.text == "seconds from restart-proxier" })
		require.GreaterOrEqual(t, axis, 0, "%s: the axis says what its zero is: %v", id, texts)
		require.True(t, slices.ContainsFunc(texts, func(tx svgText) bool { return tx.text == "0" }), "%s: zero is labelled", id)
		require.NotContains(t, figs[id].caption, "--align", "%s: aligned already", id)
	}
	require.Contains(t, figs["sync-timeline-zoom"].title, "around restart-proxier")
	require.Contains(t, string(page), "<th>start (s from restart-proxier)</th>")
	var md bytes.Buffer
	require.NoError(t, r.WriteMarkdown(&md))
	require.Contains(t, md.String(), "| start (s from restart-proxier) |")

	// Both runs' restarts are at zero: their labels begin at one x, where
	// on the runs' own axes they did not.
	restartX := func(page []byte) []float64 {
		var xs []float64
		for _, tx := range chartTexts(t, page, "sync-timeline") {
			if strings.HasPrefix(tx.text, "restart-proxier") {
				xs = append(xs, tx.x)
			}
		}
		require.Len(t, xs, 2)
		return xs
	}
	xs := restartX(page)
	require.InDelta(t, xs[0], xs[1], 0.01)
	xs = restartX(unaligned.Bytes())
	require.Greater(t, abs(xs[0]-xs[1]), 10.0)

	// Equal runs aligned need no zoom.
	r2, err := report.New(paths, []*record.File{long, long})
	require.NoError(t, err)
	require.NoError(t, r2.AlignAt("restart-proxier"))
	figs, _ = parseReport(t, renderOf(t, r2))
	require.NotContains(t, figs, "sync-timeline-zoom")

	err = r.AlignAt("bogus")
	require.ErrorContains(t, err, `run "ipset=exec" has no step whose kind or label matches "bogus"; its steps: create-cluster: 100 services; churn-endpoints: rolling restarts; probes on; sleep 1s; restart-proxier: restart proxier (36% known at first sync); wait-synced`)
	require.Error(t, r.AlignAt(" "))

	// A word of a label names its step; a kind comes first.
	require.NoError(t, r.AlignAt("rolling"))
	require.Contains(t, string(renderOf(t, r)), "seconds from churn-endpoints")
}

func renderOf(t *testing.T, r *report.Report) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, r.WriteHTML(&b))
	return b.Bytes()
}
