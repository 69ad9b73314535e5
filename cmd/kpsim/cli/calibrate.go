package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kpsim/kpsim/calibrate"
	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel"
	"github.com/kpsim/kpsim/kernel/netns"
	"github.com/kpsim/kpsim/results"
)

func init() { register("calibrate", newCalibrateCommand) }

type calibrateFlags struct {
	out, name, where, mode string
	entries, execEntries   int
	skip                   []string
}

// skippable are the operations calibrate can be told to leave out.
var skippable = []string{"ipvs", "nftables", "conntrack", "iptables-mode"}

func newCalibrateCommand() *cobra.Command {
	var o calibrateFlags
	c := &cobra.Command{
		Use:   "calibrate [-o FILE] [--name NAME] [--where TEXT] [--entries N] [--exec-entries N] [--iptables legacy|nft] [--skip ipvs,nftables,conntrack,iptables-mode]",
		Short: "measure this kernel's per-operation costs and write a cost profile for the sim (root)",
		Long: `Measure, in a throwaway network namespace, what each kernel operation kube-proxy's IPVS
mode issues costs on this machine: IPVS services and destinations, ipset entries by
each strategy (exec, restore, netlink), addresses, iptables-restore, conntrack; what
iptables-restore costs kube-proxy's iptables mode (its nat table at half, twice and four
times --entries services, up to 4,000: about a minute here); and what nft costs
kube-proxy's nftables mode: transactions and listings on a table shaped like its own,
at --entries services and four times as many. Each cost is fitted from a
small and a large batch. Run in a binary with kube-proxy releases (bin/kpsim-kube-proxy-*),
it also prices each release's own code in each of its modes. The result is a cost
profile the sim reads (--set sim.profile=FILE), so the in-memory kernel predicts this
node. Operations this kernel cannot do (IPVS on a kernel without it, nftables without
nft), and those --skip names, are left out of the profile, and its source text says so
(nft's loads of rules with maps, and iptables mode's restores, take minutes at --entries
5000 on an emulated CPU: --skip nftables,iptables-mode there). See
docs/kernel-costs.md and docs/nftables.md.`,
		Example: `  sudo kpsim calibrate -o my-node.json
  sudo kpsim calibrate --entries 5000 --iptables nft -o my-node.json
  kpsim run -s restart-stale-ipsets --set sim.profile=my-node.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCalibrate(cmd, o)
		},
	}
	f := c.Flags()
	f.StringVarP(&o.out, "output", "o", "", "write the profile to `FILE` (default: standard output)")
	f.StringVar(&o.name, "name", "calibrated", "profile `NAME`")
	f.StringVar(&o.where, "where", "", "`TEXT` saying where this runs, for the profile's source text (default: the CPU model)")
	f.IntVar(&o.entries, "entries", 1000, "set entries, IPVS services, addresses and conntrack flows per measurement, `N`")
	f.IntVar(&o.execEntries, "exec-entries", 100, "`N` entries for the one-process-per-entry ipset strategy")
	f.StringVar(&o.mode, "iptables", "", "iptables variant, `legacy|nft` (default: detected as kube-proxy does)")
	f.StringSliceVar(&o.skip, "skip", nil, "leave out these operations, `ipvs,nftables,conntrack,iptables-mode`")
	completeValues(c, "iptables", "legacy", "nft")
	completeValues(c, "skip", skippable...)
	completeFiles(c, "output", "json")
	return c
}

func runCalibrate(cmd *cobra.Command, o calibrateFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if o.entries < 20 || o.execEntries < 20 {
		return usageError("--entries and --exec-entries must be at least 20 (the fits need a small and a large batch)")
	}
	for _, what := range o.skip {
		if !slices.Contains(skippable, what) {
			return usageError("--skip %s: one of %s", what, strings.Join(skippable, ", "))
		}
	}
	if o.out != "" {
		if err := checkOutput("--output", o.out); err != nil {
			return err
		}
	}
	if !netns.Isolated() {
		return reexecIsolated(append([]string{"calibrate"}, setFlags(cmd)...), stderr)
	}
	if err := netns.LoopbackUp(); err != nil {
		return err
	}
	caps := kernel.Detect()
	skip := map[string]string{}
	if !caps.IPVS.OK {
		skip["ipvs"] = "no IPVS: " + caps.IPVS.Detail
	}
	if !caps.Dummy.OK {
		skip["dummy"] = "no dummy links: " + caps.Dummy.Detail
	}
	if !caps.Conntrack.OK {
		skip["conntrack"] = "no conntrack: " + caps.Conntrack.Detail
	}
	if !caps.NFTables.OK {
		skip["nftables"] = "no nftables: " + caps.NFTables.Detail
	}
	for _, what := range o.skip {
		skip[what] = "--skip " + what
	}
	if o.where == "" {
		o.where = cpuModel()
	}
	open := func(s dataplane.IPSetStrategy) (dataplane.Dataplane, func(), error) {
		k, err := kernel.New(kernel.Options{IPSetStrategy: s, IPTablesMode: o.mode})
		if err != nil {
			return dataplane.Dataplane{}, nil, err
		}
		return k.Dataplane(), k.Close, nil
	}
	p, err := calibrate.Run(open, calibrate.Options{
		Entries: o.entries, ExecEntries: o.execEntries, Name: o.name, Where: o.where, Skip: skip, Log: stderr,
		NFTVersion: caps.NFTables.Detail, IPTables: iptablesVersion(o.mode),
	})
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if o.out == "" {
		_, err = stdout.Write(b)
		return err
	}
	if err := results.WriteFile(o.out, b); err != nil {
		return fmt.Errorf("write profile: %w", err)
	}
	fmt.Fprintf(stderr, "wrote %s\n", o.out)
	return nil
}

// setFlags returns the flags given on the command line, to pass them on.
func setFlags(cmd *cobra.Command) []string {
	var out []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		v := f.Value.String()
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			v = strings.Join(sv.GetSlice(), ",") // String() brackets a list
		}
		out = append(out, "--"+f.Name+"="+v)
	})
	return out
}

// reexecIsolated runs `kpsim args...` again in a fresh network namespace
// (netns.RunIsolated) and passes its exit status on: kernel work never
// happens in the namespace kpsim was started in.
func reexecIsolated(args []string, stderr io.Writer) error {
	code, err := netns.RunIsolated(args, os.Stdin, os.Stdout, stderr)
	if err != nil {
		return err
	}
	if code != 0 {
		// The child has said why; pass its status on without another message.
		return &exitError{code: code, err: fmt.Errorf("isolated kpsim %s exited with status %d", args[0], code)}
	}
	return nil
}

// cpuModel names the machine for a profile's source text.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "an unnamed machine"
	}
	model, virt := "", ""
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if model == "" {
				model = strings.TrimSpace(v)
			}
		case "flags":
			if strings.Contains(v, " hypervisor") {
				virt = ", virtualised"
			}
		}
	}
	if model == "" {
		model = "an unnamed CPU"
	}
	return model + virt
}

// iptablesVersion names the iptables variant the kernel backend restores
// with (mode, or the one kernel.DetectIPTablesMode picks, as Debian's
// alternatives or a node's rules select it) and what it says of its version.
func iptablesVersion(mode string) string {
	name := "iptables-" + cmp.Or(mode, kernel.DetectIPTablesMode())
	out, err := exec.Command(name, "--version").Output()
	if err != nil {
		return name
	}
	return name + " (" + strings.TrimSpace(string(out)) + ")"
}
