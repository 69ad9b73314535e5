package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/compare"
)

// runRepeated runs the scenario o.runs times with the same seed, each run
// a 'kpsim run' process of its own writing STEM-runI.json: where runs of
// one seed differ (a kube-proxy release iterates Go maps, whose order Go
// randomizes per run; the wall clock and the real kernel never repeat)
// each run is one sample, and a process of its own keeps its CPU, memory
// and the release's global metrics its own. It prints each figure's
// median and range over the runs, and how to compare them.
func runRepeated(cmd *cobra.Command, o runFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if o.runs < 1 || o.runs > maxSeeds {
		return usageError("--runs %d: want 1 to %d runs", o.runs, maxSeeds)
	}
	if o.seeds != 1 {
		return badUsage("--runs repeats one seed and --seeds runs several: give one of them")
	}
	if o.state != "" || o.metricsAddr != "" || o.cpuprofile != "" || o.memprofile != "" {
		return usageError("--runs runs the scenario several times: --state, --metrics-addr, --cpuprofile and --memprofile take one run")
	}
	release := claimSignals(cmd)
	defer release()
	ctx := cmd.Context()
	sc, err := loadInterruptible(ctx, o.scenario, o.sets, io.Discard)
	if err != nil {
		return err
	}
	if _, err := sc.Implementation(); err != nil {
		return usageError("%v", err)
	}
	stem := strings.TrimSuffix(o.out, ".json")
	if stem == "" {
		stem = filepath.Join("out", fmt.Sprintf("%s-%s", sc.Name, time.Now().Format("20060102-150405")))
	}
	for i := 1; i <= o.runs; i++ {
		if err := checkOutput("--output", runPath(stem, i)); err != nil {
			return err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--runs: find this kpsim to run the runs with: %w", err)
	}
	var files []*record.File
	var paths []string
	var errs []error
	for i := 1; i <= o.runs && ctx.Err() == nil; i++ {
		path := runPath(stem, i)
		args := []string{"run", "-s", o.scenario, "-o", path}
		for _, s := range o.sets {
			args = append(args, "--set", s)
		}
		fmt.Fprintf(stderr, "kpsim run: run %d of %d: %s\n", i, o.runs, path)
		// Each run's own summary would be one sample among many: the
		// spread over all of them is printed at the end instead.
		if err := runChild(ctx, exe, args, io.Discard, stderr); err != nil {
			errs = append(errs, fmt.Errorf("run %d: %w", i, err))
		}
		f, err := results.Read(path)
		if err != nil {
			continue // the run failed before writing; its error says why
		}
		results.Summarize(f)
		files, paths = append(files, f), append(paths, path)
	}
	if len(files) > 0 {
		if err := results.PrintSpread(stdout, files); err != nil {
			return err
		}
		if why := compare.WhySamples(files); why != "" {
			fmt.Fprintf(stdout, "runs of one seed differ: %s\n", why)
		} else {
			fmt.Fprintf(stdout, "note: kpsim's proxier on the modeled clock repeats a seed exactly: these runs are copies of one answer (--seeds runs other seeds)\n")
		}
		fmt.Fprintf(stdout, "results: %s\n", strings.Join(paths, " "))
		fmt.Fprintf(stdout, "compare them with another build's or release's runs: kpsim compare %s-run*.json -- OTHER-run*.json\n", stem)
		if len(files) < compare.DefaultRuns && compare.WhySamples(files) != "" {
			fmt.Fprintf(stdout, "note: a comparison of runs that vary decides most figures with %d runs a side; fewer may leave it undecided\n", compare.DefaultRuns)
		}
	}
	if ctx.Err() != nil {
		errs = append(errs, fmt.Errorf("interrupted after %d of %d runs (%v)", len(files), o.runs, context.Cause(ctx)))
	}
	return errors.Join(errs...)
}

// runPath is the results file of run i of --runs.
func runPath(stem string, i int) string { return fmt.Sprintf("%s-run%d.json", stem, i) }
