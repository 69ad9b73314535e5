package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/results/sweep"
)

func newSweepMergeCommand() *cobra.Command {
	var o sweep.MergeOptions
	var out string
	c := &cobra.Command{
		Use:   "merge DIR... [-o FILE] [--plan FILE] [--allow-mixed]",
		Short: "gather the cells of a sweep (downloaded artifacts) into one index",
		Long: `Gather the directories 'kpsim sweep run' wrote, found anywhere under the DIRs (such as
GitHub Actions artifacts downloaded into one directory each), into one sweep index
that 'kpsim report' draws and 'kpsim compare' compares. The plan ('kpsim sweep plan
-o plan.json') must be among them, or named with --plan: it says which cells there
should be. Every planned cell is in the index: a cell without a record is missing, and one
whose runs failed or never finished has failed. The index names the results files relative to itself: keep them together.

Cells planned and run by different kpsim builds are refused (a difference between two
cells could be the builds'), unless --allow-mixed.`,
		Example: `  kpsim sweep merge out/sweep -o out/sweep/index.json
  kpsim sweep merge artifacts/ --plan artifacts/sweep-plan/plan.json -o artifacts/index.json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return badUsage("want at least one directory")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, dirs []string) error {
			return runSweepMerge(cmd, dirs, out, o)
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "index `FILE` (default DIR/index.json, the first DIR)")
	c.Flags().StringVar(&o.Plan, "plan", "", "the sweep's plan `FILE` (default: the one plan found in the DIRs)")
	c.Flags().BoolVar(&o.AllowMixed, "allow-mixed", false, "merge cells that different kpsim builds planned or ran")
	completeFiles(c, "output", "json")
	completeFiles(c, "plan", "json")
	return c
}

func runSweepMerge(cmd *cobra.Command, dirs []string, out string, o sweep.MergeOptions) error {
	if out == "" {
		out = filepath.Join(dirs[0], "index.json")
	}
	if err := checkOutput("--output", out); err != nil {
		return err
	}
	o.IndexDir = filepath.Dir(out)
	ix, err := sweep.Merge(dirs, o)
	var mixed *sweep.MixedError
	switch {
	case errors.As(err, &mixed):
		return usageError("%v\npass --allow-mixed to merge them anyway", err)
	case err != nil:
		return usageError("%v", err)
	}
	if err := sweep.WriteIndex(out, ix); err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "cell\tstatus\tresults\twhy")
	for _, c := range ix.Cells {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", c.Name, c.Status, len(c.Files), c.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range ix.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "sweep %s: %s\nindex: %s\n", ix.Sweep, ix.Summary(), out)
	return nil
}
