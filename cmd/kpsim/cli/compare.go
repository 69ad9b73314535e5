package cli

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/compare"
)

func init() { register("compare", newCompareCommand) }

type compareFlags struct {
	o                                        compare.Options
	minDelta                                 time.Duration
	baseList, headList, format, latency, out string
	allowOps, allowDisruption                bool
}

func newCompareCommand() *cobra.Command {
	f := compareFlags{o: compare.DefaultOptions()}
	c := &cobra.Command{
		Use: "compare BASE.json... -- HEAD.json... [--latency report|gate] [--threshold PERCENT] [--allow-ops-change] [--allow-disruption] [--format text|md|benchstat] [-o FILE]\n" +
			"  kpsim compare BASE.json HEAD.json [...]\n" +
			"  kpsim compare --base A.json,B.json --head C.json,D.json [...]",
		Short: "compare results files of two builds or settings, with a verdict (exit 1 on regression)",
		Long: `Compare results files of two builds, settings or releases metric by metric: base
and head values, the change, a p-value and a verdict. Both sides must have run the
same scenario with the same settings and seeds (--allow-different compares others,
such as two kube-proxy releases).

kpsim's own proxier on the modeled clock (the sim at time scale 0) gives one answer
per seed: every figure but the process's measured CPU and RSS is compared exactly,
seed by seed (runs of 'kpsim run --seeds N' pair by seed), and identical copies of a
run count once.

Everywhere else runs of one seed differ: a kube-proxy release iterates Go maps, whose
order Go randomizes per run, and the wall clock and a real kernel never repeat. There
the run is the unit of evidence: every figure (syncs, phases, broken traffic,
operation counts) is one value per run, the sides are compared with the Mann-Whitney
U test over runs, and Holm's method adjusts the p-values for the number of figures
tested, so that a comparison of a build with itself fails by chance at most --alpha
of the time. Run each side with 'kpsim run --runs 8': with fewer, a change may be
undecided, and the comparison says how many runs per side would decide it. An
undecided change never fails the comparison. Figures are given for the whole run and
for each segment of the timeline (restart/sync/p99, ...).

What fails (exit 1):
  - more broken traffic (disruption, failed attempts, longest window, time to first
    success), unless --allow-disruption declares it; --latency does not change this;
  - more failed syncs or a failed run, always;
  - a change in kernel operation counts or modeled kernel time, unless
    --allow-ops-change declares it (on the modeled clock, slower modeled syncs too);
  - slower syncs, phases or network programming and more CPU or memory, under
    --latency gate (the default); --latency report only reports them.

Two sweep indexes ('kpsim sweep merge') are compared cell by cell: each cell that
ran in both as runs are compared, a cell whose head failed where its base ran is a
regression, and every other cell is listed with what became of it.

Two cost profiles ('kpsim calibrate -o') are compared price by price: a price that
moved by more than --threshold percent either way is a difference, and the summary
counts what held by kind (nft, ipset, ...). Two calibrations of one machine differ by
what it did while each ran; each nftables price's range over calibrate's rounds is in
the profile's source text.

Exit status: 0 no regression, 1 regression or undeclared change in kernel
operations or modeled time, 2 bad input or runs that differ.`,
		Example: `  kpsim compare out/base.json out/head.json
  kpsim compare base-*.json -- head-*.json --latency report
  kpsim compare --allow-different --allow-ops-change out/v1.30.3-run*.json -- out/v1.37.1-run*.json
  kpsim compare --base a1.json,a2.json --head b1.json,b2.json --format md -o cmp.md
  kpsim compare base/sweep/index.json head/sweep/index.json
  kpsim compare --threshold 15 node-monday.json node-friday.json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := compareArgs(cmd, args)
			if err != nil {
				return err
			}
			return runCompare(cmd, f, files)
		},
		ValidArgsFunction: resultsFiles,
	}
	o := &f.o
	fs := c.Flags()
	fs.StringVar(&f.baseList, "base", "", "comma-separated base results `FILES` (instead of BASE... --)")
	fs.StringVar(&f.headList, "head", "", "comma-separated head results `FILES`")
	fs.Float64Var(&o.Threshold, "threshold", o.Threshold, "smallest change in `PERCENT` that counts as a regression")
	fs.Float64Var(&o.Alpha, "alpha", o.Alpha, "significance level `P` of the whole comparison: the chance that a comparison of runs that do not differ calls any figure (Mann-Whitney U over runs, Holm's method over the figures)")
	fs.DurationVar(&f.minDelta, "min-delta", time.Duration(o.MinDeltaSeconds*float64(time.Second)), "smallest absolute change (a `DURATION`) of a duration that can count as a regression")
	fs.StringVar(&f.latency, "latency", "gate", "`report|gate`: with report, timing metrics (sync, phase and network programming durations, CPU, RSS) never fail the comparison; gate: a significant regression exits 1. Broken traffic fails either way")
	fs.BoolVar(&f.allowOps, "allow-ops-change", false, "a change in kernel operation counts or modeled time (slower syncs on the modeled clock included) is expected: report it, do not fail")
	fs.BoolVar(&f.allowDisruption, "allow-disruption", false, "more broken traffic (disruption, failed probe attempts, time to first success) is expected: report it, do not fail; nothing else declares it")
	fs.BoolVar(&o.AllowDifferent, "allow-different", false, "compare runs of different scenarios, seeds or settings, and judge runs that ended early as whole")
	fs.StringVar(&f.format, "format", "text", "output format, `text|md|benchstat`")
	fs.StringVarP(&f.out, "output", "o", "", "write to `FILE` instead of standard output")
	completeValues(c, "latency", "report", "gate")
	completeValues(c, "format", "text", "md", "benchstat")
	return c
}

// compareArgs returns the positional arguments with the "--" that separates
// base from head files put back (cobra's flag parsing drops it), after
// parsing flags that follow it ("BASE -- HEAD --format md").
func compareArgs(cmd *cobra.Command, args []string) ([]string, error) {
	dash := cmd.ArgsLenAtDash()
	if dash < 0 {
		return args, nil
	}
	before, after := args[:dash], args[dash:]
	if err := cmd.Flags().Parse(after); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, cmd.Help()
		}
		return nil, flagError(cmd, err)
	}
	return append(append(slices.Clone(before), "--"), cmd.Flags().Args()...), nil
}

func runCompare(cmd *cobra.Command, f compareFlags, files []string) error {
	stdout := cmd.OutOrStdout()
	o := f.o
	baseList, headList, format, latency, out := f.baseList, f.headList, f.format, f.latency, f.out
	minDelta, allowOps := &f.minDelta, &f.allowOps
	o.MinDeltaSeconds = minDelta.Seconds()
	if o.Alpha <= 0 || o.Alpha >= 1 {
		return usageError("--alpha %g: want a value between 0 and 1", o.Alpha)
	}
	if o.Threshold < 0 {
		return usageError("--threshold %g: want a percentage >= 0", o.Threshold)
	}
	if latency != "report" && latency != "gate" {
		return usageError("--latency %q: want report or gate", latency)
	}
	if format != "text" && format != "md" && format != "benchstat" {
		return usageError("--format %q: want text, md or benchstat", format)
	}
	basePaths, headPaths, err := compareSides(files, baseList, headList)
	if err != nil {
		return err
	}
	if out != "" {
		if err := checkOutput("--output", out); err != nil {
			return err
		}
	}
	if slices.ContainsFunc(append(slices.Clone(basePaths), headPaths...), sweepIndex) {
		return compareSweeps(cmd, f, basePaths, headPaths)
	}
	if slices.ContainsFunc(append(slices.Clone(basePaths), headPaths...), costProfile) {
		return compareProfiles(cmd, f, basePaths, headPaths)
	}
	base, err := readSummarized(basePaths)
	if err != nil {
		return err
	}
	head, err := readSummarized(headPaths)
	if err != nil {
		return err
	}

	var buf bytes.Buffer
	var c *compare.Comparison
	if format == "benchstat" {
		if err := compare.WriteBenchstat(&buf, "base", base); err != nil {
			return err
		}
		if err := compare.WriteBenchstat(&buf, "head", head); err != nil {
			return err
		}
	}
	c, err = compare.Compare(base, head, baseNames(basePaths), baseNames(headPaths), o)
	var diff *compare.DifferentError
	if errors.As(err, &diff) {
		return usageError("%v\npass --allow-different to compare them anyway", err)
	}
	if err != nil {
		return err
	}
	switch format {
	case "text":
		err = c.WriteText(&buf)
	case "md":
		err = c.WriteMarkdown(&buf, "kpsim compare: "+strings.Join(scenarioList(append(base, head...)), ", "))
	}
	if err != nil {
		return err
	}
	if out != "" {
		if err := results.WriteFile(out, buf.Bytes()); err != nil {
			return fmt.Errorf("write comparison: %w", err)
		}
	} else if _, err := stdout.Write(buf.Bytes()); err != nil {
		return err
	}

	failing := c.Failures(compare.Gate{Timing: latency == "gate", AllowChanges: *allowOps, AllowDisruption: f.allowDisruption})
	if len(failing) > 0 {
		var names, broken, hints []string
		for _, m := range failing {
			names = append(names, m.Name)
			switch {
			case m.Disruption:
				broken = append(broken, m.Name)
			case m.Declarable && !slices.Contains(hints, "--allow-ops-change"):
				hints = append(hints, "--allow-ops-change")
			}
		}
		msg := fmt.Sprintf("%d metrics regressed or changed: %s", len(failing), strings.Join(clipNames(names), ", "))
		if len(broken) > 0 {
			msg += fmt.Sprintf("\nmore broken traffic: %s (pass --allow-disruption only if that is intended)", strings.Join(clipNames(broken), ", "))
		}
		if len(hints) > 0 {
			msg += "\nkernel operation counts or modeled time changed: pass --allow-ops-change if intended"
		}
		return verdict("%s", msg)
	}
	return nil
}

// clipNames keeps a failure message readable when a change moves every
// figure of every segment.
func clipNames(names []string) []string {
	const most = 8
	if len(names) <= most {
		return names
	}
	return append(slices.Clone(names[:most]), fmt.Sprintf("and %d more", len(names)-most))
}

// compareSides accepts either the two lists of --base/--head or positional
// files split by "--".
func compareSides(args []string, baseList, headList string) ([]string, []string, error) {
	split := func(s string) []string {
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	if baseList != "" || headList != "" {
		if len(args) > 0 {
			return nil, nil, badUsage("give files either with --base/--head or as BASE... -- HEAD..., not both")
		}
		b, h := split(baseList), split(headList)
		if len(b) == 0 || len(h) == 0 {
			return nil, nil, badUsage("--base and --head each need at least one results file")
		}
		return b, h, nil
	}
	for i, a := range args {
		if a == "--" {
			b, h := args[:i], args[i+1:]
			if len(b) == 0 || len(h) == 0 {
				return nil, nil, badUsage("need at least one results file on each side of --")
			}
			return b, h, nil
		}
	}
	if len(args) == 2 {
		return args[:1], args[1:], nil
	}
	return nil, nil, badUsage("want BASE.json HEAD.json, BASE.json... -- HEAD.json..., or --base and --head")
}

// readSummarized reads results files and recomputes their summaries, so a
// file written by an older build is judged by this build's statistics.
func readSummarized(paths []string) ([]*record.File, error) {
	fs := make([]*record.File, len(paths))
	for i, p := range paths {
		f, err := results.Read(p)
		if err != nil {
			return nil, cmp.Or(notResults(p), usageError("%v", err))
		}
		results.Summarize(f)
		fs[i] = f
	}
	return fs, nil
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}

func scenarioList(files []*record.File) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range files {
		if n := results.ScenarioName(f); n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
