package kernel

import (
	"os"
	"os/exec"
	"testing"

	"github.com/moby/ipvs"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/dataplane/conformance"
	"github.com/kpsim/kpsim/kernel/netns/netnstest"
)

// conformanceVariants run the suite once per ipset strategy, each iptables
// variant at least once; exec with nft is what kube-proxy does in a
// namespace without rules.
var conformanceVariants = []Options{
	{IPSetStrategy: dataplane.IPSetExec, IPTablesMode: "nft"},
	{IPSetStrategy: dataplane.IPSetRestore, IPTablesMode: "legacy"},
	{IPSetStrategy: dataplane.IPSetNetlink, IPTablesMode: "legacy"},
}

// TestConformance runs the dataplane conformance suite against this kernel,
// each variant in a network namespace (and a process) of its own, side by
// side. Parts the kernel cannot do are skipped, naming the missing
// capability as Detect reports it.
func TestConformance(t *testing.T) {
	for _, opts := range conformanceVariants {
		t.Run(string(opts.IPSetStrategy)+"-"+opts.IPTablesMode, func(t *testing.T) {
			t.Parallel()
			if !netnstest.Private(t) {
				return
			}
			ns := &scratchNamespace{opts: opts}
			ns.flushIPTables(t, opts.IPTablesMode)
			conformance.Run(t, ns.fresh, conformanceCapabilities(Detect(), opts))
		})
	}
}

// conformanceCapabilities translates Detect's answer for the suite, with the
// host tools a dataplane with opts runs: the suite skips a part whose tool is
// missing by the tool's name (Detect's netlink probes find the set types
// whether or not the ipset tool is there).
func conformanceCapabilities(c Capabilities, opts Options) conformance.Capabilities {
	mode := opts.IPTablesMode
	have := conformance.Capabilities{Reasons: map[string]string{}, Tools: map[string][]string{}}
	for _, t := range supportedSetTypes {
		have.Tools["ipset:"+string(t)] = ipsetTools(opts.IPSetStrategy)
	}
	ipt := &iptables{mode: mode}
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		for _, verb := range []string{"restore", "save"} {
			have.Tools["iptables"] = append(have.Tools["iptables"], ipt.tool(f, verb))
		}
	}
	why := func(name string, ch Check) bool {
		if !ch.OK {
			have.Reasons[name] = ch.String()
		}
		return ch.OK
	}
	have.IPVS = why("ipvs", c.IPVS)
	for _, s := range []string{"rr", "wrr"} { // the schedulers the suite uses
		if have.IPVS && !c.Schedulers[s].OK {
			have.IPVS = false
			have.Reasons["ipvs"] = "scheduler " + s + ": " + c.Schedulers[s].String()
		}
	}
	have.Dummy = why("dummy", c.Dummy)
	for _, t := range supportedSetTypes {
		if why("ipset:"+string(t), c.IPSetTypes[t]) {
			have.IPSet = append(have.IPSet, t)
		}
	}
	have.IPTables = why("iptables", c.IPTables[mode])
	have.IPVSMatch = why("ipvs-match", c.IPVSMatch)
	have.Conntrack = why("conntrack", c.Conntrack)
	_, err := os.Stat("/proc/sys/net/ipv4/ip_forward")
	have.Sysctls = why("sysctls", Check{OK: err == nil, Detail: "/proc/sys/net not readable"})
	return have
}

// ipsetTools are the host tools an ipset strategy runs: the ipset command,
// except for netlink, kpsim's own messages.
func ipsetTools(s dataplane.IPSetStrategy) []string {
	if s == dataplane.IPSetNetlink {
		return nil
	}
	return []string{"ipset"}
}

// scratchNamespace hands the suite a fresh dataplane per test. The kernel
// dataplane is the process's namespace, which a test cannot swap, so fresh
// means emptied: IPVS flushed, iptables tables flushed (only when a test
// restored rules: a restore costs a process), sets destroyed, links other
// than lo deleted, conntrack flushed.
type scratchNamespace struct {
	opts          Options
	iptablesDirty bool
}

func (ns *scratchNamespace) fresh(t *testing.T) dataplane.Dataplane {
	ns.reset(t)
	k, err := New(ns.opts)
	require.NoError(t, err)
	t.Cleanup(k.Close)
	dp := k.Dataplane()
	dp.IPTables = dirtyIPTables{dp.IPTables, &ns.iptablesDirty}
	return dp
}

// dirtyIPTables notes that a test restored rules.
type dirtyIPTables struct {
	dataplane.IPTables
	dirty *bool
}

func (d dirtyIPTables) Restore(f dataplane.Family, payload []byte) error {
	*d.dirty = true
	return d.IPTables.Restore(f, payload)
}

func (ns *scratchNamespace) reset(t *testing.T) {
	t.Helper()
	if ns.iptablesDirty {
		ns.flushIPTables(t, ns.opts.IPTablesMode)
	}
	if _, err := os.Stat("/proc/net/ip_vs"); err == nil {
		h, err := ipvs.New("")
		require.NoError(t, err)
		err = h.Flush()
		h.Close()
		require.NoError(t, err)
	}
	sets, err := newIPSetNetlink()
	require.NoError(t, err)
	defer sets.close()
	list, err := sets.Sets()
	require.NoError(t, err)
	for _, s := range list {
		require.NoError(t, sets.DestroySet(s.Name))
	}
	links, err := redump(netlink.LinkList)
	require.NoError(t, err)
	for _, l := range links {
		if l.Attrs().Name != "lo" {
			require.NoError(t, netlink.LinkDel(l), "delete link %s", l.Attrs().Name)
		}
	}
	// A kernel without conntrack has nothing to flush; the suite skips it.
	_ = netlink.ConntrackTableFlush(netlink.ConntrackTable)
}

// flushIPTables empties the filter and nat tables of both families of each
// installed variant: without --noflush a restore replaces each table it names.
func (ns *scratchNamespace) flushIPTables(t *testing.T, modes ...string) {
	t.Helper()
	for _, mode := range modes {
		for _, tool := range []string{"iptables-" + mode + "-restore", "ip6tables-" + mode + "-restore"} {
			if _, err := exec.LookPath(tool); err != nil {
				continue
			}
			_, err := run([]byte("*filter\nCOMMIT\n*nat\nCOMMIT\n"), tool)
			require.NoError(t, err)
		}
	}
	ns.iptablesDirty = false
}
