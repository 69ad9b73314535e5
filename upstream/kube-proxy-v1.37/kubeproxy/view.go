package kubeproxy

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strings"

	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	ipvstest "k8s.io/kubernetes/pkg/proxy/ipvs/util/testing"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/kpsim/kpsim/dataplane"
)

// view shows the fakes through kpsim's dataplane interfaces, so that
// state.Read dumps kube-proxy's state exactly as it dumps kpsim's.
// It is read-only: ReadState only reads, and the embedded (nil)
// interfaces stand for the write methods it never calls.
func (n *Node) view() dataplane.Dataplane {
	return dataplane.Dataplane{
		IPVS:     ipvsView{fake: n.ipvs},
		IPSet:    ipsetView{n: n},
		IPTables: iptablesView{n: n},
		Links:    linksView{n: n},
	}
}

type ipvsView struct {
	dataplane.IPVS
	fake *ipvstest.FakeIPVS
}

func (v ipvsView) Services() ([]dataplane.VirtualServer, error) {
	out := make([]dataplane.VirtualServer, 0, len(v.fake.Services))
	for key, s := range v.fake.Services {
		a, ok := netip.AddrFromSlice(s.Address)
		if !ok {
			return nil, fmt.Errorf("kube-proxy virtual server with address %v", s.Address)
		}
		vs := dataplane.VirtualServer{
			ServiceKey: dataplane.ServiceKey{Address: a.Unmap(), Port: s.Port, Protocol: dataplane.Protocol(s.Protocol)},
			Scheduler:  s.Scheduler,
			Flags:      dataplane.ServiceFlags(s.Flags),
			Timeout:    s.Timeout,
		}
		for _, d := range v.fake.Destinations[key] {
			a, ok := netip.AddrFromSlice(d.Address)
			if !ok {
				return nil, fmt.Errorf("kube-proxy destination with address %v", d.Address)
			}
			vs.Destinations = append(vs.Destinations, dataplane.RealServer{Address: a.Unmap(), Port: d.Port, Weight: d.Weight})
		}
		out = append(out, vs)
	}
	return out, nil
}

type ipsetView struct {
	dataplane.IPSet
	n *Node
}

// Sets lists the sets with their entries as the kernel lists them: the fake
// keeps the strings kube-proxy passed to ipset add, and the kernel drops a
// host net's prefix length in hash:ip,port,net.
func (v ipsetView) Sets() ([]dataplane.Set, error) {
	var out []dataplane.Set
	for name, s := range v.n.ipset.Sets {
		f := dataplane.IPv4
		if s.HashFamily == utilipset.ProtocolFamilyIPV6 {
			f = dataplane.IPv6
		}
		entries := v.n.ipset.Entries[name].List()
		if s.SetType == utilipset.HashIPPortNet {
			for i, e := range entries {
				j := strings.LastIndexByte(e, ',')
				if p, err := netip.ParsePrefix(e[j+1:]); err == nil && p.IsSingleIP() {
					entries[i] = e[:j+1] + p.Addr().String()
				}
			}
		}
		out = append(out, dataplane.Set{Name: name, Type: dataplane.SetType(s.SetType), Family: f, Comment: s.Comment, Entries: entries})
	}
	return out, nil
}

type iptablesView struct {
	dataplane.IPTables
	n *Node
}

// Save prints a table as iptables-save does: upstream's fake prints "-" as
// the policy of built-in chains, which have one (ACCEPT on a fresh node).
func (v iptablesView) Save(f dataplane.Family, table string) ([]byte, error) {
	ipt, ok := v.n.ipt[f]
	if !ok {
		return nil, fmt.Errorf("no kube-proxy %s iptables", f)
	}
	var b bytes.Buffer
	if err := ipt.SaveInto(utiliptables.Table(table), &b); err != nil {
		return nil, err
	}
	lines := strings.Split(b.String(), "\n")
	builtin := []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}
	for i, l := range lines {
		if f := strings.Fields(l); len(f) == 3 && strings.HasPrefix(l, ":") && f[1] == "-" && slices.Contains(builtin, f[0][1:]) {
			lines[i] = f[0] + " ACCEPT " + f[2]
		}
	}
	return []byte(strings.Join(lines, "\n")), nil
}

type linksView struct {
	dataplane.Links
	n *Node
}

func (v linksView) Addresses(link string, f dataplane.Family) ([]netip.Addr, error) {
	nl, ok := v.n.netlink[f]
	if !ok {
		return nil, fmt.Errorf("no kube-proxy %s netlink: %w", f, fs.ErrNotExist)
	}
	addrs, err := nl.ListBindAddress(link)
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", link, err, fs.ErrNotExist)
	}
	var out []netip.Addr
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("kube-proxy bound %q to %s: %w", s, link, err)
		}
		out = append(out, a)
	}
	return out, nil
}
