package cli

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/scenarios"
)

func init() { register("state", newStateCommand) }

type stateFlags struct {
	in, then, out, node, family string
	diff                        bool
	scale                       int
	sets                        []string
}

func newStateCommand() *cobra.Command {
	var o stateFlags
	c := &cobra.Command{
		Use: "state -f OBJECTS [--scale N] [--node NAME] [--family IPv4|IPv6|dual] [--set proxier.KEY=VALUE]... [--then CHANGES] [-o FILE]\n" +
			"  kpsim state --diff A.json B.json",
		Short: "dump what the proxier programs for a cluster export (or diff two dumps, exit 1 if they differ)",
		Long: `Run one proxier per family once on the in-memory kernel with the objects of a kubectl
export and dump what it programs: IPVS virtual servers, ipsets, kube-ipvs0 addresses
and the nat and filter tables, canonically sorted. --then applies a second file
after the first sync and dumps the result of the incremental sync. --diff compares
two dumps (of kpsim state or 'kpsim run --state', whose dump of a release in
nftables mode holds its nftables table) and exits 1 if they differ.

In nftables mode the elements of kube-proxy's affinity-* sets are traffic's, not
the proxier's: the update statement of a ClientIP affinity endpoint's chain writes
the client's address, which lives for the affinity timeout. A dump taken after
probes holds the probing clients there, on the sim as on a kernel. Which endpoint
a client's first connection went to is the kernel's random choice, so --diff
compares these clients per service, whichever endpoint's set holds them, and marks
a difference "written by traffic".`,
		Example: `  kubectl get services,endpointslices -A -o json > cluster.json
  kpsim state -f cluster.json -o state.json
  kpsim state -f cluster.json --node worker-3 --set proxier.scheduler=wrr
  kpsim state -f cluster.json --then changes.yaml -o after.json
  kpsim state --diff state.json after.json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runState(cmd, o, args)
		},
	}
	f := c.Flags()
	f.StringVarP(&o.in, "filename", "f", "", "the cluster, `OBJECTS`: a kubectl export (JSON or YAML, a List, documents, or a directory of them)")
	f.StringVar(&o.then, "then", "", "`CHANGES` (a file like OBJECTS) applied after the first sync; the dump is taken after the second (incremental) sync.\n"+
		"Objects in it are creates or updates; an object annotated "+objects.AnnotationDelete+": \"true\" (kind, namespace and\n"+
		"name suffice) is deleted, and so is an object whose new version kube-proxy ignores")
	f.StringVarP(&o.out, "output", "o", "-", "write the dump to `FILE` (- is standard output)")
	f.StringVar(&o.node, "node", "", "`NAME` of the node the proxier plays (Local traffic policies, NodePort addresses, node IP); default: "+objects.DefaultNode)
	f.StringVar(&o.family, "family", "", "the families to run, `IPv4|IPv6|dual` (one proxier per family); default: the families the services use")
	f.StringArrayVar(&o.sets, "set", nil, "a proxier.* or dataplane.* setting `KEY=VALUE`, as in scenarios (repeatable), e.g. proxier.scheduler=wrr")
	f.IntVar(&o.scale, "scale", 1, "repeat the services `N` times with fresh names and addresses (a load test from a small export)")
	f.BoolVar(&o.diff, "diff", false, "compare two dumps given as arguments; exit 1 if they differ")
	completeValues(c, "family", "IPv4", "IPv6", "dual")
	completeFiles(c, "filename", "json", "yaml", "yml")
	completeFiles(c, "then", "json", "yaml", "yml")
	return c
}

func runState(cmd *cobra.Command, o stateFlags, args []string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	in, then, out, node, family, scale, sets := o.in, o.then, o.out, o.node, o.family, o.scale, o.sets
	if o.diff {
		if len(args) != 2 || in != "" || then != "" {
			return badUsage("--diff takes exactly two dump files and no other input")
		}
		return diffStates(args[0], args[1], stdout)
	}
	if in == "" || len(args) != 0 {
		return badUsage("want -f OBJECTS and no other arguments")
	}
	if err := checkOutput("--output", out); err != nil {
		return err
	}

	cfg, strategy, warnings, err := scenarios.ProxierOverrides(sets)
	if err != nil {
		return usageError("%v", err)
	}
	printWarnings(stderr, warnings)
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
	if len(set.Services) == 0 && changes == nil {
		return usageError("%s holds no Service kube-proxy would program, so the dump would be empty "+
			"(export with: kubectl get services,endpointslices -A -o json)", in)
	}
	if node != "" {
		if known := nodeNames(set); !slices.Contains(known, node) {
			return usageError("--node %q: no such node in %s; it has %s", node, in, results.ListSome(known, 10))
		}
	}
	if orphans := orphanSlices(set); len(orphans) > 0 {
		n := len(orphans)
		fmt.Fprintf(stderr, "warning: %d %s to no Service in %s, so kube-proxy programs nothing for %s: %s\n",
			n, results.Plural(n, "EndpointSlice belongs", "EndpointSlices belong"), in, results.Plural(n, "it", "them"), results.ListSome(orphans, 5))
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

func writeState(path string, st *state.State, stdout io.Writer) error {
	var b bytes.Buffer
	if err := state.Write(&b, st); err != nil {
		return err
	}
	if path == "-" {
		_, err := stdout.Write(b.Bytes())
		return err
	}
	if err := results.WriteFile(path, b.Bytes()); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

func diffStates(pa, pb string, stdout io.Writer) error {
	a, err := state.ReadFile(pa)
	if err != nil {
		return usageError("%v", err)
	}
	b, err := state.ReadFile(pb)
	if err != nil {
		return usageError("%v", err)
	}
	d := state.Diff(a, b)
	if len(d) == 0 {
		fmt.Fprintf(stdout, "A (%s) and B (%s) hold the same state\n", pa, pb)
		return nil
	}
	fmt.Fprintf(stdout, "A = %s\nB = %s\n", pa, pb)
	for _, x := range d {
		fmt.Fprintln(stdout, x.String())
	}
	return verdict("%d %s", len(d), results.Plural(len(d), "difference", "differences"))
}

// nodeNames are the nodes an export knows: its Node objects, else the
// nodes its endpoints name.
func nodeNames(set *objects.Set) []string {
	seen := map[string]bool{}
	for _, n := range set.Nodes {
		seen[n.Name] = true
	}
	if len(seen) == 0 {
		for _, eps := range set.EndpointSlices {
			for _, ep := range eps.Endpoints {
				if ep.NodeName != nil && *ep.NodeName != "" {
					seen[*ep.NodeName] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// orphanSlices are the EndpointSlices (namespace/name) whose Service is not
// in the set: kube-proxy keeps them but programs nothing for them.
func orphanSlices(set *objects.Set) []string {
	services := map[string]bool{}
	for _, svc := range set.Services {
		services[svc.Namespace+"/"+svc.Name] = true
	}
	for _, ig := range set.Ignored {
		if ig.Kind == "Service" {
			services[ig.Object] = true // ignored on purpose, and reported as such
		}
	}
	var out []string
	for _, eps := range set.EndpointSlices {
		if !services[eps.Namespace+"/"+eps.Labels[objects.LabelServiceName]] {
			out = append(out, eps.Namespace+"/"+eps.Name)
		}
	}
	return out
}
