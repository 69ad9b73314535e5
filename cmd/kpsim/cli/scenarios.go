package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/scenarios"
)

func init() { register("scenarios", newScenariosCommand) }

func newScenariosCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "scenarios",
		Short: "list the shipped scenarios and the question each answers",
		Long: `List the scenarios built into kpsim, each with the question it answers. Run one with
'kpsim run -s NAME'; write your own (see scenarios/README.md) and check it with
'kpsim validate FILE'.`,
		Example: `  kpsim scenarios
  kpsim scenarios | grep -i restart`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := scenarios.ShippedScenarios()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\n", s.Name, s.Purpose)
			}
			return tw.Flush()
		},
	}
}
