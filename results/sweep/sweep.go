// Package sweep holds the documents of a sweep, a matrix of runs of
// scenarios × settings × proxiers × kernels: the plan of its cells (what
// `kpsim sweep plan` writes and a GitHub Actions matrix runs, one job per
// cell), the record each cell's run leaves beside its results files, and the
// index that `kpsim sweep merge` gathers them into and that reports and
// comparisons read. How a sweep spec expands into a plan is package sweeps'.
package sweep

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// Kinds of document, in each one's "kind" field: a results file has none.
const (
	KindPlan  = "kpsim-sweep-plan"
	KindCell  = "kpsim-sweep-cell"
	KindIndex = "kpsim-sweep-index"
)

// SchemaVersion is bumped on any change to the documents that an older
// reader would misread.
const SchemaVersion = 1

// Setting is one swept key and the value a cell gives it.
type Setting struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func (s Setting) String() string { return s.Key + "=" + s.Value }

// Cell is one combination of a sweep's settings: one job of the matrix,
// which runs its scenario Runs times with the same seed.
type Cell struct {
	// Name is stable: a function of the cell's settings (Key), never of
	// where the cell stands in the plan, so that a spec that grows keeps the
	// names (and artifacts, and comparisons) of the cells it had.
	Name string `json:"name"`
	// Scenario is as the spec names it: a shipped scenario, or a file
	// relative to the spec.
	Scenario string `json:"scenario"`
	// Set are the overrides every cell of its scenario takes (key=value).
	Set []string `json:"set,omitempty"`
	// Axes are this cell's value of each swept key, in the spec's order.
	Axes []Setting `json:"axes,omitempty"`
	// Mode names one of the spec's fixed sets of overrides, ModeSet.
	Mode    string   `json:"mode,omitempty"`
	ModeSet []string `json:"modeSet,omitempty"`
	// Proxier is the proxier under test: record.ProxierKpsim, or a
	// kube-proxy release as "kube-proxy@v1.37.1".
	Proxier string `json:"proxier"`
	Backend string `json:"backend"`
	// Kernel is the Debian kernel release a kernel-backend cell runs on,
	// as `uname -r` prints it (the package linux-image-RELEASE).
	Kernel string `json:"kernel,omitempty"`
	Runs   int    `json:"runs"`
}

// Sets are the --set overrides a run of the cell passes, in the order
// they apply: the scenario's, the axes', the mode's, then the proxier
// (a kube-proxy release's, which runs in the binary built for it) and the backend.
func (c *Cell) Sets() []string {
	out := slices.Clone(c.Set)
	for _, a := range c.Axes {
		out = append(out, a.String())
	}
	out = append(out, c.ModeSet...)
	if c.Proxier != record.ProxierKpsim {
		out = append(out, "proxier.implementation="+c.Proxier)
	}
	return append(out, "backend="+c.Backend)
}

// Key identifies what the cell runs: the scenario, every override, the
// proxier and the kernel. Overrides never share a key (the spec refuses
// it), so the order they apply in changes nothing and they are hashed
// sorted. The number of runs is not part of it: more runs of a cell are
// more samples of the same thing.
func (c *Cell) Key() string {
	sets := c.Sets()
	slices.Sort(sets)
	b, _ := json.Marshal(struct {
		Scenario string   `json:"scenario"`
		Sets     []string `json:"sets"`
		Proxier  string   `json:"proxier"`
		Kernel   string   `json:"kernel"`
	}{c.Scenario, sets, c.Proxier, c.Kernel}) // strings only: it encodes
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// badNameChars matches what a GitHub Actions artifact name, a job name, a
// file name and a make variable all take without quoting.
var badNameChars = regexp.MustCompile(`[^A-Za-z0-9.+-]+`)

// CellName names c after what a reader looks for (scenario, swept values,
// mode, proxier, backend and kernel) and ends with the first 8 hex digits
// of its Key, which tell apart cells whose readable parts coincide (two
// axes ending in the same word, settings the name leaves out).
func CellName(c *Cell) string {
	clean := func(s string) string { return strings.Trim(badNameChars.ReplaceAllString(s, "-"), "-") }
	parts := []string{clean(strings.TrimSuffix(path.Base(c.Scenario), ".yaml"))}
	for _, a := range c.Axes {
		parts = append(parts, clean(a.Key[strings.LastIndex(a.Key, ".")+1:])+"-"+clean(a.Value))
	}
	if c.Mode != "" {
		parts = append(parts, clean(c.Mode))
	}
	backend := c.Backend
	if c.Kernel != "" {
		backend += "-" + c.Kernel
	}
	parts = append(parts, clean(c.Proxier), clean(backend), c.Key()[:8])
	return strings.Join(parts, "_")
}

// Axis is one swept key of one scenario and its values, in the spec's order.
type Axis struct {
	Scenario string   `json:"scenario"`
	Key      string   `json:"key"`
	Values   []string `json:"values"`
}

// Plan is a sweep expanded into its cells.
type Plan struct {
	Kind          string `json:"kind"`
	SchemaVersion int    `json:"schemaVersion"`
	Sweep         string `json:"sweep"`
	Description   string `json:"description,omitempty"`
	// Spec is the spec's path as it was given to the planner.
	Spec string `json:"spec"`
	// Kpsim is the build that planned: a plan and the runs of its cells
	// belong to one build (see Merge).
	Kpsim record.Build `json:"kpsim"`
	Axes  []Axis       `json:"axes,omitempty"`
	Cells []Cell       `json:"cells"`
}

// MaxMatrixJobs is the most jobs GitHub Actions makes of one matrix.
const MaxMatrixJobs = 256

// MatrixEntry is one job of the matrix: the cell's name, which is all a
// job needs to run it, and what a reader of the workflow run's page wants
// to see of it.
type MatrixEntry struct {
	Cell     string `json:"cell"`
	Scenario string `json:"scenario"`
	Proxier  string `json:"proxier"`
	Backend  string `json:"backend"`
	Kernel   string `json:"kernel"`
}

// Matrix is a GitHub Actions matrix of explicit jobs, for
// `strategy.matrix: ${{ fromJSON(...) }}`.
type Matrix struct {
	Include []MatrixEntry `json:"include"`
}

// Matrix is the plan's cells as a GitHub Actions matrix. GitHub refuses
// an empty matrix and one of more than MaxMatrixJobs jobs; so does this.
func (p *Plan) Matrix() (Matrix, error) {
	switch n := len(p.Cells); {
	case n == 0:
		return Matrix{}, fmt.Errorf("sweep %s: no cell to run", p.Sweep)
	case n > MaxMatrixJobs:
		return Matrix{}, fmt.Errorf("sweep %s: %d cells, and a GitHub Actions matrix runs at most %d jobs: split the spec", p.Sweep, n, MaxMatrixJobs)
	}
	m := Matrix{Include: make([]MatrixEntry, len(p.Cells))}
	for i, c := range p.Cells {
		m.Include[i] = MatrixEntry{Cell: c.Name, Scenario: c.Scenario, Proxier: c.Proxier, Backend: c.Backend, Kernel: c.Kernel}
	}
	return m, nil
}

// Find returns the planned cell of that name, or nil.
func (p *Plan) Find(name string) *Cell {
	for i := range p.Cells {
		if p.Cells[i].Name == name {
			return &p.Cells[i]
		}
	}
	return nil
}

// readDoc reads the JSON document at path into v, refusing one of another
// kind or of a newer schema.
func readDoc(path, kind string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", kind, err)
	}
	var head struct {
		Kind          string `json:"kind"`
		SchemaVersion int    `json:"schemaVersion"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return fmt.Errorf("read %s %s: not JSON: %w", kind, path, err)
	}
	if head.Kind != kind {
		return fmt.Errorf("read %s %s: a %s, not a %s", kind, path, kindText(head.Kind), kind)
	}
	if head.SchemaVersion < 1 || head.SchemaVersion > SchemaVersion {
		return fmt.Errorf("read %s %s: schemaVersion %d, this kpsim reads 1 to %d", kind, path, head.SchemaVersion, SchemaVersion)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("read %s %s: %w", kind, path, err)
	}
	return nil
}

// kindText names the kind of a document for a message.
func kindText(kind string) string {
	if kind == "" {
		return "document without a kind (a results file?)"
	}
	return kind
}

// KindOf reads the kind of the JSON document at path: KindPlan, KindCell,
// KindIndex, or "" for any other (a results file).
func KindOf(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	var head struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return "", fmt.Errorf("read %s: not JSON: %w", path, err)
	}
	return head.Kind, nil
}

// ReadPlan reads a plan written by WritePlan.
func ReadPlan(path string) (*Plan, error) {
	var p Plan
	if err := readDoc(path, KindPlan, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// WritePlan writes p at path.
func WritePlan(path string, p *Plan) error {
	p.Kind, p.SchemaVersion = KindPlan, SchemaVersion
	return results.WriteJSON(path, "sweep plan", p)
}
