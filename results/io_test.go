package results

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/record"
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

// TestReadSaysTruncated: a results file cut short says so, and where it
// stops, instead of "not a kpsim results file: unexpected end of JSON
// input"; a file that is not JSON, or is JSON with more after it, is not
// taken for one cut short.
func TestReadSaysTruncated(t *testing.T) {
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.json")
	require.NoError(t, Write(whole, &record.File{Scenario: []byte(`{"name":"x"}`), Start: time.Unix(1, 0).UTC(), Backend: "sim", Basis: record.Modeled,
		Syncs: []record.Sync{{Seq: 1, Error: `a "quoted" \ error`}}}))
	b, err := os.ReadFile(whole)
	require.NoError(t, err)
	_, err = Read(whole)
	require.NoError(t, err)
	half := len(b) / 2
	for _, tc := range []struct {
		name, body, want string
	}{
		{"cut in half", string(b[:half]), fmt.Sprintf("truncated: its JSON stops at byte %d, mid-document", half)},
		{"cut after the first brace", "{", "truncated: its JSON stops at byte 1, mid-document"},
		{"cut in a literal", `{"schemaVersion": 3, "interrupted": tr`, "truncated: its JSON stops at byte 38"},
		{"cut before the last brace", strings.TrimSpace(string(b))[:len(strings.TrimSpace(string(b)))-1], "truncated"},
		{"not JSON", "<html>", "not a kpsim results file: invalid character '<'"},
		{"more after the document", `{"schemaVersion": 3}}`, "not a kpsim results file: invalid character '}' after top-level value"},
		{"a list cut short", `[{"schemaVersion": 3}`, "not a kpsim results file: unexpected end of JSON input"},
		{"empty", "", "not a kpsim results file: unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "cut.json")
			require.NoError(t, os.WriteFile(p, []byte(tc.body), 0o644))
			_, err := Read(p)
			require.ErrorContains(t, err, "read results "+p+": "+tc.want)
		})
	}
}
