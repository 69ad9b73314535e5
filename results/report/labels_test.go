package report_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results/report"
)

func TestRunLabels(t *testing.T) {
	file := func(name, ipset, initial string) *record.File {
		b, err := json.Marshal(map[string]any{"name": name, "proxier": map[string]any{"ipset": ipset, "initialSync": initial, "families": []string{"IPv4"}}})
		require.NoError(t, err)
		return &record.File{Scenario: b}
	}
	tests := []struct {
		name  string
		paths []string
		files []*record.File
		want  []string
	}{
		{"single", []string{"out/smoke.json"}, []*record.File{file("smoke", "netlink", "handlers")}, []string{"smoke"}},
		{"incident modes", []string{"a.json", "b.json"},
			[]*record.File{file("restart-stale-ipsets", "exec", "legacy"), file("restart-stale-ipsets", "netlink", "handlers")},
			[]string{"initialSync=legacy ipset=exec", "initialSync=handlers ipset=netlink"}},
		{"different scenarios", []string{"a.json", "b.json"},
			[]*record.File{file("smoke", "netlink", "handlers"), file("churn-endpoints", "netlink", "handlers")},
			[]string{"smoke", "churn-endpoints"}},
		{"repetitions fall back to file names", []string{"out/base-smoke-1.json", "out/base-smoke-2.json"},
			[]*record.File{file("smoke", "netlink", "handlers"), file("smoke", "netlink", "handlers")},
			[]string{"base-smoke-1", "base-smoke-2"}},
		{"no scenario", []string{"x/r.json"}, []*record.File{{}}, []string{"r"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, report.RunLabels(tt.paths, tt.files))
		})
	}
}

// TestRunLabelsDataplane: the ipset strategy, now in the scenario's
// dataplane section, still tells runs apart.
func TestRunLabelsDataplane(t *testing.T) {
	file := func(ipset string) *record.File {
		b, err := json.Marshal(map[string]any{"name": "smoke", "proxier": map[string]any{"initialSync": "handlers"},
			"dataplane": map[string]any{"ipset": ipset}})
		require.NoError(t, err)
		return &record.File{Scenario: b}
	}
	require.Equal(t, []string{"ipset=restore", "ipset=exec"}, report.RunLabels([]string{"a.json", "b.json"}, []*record.File{file("restore"), file("exec")}))
	b, err := json.Marshal(map[string]any{"name": "smoke", "dataplane": map[string]any{"ipset": "exec"}})
	require.NoError(t, err)
	require.Equal(t, []string{"smoke"}, report.RunLabels([]string{"a.json"}, []*record.File{{Scenario: b}}), "no proxier section")
}
