package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/scenarios/objects"
)

func init() {
	register(command{
		name:  "state",
		usage: "-f OBJECTS [--scale N] [--node NAME] [--family IPv4|IPv6|dual] [--set proxier.key=value ...] [--then CHANGES] [-o state.json]  |  --diff A.json B.json",
		short: "dump what the proxier programs for a cluster export (or diff two dumps, exit 1 if they differ)",
		run:   runState,
	})
}

// setFlags collects repeated --set flags.
type setFlags []string

func (s *setFlags) String() string     { return strings.Join(*s, " ") }
func (s *setFlags) Set(v string) error { *s = append(*s, v); return nil }

func runState(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("state", stderr)
	var in, then, out, node, family string
	var diff bool
	var scale int
	var sets setFlags
	fs.StringVar(&in, "f", "", "objects: a kubectl export (JSON or YAML, a List, documents, or a directory of them)")
	fs.StringVar(&then, "then", "", "changes applied after the first sync; the dump is taken after the second (incremental) sync.\n"+
		"Objects in it are creates or updates; an object annotated "+objects.AnnotationDelete+": \"true\" (kind, namespace and\n"+
		"name suffice) is deleted, and so is an object whose new version kube-proxy ignores")
	fs.StringVar(&out, "o", "-", "write the dump here (- is standard output)")
	fs.StringVar(&node, "node", "", "the node the proxier plays (Local traffic policies, NodePort addresses, node IP); default: "+objects.DefaultNode)
	fs.StringVar(&family, "family", "", "IPv4, IPv6 or dual (one proxier per family); default: the families the services use")
	fs.Var(&sets, "set", "proxier.KEY=VALUE: a proxier setting, as in scenarios (repeatable), e.g. proxier.scheduler=wrr")
	fs.IntVar(&scale, "scale", 1, "repeat the services this many times with fresh names and addresses (a load test from a small export)")
	fs.BoolVar(&diff, "diff", false, "compare two dumps given as arguments; exit 1 if they differ")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: kpsim state %s\n\n", commands["state"].usage)
		fmt.Fprintln(stderr, "Runs one proxier per family once on the in-memory kernel and dumps IPVS virtual servers, ipsets,")
		fmt.Fprintln(stderr, "kube-ipvs0 addresses and the nat and filter tables, canonically sorted.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usageError("%v", err)
	}
	if diff {
		if fs.NArg() != 2 || in != "" || then != "" {
			return usageError("--diff takes exactly two dump files and no other input")
		}
		return diffStates(fs.Arg(0), fs.Arg(1), stdout)
	}
	if in == "" || fs.NArg() != 0 {
		return usageError("want -f OBJECTS and no other arguments (see kpsim state -h)")
	}

	cfg, strategy, err := scenarios.ProxierOverrides(sets)
	if err != nil {
		return usageError("%v", err)
	}
	cfg.NodeName = node
	switch family {
	case "":
	case "dual":
		cfg.Families = []dataplane.Family{dataplane.IPv4, dataplane.IPv6}
	case string(dataplane.IPv4), string(dataplane.IPv6):
		cfg.Families = []dataplane.Family{dataplane.Family(family)}
	default:
		return usageError("--family %q: want IPv4, IPv6 or dual", family)
	}

	set, err := objects.Load(in)
	if err != nil {
		return usageError("%v", err)
	}
	if scale != 1 {
		if set, err = set.Scale(scale); err != nil {
			return usageError("--scale: %v", err)
		}
		for _, n := range set.Notes {
			fmt.Fprintln(stderr, n)
		}
	}
	var changes *objects.Set
	if then != "" {
		if changes, err = objects.Load(then); err != nil {
			return usageError("--then: %v", err)
		}
	}
	counts := set.IgnoredCounts()
	for _, reason := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(stderr, "ignored %d x %s\n", counts[reason], reason)
	}
	run, err := scenarios.NewStateRun(set, cfg, strategy)
	if err != nil {
		return err
	}
	addrs := fmt.Sprint(run.Node.Addresses)
	if len(run.Node.Addresses) == 0 {
		addrs = "(no Node object: NodePorts on the sim's default addresses, node IP 127.0.0.1 and ::1 as kube-proxy falls back to)"
	}
	fmt.Fprintf(stderr, "node %s %s, families %v\n", run.Node.Name, addrs, run.Families)
	for _, w := range run.Node.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	st, err := run.First(set)
	if err != nil {
		return err
	}
	if changes != nil {
		if st, err = run.Then(set, changes); err != nil {
			return err
		}
	}
	for _, c := range run.Conflicts() {
		fmt.Fprintf(stderr, "conflict: %s\n", c)
	}
	return writeState(out, st, stdout)
}

func writeState(path string, st *results.State, stdout io.Writer) error {
	var b bytes.Buffer
	if err := results.WriteState(&b, st); err != nil {
		return err
	}
	if path == "-" {
		_, err := stdout.Write(b.Bytes())
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

func diffStates(pa, pb string, stdout io.Writer) error {
	a, err := results.ReadStateFile(pa)
	if err != nil {
		return usageError("%v", err)
	}
	b, err := results.ReadStateFile(pb)
	if err != nil {
		return usageError("%v", err)
	}
	d := results.DiffStates(a, b)
	if len(d) == 0 {
		fmt.Fprintf(stdout, "A (%s) and B (%s) hold the same state\n", pa, pb)
		return nil
	}
	fmt.Fprintf(stdout, "A = %s\nB = %s\n", pa, pb)
	for _, x := range d {
		fmt.Fprintln(stdout, x.String())
	}
	return verdict("%d differences", len(d))
}
