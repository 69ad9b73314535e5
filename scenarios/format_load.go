package scenarios

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/kpsim/kpsim/proxier"
)

// The shipped scenarios, embedded so that the binary can list and run them
// from anywhere.
//
//go:embed *.yaml
var shipped embed.FS

// Shipped describes one shipped scenario.
type Shipped struct {
	Name    string
	Purpose string // the first comment line of the file: the question it answers
}

// ShippedScenarios lists the shipped scenarios by name.
func ShippedScenarios() ([]Shipped, error) {
	entries, err := fs.ReadDir(shipped, ".")
	if err != nil {
		return nil, fmt.Errorf("list shipped scenarios: %w", err)
	}
	var out []Shipped
	for _, e := range entries {
		data, err := shipped.ReadFile(e.Name())
		if err != nil {
			return nil, fmt.Errorf("read shipped scenario %s: %w", e.Name(), err)
		}
		out = append(out, Shipped{Name: strings.TrimSuffix(e.Name(), ".yaml"), Purpose: purpose(data)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// purpose returns the text of the leading comment block, joined into one line.
func purpose(data []byte) string {
	var parts []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "#") {
			break
		}
		if t := strings.TrimSpace(strings.TrimPrefix(line, "#")); t != "" {
			parts = append(parts, t)
		} else if len(parts) > 0 {
			break // the first paragraph only
		}
	}
	return strings.Join(parts, " ")
}

// Read returns a scenario's file name and contents: nameOrPath is a file, or
// the name of a shipped scenario ("smoke", "smoke.yaml", "scenarios/smoke.yaml"
// when no such file exists).
func Read(nameOrPath string) (file string, data []byte, err error) {
	data, err = os.ReadFile(nameOrPath)
	if err == nil {
		return nameOrPath, data, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("read scenario: %w", err)
	}
	name := strings.TrimSuffix(filepath.Base(nameOrPath), ".yaml")
	if d, serr := shipped.ReadFile(name + ".yaml"); serr == nil {
		return "scenarios/" + name + ".yaml", d, nil
	}
	var names []string
	if list, lerr := ShippedScenarios(); lerr == nil {
		for _, s := range list {
			names = append(names, s.Name)
		}
	}
	return "", nil, fmt.Errorf("scenario %q: no such file, and not a shipped scenario (%s)", nameOrPath, strings.Join(names, ", "))
}

// Load reads, overrides, defaults and validates a scenario (see Parse).
func Load(nameOrPath string, sets []string) (*Scenario, error) {
	file, data, err := Read(nameOrPath)
	if err != nil {
		return nil, err
	}
	return Parse(file, data, sets)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// ParseYAML parses a file that holds one YAML document, what names the kind
// of file in messages ("scenario"). Errors are located by file and line, the
// line corrected where yaml.v3 counts from 0. The parser is third-party code
// fed user input, so a panic in it becomes an error rather than a crash.
func ParseYAML(file, what string, data []byte) (root *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, &Error{File: file, Msg: fmt.Sprintf("YAML parser failed: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Msg: "empty " + what}
		}
		return nil, yamlError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlError(file, err)
		}
		return nil, &Error{File: file, Line: extra.Line, Msg: "a second YAML document; a " + what + " file holds one"}
	}
	if len(doc.Content) == 0 {
		return nil, &Error{File: file, Msg: "empty " + what}
	}
	return doc.Content[0], nil
}

// yamlParserProblems are the messages of yaml.v3's parser errors (as
// opposed to its scanner errors). yaml.v3 numbers lines from 1 for scanner
// errors but from 0 for parser errors, so those would point one line early.
var yamlParserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"found undefined tag handle",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found duplicate %TAG directive",
}

func yamlError(file string, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		if slices.Contains(yamlParserProblems, m[2]) {
			line++
		}
		return &Error{File: file, Line: line, Msg: m[2]}
	}
	return &Error{File: file, Msg: strings.TrimPrefix(msg, "yaml: ")}
}

// Parse decodes a scenario, applies the --set overrides (key=value, the key
// a field path such as proxier.initialSync or timeline[2].sleep), fills the
// defaults, validates everything and builds the cluster. Every problem is
// reported, each with the file and line (or the override) and the field path;
// the error is then an Errors.
func Parse(file string, data []byte, sets []string) (*Scenario, error) {
	return parse(file, data, sets, true)
}

// Check reads, overrides, defaults and validates a scenario as Load does,
// without building its cluster: a sweep plan checks every cell this way, in
// milliseconds whatever the cluster's size. The scenario it returns has no
// cluster.
func Check(nameOrPath string, sets []string) (*Scenario, error) {
	file, data, err := Read(nameOrPath)
	if err != nil {
		return nil, err
	}
	return parse(file, data, sets, false)
}

// NodeSettings are what a scenario asks of the node it runs on.
type NodeSettings struct {
	Backend   string
	Proxier   proxier.Config // NodeName is cluster.node's
	Dataplane Dataplane
	Modes     []proxier.Mode // every proxy mode a generation runs in (Scenario.Modes)
}

// LoadNodeSettings reads what a scenario asks of its node, decoded,
// defaulted and validated as Load does, without building its cluster:
// 10,000 services for scale-10k take a quarter of a second here and ten in
// the emulated test VM, for nothing `kpsim doctor` shows.
func LoadNodeSettings(nameOrPath string) (NodeSettings, error) {
	file, data, err := Read(nameOrPath)
	if err != nil {
		return NodeSettings{}, err
	}
	s, err := parse(file, data, nil, false)
	if err != nil {
		return NodeSettings{}, err
	}
	return NodeSettings{Backend: s.Backend, Proxier: s.proxierConfig(), Dataplane: s.Dataplane, Modes: s.Modes()}, nil
}

// parse is Parse; without build it stops after validation.
func parse(file string, data []byte, sets []string, build bool) (*Scenario, error) {
	root, err := ParseYAML(file, "scenario", data)
	if err != nil {
		return nil, err
	}
	if kubernetesObject(root) {
		// Every key would be "unknown field", pointing nowhere useful.
		return nil, &Error{File: file, Msg: fmt.Sprintf("is a kubectl export, not a scenario: run a scenario on it, "+
			"e.g. kpsim run -s smoke --set cluster.fromFile=%s (see scenarios/README.md)", file)}
	}
	d := newDecoder(file)
	for _, kv := range sets {
		if err := d.applySet(root, kv); err != nil {
			return nil, err
		}
	}
	d.exportReplacesCluster(root)
	if err := d.moveDeprecated(root); err != nil {
		return nil, err
	}
	s := &Scenario{file: file, warnings: d.warnings}
	if err := d.decodeStruct(root, s, ""); err != nil {
		return nil, err
	}
	s.fromFileSet = d.pos["cluster.fromFile"].set != ""
	v := &validator{d: d}
	s.refuseZeros(v)
	s.defaults(d.present)
	s.validate(v)
	if err := v.errs.orNil(); err != nil {
		return nil, err
	}
	if !build {
		return s, nil
	}
	if err := s.build(v); err != nil {
		return nil, err
	}
	if err := v.errs.orNil(); err != nil {
		return nil, err
	}
	s.warnSetSizes()
	return s, nil
}

// kubernetesObject reports whether a document is a Kubernetes object or
// list, as kubectl writes them, rather than a scenario (which has none of
// these keys).
func kubernetesObject(root *yaml.Node) bool {
	if root.Kind != yaml.MappingNode {
		return false
	}
	for _, k := range []string{"apiVersion", "kind", "items"} {
		if mappingValue(root, k) != nil {
			return true
		}
	}
	return false
}

// exportReplacesCluster makes a --set cluster.fromFile run the scenario on
// that export: the generator fields the scenario file gives for its own
// cluster (fromFileExcludes) give way, so that any scenario can replay an
// export (kpsim run -s smoke --set cluster.fromFile=export.json). Written
// together in one place, they are still an error.
func (d *decoder) exportReplacesCluster(root *yaml.Node) {
	c := mappingValue(root, "cluster")
	if c == nil || c.Kind != yaml.MappingNode {
		return
	}
	if ff := mappingValue(c, "fromFile"); ff == nil || d.origin[ff] == "" {
		return
	}
	for _, k := range fromFileExcludes {
		if v := mappingValue(c, k); v != nil && d.origin[v] == "" {
			removeKey(c, k)
		}
	}
}
