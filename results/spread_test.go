package results_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/resultstest"
)

// TestPrintSpread: several runs of a release print each figure's median and
// range, the question segment's apart; a figure every run agrees on prints
// its one value.
func TestPrintSpread(t *testing.T) {
	var files []*record.File
	for run := range 5 {
		f := resultstest.File(resultstest.Options{Name: "incident", Seed: 2, Run: uint64(run), Syncs: 8, Noise: 0.1, Probes: true, Release: "kube-proxy@v1.30.3"})
		f.Summary.Question = "restart"
		files = append(files, f)
	}
	var b bytes.Buffer
	require.NoError(t, results.PrintSpread(&b, files))
	out := b.String()
	require.Contains(t, out, "kpsim incident: 5 runs")
	require.Contains(t, out, "proxier kube-proxy@v1.30.3")
	require.Contains(t, out, "question: restart")
	require.Regexp(t, `whole run\n(.*\n)*  disruption/failed-attempts +\d+ \(\d+\.\.\d+\)\n`, out, "broken traffic varies from run to run")
	require.Regexp(t, `whole run\n  sync +p50 \S+ \(\S+\.\.\S+\)`, out, "the whole run's syncs, under the question's")
	require.Regexp(t, `\n  failed-syncs +0\n`, out, "every run agrees: one value")
	require.NotContains(t, out, "ops/ipset-add", "an operation kind of its own is a comparison's detail")
}
