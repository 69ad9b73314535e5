package scenarios

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/results"
)

// pathSeg is one step of an override path: a mapping key or a list index.
type pathSeg struct {
	key   string
	index int // -1 for a key
}

// parseSetPath splits "timeline[2].sleep" into segments.
func parseSetPath(p string) ([]pathSeg, error) {
	var segs []pathSeg
	rest := p
	for rest != "" {
		switch {
		case rest[0] == '[':
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return nil, fmt.Errorf("unclosed [ in %q", p)
			}
			i, err := strconv.Atoi(rest[1:end])
			if err != nil || i < 0 {
				return nil, fmt.Errorf("list index %q in %q: must be a number >= 0", rest[1:end], p)
			}
			segs = append(segs, pathSeg{index: i})
			rest = rest[end+1:]
			if strings.HasPrefix(rest, ".") {
				rest = rest[1:]
				if rest == "" {
					return nil, fmt.Errorf("%q ends with a dot", p)
				}
			}
		default:
			end := strings.IndexAny(rest, ".[")
			if end < 0 {
				end = len(rest)
			}
			if end == 0 {
				return nil, fmt.Errorf("empty field name in %q", p)
			}
			segs = append(segs, pathSeg{key: rest[:end], index: -1})
			rest = rest[end:]
			if strings.HasPrefix(rest, ".") {
				rest = rest[1:]
				if rest == "" {
					return nil, fmt.Errorf("%q ends with a dot", p)
				}
			}
		}
	}
	if len(segs) == 0 {
		return nil, fmt.Errorf("empty key")
	}
	return segs, nil
}

// applySet replaces (or adds) the value at key in the document root with
// value parsed as YAML, so that "cluster.services=500" is a number and
// "proxier.ipset=exec" a string, and the result is validated like the file.
// Nodes it creates are recorded in d.origin so errors name the override.
func (d *decoder) applySet(root *yaml.Node, kv string) error {
	key, value, ok := strings.Cut(kv, "=")
	if !ok {
		return &Error{Set: kv, Msg: "must be key=value, e.g. proxier.initialSync=legacy"}
	}
	segs, err := parseSetPath(key)
	if err != nil {
		return &Error{Set: kv, Msg: err.Error()}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(value), &doc); err != nil {
		return &Error{Set: kv, Msg: fmt.Sprintf("value is not valid YAML: %v", err)}
	}
	val := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	if len(doc.Content) > 0 {
		val = doc.Content[0]
	}
	d.mark(val, kv)
	d.sets = append(d.sets, kv)

	cur := root
	path := ""
	for i, s := range segs {
		last := i == len(segs)-1
		if s.index >= 0 {
			path = fmt.Sprintf("%s[%d]", path, s.index)
			if cur.Kind != yaml.SequenceNode {
				return &Error{Set: kv, Path: parentPath(path), Msg: "is not a list"}
			}
			if s.index >= len(cur.Content) {
				return &Error{Set: kv, Path: path, Msg: fmt.Sprintf("the list has %d %s", len(cur.Content), results.Plural(len(cur.Content), "item", "items"))}
			}
			if last {
				cur.Content[s.index] = val
				return nil
			}
			cur = cur.Content[s.index]
			continue
		}
		path = joinPath(path, s.key)
		if cur.Kind == yaml.ScalarNode && cur.Tag == "!!null" {
			// "sim:" with nothing under it becomes a mapping.
			cur.Kind, cur.Tag = yaml.MappingNode, "!!map"
		}
		if cur.Kind != yaml.MappingNode {
			return &Error{Set: kv, Path: parentPath(path), Msg: fmt.Sprintf("is %s, not a mapping", Describe(cur))}
		}
		var next *yaml.Node
		for j := 0; j+1 < len(cur.Content); j += 2 {
			if cur.Content[j].Value == s.key {
				if last {
					cur.Content[j+1] = val
					return nil
				}
				next = cur.Content[j+1]
				break
			}
		}
		if next == nil {
			k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s.key}
			d.origin[k] = kv
			next = val
			if !last {
				next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
				d.origin[next] = kv
			}
			cur.Content = append(cur.Content, k, next)
			if last {
				return nil
			}
		}
		cur = next
	}
	return nil
}

// mark records n and its descendants as coming from an override.
func (d *decoder) mark(n *yaml.Node, kv string) {
	d.origin[n] = kv
	for _, c := range n.Content {
		d.mark(c, kv)
	}
}

// ProxierOverrides turns proxier.KEY=VALUE and dataplane.KEY=VALUE
// overrides alone into settings, decoded, defaulted and validated exactly as
// a scenario's sections are, for commands that run the proxier without a
// scenario (kpsim state). Families stay as set (empty if not): the caller
// decides them. warnings are as a scenario's (a deprecated key).
func ProxierOverrides(sets []string) (cfg proxier.Config, ipset dataplane.IPSetStrategy, warnings []string, err error) {
	root := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	d := newDecoder("")
	for _, kv := range sets {
		if !strings.HasPrefix(kv, "proxier.") && !strings.HasPrefix(kv, "dataplane.") {
			return cfg, "", nil, &Error{Set: kv, Msg: "only proxier.* keys apply here, and dataplane.* ones"}
		}
		if err := d.applySet(root, kv); err != nil {
			return cfg, "", nil, err
		}
	}
	if err := d.moveDeprecated(root); err != nil {
		return cfg, "", nil, err
	}
	var doc struct {
		Proxier   proxier.Config `yaml:"proxier"`
		Dataplane Dataplane      `yaml:"dataplane"`
	}
	if err := d.decodeStruct(root, &doc, ""); err != nil {
		return cfg, "", nil, err
	}
	// Validated as a scenario validates them, with stand-ins for what the
	// caller decides (node, families).
	s := &Scenario{Proxier: doc.Proxier, Dataplane: doc.Dataplane, Backend: dataplane.BackendSim} // kpsim state's kernel
	families := s.Proxier.Families
	if len(families) == 0 {
		s.Proxier.Families = []dataplane.Family{dataplane.IPv4}
	}
	s.Cluster.Node.Name = "node"
	v := &validator{d: d}
	s.refuseZeros(v)
	s.defaultSections()
	s.validateSections(v)
	if err := v.errs.orNil(); err != nil {
		return cfg, "", nil, err
	}
	s.Proxier.Families = families
	return s.Proxier, s.Dataplane.IPSet, d.warnings, nil
}

// SetKeys lists the scalar and list fields --set can override, as
// "path=" (shell completion offers them). Timeline steps are indexed
// (timeline[2].sleep) and not listed.
func SetKeys() []string {
	var out []string
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		_, names := fields(t)
		byName, _ := fields(t)
		for _, n := range names {
			ft := t.Field(byName[n]).Type
			p := joinPath(path, n)
			if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(nodeDecoderType) {
				walk(ft, p)
				continue
			}
			if p != "timeline" {
				out = append(out, p+"=")
			}
		}
	}
	walk(reflect.TypeOf(Scenario{}), "")
	return out
}

var nodeDecoderType = reflect.TypeOf((*nodeDecoder)(nil)).Elem()
