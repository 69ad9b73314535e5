package results

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// RunLabels names each file for a legend or a table: by what tells it apart
// from the others. The scenario name when scenarios differ, then the
// proxier settings whose values differ (ipset=exec, initialSync=legacy), and
// the file name when that is still not enough to tell two files apart.
func RunLabels(paths []string, files []*File) []string {
	labels := make([][]string, len(files))
	names := make([]string, len(files))
	settings := make([]map[string]string, len(files))
	for i, f := range files {
		names[i] = ScenarioName(f)
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
				labels[i] = append(labels[i], k+"="+orDash(vals[i]))
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

// proxierSettings flattens the scenario's proxier and dataplane objects
// (the ipset strategy moved from the first to the second) to key=value text.
func proxierSettings(f *File) map[string]string {
	var s struct {
		Proxier   map[string]any `json:"proxier"`
		Dataplane map[string]any `json:"dataplane"`
	}
	out := map[string]string{}
	if len(f.Scenario) == 0 || json.Unmarshal(f.Scenario, &s) != nil {
		return out
	}
	if s.Proxier == nil {
		s.Proxier = map[string]any{}
	}
	for k, v := range s.Dataplane {
		s.Proxier[k] = v
	}
	for k, v := range s.Proxier {
		switch v := v.(type) {
		case nil:
		case string, bool, float64:
			out[k] = fmt.Sprint(v)
		default:
			b, _ := json.Marshal(v)
			out[k] = string(b)
		}
	}
	return out
}
