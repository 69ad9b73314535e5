// Package sweeps reads sweep specs, a matrix of scenarios × settings ×
// proxiers × kernels, and expands them into plans (results/sweep): cells
// that a GitHub Actions matrix runs one job each, or `make sweep` one after
// another on one machine. The shipped sweeps are the YAML files beside it.
package sweeps

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/scenarios"
)

// Spec is one sweep spec file.
type Spec struct {
	File        string
	Name        string
	Description string
	Scenarios   []ScenarioSpec
	// Proxiers under test: record.ProxierKpsim, or kube-proxy releases
	// ("kube-proxy@v1.37.1"), which run in their own kpsim binaries
	// (kpsim sweep run finds them beside kpsim's).
	Proxiers []string
	Backends []string
	// Kernels are the Debian kernel releases the kernel backend runs on,
	// as `uname -r` prints them (packages linux-image-RELEASE).
	Kernels []string
	// Runs is how many times each cell runs; 0 leaves it to each cell:
	// once where a run repeats exactly, compare.DefaultRuns elsewhere.
	Runs int

	lines map[string]int // field path -> line, for what the plan checks later
}

// ScenarioSpec is one scenario of a sweep and the settings it is run with.
type ScenarioSpec struct {
	// Scenario is a shipped scenario's name, or a file relative to the spec.
	Scenario string
	// Set are overrides every cell of the scenario takes.
	Set []Override
	// Axes are the swept keys: the scenario runs at every combination of
	// their values.
	Axes []AxisSpec
	// Modes are named sets of overrides, each a line of the sweep's charts
	// (kube-proxy's behaviour against kpsim's defaults).
	Modes []Mode
	// Proxiers, when set, are this scenario's instead of the spec's: a
	// setting only some proxiers have (nftables mode: a release's, not
	// kpsim's) runs with those.
	Proxiers []string
}

// Override is one key=value, and the line of its value.
type Override struct {
	Key, Value string
	Line       int
}

func (o Override) String() string { return o.Key + "=" + o.Value }

// AxisSpec is a swept key and its values (each with its line).
type AxisSpec struct {
	Key    string
	Values []Override
}

// Mode is a named set of overrides.
type Mode struct {
	Name string
	Set  []Override
}

// Read reads and parses a spec file.
func Read(path string) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read sweep spec: %w", err)
	}
	return Parse(path, data)
}

// decoder walks a spec's YAML nodes, collecting every problem with its
// line and field path in the form scenarios use.
type decoder struct {
	file  string
	errs  scenarios.Errors
	lines map[string]int
}

func (d *decoder) errf(n *yaml.Node, path, format string, a ...any) {
	d.errs = append(d.errs, &scenarios.Error{File: d.file, Line: n.Line, Path: path, Msg: fmt.Sprintf(format, a...)})
}

// mapping calls each for every key of the mapping n, in order; it reports
// n if it is not a mapping, and keys that are not plain words or that
// repeat. An empty value (null) is an empty mapping.
func (d *decoder) mapping(n *yaml.Node, path string, each func(key string, k, v *yaml.Node)) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errf(n, path, "must be a mapping, got %s", scenarios.Describe(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		switch {
		case k.Kind != yaml.ScalarNode || k.Tag != "!!str":
			d.errf(k, path, "keys must be names, got %s", scenarios.Describe(k))
		case seen[k.Value]:
			d.errf(k, p, "given twice")
		case v.Kind == yaml.AliasNode:
			d.errf(v, p, "YAML aliases are not supported; write the value out")
		default:
			seen[k.Value] = true
			d.lines[p] = k.Line
			each(k.Value, k, v)
		}
	}
}

// fields decodes a mapping whose keys are the known fields.
func (d *decoder) fields(n *yaml.Node, path string, known map[string]func(v *yaml.Node, path string)) {
	names := make([]string, 0, len(known))
	for k := range known {
		names = append(names, k)
	}
	slices.Sort(names)
	d.mapping(n, path, func(key string, k, v *yaml.Node) {
		f, ok := known[key]
		if !ok {
			d.errf(k, join(path, key), "unknown field (known: %s)", strings.Join(names, ", "))
			return
		}
		f(v, join(path, key))
	})
}

func (d *decoder) str(n *yaml.Node, path string) string {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		d.errf(n, path, "must be a string, got %s", scenarios.Describe(n))
		return ""
	}
	return n.Value
}

// list calls each for every item of the list n.
func (d *decoder) list(n *yaml.Node, path string, each func(item *yaml.Node, path string)) {
	if n.Kind != yaml.SequenceNode {
		d.errf(n, path, "must be a list, got %s", scenarios.Describe(n))
		return
	}
	for i, c := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		if c.Kind == yaml.AliasNode {
			d.errf(c, p, "YAML aliases are not supported; write the value out")
			continue
		}
		each(c, p)
	}
}

// words decodes a list of distinct strings matching pattern (what says
// what the pattern wants).
func (d *decoder) words(n *yaml.Node, path string, pattern *regexp.Regexp, what string) []string {
	var out []string
	d.list(n, path, func(c *yaml.Node, p string) {
		s := d.str(c, p)
		switch {
		case s == "":
		case !pattern.MatchString(s):
			d.errf(c, p, "%q is not %s", s, what)
		case slices.Contains(out, s):
			d.errf(c, p, "%q is listed twice", s)
		default:
			out = append(out, s)
		}
	})
	return out
}

// value reads a scalar as the text of a --set value: as written, except a
// quoted string that would otherwise read as another type ("1000" meant as
// text) keeps its quotes, since a --set value is read as YAML.
func (d *decoder) value(n *yaml.Node, path string) (Override, bool) {
	if n.Kind != yaml.ScalarNode {
		d.errf(n, path, "must be a single value (what --set takes), got %s", scenarios.Describe(n))
		return Override{}, false
	}
	v := n.Value
	if n.Tag == "!!str" {
		var plain yaml.Node
		if yaml.Unmarshal([]byte(v), &plain) != nil || len(plain.Content) != 1 || plain.Content[0].Tag != "!!str" || plain.Content[0].Value != v {
			v = strconv.Quote(v)
		}
	}
	return Override{Value: v, Line: n.Line}, true
}

// overrides decodes a mapping of --set keys to values.
func (d *decoder) overrides(n *yaml.Node, path string) []Override {
	var out []Override
	d.mapping(n, path, func(key string, k, v *yaml.Node) {
		p := join(path, key)
		if o, ok := d.value(v, p); ok && d.settable(k, p, key) {
			o.Key = key
			out = append(out, o)
		}
	})
	return out
}

// settable reports whether key may be overridden by a sweep; the backend
// is the sweep's own axis.
func (d *decoder) settable(k *yaml.Node, path, key string) bool {
	if key == "backend" {
		d.errf(k, path, "the backend is swept by the spec's backends, not by an override")
		return false
	}
	return true
}

// sameSets reports whether two lists of overrides set the same keys to the
// same values, in any order.
func sameSets(a, b []Override) bool {
	text := func(os []Override) []string {
		out := make([]string, len(os))
		for i, o := range os {
			out[i] = o.String()
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(text(a), text(b))
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var (
	sweepName   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	modeName    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.+-]*$`)
	proxierName = regexp.MustCompile(`^(kpsim|kube-proxy@v[0-9]+\.[0-9]+\.[0-9]+)$`)
	backendName = regexp.MustCompile(`^(sim|kernel)$`)
	kernelName  = regexp.MustCompile(`^[0-9]+\.[0-9]+[0-9A-Za-z.+~-]*$`)
)

// maxRuns bounds the runs per cell: each is a job's worth of work.
const maxRuns = 100

// Parse decodes a spec and checks it on its own (the plan checks each
// cell's scenario and overrides). Every problem is reported with its file,
// line and field path; the error is then a scenarios.Errors.
func Parse(file string, data []byte) (*Spec, error) {
	root, err := scenarios.ParseYAML(file, "sweep spec", data)
	if err != nil {
		return nil, err
	}
	d := &decoder{file: file, lines: map[string]int{}}
	s := &Spec{File: file, lines: d.lines, Proxiers: []string{record.ProxierKpsim}, Backends: []string{dataplane.BackendSim}}
	empty := func(n *yaml.Node, p, what string) {
		if n.Kind == yaml.SequenceNode && len(n.Content) == 0 {
			d.errf(n, p, "empty: list at least one %s, or leave the field out", what)
		}
	}
	d.fields(root, "", map[string]func(*yaml.Node, string){
		"name": func(n *yaml.Node, p string) {
			if s.Name = d.str(n, p); s.Name != "" && !sweepName.MatchString(s.Name) {
				d.errf(n, p, "%q: use lower-case letters, digits and dashes", s.Name)
			}
		},
		"description": func(n *yaml.Node, p string) { s.Description = d.str(n, p) },
		"scenarios": func(n *yaml.Node, p string) {
			d.list(n, p, func(c *yaml.Node, p string) { s.Scenarios = append(s.Scenarios, d.scenario(c, p)) })
		},
		"proxiers": func(n *yaml.Node, p string) {
			s.Proxiers = d.words(n, p, proxierName, `a proxier: "kpsim", or a kube-proxy release such as "kube-proxy@v1.37.1"`)
			empty(n, p, "proxier (kpsim's is the default)")
		},
		"backends": func(n *yaml.Node, p string) {
			s.Backends = d.words(n, p, backendName, `a backend: "sim" or "kernel"`)
			empty(n, p, "backend (the sim is the default)")
		},
		"kernels": func(n *yaml.Node, p string) {
			s.Kernels = d.words(n, p, kernelName, `a Debian kernel release such as "6.1.0-41-amd64" (uname -r)`)
		},
		"runs": func(n *yaml.Node, p string) {
			if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
				d.errf(n, p, "must be a whole number, got %s", scenarios.Describe(n))
				return
			}
			r, err := strconv.Atoi(n.Value)
			if err != nil || r < 1 || r > maxRuns {
				d.errf(n, p, "%s: want 1 to %d runs per cell", n.Value, maxRuns)
				return
			}
			s.Runs = r
		},
	})
	at := func(path string) *yaml.Node { return &yaml.Node{Line: d.lines[path]} }
	switch {
	case s.Name == "" && d.lines["name"] == 0:
		d.errf(root, "name", "missing: name the sweep (it names the plan, the artifacts and the report)")
	case len(s.Scenarios) == 0 && d.lines["scenarios"] == 0:
		d.errf(root, "scenarios", "missing: list at least one scenario")
	case len(s.Scenarios) == 0:
		d.errf(at("scenarios"), "scenarios", "empty: list at least one scenario")
	}
	kernel := slices.Contains(s.Backends, dataplane.BackendKernel)
	switch {
	case kernel && len(s.Kernels) == 0:
		d.errf(at("backends"), "kernels", "the kernel backend needs the kernels to run on: list Debian kernel releases such as 6.1.0-41-amd64")
	case !kernel && len(s.Kernels) > 0:
		d.errf(at("kernels"), "kernels", "kernels are for the kernel backend, which backends does not list")
	}
	if len(d.errs) > 0 {
		return nil, d.errs
	}
	return s, nil
}

// scenario decodes one entry of scenarios.
func (d *decoder) scenario(n *yaml.Node, path string) ScenarioSpec {
	var sc ScenarioSpec
	keys := map[string]string{} // override key -> where the spec sets it
	claim := func(key string, line int, path, where string) bool {
		if prev, ok := keys[key]; ok && prev != where {
			d.errf(&yaml.Node{Line: line}, path, "%s is also set by %s: give each key in one place", key, prev)
			return false
		}
		keys[key] = where
		return true
	}
	d.fields(n, path, map[string]func(*yaml.Node, string){
		"scenario": func(n *yaml.Node, p string) { sc.Scenario = d.str(n, p) },
		"proxiers": func(n *yaml.Node, p string) {
			sc.Proxiers = d.words(n, p, proxierName, `a proxier: "kpsim", or a kube-proxy release such as "kube-proxy@v1.37.1"`)
			if len(sc.Proxiers) == 0 && n.Kind == yaml.SequenceNode {
				d.errf(n, p, "empty: leave it out to run the spec's proxiers")
			}
		},
		"set": func(n *yaml.Node, p string) {
			for _, o := range d.overrides(n, p) {
				if claim(o.Key, o.Line, join(p, o.Key), "set") {
					sc.Set = append(sc.Set, o)
				}
			}
		},
		"axes": func(n *yaml.Node, p string) {
			d.mapping(n, p, func(key string, k, v *yaml.Node) {
				ap := join(p, key)
				if !d.settable(k, ap, key) || !claim(key, k.Line, ap, "axes") {
					return
				}
				a := AxisSpec{Key: key}
				d.list(v, ap, func(c *yaml.Node, vp string) {
					o, ok := d.value(c, vp)
					o.Key = key
					switch {
					case !ok:
					case slices.ContainsFunc(a.Values, func(x Override) bool { return x.Value == o.Value }):
						d.errf(c, vp, "%s is listed twice", o.Value)
					default:
						a.Values = append(a.Values, o)
					}
				})
				if len(a.Values) == 0 && v.Kind == yaml.SequenceNode {
					d.errf(v, ap, "empty: an axis needs at least one value")
				}
				if len(a.Values) > 0 {
					sc.Axes = append(sc.Axes, a)
				}
			})
		},
		"modes": func(n *yaml.Node, p string) {
			d.mapping(n, p, func(name string, k, v *yaml.Node) {
				mp := join(p, name)
				if !modeName.MatchString(name) {
					d.errf(k, mp, "mode name %q: use letters, digits, '.', '+' and '-'", name)
					return
				}
				m := Mode{Name: name}
				for _, o := range d.overrides(v, mp) {
					if claim(o.Key, o.Line, join(mp, o.Key), "modes") {
						m.Set = append(m.Set, o)
					}
				}
				for _, other := range sc.Modes {
					if sameSets(other.Set, m.Set) {
						d.errf(k, mp, "sets what mode %s sets: two modes would run the same cells", other.Name)
					}
				}
				sc.Modes = append(sc.Modes, m)
			})
		},
	})
	if sc.Scenario == "" && d.lines[join(path, "scenario")] == 0 {
		d.errf(n, join(path, "scenario"), "missing: name a shipped scenario or a scenario file")
	}
	return sc
}
