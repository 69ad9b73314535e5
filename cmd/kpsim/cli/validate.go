package cli

import (
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/scenarios"
)

func init() { register("validate", newValidateCommand) }

func newValidateCommand() *cobra.Command {
	var sets, names []string
	c := &cobra.Command{
		Use:   "validate [-s NAME|FILE]... [FILE|NAME]... [--set KEY=VALUE]...",
		Short: "check scenario files: every problem with its file, line and field",
		Long: `Load each scenario as 'kpsim run' would, overrides applied, and print every problem
with its file, line and field path, or a one-line summary of what it builds. Scenarios
are named with -s as 'kpsim run' takes them, as arguments, or both. Warnings
(a deprecated key, a cluster that overflows one of kube-proxy's ipsets) are findings,
not errors: the scenario still runs.`,
		Example: `  kpsim validate my-scenario.yaml
  kpsim validate -s smoke --set cluster.services=500
  kpsim validate smoke scale-10k --set cluster.services=40000 --set cluster.portsPerService=2`,
		RunE: func(cmd *cobra.Command, args []string) error {
			paths := slices.Concat(names, args)
			if len(paths) == 0 {
				return badUsage("want at least one scenario: -s NAME|FILE or an argument")
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
				fmt.Fprintf(out, "%s: ok: %s, %d %s, %d %s, %d timeline %s\n", p, sc.Name,
					len(c.Services), results.Plural(len(c.Services), "service", "services"),
					len(c.EndpointSlices), results.Plural(len(c.EndpointSlices), "endpoint slice", "endpoint slices"),
					sc.StepCount(), results.Plural(sc.StepCount(), "step", "steps"))
			}
			if bad > 0 {
				return usageError("%d of %d %s invalid", bad, len(paths), results.Plural(len(paths), "scenario", "scenarios"))
			}
			return nil
		},
	}
	c.Flags().StringArrayVarP(&names, "scenario", "s", nil, "a scenario to check, a shipped `NAME|FILE` (see 'kpsim scenarios') or a file, as 'kpsim run -s' takes it (repeatable)")
	c.Flags().StringArrayVar(&sets, "set", nil, "override a field, `KEY=VALUE`, e.g. proxier.initialSync=legacy (repeatable)")
	c.ValidArgsFunction = scenarioCompletions
	completeScenario(c, "scenario")
	completeSetKeys(c)
	return c
}

// printWarnings prints a scenario's warnings on stderr.
func printWarnings(w io.Writer, warnings []string) {
	for _, s := range warnings {
		fmt.Fprintf(w, "warning: %s\n", s)
	}
}
