package compare_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/compare"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/scenarios/backend"
)

// runSmoke runs the shipped smoke scenario on the in-memory kernel.
func runSmoke(t *testing.T, sets ...string) *record.File {
	t.Helper()
	s, err := scenarios.Load("smoke", sets)
	require.NoError(t, err)
	spec, err := s.BackendSpec()
	require.NoError(t, err)
	b, err := backend.New(spec)
	require.NoError(t, err)
	f, err := scenarios.Run(context.Background(), s, scenarios.RunOptions{Backend: b})
	require.NoError(t, err)
	return f
}

// TestCompareRealSmokeRestoreVsExec is the comparison the U test missed:
// smoke with one ipset process per entry against kpsim's ipset restore, one
// run each. The U test over the two runs' 15 mixed syncs called a sync p99
// of 54 ms -> 287 ms "no significant change" (p=0.17); on the modeled
// clock it is exact: a regression, the operations are the same, and the
// runs are refused unless the different setting is allowed.
func TestCompareRealSmokeRestoreVsExec(t *testing.T) {
	restore := runSmoke(t)
	exec := runSmoke(t, "dataplane.ipset=exec")
	require.Equal(t, record.ClockModeled, restore.Clock)

	_, err := compare.Compare([]*record.File{restore}, []*record.File{exec}, []string{"restore.json"}, []string{"exec.json"}, compare.DefaultOptions())
	var de *compare.DifferentError
	require.ErrorAs(t, err, &de)
	require.Equal(t, []string{`dataplane.ipset: "restore" in restore.json; "exec" in exec.json`}, de.Differences)

	o := compare.DefaultOptions()
	o.AllowDifferent = true
	c, err := compare.Compare([]*record.File{restore}, []*record.File{exec}, []string{"restore.json"}, []string{"exec.json"}, o)
	require.NoError(t, err)
	var text bytes.Buffer
	require.NoError(t, c.WriteText(&text))
	t.Logf("restore vs exec:\n%s", text.String())
	require.True(t, c.Modeled, "two modeled runs of smoke, seed 1: %v", c.Notes)
	rows := byName(c)
	sync := rows["sync/p99"]
	require.Equal(t, compare.Regressed, sync.Verdict)
	require.Equal(t, results.Exact, sync.Class)
	require.Equal(t, compare.Regressed, rows["phase/ipset-entries/p50"].Verdict)
	for _, m := range c.Metrics {
		if strings.HasPrefix(m.Name, "ops/") || strings.HasPrefix(m.Name, "readded/") || m.Name == "failed-syncs" {
			require.Equal(t, compare.Same, m.Verdict, "%s: the ipset strategy changes how entries are written, not which", m.Name)
		}
	}
	// The modeled kernel time, once the sim records it per sync, is held
	// exact: exec's processes cost more than one restore.
	if results.KernelSeconds(restore) > 0 {
		require.Equal(t, compare.Different, rows["kernel/seconds"].Verdict)
	}

	// The same run against itself: nothing changed, nothing flagged.
	again := runSmoke(t)
	c, err = compare.Compare([]*record.File{restore}, []*record.File{again}, []string{"restore.json"}, []string{"again.json"}, compare.DefaultOptions())
	require.NoError(t, err)
	require.True(t, c.Modeled)
	for _, m := range c.Metrics {
		if m.Class == results.Exact {
			require.Equal(t, compare.Same, m.Verdict, "%s: a seed repeats a modeled run's exact figures", m.Name)
		}
	}
}
