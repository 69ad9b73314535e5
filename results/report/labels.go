package report

import (
	"encoding/json"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// RunLabels names each file for a legend or a table: by what tells it apart
// from the others. The scenario name when scenarios differ, then the
// proxier settings whose values differ (ipset=exec, initialSync=legacy), and
// the file name when that is still not enough to tell two files apart.
func RunLabels(paths []string, files []*record.File) []string {
	labels := make([][]string, len(files))
	names := make([]string, len(files))
	settings := make([]map[string]string, len(files))
	for i, f := range files {
		names[i] = results.ScenarioName(f)
		settings[i] = proxierSettings(f)
	}
	if distinct(names) > 1 || len(files) == 1 {
		for i := range files {
			if names[i] != "" {
				labels[i] = append(labels[i], names[i])
			}
		}
	}
	keys := map[string]bool{}
	for _, s := range settings {
		for k := range s {
			keys[k] = true
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		vals := make([]string, len(files))
		for i := range files {
			vals[i] = settings[i][k]
		}
		if distinct(vals) > 1 {
			for i := range files {
				labels[i] = append(labels[i], k+"="+results.OrDash(vals[i]))
			}
		}
	}
	out := make([]string, len(files))
	for i := range files {
		out[i] = strings.Join(labels[i], " ")
	}
	if distinct(out) < len(out) || out[0] == "" {
		for i, p := range paths {
			base := strings.TrimSuffix(filepath.Base(p), ".json")
			out[i] = strings.TrimSpace(out[i] + " " + base)
		}
	}
	return out
}

func distinct(xs []string) int {
	seen := map[string]bool{}
	for _, x := range xs {
		seen[x] = true
	}
	return len(seen)
}

// proxierSettings are the scenario's proxier and dataplane settings (the
// ipset strategy moved from the first to the second), by name, with
// strings unquoted: ipset -> exec.
func proxierSettings(f *record.File) map[string]string {
	out := map[string]string{}
	for k, v := range results.Settings(f) {
		name, ok := strings.CutPrefix(k, "proxier.")
		if !ok {
			name, ok = strings.CutPrefix(k, "dataplane.")
		}
		if !ok || v == "null" {
			continue
		}
		var text string
		if json.Unmarshal([]byte(v), &text) == nil {
			v = text
		}
		out[name] = v
	}
	return out
}
