package cli

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/scenarios"
)

// Shell completion (`kpsim completion bash|zsh|fish|powershell`, cobra's)
// knows the shipped scenario names, the top-level --set keys and each
// enumerated flag's values.

// scenarioCompletions offers the shipped scenario names and YAML files.
func scenarioCompletions(_ *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	list, err := scenarios.ShippedScenarios()
	if err != nil {
		return []string{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
	}
	var out []string
	for _, s := range list {
		if strings.HasPrefix(s.Name, prefix) {
			out = append(out, s.Name+"\t"+s.Purpose)
		}
	}
	// Names alone would hide files; with no name matching, files are offered.
	if len(out) == 0 {
		return []string{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
	}
	return out, cobra.ShellCompDirectiveDefault
}

func completeScenario(c *cobra.Command, flag string) {
	_ = c.RegisterFlagCompletionFunc(flag, scenarioCompletions)
}

// completeSetKeys offers the scenario's sections for --set.
func completeSetKeys(c *cobra.Command) {
	_ = c.RegisterFlagCompletionFunc("set", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return scenarios.SetKeys(), cobra.ShellCompDirectiveNoSpace
	})
}

// completeValues offers a fixed list for an enumerated flag.
func completeValues(c *cobra.Command, flag string, values ...string) {
	_ = c.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(slices.Clone(values), cobra.ShellCompDirectiveNoFileComp))
}

// completeFiles offers files with the given extensions.
func completeFiles(c *cobra.Command, flag string, exts ...string) {
	_ = c.MarkFlagFilename(flag, exts...)
}

// resultsFiles completes positional arguments with JSON files.
func resultsFiles(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return []string{"json"}, cobra.ShellCompDirectiveFilterFileExt
}
