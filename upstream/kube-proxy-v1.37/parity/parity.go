// Package parity holds kpsim's proxier against kube-proxy v1.37's on random
// clusters: the same objects, the same node and the same settings go to
// both (kpsim through the code path of `kpsim state`, kube-proxy through
// package kubeproxy), first as an initial list and then as incremental
// changes, and the two state dumps are diffed after each sync.
//
// Differences kube-proxy itself does not determine are explained, not
// counted: two service ports claiming one virtual server (kube-proxy lets
// map order pick the winner; kpsim picks deterministically), and the order
// of the KUBE-IPVS-OUT-FILTER rules (kube-proxy writes them in map order).
// So is the one other deliberate difference: with nodePortAddresses CIDRs,
// kube-proxy also takes the kube-ipvs0 addresses its previous sync bound
// inside them for node addresses; kpsim never does. docs/proxier.md's
// "Deliberate differences from kube-proxy" gives the reasons.
package parity

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/upstream/kube-proxy-v1.37/kubeproxy"
)

// Configs are the proxier settings the corpus cycles through, named.
var Configs = []struct {
	Name   string
	Config proxier.Config
}{
	{"defaults", proxier.Config{}},
	{"wrr, masqueradeAll", proxier.Config{Scheduler: "wrr", MasqueradeAll: true}},
	{"lc, clusterCIDRs", proxier.Config{Scheduler: "lc", ClusterCIDRs: []string{"10.244.0.0/16", "fd00:244::/64"}}},
	{"sh, nodePortAddresses on the node's subnets", proxier.Config{Scheduler: "sh", NodePortAddresses: []string{"10.0.0.0/24", "fd00::/64"}}},
	{"nodePortAddresses loopback only", proxier.Config{NodePortAddresses: []string{"127.0.0.0/8", "::1/128"}}},
	{"mh", proxier.Config{Scheduler: "mh"}},
	{"excludeCIDRs, strictARP", proxier.Config{ExcludeCIDRs: []string{"10.96.0.0/24", "fd00:96::/120"}, StrictARP: true}},
	{"nodePortAddresses IPv4 external only", proxier.Config{NodePortAddresses: []string{"192.0.2.0/24"}}},
}

// Case is one cluster of the corpus, drawn from its seed.
type Case struct {
	Seed    uint64
	Config  string // the Configs entry
	cfg     proxier.Config
	Base    *objects.Set
	Changes *objects.Set
}

// NewCase draws the cluster, the changes, the settings and the node for seed.
func NewCase(seed uint64, services, changes int) (*Case, error) {
	g := objects.NewRandom(seed)
	base, err := g.Cluster(services)
	if err != nil {
		return nil, fmt.Errorf("seed %d: cluster: %w", seed, err)
	}
	ch, err := g.Changes(base, changes)
	if err != nil {
		return nil, fmt.Errorf("seed %d: changes: %w", seed, err)
	}
	r := rand.New(rand.NewPCG(seed, 0x706172697479))
	c := Configs[int(seed)%len(Configs)]
	cfg := c.Config
	switch x := r.Float64(); {
	case x < 0.2:
		cfg.NodeName = objects.RandomNodes[r.IntN(len(objects.RandomNodes))]
	case x < 0.25:
		cfg.NodeName = "node-elsewhere"
	}
	if r.Float64() < 0.2 {
		cfg.Families = []dataplane.Family{dataplane.IPv4, dataplane.IPv6}
	}
	return &Case{Seed: seed, Config: c.Name, cfg: cfg, Base: base, Changes: ch}, nil
}

// Step is one comparison: after the first sync or after the changes.
type Step struct {
	Name        string
	KPSim       *state.State
	KubeProxy   *state.State
	Unexplained []state.Difference
	Explained   map[string]int // why -> how many differences
}

// Result is a case's outcome.
type Result struct {
	Case  *Case
	Node  string
	Steps []Step
}

// Match reports whether every step has no unexplained difference.
func (r *Result) Match() bool {
	for _, s := range r.Steps {
		if len(s.Unexplained) > 0 {
			return false
		}
	}
	return true
}

// Run programs the case with both proxiers and compares them after each sync.
func Run(c *Case) (*Result, error) {
	kp, err := scenarios.NewStateRun(c.Base, c.cfg, "")
	if err != nil {
		return nil, fmt.Errorf("seed %d: kpsim: %w", c.Seed, err)
	}
	cfg := c.cfg
	cfg.NodeName, cfg.Families = kp.Node.Name, kp.Families
	up, err := kubeproxy.New(cfg, kp.Addresses)
	if err != nil {
		return nil, fmt.Errorf("seed %d: %w", c.Seed, err)
	}
	res := &Result{Case: c, Node: kp.Node.Name}
	var bound []string // kube-ipvs0's addresses in kube-proxy before the step
	for _, step := range []struct {
		name      string
		kpsim, kp func() (*state.State, error)
	}{
		{"first sync", func() (*state.State, error) { return kp.First(c.Base) }, func() (*state.State, error) { return up.First(c.Base) }},
		{"after changes", func() (*state.State, error) { return kp.Then(c.Base, c.Changes) }, func() (*state.State, error) { return up.Then(c.Base, c.Changes) }},
	} {
		a, err := step.kpsim()
		if err != nil {
			return nil, fmt.Errorf("seed %d: %s: kpsim: %w", c.Seed, step.name, err)
		}
		b, err := step.kp()
		if err != nil {
			return nil, fmt.Errorf("seed %d: %s: kube-proxy: %w", c.Seed, step.name, err)
		}
		s := Step{Name: step.name, KPSim: a, KubeProxy: b, Explained: map[string]int{}}
		k := known{duplicates: map[string]bool{}}
		k.ipvs0NodeIPs, k.nodeIPs = nodePortAddresses(cfg.NodePortAddresses, bound, kp.Addresses)
		for _, c := range kp.Conflicts() {
			// "IPv4 10.0.0.1:80/TCP: default/a:http (also: [...])"
			if _, rest, ok := strings.Cut(c, " "); ok {
				vs, _, _ := strings.Cut(rest, ": ")
				k.duplicates[vs] = true
			}
		}
		for _, d := range state.Diff(a, b) {
			if why := k.explain(d); why != "" {
				s.Explained[why]++
			} else {
				s.Unexplained = append(s.Unexplained, d)
			}
		}
		res.Steps = append(res.Steps, s)
		bound = b.Addresses
	}
	return res, nil
}

// known is what a step's explanations need: the virtual servers several
// service ports claim, and per family the addresses kube-proxy took for
// node addresses from kube-ipvs0.
type known struct {
	duplicates   map[string]bool
	ipvs0NodeIPs map[dataplane.Family]map[netip.Addr]bool
	nodeIPs      map[dataplane.Family]int // how many NodePort addresses kpsim has
}

// nodePortAddresses works out, per family, where the two proxiers' NodePort
// addresses part: ipvs0 holds the addresses kube-proxy lists and kpsim does
// not, and kpsim counts kpsim's own. With nodePortAddresses CIDRs of the
// family (none, or a /0, means every node address except kube-ipvs0's, for
// both), kube-proxy lists every interface's addresses inside them,
// kube-ipvs0's included as the previous sync left them (bound); kpsim the
// node's own (eth0).
func nodePortAddresses(cidrs, bound []string, eth0 []dataplane.InterfaceAddr) (ipvs0 map[dataplane.Family]map[netip.Addr]bool, kpsim map[dataplane.Family]int) {
	nets := map[dataplane.Family][]netip.Prefix{}
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			f := dataplane.FamilyOf(p.Addr())
			nets[f] = append(nets[f], p.Masked())
		}
	}
	inside := func(a netip.Addr) bool {
		n := nets[dataplane.FamilyOf(a)]
		return !a.IsLoopback() && !slices.ContainsFunc(n, func(p netip.Prefix) bool { return p.Bits() == 0 }) &&
			slices.ContainsFunc(n, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	local := map[netip.Addr]bool{}
	kpsim = map[dataplane.Family]int{}
	for _, a := range eth0 {
		local[a.Prefix.Addr()] = true
		if inside(a.Prefix.Addr()) {
			kpsim[dataplane.FamilyOf(a.Prefix.Addr())]++
		}
	}
	ipvs0 = map[dataplane.Family]map[netip.Addr]bool{}
	for _, s := range bound {
		a, err := netip.ParseAddr(s)
		if err != nil || local[a] || !inside(a) {
			continue
		}
		f := dataplane.FamilyOf(a)
		if ipvs0[f] == nil {
			ipvs0[f] = map[netip.Addr]bool{}
		}
		ipvs0[f][a] = true
	}
	return ipvs0, kpsim
}

// Why a difference is explained.
const (
	whyDuplicate = "duplicate virtual server (kube-proxy: map order picks the owner)"
	whyRuleOrder = "KUBE-IPVS-OUT-FILTER rule order (kube-proxy: map order)"
	whyIPVS0     = "NodePort on a kube-ipvs0 address inside nodePortAddresses (deliberate)"
)

// explain says why a difference is not kpsim's to fix, or "".
func (k known) explain(d state.Difference) string {
	switch d.Kind {
	case "virtual-server", "destination":
		vs, _, _ := strings.Cut(d.Object, " -> ")
		if k.duplicates[vs] {
			return whyDuplicate
		}
		if ap, err := netip.ParseAddrPort(strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(vs, "/TCP"), "/UDP"), "/SCTP")); err == nil &&
			d.Change == "only in B" && k.ipvs0NodeIPs[dataplane.FamilyOf(ap.Addr())][ap.Addr()] {
			return whyIPVS0
		}
	case "ipset-entry":
		set, entry, _ := strings.Cut(d.Object, " ")
		f := dataplane.IPv4
		if strings.HasPrefix(set, "KUBE-6-") {
			f = dataplane.IPv6
		}
		if d.Change == "only in B" && len(k.ipvs0NodeIPs[f]) > 0 && strings.Contains(set, "NODE-PORT") {
			// An SCTP entry names its address; a port-only entry is kube-ipvs0's
			// doing only when kpsim has no NodePort address of the family at all.
			addr, _, named := strings.Cut(entry, ",")
			a, err := netip.ParseAddr(addr)
			if named && err == nil && k.ipvs0NodeIPs[f][a] || !named && k.nodeIPs[f] == 0 {
				return whyIPVS0
			}
		}
	case "rule":
		if strings.HasSuffix(d.Object, " KUBE-IPVS-OUT-FILTER") && d.Change == "differs" {
			return whyRuleOrder
		}
		fam, _, _ := strings.Cut(d.Object, " ")
		if f := dataplane.Family(fam); d.Change == "only in B" && d.Object == fam+" nat KUBE-NODE-PORT" && len(k.ipvs0NodeIPs[f]) > 0 && k.nodeIPs[f] == 0 {
			return whyIPVS0
		}
	}
	return ""
}

// Signature groups a difference for a summary: its kind, change and the
// set, chain or kind of address it concerns, without the addresses.
func Signature(d state.Difference) string {
	obj := d.Object
	switch d.Kind {
	case "ipset-entry":
		obj, _, _ = strings.Cut(obj, " ")
	case "virtual-server", "destination", "address":
		obj = ""
	}
	return strings.TrimSpace(strings.Join(slices.DeleteFunc([]string{d.Kind, obj, d.Change}, func(s string) bool { return s == "" }), " "))
}
