package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/results/resultstest"
)

// TestOutputsAreReplacedNotRewritten: every command that writes a file
// writes a temporary one beside it and renames it into place, so a reader
// (or a second link to the old file) never sees a half-written one. The old
// file's content surviving under a second link shows it was replaced, not
// truncated and rewritten in place.
func TestOutputsAreReplacedNotRewritten(t *testing.T) {
	dir := t.TempDir()
	runs := writeRuns(t, dir, "smoke", 2, resultstest.Options{Name: "smoke", Seed: 1, Syncs: 4})
	export := filepath.Join("..", "..", "..", "objects", "testdata", "example", "cluster.json")
	spec := filepath.Join("..", "..", "..", "sweeps", "restart-scale.yaml")
	for _, tc := range []struct {
		name string
		args []string // the output file is appended after -o
	}{
		{"report", []string{"report", runs[0]}},
		{"report md", []string{"report", "--format", "md", runs[0]}},
		{"compare", []string{"compare", "--allow-different", runs[0], runs[1]}},
		{"anonymize", []string{"anonymize", "--seed", "1", export}},
		{"state", []string{"state", "-f", export}},
		{"sweep plan", []string{"sweep", "plan", "--format", "names", spec}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			require.NoError(t, os.WriteFile(out, []byte("old"), 0o644))
			require.NoError(t, os.Link(out, out+".link"))
			var stdout, stderr bytes.Buffer
			code := run(append(tc.args, "-o", out), &stdout, &stderr)
			require.Contains(t, []int{0, 1}, code, stderr.String()) // compare may say "changed"
			b, err := os.ReadFile(out)
			require.NoError(t, err)
			require.NotEqual(t, "old", string(b))
			old, err := os.ReadFile(out + ".link")
			require.NoError(t, err)
			require.True(t, string(old) == "old", "the file was rewritten in place: %.60q", old)
			left, err := filepath.Glob(filepath.Join(filepath.Dir(out), ".*"))
			require.NoError(t, err)
			require.Empty(t, left, "temporary files left behind")
		})
	}
}

// TestOutputWrittenMeanwhile: a run's output file that something else wrote
// while the run went on is kept; the run's results go to a free sibling
// name, and it says so. A file that was there before and not touched since
// is replaced as always, and a missing one created.
func TestOutputWrittenMeanwhile(t *testing.T) {
	dir := t.TempDir()
	write := func(dest string) error { return os.WriteFile(dest, []byte("ours"), 0o644) }
	read := func(p string) string {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return string(b)
	}

	// Absent at the start, still absent: created.
	p := filepath.Join(dir, "new.json")
	var warn bytes.Buffer
	got, err := stampOutput(p).write(&warn, "kpsim run", write)
	require.NoError(t, err)
	require.Equal(t, p, got)
	require.Equal(t, "ours", read(p))
	require.Empty(t, warn.String())

	// There at the start, untouched: replaced.
	st := stampOutput(p)
	got, err = st.write(&warn, "kpsim run", write)
	require.NoError(t, err)
	require.Equal(t, p, got)
	require.Empty(t, warn.String())

	// Written by another run meanwhile, whether it was there or not: kept.
	for _, before := range []bool{false, true} {
		p := filepath.Join(dir, "same.json")
		os.Remove(p)
		if before {
			require.NoError(t, os.WriteFile(p, []byte("earlier"), 0o644))
		}
		st := stampOutput(p)
		require.NoError(t, os.WriteFile(p, []byte("theirs, a longer file"), 0o644))
		warn.Reset()
		got, err := st.write(&warn, "kpsim run", write)
		require.NoError(t, err)
		require.NotEqual(t, p, got)
		require.Equal(t, dir, filepath.Dir(got))
		require.Equal(t, "theirs, a longer file", read(p))
		require.Equal(t, "ours", read(got))
		require.Contains(t, warn.String(), p+" was written by another run since this one started")
		require.Contains(t, warn.String(), got)
		// A third run that finds the sibling taken takes the next one.
		got2, err := st.write(&warn, "kpsim run", write)
		require.NoError(t, err)
		require.NotEqual(t, got, got2)
		require.True(t, strings.HasPrefix(filepath.Base(got2), "same-"), got2)
		os.Remove(got)
		os.Remove(got2)
	}
}
