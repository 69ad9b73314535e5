package scenarios

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/results"
)

// TestQuestionNamesASegment: a question must be a segment the timeline
// makes (marks, restarts, repeats included), and says which it has when not.
func TestQuestionNamesASegment(t *testing.T) {
	timeline := base + "  - mark: churn\n  - repeat: {times: 2, steps: [restartProxier]}\n"
	for _, q := range []string{"start", "churn", "restart", "restart-2"} {
		_, err := Parse("x.yaml", []byte(timeline), []string{"question=" + q})
		require.NoError(t, err, q)
	}
	_, err := Parse("x.yaml", []byte(timeline), []string{"question=restart-3"})
	require.ErrorContains(t, err, `question: "restart-3" is not a segment of the timeline, which has start, churn, restart, restart-2`)
	_, err = Parse("x.yaml", []byte(base+"  - mark: start\n"), nil)
	require.ErrorContains(t, err, `"start": want a name other than "start"`)
	_, err = Parse("x.yaml", []byte(base+"  - mark\n"), nil)
	require.ErrorContains(t, err, "want a segment name")
}

// TestSegmentsOfARun: a run's segments split its attempts exactly, and the
// question's segment is its summary's.
func TestSegmentsOfARun(t *testing.T) {
	s, err := Parse("x.yaml", []byte(base+"  - mark: churned\n  - restartProxier\n  - waitSynced\n  - sleep: 1s\n"), []string{"question=restart"})
	require.NoError(t, err)
	b := simBackend(t, s)
	f, err := Run(context.Background(), s, RunOptions{Backend: b})
	require.NoError(t, err)
	require.Equal(t, "restart", f.Summary.Question)
	var names []string
	attempts, syncs := 0, 0
	for _, seg := range f.Summary.Segments {
		names = append(names, seg.Name)
		attempts += seg.Summary.Disruption.Attempts
		syncs += seg.Summary.Syncs
	}
	require.Equal(t, []string{results.FirstSegment, "churned", "restart"}, names)
	require.Equal(t, f.Probes.Attempts, attempts, "the segments' attempts add up to the run's")
	require.Equal(t, len(f.Syncs), syncs, "every sync started in one segment")
	restart := results.View(f, "restart")
	require.Positive(t, restart.Summary.Disruption.Attempts)
	for _, sy := range restart.Syncs {
		require.Equal(t, 1, sy.Proxier, "the restart's syncs are the new generation's")
	}
}
