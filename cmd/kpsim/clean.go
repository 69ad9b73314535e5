package main

import (
	"fmt"
	"io"
	"os"

	"github.com/kpsim/kpsim/kernel"
)

func init() {
	register(command{
		name:  "clean",
		usage: "[-force]",
		short: "remove network namespaces and processes that crashed kernel runs left behind (root)",
		run:   runClean,
	})
}

func runClean(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("clean", stderr)
	force := fs.Bool("force", false, "also remove namespaces of runs that still seem to be in progress")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %v", fs.Args())
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("clean needs root: it unmounts namespaces in %s", kernel.NetnsDir)
	}
	rep, err := kernel.Clean(*force)
	for _, pid := range rep.Killed {
		fmt.Fprintf(stdout, "stopped orphaned isolated kpsim process %d\n", pid)
	}
	for _, n := range rep.Removed {
		fmt.Fprintf(stdout, "removed %s/%s\n", kernel.NetnsDir, n)
	}
	for _, n := range rep.Kept {
		fmt.Fprintf(stdout, "kept %s/%s: its run is still in progress (use -force)\n", kernel.NetnsDir, n)
	}
	if len(rep.Killed)+len(rep.Removed)+len(rep.Kept) == 0 && err == nil {
		fmt.Fprintln(stdout, "nothing to clean")
	}
	return err
}
