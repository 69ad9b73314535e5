package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/scenarios"
)

func init() { register("doctor", newDoctorCommand) }

func newDoctorCommand() *cobra.Command {
	var asJSON bool
	var require string
	c := &cobra.Command{
		Use:   "doctor [--json] [--require sim|kernel]",
		Short: "show what this kernel offers and which backends and scenarios can run here",
		Long: `Probe this kernel (inside a throwaway network namespace: the host is never changed)
for what kube-proxy's IPVS mode needs: IPVS and its schedulers, dummy and veth links,
every ipset type kube-proxy creates, the ipset tool, iptables (legacy and nft),
conntrack and IPv6. Then say which backends, and which shipped scenarios on which
backend, can run here, and what is missing. Needs root for the kernel checks.

With --require, exit 1 unless that backend can run here: how scripts and VMs ask
"ready?".`,
		Example: `  sudo kpsim doctor
  sudo kpsim doctor --require kernel && sudo kpsim run -s smoke --set backend=kernel
  kpsim doctor --json | jq .backends`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDoctor(cmd, asJSON, require)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	c.Flags().StringVar(&require, "require", "", "exit 1 unless `BACKEND` (sim or kernel) can run here")
	completeValues(c, "require", dataplane.Backends...)
	return c
}

// doctorReport is doctor's answer, also its -json output.
type doctorReport struct {
	Capabilities kernel.Capabilities `json:"capabilities"`
	Backends     []backendVerdict    `json:"backends"`
	// NFTablesMode is the kernel backend for a proxier in nftables mode
	// (proxier.mode: nftables), which needs nf_tables instead of IPVS.
	NFTablesMode backendVerdict    `json:"nftablesMode"`
	Scenarios    []scenarioVerdict `json:"scenarios"`
}

type backendVerdict struct {
	Backend string   `json:"backend"`
	OK      bool     `json:"ok"`
	Missing []string `json:"missing,omitempty"`
}

type scenarioVerdict struct {
	Name     string           `json:"name"`
	Backend  string           `json:"backend"` // the one the scenario runs on unless told otherwise
	Backends []backendVerdict `json:"backends"`
	Error    string           `json:"error,omitempty"` // the scenario did not load
}

func runDoctor(cmd *cobra.Command, asJSON bool, require string) error {
	stdout := cmd.OutOrStdout()
	if require != "" && !slices.Contains(dataplane.Backends, require) {
		return usageError("--require %q: want sim or kernel", require)
	}
	rep, err := diagnose()
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printDoctor(stdout, rep)
	}
	if require != "" {
		for _, b := range rep.Backends {
			if b.Backend == require && !b.OK {
				return verdict("the %s backend cannot run here: missing %s", b.Backend, strings.Join(b.Missing, "; "))
			}
		}
	}
	return nil
}

// diagnose probes the kernel (kernel.Detect works in a throwaway network
// namespace of its own, so this never changes the host) and judges every
// backend and shipped scenario against what it found.
func diagnose() (doctorReport, error) {
	rep := doctorReport{Capabilities: kernel.Detect()}
	for _, b := range dataplane.Backends {
		rep.Backends = append(rep.Backends, judge(rep.Capabilities, b, kernel.Needs{}))
	}
	rep.NFTablesMode = judge(rep.Capabilities, dataplane.BackendKernel, kernel.Needs{NFTables: true, NoIPVS: true})
	shipped, err := scenarios.ShippedScenarios()
	if err != nil {
		return rep, err
	}
	for _, sh := range shipped {
		v := scenarioVerdict{Name: sh.Name}
		needs, backend, err := scenarioNeeds(sh.Name)
		if err != nil {
			v.Error = err.Error()
			rep.Scenarios = append(rep.Scenarios, v)
			continue
		}
		v.Backend = backend
		for _, b := range dataplane.Backends {
			v.Backends = append(v.Backends, judge(rep.Capabilities, b, needs))
		}
		rep.Scenarios = append(rep.Scenarios, v)
	}
	return rep, nil
}

// scenarioNeeds is what a scenario asks of the kernel, read by the
// scenarios package without building the scenario's cluster.
func scenarioNeeds(name string) (kernel.Needs, string, error) {
	ns, err := scenarios.LoadNodeSettings(name)
	if err != nil {
		return kernel.Needs{}, "", err
	}
	return kernel.Needs{
		Scheduler:     ns.Proxier.Scheduler,
		IPSetStrategy: ns.Dataplane.IPSet,
		IPv6:          slices.Contains(ns.Proxier.Families, dataplane.IPv6),
		NFTables:      slices.Contains(ns.Modes, proxier.ModeNFTables),
		NoIPVS:        !slices.Contains(ns.Modes, proxier.ModeIPVS),
	}, ns.Backend, nil
}

func judge(c kernel.Capabilities, backend string, n kernel.Needs) backendVerdict {
	missing := c.MissingFor(backend, n)
	return backendVerdict{Backend: backend, OK: len(missing) == 0, Missing: missing}
}

func (v backendVerdict) String() string {
	switch {
	case v.OK && v.Backend == dataplane.BackendSim:
		return "yes (always)"
	case v.OK:
		return "yes"
	}
	return "no: missing " + strings.Join(v.Missing, "; ")
}

func printDoctor(w io.Writer, rep doctorReport) {
	c := rep.Capabilities
	fmt.Fprintf(w, "kernel %s\n\n", c.Kernel)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, ch kernel.Check) { fmt.Fprintf(tw, "  %s\t%s\n", name, ch) }
	row("root", c.Root)
	row("network namespaces", c.NetNS)
	row("IPVS", c.IPVS)
	if c.IPVS.OK {
		var yes, no []string
		for _, s := range dataplane.Schedulers {
			if c.Schedulers[s].OK {
				yes = append(yes, s)
			} else {
				no = append(no, fmt.Sprintf("%s (%s)", s, c.Schedulers[s].Detail))
			}
		}
		fmt.Fprintf(tw, "  IPVS schedulers\t%s\n", strings.Join(yes, " "))
		if len(no) > 0 {
			fmt.Fprintf(tw, "  IPVS schedulers missing\t%s\n", strings.Join(no, "; "))
		}
	}
	row("dummy links", c.Dummy)
	row("veth links", c.Veth)
	types := make([]string, 0, len(c.IPSetTypes))
	for t := range c.IPSetTypes {
		types = append(types, string(t))
	}
	sort.Strings(types)
	for _, t := range types {
		row("ipset "+t, c.IPSetTypes[dataplane.SetType(t)])
	}
	row("ipset tool", c.IPSetTool)
	row("iptables legacy", c.IPTables["legacy"])
	row("iptables nft", c.IPTables["nft"])
	row("iptables ipvs match", c.IPVSMatch)
	row("conntrack", c.Conntrack)
	row("IPv6", c.IPv6)
	row("nftables (nft)", c.NFTables)
	tw.Flush()

	fmt.Fprintln(w, "\nbackends")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, b := range rep.Backends {
		fmt.Fprintf(tw, "  %s\t%s\n", b.Backend, b)
	}
	fmt.Fprintf(tw, "  %s, nftables mode\t%s\n", dataplane.BackendKernel, rep.NFTablesMode)
	tw.Flush()

	fmt.Fprintln(w, "\nscenarios (* the scenario's own backend)")
	base := map[string]map[string]bool{} // what each backend lacks whatever the scenario
	for _, b := range rep.Backends {
		base[b.Backend] = map[string]bool{}
		for _, m := range b.Missing {
			base[b.Backend][m] = true
		}
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range rep.Scenarios {
		if s.Error != "" {
			fmt.Fprintf(tw, "  %s\tdoes not load: %s\n", s.Name, s.Error)
			continue
		}
		var parts []string
		for _, b := range s.Backends {
			mark := ""
			if b.Backend == s.Backend {
				mark = "*"
			}
			answer := "yes"
			if !b.OK {
				var extra []string
				for _, m := range b.Missing {
					if !base[b.Backend][m] {
						extra = append(extra, m)
					}
				}
				answer = "no (as the backend)"
				if len(extra) > 0 {
					answer = "no: also missing " + strings.Join(extra, "; ")
				}
			}
			parts = append(parts, fmt.Sprintf("%s%s: %s", b.Backend, mark, answer))
		}
		fmt.Fprintf(tw, "  %s\t%s\n", s.Name, strings.Join(parts, "\t"))
	}
	tw.Flush()
}
