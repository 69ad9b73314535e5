package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/compare"
	"github.com/kpsim/kpsim/results/report"
	"github.com/kpsim/kpsim/results/sweep"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/sweeps"
)

func init() { register("sweep", newSweepCommand) }

func newSweepCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "sweep COMMAND",
		Short: "plan, run and merge a sweep: scenarios × settings × proxiers × kernels",
		Long: `A sweep runs scenarios over a matrix of settings (an axis such as cluster.services,
named modes such as kube-proxy's legacy first sync), proxiers and kernels, one cell at a
time, and merges the cells' results into one index that 'kpsim report' draws and
'kpsim compare' compares cell by cell.

'sweep plan' expands a spec into its cells, as a GitHub Actions matrix or a list;
'sweep run' runs one cell, the same command on a laptop and in a job; 'sweep merge'
gathers the cells' directories (downloaded artifacts) into the index. 'make sweep
SPEC=...' does all three on one machine, the cells one after another.`,
		Example: `  kpsim sweep plan sweeps/restart-scale.yaml --format names
  kpsim sweep run sweeps/restart-scale.yaml CELL -o out/sweep/cells
  kpsim sweep merge out/sweep -o out/sweep/index.json
  kpsim report out/sweep/index.json -o out/sweep/report.html`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return badUsage("unknown sweep command %q: want plan, run or merge", args[0])
			}
			return badUsage("want a sweep command: plan, run or merge")
		},
		// Runnable, so that cobra calls Args, which refuses every call:
		// without it "kpsim sweep bogus" would print the help and exit 0.
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	for _, sub := range []*cobra.Command{newSweepPlanCommand(), newSweepRunCommand(), newSweepMergeCommand()} {
		sub.DisableFlagsInUseLine = true
		c.AddCommand(sub)
	}
	return c
}

func newSweepPlanCommand() *cobra.Command {
	var out, format string
	c := &cobra.Command{
		Use:   "plan SPEC.yaml [-o FILE] [--format json|matrix|names]",
		Short: "expand a sweep spec into its cells: the plan, a GitHub Actions matrix, or the cell names",
		Long: `Expand a sweep spec into its cells and check each: its scenario is loaded with its
overrides as 'kpsim run' would load it, so that a typo fails here, at the spec's line,
rather than in every job. Each cell has a stable name, made of its settings and a hash
of them, so a cell keeps its name when the spec grows around it.

A kube-proxy release's cell runs in the release's own kpsim binary
(bin/kpsim-kube-proxy-v1.37 for kube-proxy@v1.37.1), which 'sweep run' finds
beside this kpsim.

--format json (the default) writes the plan, which 'sweep merge' reads to know every
cell; matrix writes the GitHub Actions matrix on one line, for
'matrix: ${{ fromJSON(...) }}' (at most 256 jobs); names writes one cell per line.`,
		Example: `  kpsim sweep plan sweeps/restart-scale.yaml -o out/sweep/plan.json
  echo "matrix=$(kpsim sweep plan sweeps/restart-scale.yaml --format matrix)" >> "$GITHUB_OUTPUT"
  for cell in $(kpsim sweep plan sweeps/restart-scale.yaml --format names); do ...; done`,
		Args: exactArgs(1, "want one sweep spec"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSweepPlan(cmd, args[0], out, format)
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "write to `FILE` instead of standard output")
	c.Flags().StringVar(&format, "format", "json", "`json|matrix|names`: the plan, the GitHub Actions matrix, or one cell name per line")
	completeValues(c, "format", "json", "matrix", "names")
	completeFiles(c, "output", "json")
	return c
}

// exactArgs refuses any number of positional arguments but n.
func exactArgs(n int, want string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return badUsage("%s, got %d %s", want, len(args), results.Plural(len(args), "argument", "arguments"))
		}
		return nil
	}
}

// loadPlan plans a spec as this build; a bad spec is bad input.
func loadPlan(spec string) (*sweep.Plan, error) {
	p, err := sweeps.Load(spec, buildInfo())
	if err != nil {
		var es scenarios.Errors
		if errors.As(err, &es) && len(es) > 1 {
			return nil, usageError("%d problems:\n%v", len(es), err)
		}
		return nil, usageError("%v", err)
	}
	return p, nil
}

func runSweepPlan(cmd *cobra.Command, spec, out, format string) error {
	if format != "json" && format != "matrix" && format != "names" {
		return usageError("--format %q: want json, matrix or names", format)
	}
	if out != "" {
		if err := checkOutput("--output", out); err != nil {
			return err
		}
	}
	p, err := loadPlan(spec)
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	fmt.Fprintf(stderr, "kpsim sweep plan: sweep %s: %d %s to run\n", p.Sweep, len(p.Cells), results.Plural(len(p.Cells), "cell", "cells"))
	var b bytes.Buffer
	switch format {
	case "json":
		if out != "" {
			if err := sweep.WritePlan(out, p); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "plan: %s\n", out)
			return nil
		}
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(p); err != nil {
			return fmt.Errorf("encode plan: %w", err)
		}
	case "matrix":
		m, err := p.Matrix()
		if err != nil {
			return usageError("%v", err)
		}
		if err := json.NewEncoder(&b).Encode(m); err != nil {
			return fmt.Errorf("encode matrix: %w", err)
		}
	case "names":
		for _, c := range p.Cells {
			fmt.Fprintln(&b, c.Name)
		}
	}
	if out == "" {
		_, err := cmd.OutOrStdout().Write(b.Bytes())
		return err
	}
	if err := results.WriteFile(out, b.Bytes()); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	return nil
}

// cellNames lists a plan's cells for a message that names none of them.
func cellNames(p *sweep.Plan) string {
	names := make([]string, len(p.Cells))
	for i, c := range p.Cells {
		names[i] = c.Name
	}
	if len(names) > 8 {
		return strings.Join(names[:8], ", ") + fmt.Sprintf(" and %d more ('kpsim sweep plan --format names' lists them)", len(names)-8)
	}
	return strings.Join(names, ", ")
}

// sweepIndex reports whether path is a sweep index, which 'kpsim report'
// and 'kpsim compare' read in place of results files.
func sweepIndex(path string) bool {
	kind, err := sweep.KindOf(path)
	return err == nil && kind == sweep.KindIndex
}

// notResults explains a sweep's own document given where results files go
// (report, compare), or is nil: read as results, a plan or a cell record
// said only "not a complete kpsim results file: no scenario, start, ...".
func notResults(path string) error {
	kind, err := sweep.KindOf(path)
	if err != nil {
		return nil // not JSON: results.Read says so
	}
	switch kind {
	case sweep.KindPlan:
		p, err := sweep.ReadPlan(path)
		if err != nil {
			return usageError("%s is a sweep plan, not results: %v", path, err)
		}
		// What sweep run writes by default, and where merge then puts the index.
		cells := filepath.Join("out", "sweep", p.Sweep, "cells")
		index := filepath.Join("out", "sweep", p.Sweep, "index.json")
		return usageError("%s is a sweep plan, not results: run its cells (kpsim sweep run %s CELL, for each CELL of kpsim sweep plan %s --format names), "+
			"merge them (kpsim sweep merge %s --plan %s -o %s), then report the index (kpsim report %s)",
			path, p.Spec, p.Spec, cells, path, index, index)
	case sweep.KindCell:
		return usageError("%s is a sweep cell's record, not results: its runs are beside it (kpsim report %s), "+
			"and the sweep's index is what 'kpsim sweep merge' writes", path, filepath.Join(filepath.Dir(path), "run-*.json"))
	}
	return nil
}

// loadIndex loads a sweep index and its results files; a bad one is bad input.
func loadIndex(path string) (*sweep.Loaded, error) {
	l, err := sweep.Load(path)
	if err != nil {
		return nil, usageError("%v", err)
	}
	return l, nil
}

// reportSweep is 'kpsim report' of a sweep index.
func reportSweep(cmd *cobra.Command, paths []string, dest, format string) error {
	if len(paths) > 1 {
		return badUsage("a sweep index is reported on its own, not with other files: %s", strings.Join(paths, " "))
	}
	if dest != "" {
		if err := checkOutput("--output", dest); err != nil {
			return err
		}
	}
	l, err := loadIndex(paths[0])
	if err != nil {
		return err
	}
	return writeReport(cmd, report.NewSweep(l), dest, format)
}

// compareSweeps is 'kpsim compare' of two sweep indexes: cell by cell,
// each cell that ran in both as two sets of runs are compared, with the
// same options and gate.
func compareSweeps(cmd *cobra.Command, f compareFlags, basePaths, headPaths []string) error {
	if len(basePaths) != 1 || len(headPaths) != 1 || !sweepIndex(basePaths[0]) || !sweepIndex(headPaths[0]) {
		return badUsage("sweeps are compared one index against one: kpsim compare BASE/index.json HEAD/index.json")
	}
	if f.format == "benchstat" {
		return usageError("--format benchstat: a sweep is compared as text or md")
	}
	base, err := loadIndex(basePaths[0])
	if err != nil {
		return err
	}
	head, err := loadIndex(headPaths[0])
	if err != nil {
		return err
	}
	o := f.o
	o.MinDeltaSeconds = f.minDelta.Seconds()
	sc := compare.CompareSweeps(base, head, basePaths[0], headPaths[0], o)
	var b bytes.Buffer
	if f.format == "md" {
		err = sc.WriteMarkdown(&b, "kpsim compare: sweep "+head.Index.Sweep)
	} else {
		err = sc.WriteText(&b)
	}
	if err != nil {
		return err
	}
	if f.out != "" {
		if err := results.WriteFile(f.out, b.Bytes()); err != nil {
			return fmt.Errorf("write comparison: %w", err)
		}
	} else if _, err := cmd.OutOrStdout().Write(b.Bytes()); err != nil {
		return err
	}
	if refused := sc.Refused(); len(refused) > 0 {
		return usageError("%d %s different settings in the two sweeps: %s\npass --allow-different to compare them anyway",
			len(refused), results.Plural(len(refused), "cell ran", "cells ran"), strings.Join(refused, ", "))
	}
	if failing := sc.Failures(compare.Gate{Timing: f.latency == "gate", AllowChanges: f.allowOps}); len(failing) > 0 {
		return verdict("%d %s regressed or changed: %s", len(failing), results.Plural(len(failing), "cell", "cells"), strings.Join(failing, ", "))
	}
	return nil
}
