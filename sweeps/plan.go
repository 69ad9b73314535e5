package sweeps

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results/compare"
	"github.com/kpsim/kpsim/results/sweep"
	"github.com/kpsim/kpsim/scenarios"
)

// ScenarioPath is where the scenario a spec names is read from: a name
// without a slash or ".yaml" is a shipped scenario; anything else is a file
// relative to the spec, as a scenario's cluster.fromFile is relative to
// the scenario.
func ScenarioPath(specFile, scenario string) string {
	if !strings.Contains(scenario, "/") && !strings.HasSuffix(scenario, ".yaml") || filepath.IsAbs(scenario) {
		return scenario
	}
	return filepath.Join(filepath.Dir(specFile), scenario)
}

// Plan expands the spec into its cells, in the spec's order: for each
// scenario, every combination of its axes' values (the first axis
// outermost), each mode, proxier, backend and, on the kernel backend,
// kernel. Every
// cell's scenario is loaded with the cell's overrides and validated as
// `kpsim run` would, so that a typo fails the plan rather than every job;
// a problem an override causes is reported at the spec line that gave it.
// build is the kpsim that plans, recorded in the plan.
func (s *Spec) Plan(build record.Build) (*sweep.Plan, error) {
	p := &sweep.Plan{Kind: sweep.KindPlan, SchemaVersion: sweep.SchemaVersion, Sweep: s.Name, Description: s.Description,
		Spec: s.File, Kpsim: build}
	var errs scenarios.Errors
	seen := map[string]int{} // cell key -> the scenario entry it came from
	for i, sc := range s.Scenarios {
		path := fmt.Sprintf("scenarios[%d]", i)
		origin := map[string]*scenarios.Error{} // key=value -> where the spec gives it
		at := func(o Override, field string) *scenarios.Error {
			return &scenarios.Error{File: s.File, Line: o.Line, Path: join(path, field)}
		}
		cell := sweep.Cell{Scenario: sc.Scenario, Runs: s.Runs}
		for _, o := range sc.Set {
			cell.Set = append(cell.Set, o.String())
			origin[o.String()] = at(o, "set."+o.Key)
		}
		for _, a := range sc.Axes {
			values := make([]string, len(a.Values))
			for j, v := range a.Values {
				values[j] = v.Value
				origin[v.String()] = at(v, "axes."+a.Key)
			}
			axis := sweep.Axis{Scenario: sc.Scenario, Key: a.Key, Values: values}
			if !slices.ContainsFunc(p.Axes, func(b sweep.Axis) bool {
				return b.Scenario == axis.Scenario && b.Key == axis.Key && slices.Equal(b.Values, axis.Values)
			}) {
				p.Axes = append(p.Axes, axis) // two entries of one scenario (other proxiers or modes) share its charts
			}
		}
		modes := sc.Modes
		if len(modes) == 0 {
			modes = []Mode{{}}
		}
		for _, m := range modes {
			for _, o := range m.Set {
				origin[o.String()] = at(o, "modes."+m.Name+"."+o.Key)
			}
		}
		scenarioAt := &scenarios.Error{File: s.File, Line: s.lines[join(path, "scenario")], Path: join(path, "scenario")}
		proxiers := s.Proxiers
		if len(sc.Proxiers) > 0 {
			proxiers = sc.Proxiers
		}
		for _, axes := range combinations(sc.Axes) {
			for _, m := range modes {
				for _, proxier := range proxiers {
					for _, target := range s.targets() {
						c := cell
						c.Axes, c.Mode, c.ModeSet = axes, m.Name, nil
						for _, o := range m.Set {
							c.ModeSet = append(c.ModeSet, o.String())
						}
						c.Proxier, c.Backend, c.Kernel = proxier, target.backend, target.kernel
						c.Name = sweep.CellName(&c)
						if prev, dup := seen[c.Key()]; dup {
							errs = appendNew(errs, scenarios.Errors{{File: s.File, Line: scenarioAt.Line, Path: path,
								Msg: fmt.Sprintf("runs cells scenarios[%d] runs too (such as %s): give each combination once", prev, c.Name)}})
							continue
						}
						seen[c.Key()] = i
						sc, cerrs := check(s.File, &c, scenarioAt, origin)
						errs = appendNew(errs, cerrs)
						if c.Runs == 0 && sc != nil {
							c.Runs = runsOf(sc)
						}
						p.Cells = append(p.Cells, c)
					}
				}
			}
		}
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *scenarios.Error) int { return a.Line - b.Line })
		return nil, errs
	}
	if len(p.Cells) == 0 {
		return nil, fmt.Errorf("sweep spec %s: no cells", s.File)
	}
	return p, nil
}

// target is one backend, and the kernel on the kernel backend.
type target struct{ backend, kernel string }

func (s *Spec) targets() []target {
	var out []target
	for _, b := range s.Backends {
		if b != dataplane.BackendKernel {
			out = append(out, target{backend: b})
			continue
		}
		for _, k := range s.Kernels {
			out = append(out, target{backend: b, kernel: k})
		}
	}
	return out
}

// combinations is every choice of one value per axis, the first axis
// outermost; one empty choice when there are no axes.
func combinations(axes []AxisSpec) [][]sweep.Setting {
	out := [][]sweep.Setting{nil}
	for _, a := range axes {
		var next [][]sweep.Setting
		for _, prefix := range out {
			for _, v := range a.Values {
				next = append(next, append(append([]sweep.Setting(nil), prefix...), sweep.Setting{Key: a.Key, Value: v.Value}))
			}
		}
		out = next
	}
	return out
}

// check loads the cell's scenario with its overrides as `kpsim run` will,
// without building the cluster. A problem an override caused is moved to
// the spec line that gave the override; any other is the scenario's own,
// reported where the spec names the scenario.
func check(specFile string, c *sweep.Cell, scenarioAt *scenarios.Error, origin map[string]*scenarios.Error) (*scenarios.Scenario, scenarios.Errors) {
	sc, err := scenarios.Check(ScenarioPath(specFile, c.Scenario), c.Sets())
	if err == nil {
		return sc, nil
	}
	var es scenarios.Errors
	var e1 *scenarios.Error
	switch {
	case errors.As(err, &es):
	case errors.As(err, &e1):
		es = scenarios.Errors{e1}
	default:
		es = scenarios.Errors{{Msg: err.Error()}}
	}
	var out scenarios.Errors
	for _, e := range es {
		at, ok := origin[e.Set]
		msg := e.Msg
		switch {
		case !ok:
			at, msg = scenarioAt, strings.TrimPrefix(e.Error(), ": ")
		case e.Path != "" && e.Path != strings.SplitN(e.Set, "=", 2)[0]:
			msg = e.Path + ": " + msg
		}
		out = append(out, &scenarios.Error{File: at.File, Line: at.Line, Path: at.Path, Msg: msg})
	}
	return nil, out
}

// runsOf is how many times a cell runs when the spec does not say: once
// where a run repeats exactly (kpsim's proxier on the modeled clock), and
// otherwise as many runs as a comparison needs to decide, each a sample.
func runsOf(sc *scenarios.Scenario) int {
	if sc.Repeats() {
		return 1
	}
	return compare.DefaultRuns
}

// appendNew appends the errors not already in errs: every cell of a
// scenario repeats the problems of the overrides they share.
func appendNew(errs, more scenarios.Errors) scenarios.Errors {
	for _, e := range more {
		dup := false
		for _, have := range errs {
			dup = dup || have.Error() == e.Error()
		}
		if !dup {
			errs = append(errs, e)
		}
	}
	return errs
}

// Load reads a spec and plans it.
func Load(path string, build record.Build) (*sweep.Plan, error) {
	s, err := Read(path)
	if err != nil {
		return nil, err
	}
	return s.Plan(build)
}
