package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/kpsim/kpsim/scenarios"
)

func init() {
	register(command{
		name:  "scenarios",
		usage: "",
		short: "list the shipped scenarios and the question each answers",
		run:   runScenarios,
	})
}

func runScenarios(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("scenarios", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kpsim scenarios\n\nRun one with 'kpsim run -s NAME'; 'kpsim validate FILE' checks your own.")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("takes no arguments")
	}
	list, err := scenarios.ShippedScenarios()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\n", s.Name, s.Purpose)
	}
	return tw.Flush()
}
