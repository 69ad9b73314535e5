package report_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/report"
	"github.com/kpsim/kpsim/results/resultstest"
	"github.com/kpsim/kpsim/results/sweep"
)

// sweepOf is a loaded sweep of synthetic runs: a cell per services value
// and mode (exec charges a process per ipset entry), with the status each
// cell is given; the runs of an ok cell are made, the others have none.
func sweepOf(values []string, modes []string, status map[string]string) *sweep.Loaded {
	ix := &sweep.Index{Sweep: "synthetic-sweep", Axes: []sweep.Axis{{Scenario: "synthetic", Key: "cluster.services", Values: values}}}
	l := &sweep.Loaded{Index: ix, Files: map[string][]*record.File{}}
	for i, v := range values {
		for _, m := range modes {
			c := sweep.Cell{Scenario: "synthetic", Axes: []sweep.Setting{{Key: "cluster.services", Value: v}}, Mode: m,
				Proxier: "kpsim", Backend: "sim", Runs: 2}
			c.Name = sweep.CellName(&c)
			st := status[v+"/"+m]
			if st == "" {
				st = sweep.StatusOK
			}
			ix.Cells = append(ix.Cells, sweep.IndexCell{Cell: c, Status: st, Error: map[bool]string{true: "", false: "because"}[st == sweep.StatusOK]})
			if st != sweep.StatusOK {
				continue
			}
			for run := range 2 {
				l.Files[c.Name] = append(l.Files[c.Name], resultstest.File(resultstest.Options{Name: "synthetic", Seed: uint64(i + 1),
					Run: uint64(run), Syncs: 6, Services: 100 * (i + 1), IPSetExec: m == "exec", Probes: true, Modeled: true}))
			}
		}
	}
	return l
}

// TestSweepReportDrawsEveryFigureAgainstTheAxis: one chart per figure
// against the swept axis, one line per mode, the values those of the
// table of figures; cells without results are crossed out and named, and
// every cell is in the cells table.
func TestSweepReportDrawsEveryFigureAgainstTheAxis(t *testing.T) {
	l := sweepOf([]string{"100", "200", "300"}, []string{"exec", "netlink"},
		map[string]string{"300/exec": sweep.StatusFailed, "300/netlink": sweep.StatusMissing})

	var b bytes.Buffer
	require.NoError(t, report.NewSweep(l).WriteHTML(&b))
	figs, doc := parseReport(t, b.Bytes())
	require.Len(t, figs, 3)
	for id, title := range map[string]string{
		"sweep-synthetic-cluster-services-sync-p99":      "Sync p99 against cluster.services (synthetic, modeled)",
		"sweep-synthetic-cluster-services-disruption":    "Disruption against cluster.services (synthetic, modeled)",
		"sweep-synthetic-cluster-services-kernel-writes": "Kernel writes against cluster.services (synthetic, counted)",
	} {
		f, ok := figs[id]
		require.True(t, ok, "no chart %s among %v", id, figs)
		require.Equal(t, title, f.title)
		require.Equal(t, title, f.svgTitle)
		require.Empty(t, f.noData)
		require.Greater(t, f.svgShapes, 10)
		require.Equal(t, []string{"exec", "netlink", "✕no result (2 cells)"}, f.legend)
		// Modes that agree draw one line over another: each has its own
		// dashes (the first solid).
		var dashes []bool
		for _, st := range f.strokes {
			line := !strings.Contains(st, "stroke-width:0.5") // not a triangle's outline
			if line && (strings.Contains(st, "stroke:#4E79A7;") || strings.Contains(st, "stroke:#F28E2B;")) {
				dashes = append(dashes, strings.Contains(st, "stroke-dasharray"))
			}
		}
		require.Equal(t, []bool{false, true}, dashes, "%s: the lines of exec and netlink", id)
		failed, missing := l.Index.Cells[4].Name, l.Index.Cells[5].Name
		require.Contains(t, f.caption, "Crosses below the zero line mark the 2 cells without a result: "+failed+" (failed), "+missing+" (missing).")
	}
	// Every cell is a row of the table.
	page := text(doc)
	for _, c := range l.Index.Cells {
		require.Contains(t, page, c.Name)
	}
	require.Contains(t, page, "6 cells: 4 ok, 1 failed, 1 missing.")

	var md bytes.Buffer
	require.NoError(t, report.NewSweep(l).WriteMarkdown(&md))
	f := l.Files[l.Index.Cells[0].Name][0]
	g := l.Files[l.Index.Cells[1].Name][0]
	require.Contains(t, md.String(), fmt.Sprintf("**Kernel writes against cluster.services** (synthetic)\n\n| cluster.services | exec | netlink |\n|---:|---:|---:|\n| 100 | %d | %d |\n",
		f.Totals.Ops.Writes(), g.Totals.Ops.Writes()))
	require.Contains(t, md.String(), "| 300 | failed | missing |")
	// A modeled sync p99 is the median of the cell's runs.
	p99 := results.NewDist([]float64{f.Summary.Sync.P99, l.Files[l.Index.Cells[0].Name][1].Summary.Sync.P99}).P50
	require.Contains(t, md.String(), "| 100 | "+results.FormatSeconds(p99)+" |")
}

// TestSweepReportLines: lines are labelled by what tells them apart (here
// the kernel), a line without any result says so, and an axis of words is
// drawn in the spec's order.
func TestSweepReportLines(t *testing.T) {
	l := sweepOf([]string{"exec", "restore"}, []string{""}, nil)
	l.Index.Axes[0].Key = "dataplane.ipset"
	var cells []sweep.IndexCell
	for _, k := range []string{"6.1.0-56-amd64", "6.12.100+deb12-amd64"} {
		for _, c := range l.Index.Cells {
			c.Axes = []sweep.Setting{{Key: "dataplane.ipset", Value: c.Axes[0].Value}}
			c.Backend, c.Kernel = "kernel", k
			old := c.Name
			c.Name = sweep.CellName(&c.Cell)
			if k == "6.12.100+deb12-amd64" {
				c.Status, c.Error = sweep.StatusFailed, "the cell runs on kernel "+k
			} else {
				l.Files[c.Name] = l.Files[old]
			}
			cells = append(cells, c)
		}
	}
	l.Index.Cells = cells
	var md bytes.Buffer
	require.NoError(t, report.NewSweep(l).WriteMarkdown(&md))
	require.Contains(t, md.String(), "| dataplane.ipset | kernel 6.1.0-56-amd64 | kernel 6.12.100+deb12-amd64 |\n|---:|---:|---:|\n| exec |")
	require.Contains(t, md.String(), " | failed |\n| restore |")
	var b bytes.Buffer
	require.NoError(t, report.NewSweep(l).WriteHTML(&b))
	figs, _ := parseReport(t, b.Bytes())
	f := figs["sweep-synthetic-dataplane-ipset-kernel-writes"]
	require.Equal(t, []string{"kernel 6.1.0-56-amd64", "kernel 6.12.100+deb12-amd64 (no result)", "✕no result (2 cells)"}, f.legend)
	require.True(t, strings.Index(b.String(), ">exec<") < strings.Index(b.String(), ">restore<"), "the words on the axis in the spec's order")
}

// TestSweepReportPlotsTheQuestion: a scenario that names its question's
// segment is plotted over that segment (restart-scale: the restart's
// syncs, not the cold start before it), and the chart says so.
func TestSweepReportPlotsTheQuestion(t *testing.T) {
	l := sweepOf([]string{"100", "200"}, []string{"exec"}, nil)
	for _, fs := range l.Files {
		for _, f := range fs {
			resultstest.Ask(f, "restart")
			require.Equal(t, "restart", f.Summary.Question)
		}
	}
	var md bytes.Buffer
	require.NoError(t, report.NewSweep(l).WriteMarkdown(&md))
	cell := l.Files[l.Index.Cells[0].Name]
	restart := results.View(cell[0], "restart").Totals.Ops.Writes()
	require.Less(t, restart, cell[0].Totals.Ops.Writes(), "the cold start wrote too")
	require.Contains(t, md.String(), fmt.Sprintf("**Kernel writes against cluster.services** (synthetic, restart segment)\n\n| cluster.services | kpsim on sim |\n|---:|---:|\n| 100 | %d |", restart))

	var b bytes.Buffer
	require.NoError(t, report.NewSweep(l).WriteHTML(&b))
	figs, _ := parseReport(t, b.Bytes())
	require.Equal(t, "Sync p99 against cluster.services (synthetic, modeled, restart segment)", figs["sweep-synthetic-cluster-services-sync-p99"].title)
}

// TestSweepReportDrawsTheSpread: a release's cell runs several times, its
// runs being samples: where they differ the chart draws each run and a bar
// over their range, and says so; where every run agrees, nothing more.
func TestSweepReportDrawsTheSpread(t *testing.T) {
	l := sweepOf([]string{"100", "200"}, []string{""}, nil)
	for _, c := range l.Index.Cells {
		l.Files[c.Name] = nil
		for run := range 8 {
			l.Files[c.Name] = append(l.Files[c.Name], resultstest.File(resultstest.Options{Name: "synthetic", Seed: 1,
				Run: uint64(run), Syncs: 6, Probes: true, Release: "kube-proxy@v1.30.3"}))
		}
	}
	var b bytes.Buffer
	require.NoError(t, report.NewSweep(l).WriteHTML(&b))
	figs, _ := parseReport(t, b.Bytes())
	// Broken traffic varies with a release's map order; kernel writes by the
	// entries a sync deleted; the modeled syncs do not.
	require.Contains(t, figs["sweep-synthetic-cluster-services-kernel-writes"].caption, "Where a cell's runs differ (2 cells: a kube-proxy release")
	require.Contains(t, figs["sweep-synthetic-cluster-services-kernel-writes"].caption, "each run is a ring and a bar spans their range")
	require.NotContains(t, figs["sweep-synthetic-cluster-services-sync-p99"].caption, "Where a cell's runs differ")
}
