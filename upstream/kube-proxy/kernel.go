package kubeproxy

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/util/sets"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier/observed"
)

// The utilities below wrap those kube-proxy's constructor takes (and the
// netlink handle it makes itself) so that every kernel operation of the
// IPVS proxier is counted under kpsim's operation kinds, as kpsim's own
// dataplane counts them, and refused once the generation is killed. What
// they do is the release's own. They wrap the methods the proxier calls
// (the same from 1.30 to 1.37); the rest, cleanup and version checks, pass
// through.

func addr(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

func serviceKey(vs *utilipvs.VirtualServer) dataplane.ServiceKey {
	return dataplane.ServiceKey{Address: addr(vs.Address), Port: vs.Port, Protocol: dataplane.Protocol(vs.Protocol)}
}

func virtualServer(vs *utilipvs.VirtualServer) dataplane.VirtualServer {
	return dataplane.VirtualServer{ServiceKey: serviceKey(vs), Scheduler: vs.Scheduler, Flags: dataplane.ServiceFlags(vs.Flags), Timeout: vs.Timeout}
}

func realServer(rs *utilipvs.RealServer) dataplane.RealServer {
	return dataplane.RealServer{Address: addr(rs.Address), Port: rs.Port, Weight: rs.Weight}
}

type countedIPVS struct {
	utilipvs.Interface
	f *observed.Family
}

func (c countedIPVS) AddVirtualServer(vs *utilipvs.VirtualServer) error {
	const op = "ipvs add virtual server"
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _ = dp.IPVS.AddService(virtualServer(vs)) }); err != nil {
		return err
	}
	return c.f.Result(op, c.Interface.AddVirtualServer(vs))
}

func (c countedIPVS) UpdateVirtualServer(vs *utilipvs.VirtualServer) error {
	const op = "ipvs update virtual server"
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _ = dp.IPVS.UpdateService(virtualServer(vs)) }); err != nil {
		return err
	}
	return c.f.Result(op, c.Interface.UpdateVirtualServer(vs))
}

func (c countedIPVS) DeleteVirtualServer(vs *utilipvs.VirtualServer) error {
	const op = "ipvs delete virtual server"
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _ = dp.IPVS.DeleteService(serviceKey(vs)) }); err != nil {
		return err
	}
	return c.f.Result(op, c.Interface.DeleteVirtualServer(vs))
}

func (c countedIPVS) GetVirtualServer(vs *utilipvs.VirtualServer) (*utilipvs.VirtualServer, error) {
	const op = "ipvs get virtual server"
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _, _ = dp.IPVS.Services() }); err != nil {
		return nil, err
	}
	return c.Interface.GetVirtualServer(vs) // absent is an answer, not a failure
}

func (c countedIPVS) GetVirtualServers() ([]*utilipvs.VirtualServer, error) {
	const op = "ipvs list virtual servers"
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _, _ = dp.IPVS.Services() }); err != nil {
		return nil, err
	}
	vss, err := c.Interface.GetVirtualServers()
	return vss, c.f.Result(op, err)
}

func (c countedIPVS) AddRealServer(vs *utilipvs.VirtualServer, rs *utilipvs.RealServer) error {
	const op = "ipvs add real server"
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _ = dp.IPVS.AddDestination(serviceKey(vs), realServer(rs)) }); err != nil {
		return err
	}
	return c.f.Result(op, c.Interface.AddRealServer(vs, rs))
}

func (c countedIPVS) GetRealServers(vs *utilipvs.VirtualServer) ([]*utilipvs.RealServer, error) {
	const op = "ipvs list real servers"
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _, _ = dp.IPVS.Destinations(serviceKey(vs)) }); err != nil {
		return nil, err
	}
	rss, err := c.Interface.GetRealServers(vs)
	return rss, c.f.Result(op, err)
}

func (c countedIPVS) DeleteRealServer(vs *utilipvs.VirtualServer, rs *utilipvs.RealServer) error {
	const op = "ipvs delete real server"
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _ = dp.IPVS.DeleteDestination(serviceKey(vs), realServer(rs)) }); err != nil {
		return err
	}
	return c.f.Result(op, c.Interface.DeleteRealServer(vs, rs))
}

func (c countedIPVS) UpdateRealServer(vs *utilipvs.VirtualServer, rs *utilipvs.RealServer) error {
	const op = "ipvs update real server"
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _ = dp.IPVS.UpdateDestination(serviceKey(vs), realServer(rs)) }); err != nil {
		return err
	}
	return c.f.Result(op, c.Interface.UpdateRealServer(vs, rs))
}

// countedIPSet counts per entry, as kube-proxy runs one ipset process per entry.
type countedIPSet struct {
	utilipset.Interface
	f *observed.Family
}

func (c countedIPSet) CreateSet(set *utilipset.IPSet, ignoreExistErr bool) error {
	const op = "ipset create"
	if err := c.f.Record(op+" "+set.Name, func(dp dataplane.Dataplane) { _ = dp.IPSet.CreateSet(dataplane.Set{Name: set.Name}) }); err != nil {
		return err
	}
	return c.f.Result(op+" "+set.Name, c.Interface.CreateSet(set, ignoreExistErr))
}

func (c countedIPSet) AddEntry(entry string, set *utilipset.IPSet, ignoreExistErr bool) error {
	op := "ipset add " + set.Name + " " + entry
	if err := c.f.Record(op, func(dp dataplane.Dataplane) {
		_ = dp.IPSet.Apply([]dataplane.SetChange{{Set: set.Name, Add: []string{entry}}})
	}); err != nil {
		return err
	}
	err := c.Interface.AddEntry(entry, set, ignoreExistErr)
	if setFull(err) {
		c.f.Unfit(set.Name, entry)
	}
	return c.f.Result(op, err)
}

// setFull reports whether err is an ipset add refused because the set is
// full: ENOSPC from the in-memory kernel, ipset's own words from the tool.
func setFull(err error) bool {
	return err != nil && (errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "set is full") || strings.Contains(err.Error(), "Hash is full"))
}

func (c countedIPSet) DelEntry(entry string, set string) error {
	op := "ipset del " + set + " " + entry
	if err := c.f.Record(op, func(dp dataplane.Dataplane) {
		_ = dp.IPSet.Apply([]dataplane.SetChange{{Set: set, Del: []string{entry}}})
	}); err != nil {
		return err
	}
	return c.f.Result(op, c.Interface.DelEntry(entry, set))
}

// ListEntries counts as one ipset-list, the contract's one read of sets:
// kube-proxy runs an ipset process per set where kpsim's proxier reads every
// set at once, so the count says how many reads each made.
func (c countedIPSet) ListEntries(set string) ([]string, error) {
	op := "ipset list " + set
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _, _ = dp.IPSet.Sets() }); err != nil {
		return nil, err
	}
	es, err := c.Interface.ListEntries(set)
	return es, c.f.Result(op, err)
}

// countedIPTables counts each command, an iptables process: kube-proxy's
// IPVS mode writes its rules with one iptables-restore and ensures its
// chains (-N) and their jumps (-C, and -I or -A when missing) one command
// at a time.
type countedIPTables struct {
	utiliptables.Interface
	f      *observed.Family
	family dataplane.Family
}

func (c countedIPTables) EnsureChain(table utiliptables.Table, chain utiliptables.Chain) (bool, error) {
	op := "iptables -N " + string(chain)
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _ = dp.IPTables.Command(c.family, string(table), "-N", string(chain)) }); err != nil {
		return false, err
	}
	exists, err := c.Interface.EnsureChain(table, chain)
	return exists, c.f.Result(op, err)
}

func (c countedIPTables) EnsureRule(pos utiliptables.RulePosition, table utiliptables.Table, chain utiliptables.Chain, args ...string) (bool, error) {
	op := "iptables " + string(pos) + " " + string(chain)
	command := func(flag string) func(dp dataplane.Dataplane) {
		return func(dp dataplane.Dataplane) {
			_ = dp.IPTables.Command(c.family, string(table), append([]string{flag, string(chain)}, args...)...)
		}
	}
	if err := c.f.Record(op, command("-C")); err != nil {
		return false, err
	}
	exists, err := c.Interface.EnsureRule(pos, table, chain, args...)
	if !exists && err == nil {
		c.f.Count(command(string(pos))) // -C found none: -I or -A
	}
	return exists, c.f.Result(op, err)
}

// SaveInto is one iptables-save (iptables mode's full sync reads its nat
// table's chains back).
func (c countedIPTables) SaveInto(table utiliptables.Table, buffer *bytes.Buffer) error {
	const op = "iptables-save"
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _, _ = dp.IPTables.Save(c.family, string(table)) }); err != nil {
		return err
	}
	return c.f.Result(op, c.Interface.SaveInto(table, buffer))
}

func (c countedIPTables) RestoreAll(data []byte, flush utiliptables.FlushFlag, counters utiliptables.RestoreCountersFlag) error {
	const op = "iptables-restore"
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _ = dp.IPTables.Restore(c.family, data) }); err != nil {
		return err
	}
	return c.f.Result(op, c.Interface.RestoreAll(data, flush, counters))
}

type countedSysctl struct {
	utilsysctl.Interface
	f *observed.Family
}

func (c countedSysctl) SetSysctl(key string, value int) error {
	op := "sysctl " + key
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _ = dp.Sysctls.SetSysctl(key, "") }); err != nil {
		return err
	}
	return c.f.Result(op, c.Interface.SetSysctl(key, value))
}

// countedNetlink wraps the netlink handle the constructor makes itself:
// kube-ipvs0 and the service addresses bound to it.
type countedNetlink struct {
	ipvs.NetLinkHandle
	f *observed.Family
}

func (c countedNetlink) EnsureAddressBind(address, devName string) (bool, error) {
	op := "bind " + address + " to " + devName
	p, err := hostPrefix(address)
	if err == nil {
		err = c.f.Record(op, func(dp dataplane.Dataplane) { _ = dp.Links.AddAddress(devName, p) })
	}
	if err != nil {
		return false, err
	}
	exists, err := c.NetLinkHandle.EnsureAddressBind(address, devName)
	return exists, c.f.Result(op, err)
}

func (c countedNetlink) UnbindAddress(address, devName string) error {
	op := "unbind " + address + " from " + devName
	p, err := hostPrefix(address)
	if err == nil {
		err = c.f.Record(op, func(dp dataplane.Dataplane) { _ = dp.Links.DelAddress(devName, p) })
	}
	if err != nil {
		return err
	}
	return c.f.Result(op, c.NetLinkHandle.UnbindAddress(address, devName))
}

func (c countedNetlink) EnsureDummyDevice(devName string) (bool, error) {
	op := "create " + devName
	if err := c.f.Record(op, nil); err != nil {
		return false, err
	}
	exists, err := c.NetLinkHandle.EnsureDummyDevice(devName)
	if err == nil && !exists {
		c.f.Count(func(dp dataplane.Dataplane) { _, _ = dp.Links.EnsureDummy(devName) })
	}
	return exists, c.f.Result(op, err)
}

func (c countedNetlink) list(op string) error {
	return c.f.Record(op, func(dp dataplane.Dataplane) { _, _ = dp.Links.LocalAddresses(dataplane.IPv4) })
}

func (c countedNetlink) GetLocalAddresses(dev string) (sets.Set[string], error) {
	if err := c.list("list addresses of " + dev); err != nil {
		return nil, err
	}
	return c.NetLinkHandle.GetLocalAddresses(dev)
}

func (c countedNetlink) GetAllLocalAddressesExcept(dev string) (sets.Set[string], error) {
	if err := c.list("list local addresses but " + dev); err != nil {
		return nil, err
	}
	return c.NetLinkHandle.GetAllLocalAddressesExcept(dev)
}
