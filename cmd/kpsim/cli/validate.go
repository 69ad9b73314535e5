package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/scenarios"
)

func init() { register("validate", newValidateCommand) }

func newValidateCommand() *cobra.Command {
	var sets []string
	c := &cobra.Command{
		Use:   "validate FILE|NAME... [--set KEY=VALUE]...",
		Short: "check scenario files: every problem with its file, line and field",
		Long: `Load each scenario as 'kpsim run' would, overrides applied, and print every problem
with its file, line and field path, or a one-line summary of what it builds. Warnings
(a deprecated key, a cluster that overflows one of kube-proxy's ipsets) are findings,
not errors: the scenario still runs.`,
		Example: `  kpsim validate my-scenario.yaml
  kpsim validate smoke scale-10k --set cluster.services=40000 --set cluster.portsPerService=2`,
		RunE: func(cmd *cobra.Command, paths []string) error {
			if len(paths) == 0 {
				return badUsage("want at least one scenario file")
			}
			out := cmd.OutOrStdout()
			bad := 0
			for _, p := range paths {
				sc, err := scenarios.Load(p, sets)
				if err != nil {
					bad++
					fmt.Fprintln(out, err)
					continue
				}
				for _, w := range sc.Warnings() {
					fmt.Fprintf(out, "%s: warning: %s\n", p, w)
				}
				c := sc.ClusterObjects()
				fmt.Fprintf(out, "%s: ok: %s, %d services, %d endpoint slices, %d timeline steps\n",
					p, sc.Name, len(c.Services), len(c.EndpointSlices), sc.StepCount())
			}
			if bad > 0 {
				return usageError("%d of %d scenarios invalid", bad, len(paths))
			}
			return nil
		},
	}
	c.Flags().StringArrayVar(&sets, "set", nil, "override a field, `KEY=VALUE`, e.g. proxier.initialSync=legacy (repeatable)")
	c.ValidArgsFunction = scenarioCompletions
	completeSetKeys(c)
	return c
}

// printWarnings prints a scenario's warnings on stderr.
func printWarnings(w io.Writer, warnings []string) {
	for _, s := range warnings {
		fmt.Fprintf(w, "warning: %s\n", s)
	}
}
