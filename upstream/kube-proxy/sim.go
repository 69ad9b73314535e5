package kubeproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/kubernetes/pkg/proxy/conntrack"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/internal/private"
	"github.com/kpsim/kpsim/proxier"
)

// SimKernel is the in-memory kernel (kpsim's sim backend) as a release's
// utilities: each method the IPVS proxier calls becomes the dataplane
// operation the real utility's syscall or command is (AddVirtualServer is
// IPVS.AddService, AddEntry an ipset batch of one entry, EnsureRule an
// iptables-save of the table and, when the rule is missing, a restore that
// inserts it), and reads come back converted to the release's types. So
// the release's code decides everything and the in-memory kernel holds,
// charges and lets probes see what it programs. What the constructor
// wires to the node itself is replaced by Adopt: the netlink handle and
// interface lister by the same kernel's links, conntrack by the same
// kernel's conntrack table (from 1.31, whose conntrack lists the table and
// deletes the stale flows it finds; 1.30's clears by address and gets
// upstream's fake, so its stale flows stay), the service health server by
// upstream's fake (a health server would listen on the host).
//
// Methods the IPVS proxier does not call are not implemented (the
// embedded interfaces are nil): calling one panics rather than answering
// from nowhere.
func SimKernel(dp dataplane.Dataplane) Kernel {
	return Kernel{
		IPVS:  simIPVS{dp: dp},
		IPSet: simIPSet{dp: dp},
		IPTables: func(f v1.IPFamily) utiliptables.Interface {
			return simIPTables{dp: dp, family: dataplane.Family(f)}
		},
		Sysctl:   simSysctl{dp: dp},
		NFTables: dp.NFTables,
		CleanupIPVSMode: func(context.Context) bool {
			return proxier.CleanupIPVSMode(dp) != nil
		},
		CleanupNFTablesMode: func(ctx context.Context) bool { return cleanupNFTablesMode(ctx, dp) },
		Adopt: func(p any, f v1.IPFamily) error {
			links := simLinks{dp: dp, family: dataplane.Family(f)}
			var netlink error // an nftables proxier has no netlink handle
			if _, ok := p.(*ipvs.Proxier); ok {
				netlink = private.Wrap(p, fieldNetlink, func(ipvs.NetLinkHandle) ipvs.NetLinkHandle { return links })
			}
			iptablesMode, nfacct := adoptIPTablesMode(p)
			if iptablesMode {
				// What its monitor makes first, in its own goroutine
				// (simIPTables.Monitor says why the sim makes them here).
				for _, table := range []string{"mangle", "nat", "filter"} {
					nfacct = errors.Join(nfacct, dp.IPTables.Restore(dataplane.Family(f), fmt.Appendf(nil, "*%s\n:%s - [0:0]\nCOMMIT\n", table, canaryChain)))
				}
			}
			return errors.Join(netlink, nfacct,
				private.Wrap(p, fieldInterfaces, func(proxyutil.NetworkInterfacer) proxyutil.NetworkInterfacer { return links }),
				private.Wrap(p, fieldConntrack, func(conntrack.Interface) conntrack.Interface { return simConntrack(dp) }),
				private.Wrap(p, fieldHealthServer, func(healthcheck.ServiceHealthServer) healthcheck.ServiceHealthServer {
					return healthcheck.NewFakeServiceHealthServer()
				}),
			)
		},
	}
}

// nodeKernel is the kernel a generation programs: the in-memory one when
// the run's dataplane is (it has a Model of time), else the real kernel
// of the network namespace the process runs in.
func nodeKernel(dp dataplane.Dataplane) (Kernel, error) {
	if dp.Model != nil {
		return SimKernel(dp), nil
	}
	return RealKernel()
}

// cleanupNFTablesMode is nftables mode's cleanup (its CleanupLeftovers) on
// the in-memory kernel: one transaction per family that deletes the table.
func cleanupNFTablesMode(ctx context.Context, dp dataplane.Dataplane) (failed bool) {
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		nft, err := dp.NFTables.Table(dataplane.NFTablesFamily(f), dataplane.NFTablesTable)
		if err != nil {
			continue // as knftables.New failing: nothing to clean
		}
		tx := nft.NewTransaction()
		tx.Delete(&knftables.Table{})
		if err := nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
			failed = true
		}
	}
	return failed
}

// canaryChain is the chain iptables mode's monitor makes in the mangle, nat
// and filter tables (pkg/proxy/iptables's kubeProxyCanaryChain).
const canaryChain = "KUBE-PROXY-CANARY"

type simIPVS struct {
	utilipvs.Interface
	dp dataplane.Dataplane
}

// simVirtualServer is vs as the kernel stores it: the netmask the real
// utility sets by family.
func simVirtualServer(vs *utilipvs.VirtualServer) dataplane.VirtualServer {
	out := virtualServer(vs)
	out.Netmask = dataplane.Netmask(out.Address)
	return out
}

func (s simIPVS) AddVirtualServer(vs *utilipvs.VirtualServer) error {
	return s.dp.IPVS.AddService(simVirtualServer(vs))
}

func (s simIPVS) UpdateVirtualServer(vs *utilipvs.VirtualServer) error {
	return s.dp.IPVS.UpdateService(simVirtualServer(vs))
}

func (s simIPVS) DeleteVirtualServer(vs *utilipvs.VirtualServer) error {
	return s.dp.IPVS.DeleteService(serviceKey(vs))
}

// toVirtualServer is the utility's reading of a kernel service: without
// the hashed flag, which the kernel sets on every service.
func toVirtualServer(vs dataplane.VirtualServer) *utilipvs.VirtualServer {
	return &utilipvs.VirtualServer{
		Address: net.IP(vs.Address.AsSlice()), Protocol: string(vs.Protocol), Port: vs.Port, Scheduler: vs.Scheduler,
		Flags: utilipvs.ServiceFlags(vs.Flags &^ dataplane.FlagHashed), Timeout: vs.Timeout,
	}
}

func (s simIPVS) GetVirtualServer(vs *utilipvs.VirtualServer) (*utilipvs.VirtualServer, error) {
	got, err := s.dp.IPVS.Service(serviceKey(vs))
	if err != nil {
		return nil, err
	}
	return toVirtualServer(got), nil
}

func (s simIPVS) GetVirtualServers() ([]*utilipvs.VirtualServer, error) {
	vss, err := s.dp.IPVS.Services()
	if err != nil {
		return nil, err
	}
	out := make([]*utilipvs.VirtualServer, len(vss))
	for i, vs := range vss {
		out[i] = toVirtualServer(vs)
	}
	return out, nil
}

func (s simIPVS) AddRealServer(vs *utilipvs.VirtualServer, rs *utilipvs.RealServer) error {
	return s.dp.IPVS.AddDestination(serviceKey(vs), realServer(rs))
}

func (s simIPVS) UpdateRealServer(vs *utilipvs.VirtualServer, rs *utilipvs.RealServer) error {
	return s.dp.IPVS.UpdateDestination(serviceKey(vs), realServer(rs))
}

func (s simIPVS) DeleteRealServer(vs *utilipvs.VirtualServer, rs *utilipvs.RealServer) error {
	return s.dp.IPVS.DeleteDestination(serviceKey(vs), realServer(rs))
}

func (s simIPVS) GetRealServers(vs *utilipvs.VirtualServer) ([]*utilipvs.RealServer, error) {
	rss, err := s.dp.IPVS.Destinations(serviceKey(vs))
	if err != nil {
		return nil, err
	}
	out := make([]*utilipvs.RealServer, len(rss))
	for i, rs := range rss {
		out[i] = &utilipvs.RealServer{Address: net.IP(rs.Address.AsSlice()), Port: rs.Port, Weight: rs.Weight,
			ActiveConn: rs.ActiveConns, InactiveConn: rs.InactiveConns}
	}
	return out, nil
}

type simIPSet struct {
	utilipset.Interface
	dp dataplane.Dataplane
}

// CreateSet creates the set as `ipset create` does with kube-proxy's
// arguments (its defaults: hashsize 1024, maxelem 65536, ports 0-65535).
func (s simIPSet) CreateSet(set *utilipset.IPSet, ignoreExistErr bool) error {
	spec := dataplane.Set{Name: set.Name, Type: dataplane.SetType(set.SetType), Family: dataplane.IPv4, Comment: set.Comment, MaxElem: set.MaxElem}
	if set.HashFamily == utilipset.ProtocolFamilyIPV6 {
		spec.Family = dataplane.IPv6
	}
	if spec.Type == dataplane.BitmapPort {
		spec.PortFrom, spec.PortTo = 0, 65535
		if from, to, ok := strings.Cut(set.PortRange, "-"); ok {
			f, err1 := strconv.ParseUint(from, 10, 16)
			t, err2 := strconv.ParseUint(to, 10, 16)
			if err := errors.Join(err1, err2); err != nil {
				return fmt.Errorf("ipset create %s: port range %q: %w", set.Name, set.PortRange, err)
			}
			spec.PortFrom, spec.PortTo = uint16(f), uint16(t)
		}
	}
	err := s.dp.IPSet.CreateSet(spec)
	if ignoreExistErr && errors.Is(err, syscall.EEXIST) {
		return nil
	}
	return err
}

// AddEntry and DelEntry are one `ipset add|del -exist` each: a batch of one.
func (s simIPSet) AddEntry(entry string, set *utilipset.IPSet, _ bool) error {
	return s.dp.IPSet.Apply([]dataplane.SetChange{{Set: set.Name, Add: []string{entry}}})
}

func (s simIPSet) DelEntry(entry string, set string) error {
	return s.dp.IPSet.Apply([]dataplane.SetChange{{Set: set, Del: []string{entry}}})
}

func (s simIPSet) ListEntries(set string) ([]string, error) { return s.dp.IPSet.Entries(set) }

type simIPTables struct {
	utiliptables.Interface
	dp     dataplane.Dataplane
	family dataplane.Family
}

// EnsureChain is `iptables -N`: one command, which fails for a chain that
// exists.
func (t simIPTables) EnsureChain(table utiliptables.Table, chain utiliptables.Chain) (bool, error) {
	err := t.dp.IPTables.Command(t.family, string(table), "-N", string(chain))
	if errors.Is(err, fs.ErrExist) {
		return true, nil
	}
	return false, err
}

// EnsureRule is `iptables -C`, then, for a missing rule, `-I` or `-A`: one
// command or two.
func (t simIPTables) EnsureRule(pos utiliptables.RulePosition, table utiliptables.Table, chain utiliptables.Chain, args ...string) (bool, error) {
	err := t.dp.IPTables.Command(t.family, string(table), append([]string{"-C", string(chain)}, args...)...)
	if !errors.Is(err, fs.ErrNotExist) {
		return err == nil, err
	}
	return false, t.dp.IPTables.Command(t.family, string(table), append([]string{string(pos), string(chain)}, args...)...)
}

func (t simIPTables) IsIPv6() bool { return t.family == dataplane.IPv6 }

func (t simIPTables) Protocol() utiliptables.Protocol {
	if t.IsIPv6() {
		return utiliptables.ProtocolIPv6
	}
	return utiliptables.ProtocolIPv4
}

// HasRandomFully: releases before 1.37 ask whether iptables has
// --random-fully, which every iptables kpsim runs with has (1.6.2 and later).
func (t simIPTables) HasRandomFully() bool { return true }

// SaveInto is iptables-save of one table (iptables mode reads its nat
// table's chains back on a full sync).
func (t simIPTables) SaveInto(table utiliptables.Table, buffer *bytes.Buffer) error {
	b, err := t.dp.IPTables.Save(t.family, string(table))
	buffer.Write(b)
	return err
}

// Monitor does nothing: iptables mode's monitor makes a canary chain in
// each table, then polls, on wall time and outside any sync, for a flush of
// the tables by someone else, which the in-memory kernel never has. The
// chains it would make are made as the proxier is adopted (SimKernel), at
// a point of the run that does not depend on a goroutine's timing.
func (t simIPTables) Monitor(utiliptables.Chain, []utiliptables.Table, func(), time.Duration, <-chan struct{}) {
}

func (t simIPTables) RestoreAll(data []byte, _ utiliptables.FlushFlag, _ utiliptables.RestoreCountersFlag) error {
	return t.dp.IPTables.Restore(t.family, data)
}

type simSysctl struct{ dp dataplane.Dataplane }

var _ utilsysctl.Interface = simSysctl{}

func (s simSysctl) GetSysctl(key string) (int, error) {
	v, err := s.dp.Sysctls.Sysctl(key)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(v))
}

func (s simSysctl) SetSysctl(key string, value int) error {
	return s.dp.Sysctls.SetSysctl(key, strconv.Itoa(value))
}

// simLinks is the netlink handle and the interface lister of one family:
// kube-ipvs0 and the node's addresses in the in-memory kernel.
type simLinks struct {
	ipvs.NetLinkHandle
	dp     dataplane.Dataplane
	family dataplane.Family
}

func hostPrefix(address string) (netip.Prefix, error) {
	a, err := netip.ParseAddr(address)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func (l simLinks) EnsureAddressBind(address, dev string) (bool, error) {
	p, err := hostPrefix(address)
	if err != nil {
		return false, err
	}
	if err := l.dp.Links.AddAddress(dev, p); errors.Is(err, syscall.EEXIST) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	return false, nil
}

func (l simLinks) UnbindAddress(address, dev string) error {
	p, err := hostPrefix(address)
	if err != nil {
		return err
	}
	return l.dp.Links.DelAddress(dev, p)
}

func (l simLinks) EnsureDummyDevice(dev string) (bool, error) {
	created, err := l.dp.Links.EnsureDummy(dev)
	return !created, err
}

// addressSet is the addresses as the real handle reports them: of the
// family, without loopback and IPv6 link-local ones.
func addressSet(addrs []netip.Addr) sets.Set[string] {
	out := sets.New[string]()
	for _, a := range addrs {
		if !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			out.Insert(a.String())
		}
	}
	return out
}

func (l simLinks) GetLocalAddresses(dev string) (sets.Set[string], error) {
	addrs, err := l.dp.Links.Addresses(dev, l.family)
	if err != nil {
		return nil, err
	}
	return addressSet(addrs), nil
}

func (l simLinks) GetAllLocalAddressesExcept(dev string) (sets.Set[string], error) {
	ias, err := l.dp.Links.LocalAddresses(l.family, dev)
	if err != nil {
		return nil, err
	}
	addrs := make([]netip.Addr, len(ias))
	for i, ia := range ias {
		addrs[i] = ia.Prefix.Addr()
	}
	return addressSet(addrs), nil
}

func (l simLinks) ListBindAddress(dev string) ([]string, error) {
	addrs, err := l.dp.Links.Addresses(dev, l.family)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out, nil
}

// InterfaceAddrs is net.InterfaceAddrs on the node: every address of both
// families on every link (kube-proxy filters by nodePortAddresses and
// drops loopback itself).
func (l simLinks) InterfaceAddrs() ([]net.Addr, error) {
	var out []net.Addr
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		ias, err := l.dp.Links.LocalAddresses(f)
		if err != nil {
			return nil, err
		}
		for _, ia := range ias {
			a := ia.Prefix.Addr()
			out = append(out, &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(ia.Prefix.Bits(), a.BitLen())})
		}
	}
	return out, nil
}
