package results

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadRefusesIncompleteFiles: a file holding only a schema version (or
// lacking what every run writes) is refused, naming what is missing.
func TestReadRefusesIncompleteFiles(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, body, want string }{
		{"version only", `{"schemaVersion":1}`, "no scenario, start, backend, basis (every run writes them)"},
		{"no basis", `{"schemaVersion":2,"scenario":{"name":"x"},"start":"2026-01-01T00:00:00Z","backend":"sim"}`, "no basis"},
		{"scenario not an object", `{"schemaVersion":2,"scenario":null,"start":"2026-01-01T00:00:00Z","backend":"sim","basis":"modeled"}`, "no scenario"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".json")
			require.NoError(t, os.WriteFile(p, []byte(tc.body), 0o644))
			_, err := Read(p)
			require.ErrorContains(t, err, p+": not a complete kpsim results file: "+tc.want)
		})
	}
	p := filepath.Join(dir, "whole.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"schemaVersion":1,"scenario":{"name":"x"},"start":"2026-01-01T00:00:00Z","backend":"sim","basis":"modeled"}`), 0o644))
	_, err := Read(p)
	require.NoError(t, err, "a version 1 file with what every run writes reads")
}
