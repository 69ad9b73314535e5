package results

import (
	"encoding/json"
	"strconv"

	"github.com/kpsim/kpsim/record"
)

// Settings flattens the scenario a file recorded (after defaults) into
// dotted paths and the JSON text of their values: "proxier.ipset" ->
// `"exec"`, "timeline[4].churnEndpoints.rate" -> "20". A list of plain
// values (CIDRs, families) is one value; a list of objects (the timeline)
// is flattened entry by entry, so that a difference names the step. A file
// without a readable scenario has no settings.
func Settings(f *record.File) map[string]string {
	out := map[string]string{}
	var v any
	if len(f.Scenario) == 0 || json.Unmarshal(f.Scenario, &v) != nil {
		return out
	}
	flatten(out, "", v)
	return out
}

func flatten(out map[string]string, path string, v any) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			flatten(out, join(k), x)
		}
		return
	case []any:
		objects := len(v) > 0
		for _, x := range v {
			_, isObject := x.(map[string]any)
			objects = objects && isObject
		}
		if objects {
			for i, x := range v {
				flatten(out, path+"["+strconv.Itoa(i)+"]", x)
			}
			return
		}
	}
	b, _ := json.Marshal(v) // v was decoded from JSON: it encodes
	out[path] = string(b)
}
