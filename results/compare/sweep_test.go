package compare

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results/resultstest"
	"github.com/kpsim/kpsim/results/sweep"
)

// sweepSide is a loaded sweep whose cells are named as given, each with a
// status and, when ok, two modeled runs of a seed; exec makes a build that
// charges a process per ipset entry, the slower strategy, for the same
// settings.
type sweepCell struct {
	name, status string
	seed         uint64
	exec         bool
}

func sweepSide(path string, cells ...sweepCell) *sweep.Loaded {
	l := &sweep.Loaded{Path: path, Index: &sweep.Index{Sweep: "s", Kpsim: []record.Build{{Version: "v1", Commit: "c"}}},
		Files: map[string][]*record.File{}}
	for _, c := range cells {
		l.Index.Cells = append(l.Index.Cells, sweep.IndexCell{Cell: sweep.Cell{Name: c.name, Runs: 2}, Status: c.status})
		if c.status != sweep.StatusOK {
			continue
		}
		for run := range 2 {
			f := resultstest.File(resultstest.Options{Name: "s", Seed: c.seed, Run: uint64(run),
				Syncs: 12, Services: 500, IPSetExec: c.exec, Noise: 0.02, Modeled: true})
			f.Scenario = []byte(fmt.Sprintf(`{"name": "s", "seed": %d}`, c.seed))
			l.Files[c.name] = append(l.Files[c.name], f)
		}
	}
	return l
}

// TestCompareSweepsCellByCell: cells both sweeps ran are compared as runs
// are; a cell whose head failed where its base ran regressed; cells that
// did not run on both sides are listed with why, and warned about.
func TestCompareSweepsCellByCell(t *testing.T) {
	base := sweepSide("base/index.json",
		sweepCell{"same", sweep.StatusOK, 1, false},
		sweepCell{"slower", sweep.StatusOK, 2, false},
		sweepCell{"broke", sweep.StatusOK, 3, false},
		sweepCell{"fixed", sweep.StatusFailed, 4, false},
		sweepCell{"gone", sweep.StatusOK, 5, false})
	head := sweepSide("head/index.json",
		sweepCell{"same", sweep.StatusOK, 1, false},
		sweepCell{"slower", sweep.StatusOK, 2, true},
		sweepCell{"broke", sweep.StatusFailed, 3, false},
		sweepCell{"fixed", sweep.StatusOK, 4, false},
		sweepCell{"gone", sweep.StatusMissing, 5, false},
		sweepCell{"new", sweep.StatusOK, 7, false})
	sc := CompareSweeps(base, head, "base/index.json", "head/index.json", DefaultOptions())

	verdicts := map[string]string{}
	for i := range sc.Cells {
		verdicts[sc.Cells[i].Name] = sc.Cells[i].Base + " -> " + sc.Cells[i].Head + ": " + sc.Cells[i].verdict()
	}
	require.Len(t, verdicts, 6)
	require.Regexp(t, `^ok -> ok: no significant change in \d+ metrics$`, verdicts["same"])
	require.Contains(t, verdicts["slower"], "kernel/seconds exact-different")
	require.Equal(t, "ok -> failed: REGRESSED: the head's cell failed", verdicts["broke"])
	require.Equal(t, "failed -> ok: improved: the base's cell failed, the head's ran", verdicts["fixed"])
	require.Equal(t, "ok -> missing: not compared: ok in base, missing in head", verdicts["gone"])
	require.Equal(t, "absent -> ok: not compared: absent in base, ok in head", verdicts["new"])
	require.Equal(t, []string{"2 of 6 cells were not compared (see why below): gone, new"}, sc.Warnings)

	require.Equal(t, []string{"slower", "broke"}, sc.Failures(Gate{}))
	require.Equal(t, []string{"broke"}, sc.Failures(Gate{Timing: true, AllowChanges: true}),
		"exec's slower phase is modeled time, which --allow-ops-change declares")
	require.Empty(t, sc.Refused())

	var text bytes.Buffer
	require.NoError(t, sc.WriteText(&text))
	require.Contains(t, text.String(), "slower: EXACT-DIFFERENT: kernel/seconds")
	require.Contains(t, text.String(), "WARNING: 2 of 6 cells were not compared")
	var md bytes.Buffer
	require.NoError(t, sc.WriteMarkdown(&md, "t"))
	require.Contains(t, md.String(), "| `broke` | ok | failed | REGRESSED: the head's cell failed |")
	require.Contains(t, md.String(), "<details><summary><code>slower</code></summary>")
}

// TestCompareSweepsRefusesCellsThatDiffer: a cell of one name that ran
// other settings (defaults that moved between the builds) is not compared
// unless told.
func TestCompareSweepsRefusesCellsThatDiffer(t *testing.T) {
	base := sweepSide("b", sweepCell{"c", sweep.StatusOK, 1, false})
	head := sweepSide("h", sweepCell{"c", sweep.StatusOK, 1, false})
	for side, sync := range map[*sweep.Loaded]string{base: "handlers", head: "legacy"} {
		for _, f := range side.Files["c"] {
			f.Scenario = []byte(`{"name": "s", "seed": 1, "proxier": {"initialSync": "` + sync + `"}}`)
		}
	}
	sc := CompareSweeps(base, head, "b", "h", DefaultOptions())
	require.Equal(t, []string{"c"}, sc.Refused())
	require.Contains(t, sc.Cells[0].verdict(), "not compared: the runs differ: proxier.initialSync:")
	o := DefaultOptions()
	o.AllowDifferent = true
	sc = CompareSweeps(base, head, "b", "h", o)
	require.Empty(t, sc.Refused())
	require.NotNil(t, sc.Cells[0].Comparison)
}
