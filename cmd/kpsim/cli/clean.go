package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/kernel/netns"
)

func init() { register("clean", newCleanCommand) }

func newCleanCommand() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "clean [--force]",
		Short: "remove network namespaces and processes that crashed kernel runs left behind (root)",
		Long: `A kernel run removes its network namespaces when it ends, fails or is interrupted. A
run killed together with its parent (SIGKILL, a lost VM) cannot: clean stops its
orphaned isolated processes and removes its namespaces under ` + netns.Dir + `. Namespaces
of runs that still seem to be in progress are kept unless --force is given.`,
		Example: `  sudo kpsim clean
  sudo kpsim clean --force`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runClean(cmd.OutOrStdout(), force)
		},
	}
	c.Flags().BoolVar(&force, "force", false, "also remove namespaces of runs that still seem to be in progress")
	return c
}

func runClean(stdout io.Writer, force bool) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("clean needs root: it unmounts namespaces in %s", netns.Dir)
	}
	rep, err := netns.Clean(force)
	for _, pid := range rep.Killed {
		fmt.Fprintf(stdout, "stopped orphaned isolated kpsim process %d\n", pid)
	}
	for _, n := range rep.Removed {
		fmt.Fprintf(stdout, "removed %s/%s\n", netns.Dir, n)
	}
	for _, n := range rep.Kept {
		fmt.Fprintf(stdout, "kept %s/%s: its run is still in progress (use --force)\n", netns.Dir, n)
	}
	if len(rep.Killed)+len(rep.Removed)+len(rep.Kept) == 0 && err == nil {
		fmt.Fprintln(stdout, "nothing to clean")
	}
	return err
}
