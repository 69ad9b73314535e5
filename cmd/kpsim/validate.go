package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/kpsim/kpsim/scenarios"
)

func init() {
	register(command{
		name:  "validate",
		usage: "FILE|NAME [MORE ...] [--set key=value ...]",
		short: "check scenario files: every problem with its file, line and field",
		run:   runValidate,
	})
}

func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("validate", stderr)
	var sets setFlags
	fs.Var(&sets, "set", "override a field, e.g. proxier.initialSync=legacy (repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: kpsim validate %s\n\n", commands["validate"].usage)
		fs.PrintDefaults()
	}
	paths, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return usageError("want at least one scenario file")
	}
	bad := 0
	for _, p := range paths {
		sc, err := scenarios.Load(p, sets)
		if err != nil {
			bad++
			var es scenarios.Errors
			if errors.As(err, &es) {
				for _, e := range es {
					fmt.Fprintln(stdout, e)
				}
				continue
			}
			fmt.Fprintln(stdout, err)
			continue
		}
		c := sc.ClusterObjects()
		fmt.Fprintf(stdout, "%s: ok: %s, %d services, %d endpoint slices, %d timeline steps\n",
			p, sc.Name, len(c.Services), len(c.EndpointSlices), sc.StepCount())
	}
	if bad > 0 {
		return usageError("%d of %d scenarios invalid", bad, len(paths))
	}
	return nil
}
