// Package parity holds kpsim's proxier against kube-proxy v1.37's on random
// clusters: the same objects, the same node and the same settings go to
// both (kpsim through the code path of `kpsim state`, kube-proxy through
// package kubeproxy), first as an initial list and then as incremental
// changes, and the two state dumps are diffed after each sync.
//
// Differences kube-proxy itself does not determine are explained, not
// counted: two service ports claiming one virtual server (kube-proxy lets
// map order pick the winner; kpsim picks deterministically, see README's
// "Deliberate differences from kube-proxy"), and the order of the
// KUBE-IPVS-OUT-FILTER rules (kube-proxy writes them in map order).
package parity

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/scenarios/objects"
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
	KPSim       *results.State
	KubeProxy   *results.State
	Unexplained []results.StateDiff
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
	for _, step := range []struct {
		name      string
		kpsim, kp func() (*results.State, error)
	}{
		{"first sync", func() (*results.State, error) { return kp.First(c.Base) }, func() (*results.State, error) { return up.First(c.Base) }},
		{"after changes", func() (*results.State, error) { return kp.Then(c.Base, c.Changes) }, func() (*results.State, error) { return up.Then(c.Base, c.Changes) }},
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
		duplicates := map[string]bool{}
		for _, c := range kp.Conflicts() {
			// "IPv4 10.0.0.1:80/TCP: default/a:http (also: [...])"
			if _, rest, ok := strings.Cut(c, " "); ok {
				vs, _, _ := strings.Cut(rest, ": ")
				duplicates[vs] = true
			}
		}
		for _, d := range results.DiffStates(a, b) {
			if why := explain(d, duplicates); why != "" {
				s.Explained[why]++
			} else {
				s.Unexplained = append(s.Unexplained, d)
			}
		}
		res.Steps = append(res.Steps, s)
	}
	return res, nil
}

// explain says why a difference is kube-proxy's indeterminism, or "".
func explain(d results.StateDiff, duplicates map[string]bool) string {
	switch d.Kind {
	case "virtual-server", "destination":
		vs, _, _ := strings.Cut(d.Object, " -> ")
		if duplicates[vs] {
			return "duplicate virtual server (kube-proxy: map order picks the owner)"
		}
	case "rule":
		if strings.HasSuffix(d.Object, " KUBE-IPVS-OUT-FILTER") && d.Change == "differs" {
			return "KUBE-IPVS-OUT-FILTER rule order (kube-proxy: map order)"
		}
	}
	return ""
}

// Signature groups a difference for a summary: its kind, change and the
// set, chain or kind of address it concerns, without the addresses.
func Signature(d results.StateDiff) string {
	obj := d.Object
	switch d.Kind {
	case "ipset-entry":
		obj, _, _ = strings.Cut(obj, " ")
	case "virtual-server", "destination", "address":
		obj = ""
	}
	return strings.TrimSpace(strings.Join(slices.DeleteFunc([]string{d.Kind, obj, d.Change}, func(s string) bool { return s == "" }), " "))
}
