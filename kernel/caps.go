package kernel

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/moby/ipvs"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/dataplane"
)

// Check is one capability: whether the kernel (and the tools next to it)
// offer it, and why not, or what was found.
type Check struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

func (c Check) String() string {
	s := "no"
	if c.OK {
		s = "yes"
	}
	if c.Detail != "" {
		s += " (" + c.Detail + ")"
	}
	return s
}

// Capabilities are what this kernel offers kpsim. Detect fills them by
// trying each thing; doctor prints them and the kernel backend refuses to
// start a run when Missing lists anything.
type Capabilities struct {
	Kernel     string                      `json:"kernel"` // uname -r
	Root       Check                       `json:"root"`
	NetNS      Check                       `json:"netns"`
	IPVS       Check                       `json:"ipvs"`
	Schedulers map[string]Check            `json:"schedulers"` // IPVS schedulers, when IPVS is there
	Dummy      Check                       `json:"dummy"`
	Veth       Check                       `json:"veth"`
	IPSetTypes map[dataplane.SetType]Check `json:"ipsetTypes"`
	IPSetTool  Check                       `json:"ipsetTool"` // the ipset command (exec and restore strategies)
	IPTables   map[string]Check            `json:"iptables"`  // "legacy", "nft"
	// IPVSMatch is iptables' ipvs match (xt_ipvs): kube-proxy's rules for
	// load balancer source ranges that leave the node out use it.
	IPVSMatch Check `json:"ipvsMatch"`
	Conntrack Check `json:"conntrack"`
	IPv6      Check `json:"ipv6"` // for dual-stack and IPv6 scenarios
	// NFTables is nf_tables with the nft binary (its version in Detail):
	// kube-proxy's nftables mode.
	NFTables Check `json:"nftables"`
}

// kubeProxySetTypes are the ipset types kube-proxy's IPVS mode creates.
var kubeProxySetTypes = []dataplane.SetType{
	dataplane.HashIP, dataplane.HashIPPort, dataplane.HashIPPortIP, dataplane.HashIPPortNet, dataplane.BitmapPort,
}

// Needs are what a particular run asks of the kernel beyond the kernel
// backend's basics.
type Needs struct {
	Scheduler     string                  // IPVS scheduler; empty means rr
	IPv6          bool                    // an IPv6 proxier (IPv6 or dual-stack)
	IPSetStrategy dataplane.IPSetStrategy // empty means dataplane.DefaultIPSetStrategy
	// NFTables: a proxier of the run runs in kube-proxy's nftables mode,
	// which needs nf_tables and the nft binary; NoIPVS: none runs in IPVS
	// mode, so IPVS, ipsets, a dummy link and iptables are not needed.
	NFTables, NoIPVS bool
}

// Missing lists what a backend needs and this kernel lacks, each as
// "what (why)"; nil means the backend can run here. The kernel backend needs
// root, network namespaces, veth links and conntrack; for IPVS mode IPVS
// with the rr scheduler, dummy links, kube-proxy's ipset types and the
// ipset tool, one iptables variant; for nftables mode (Needs.NFTables)
// nf_tables and nft.
func (c Capabilities) Missing(backend string) []string { return c.MissingFor(backend, Needs{}) }

// MissingFor is Missing for a run with particular needs (a scenario's
// scheduler, families and ipset strategy).
func (c Capabilities) MissingFor(backend string, n Needs) []string {
	switch backend {
	case dataplane.BackendSim:
		return nil
	case dataplane.BackendKernel:
	default:
		return []string{fmt.Sprintf("unknown backend %q (want one of %v)", backend, dataplane.Backends)}
	}
	if n.Scheduler == "" {
		n.Scheduler = "rr"
	}
	var out []string
	need := func(what string, ch Check) { out = lacking(out, what, ch) }
	need("root", c.Root)
	need("network namespaces", c.NetNS)
	if len(out) > 0 {
		return out // nothing else could be checked
	}
	if !n.NoIPVS {
		out = append(out, c.missingIPVSMode(n)...)
	}
	if n.NFTables {
		need("nftables", c.NFTables)
	}
	need("veth links", c.Veth)
	need("conntrack", c.Conntrack)
	if n.IPv6 {
		need("IPv6", c.IPv6)
	}
	return out
}

// lacking is out with what added, and why, when ch failed.
func lacking(out []string, what string, ch Check) []string {
	if ch.OK {
		return out
	}
	if ch.Detail != "" {
		what += " (" + ch.Detail + ")"
	}
	return append(out, what)
}

// missingIPVSMode is what IPVS mode needs and this kernel lacks.
func (c Capabilities) missingIPVSMode(n Needs) []string {
	var out []string
	need := func(what string, ch Check) { out = lacking(out, what, ch) }
	need("IPVS", c.IPVS)
	if c.IPVS.OK {
		need("IPVS scheduler "+n.Scheduler, c.Schedulers[n.Scheduler])
	}
	need("dummy links", c.Dummy)
	for _, t := range kubeProxySetTypes {
		need("ipset type "+string(t), c.IPSetTypes[t])
	}
	if n.IPSetStrategy == "" {
		n.IPSetStrategy = dataplane.DefaultIPSetStrategy
	}
	if n.IPSetStrategy != dataplane.IPSetNetlink {
		need("ipset tool", c.IPSetTool)
	}
	if !c.IPTables["legacy"].OK && !c.IPTables["nft"].OK {
		out = append(out, fmt.Sprintf("iptables (legacy: %s; nft: %s)", c.IPTables["legacy"], c.IPTables["nft"]))
	}
	return out
}

// Detect finds out what this kernel offers by trying it: creating a scratch
// IPVS service per scheduler, a dummy and a veth link, a set of each type,
// running each iptables variant's save and dumping conntrack. It does all of
// it on a thread of its own moved into a fresh network namespace, which
// disappears with the thread, so it changes nothing in the caller's
// namespace, the host's or not. Without root, only what needs no privilege
// is checked.
func Detect() Capabilities {
	c := Capabilities{
		Schedulers: map[string]Check{},
		IPSetTypes: map[dataplane.SetType]Check{},
		IPTables:   map[string]Check{},
	}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		c.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	c.Root = Check{OK: os.Geteuid() == 0}
	if !c.Root.OK {
		c.Root.Detail = fmt.Sprintf("running as uid %d", os.Geteuid())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the thread ends with the goroutine, and its
		// namespace with it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			c.NetNS = Check{Detail: fmt.Sprintf("unshare(CLONE_NEWNET): %v", err)}
			c.fillUnchecked("needs a private network namespace")
			return
		}
		c.NetNS = Check{OK: true}
		c.probe()
	}()
	<-done
	return c
}

// fillUnchecked marks everything not probed.
func (c *Capabilities) fillUnchecked(why string) {
	no := Check{Detail: "not checked: " + why}
	c.IPVS, c.Dummy, c.Veth, c.Conntrack, c.IPv6, c.IPSetTool, c.IPVSMatch, c.NFTables = no, no, no, no, no, no, no, no
	for _, t := range supportedSetTypes {
		c.IPSetTypes[t] = no
	}
	for _, m := range []string{"legacy", "nft"} {
		c.IPTables[m] = no
	}
}

// probe runs on a locked thread inside a scratch namespace.
func (c *Capabilities) probe() {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER)
	if err != nil {
		c.fillUnchecked(fmt.Sprintf("netlink: %v", err))
		return
	}
	defer h.Close()
	if lo, err := h.LinkByName("lo"); err == nil {
		_ = h.LinkSetUp(lo) // only so the namespace is like the ones runs use
	}
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		c.IPv6 = Check{Detail: "no /proc/sys/net/ipv6: IPv6 disabled or not built"}
	} else {
		c.IPv6 = Check{OK: true}
	}
	c.probeIPVS()
	c.Dummy = tryLink(h, &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "kpsim-probe0"}})
	if !c.Dummy.OK && strings.Contains(c.Dummy.Detail, "not supported") {
		c.Dummy.Detail = errNoDummy.Error() + " (" + c.Dummy.Detail + ")"
	}
	c.Veth = tryLink(h, &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kpsim-probe1"}, PeerName: "kpsim-probe2"})
	c.probeIPSet()
	c.IPSetTool = toolCheck("ipset", "version")
	for _, m := range []string{"legacy", "nft"} {
		c.IPTables[m] = iptablesCheck(m)
	}
	c.IPVSMatch = ipvsMatchCheck(c.IPTables)
	c.NFTables = nftablesCheck()
	if _, err := redump(func() ([]*netlink.ConntrackFlow, error) {
		return h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	}); err != nil {
		c.Conntrack = Check{Detail: fmt.Sprintf("conntrack netlink dump: %v", err)}
	} else {
		c.Conntrack = Check{OK: true}
	}
}

func (c *Capabilities) probeIPVS() {
	if err := ipvsAvailable(); err != nil {
		c.IPVS = Check{Detail: err.Error()}
		return
	}
	h, err := ipvs.New("")
	if err != nil {
		c.IPVS = Check{Detail: fmt.Sprintf("open IPVS netlink: %v", err)}
		return
	}
	defer h.Close()
	if _, err := h.GetServices(); err != nil {
		c.IPVS = Check{Detail: fmt.Sprintf("list IPVS services: %v", err)}
		return
	}
	c.IPVS = Check{OK: true}
	// 198.18.0.0/15 is reserved for benchmarks; nothing is ever sent to it.
	addr := net.ParseIP("198.18.0.1").To4()
	for _, s := range dataplane.Schedulers {
		svc := &ipvs.Service{AddressFamily: unix.AF_INET, Protocol: unix.IPPROTO_TCP, Address: addr, Port: 80,
			SchedName: s, Netmask: 0xffffffff}
		if err := h.NewService(svc); err != nil {
			c.Schedulers[s] = Check{Detail: fmt.Sprintf("module ip_vs_%s: %v", s, err)}
			continue
		}
		c.Schedulers[s] = Check{OK: true}
		if err := h.DelService(svc); err != nil {
			c.Schedulers[s] = Check{Detail: fmt.Sprintf("delete scratch service: %v", err)}
		}
	}
}

// tryLink creates and deletes a link of a kind.
func tryLink(h *netlink.Handle, l netlink.Link) Check {
	if err := h.LinkAdd(l); err != nil {
		return Check{Detail: fmt.Sprintf("create %s link: %v", l.Type(), err)}
	}
	if err := h.LinkDel(l); err != nil {
		return Check{Detail: fmt.Sprintf("delete scratch %s link: %v", l.Type(), err)}
	}
	return Check{OK: true}
}

func (c *Capabilities) probeIPSet() {
	n, err := newIPSetNetlink()
	if err != nil {
		for _, t := range supportedSetTypes {
			c.IPSetTypes[t] = Check{Detail: err.Error()}
		}
		return
	}
	defer n.close()
	for _, t := range supportedSetTypes {
		s := dataplane.Set{Name: "KPSIM-PROBE", Type: t, Family: dataplane.IPv4, PortTo: 65535}
		if err := n.CreateSet(s); err != nil {
			c.IPSetTypes[t] = Check{Detail: err.Error()}
			continue
		}
		c.IPSetTypes[t] = Check{OK: true}
		if err := n.DestroySet(s.Name); err != nil {
			c.IPSetTypes[t] = Check{Detail: fmt.Sprintf("destroy scratch set: %v", err)}
		}
	}
}

// toolCheck runs a tool's version command and reports its first line.
func toolCheck(name string, args ...string) Check {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return Check{Detail: name + " not installed"}
		}
		return Check{Detail: fmt.Sprintf("%s %s: %v: %s", name, strings.Join(args, " "), err, firstLine(string(out), ""))}
	}
	return Check{OK: true, Detail: firstLine(string(out), "")}
}

// ipvsMatchCheck restores a rule with the ipvs match into the scratch
// namespace with an iptables variant that works here.
func ipvsMatchCheck(variants map[string]Check) Check {
	for _, m := range []string{"legacy", "nft"} {
		if !variants[m].OK {
			continue
		}
		cmd := exec.Command("iptables-"+m+"-restore", "--noflush")
		cmd.Stdin = strings.NewReader("*filter\n:KPSIM-PROBE - [0:0]\n-A KPSIM-PROBE -m ipvs --vaddr 198.18.0.1 -j RETURN\nCOMMIT\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			return Check{Detail: fmt.Sprintf("iptables-%s-restore of a rule with -m ipvs: %v: %s", m, err, firstLine(string(out), ""))}
		}
		return Check{OK: true}
	}
	return Check{Detail: "no iptables variant works here"}
}

// nftablesCheck loads and deletes a table in the scratch namespace with
// the nft binary, and reports its version.
func nftablesCheck() Check {
	version := toolCheck("nft", "--version")
	if !version.OK {
		return version
	}
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader("add table ip kpsim-probe\ndelete table ip kpsim-probe\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return Check{Detail: fmt.Sprintf("nft -f of a table: %v: %s", err, firstLine(string(out), ""))}
	}
	return version
}

// iptablesCheck runs both families' save of a variant: on a kernel without
// the variant's backing (ip_tables or nf_tables) it fails.
func iptablesCheck(mode string) Check {
	for _, base := range []string{"iptables", "ip6tables"} {
		name := base + "-" + mode + "-save"
		if out, err := exec.Command(name).CombinedOutput(); err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return Check{Detail: name + " not installed"}
			}
			return Check{Detail: fmt.Sprintf("%s: %v: %s", name, err, firstLine(string(out), ""))}
		}
	}
	return toolCheck("iptables-"+mode, "--version")
}
