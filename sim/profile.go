package sim

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/kpsim/kpsim/dataplane"
)

// DefaultProfile is the profile a Kernel charges from when none is given:
// this project's own measurements of a host kernel.
const DefaultProfile = "host"

//go:embed profiles/*.json
var embedded embed.FS

// Profile is a cost model: what each kernel operation costs, in seconds, and
// where the numbers came from. A real kernel run can produce a new profile;
// the simulation only replays one.
type Profile struct {
	Name string `json:"name"`
	// Source says where every number came from (measurement, environment,
	// or the estimate and its reasoning). Reports quote it.
	Source string `json:"source"`
	// Ops is the cost of one operation, keyed by dataplane operation name
	// (dataplane.Op.String). iptables-restore is per payload and
	// iptables-restore-bytes per payload byte. ipset-add, ipset-del,
	// ipset-create and ipset-destroy are priced per strategy in IPSet
	// instead. A missing op costs nothing.
	Ops map[string]float64 `json:"ops"`
	// ListItem is the extra cost per item a read returns (per virtual server
	// and per real server for ipvs-list, per real server for
	// ipvs-destination-list, per entry for ipset-list, per address for
	// address-list, per rule for iptables-save), for iptables-restore
	// per rule a payload flushes out of a chain it replaces, and for
	// iptables-command per rule or chain a command removes.
	ListItem map[string]float64 `json:"list_item,omitempty"`
	// ListPairs is the extra cost per pair of items, for a read whose cost
	// grows faster than what it goes through: nft 1.0.6's listing of a
	// table (nft-list), per pair of objects the table holds
	// (docs/nftables.md).
	ListPairs map[string]float64 `json:"list_pairs,omitempty"`
	// IPTablesRestore prices what iptables-restore does beyond its price
	// per call and per byte (Ops) and per rule flushed (ListItem), which
	// grows faster than its payload at iptables mode's sizes. A profile
	// without it charges nothing more.
	IPTablesRestore *IPTablesRestoreCost `json:"iptables_restore,omitempty"`
	// NFTMapRule prices what nf_tables does for each rule with a set or
	// map of its own beyond nft-map-rule's price in Ops (a profile without
	// it charges nothing more).
	NFTMapRule *NFTMapRuleCost `json:"nft_map_rule,omitempty"`
	// IPSet prices each strategy; every strategy must be present.
	IPSet map[dataplane.IPSetStrategy]IPSetCost `json:"ipset"`
	// Proxier prices the proxier's own work on a modeled clock, where it
	// cannot be measured without making runs unrepeatable. A profile without
	// it (an older calibration) is priced as the embedded host profile is.
	Proxier *ProxierCost `json:"proxier,omitempty"`
	// Releases prices each kube-proxy release's own work, by the name
	// proxier.Config.Priced gives it ("kube-proxy@v1.37.1" in IPVS mode,
	// "kube-proxy@v1.37.1 nftables" in nftables mode), fitted by `kpsim
	// calibrate` run in the release's binary; a release without an entry is
	// priced as Proxier prices kpsim's proxier.
	Releases map[string]ProxierCost `json:"releases,omitempty"`
}

// ProxierCost prices a proxier's own work (dataplane.Work), in seconds per
// unit, with where the numbers came from.
type ProxierCost struct {
	PerSync     float64 `json:"per_sync"`
	PerDerived  float64 `json:"per_derived"`  // service port whose wants are derived
	PerPort     float64 `json:"per_port"`     // virtual server visited
	PerEndpoint float64 `json:"per_endpoint"` // endpoint or real server visited
	PerPassed   float64 `json:"per_passed"`   // endpoint of a port passed over
	PerEntry    float64 `json:"per_entry"`    // ipset entry compared
	Source      string  `json:"source"`
}

// Price is what the units of work w cost.
func (c ProxierCost) Price(w dataplane.Work) time.Duration {
	return seconds(float64(w.Syncs)*c.PerSync + float64(w.Derived)*c.PerDerived + float64(w.Ports)*c.PerPort +
		float64(w.Endpoints)*c.PerEndpoint + float64(w.Passed)*c.PerPassed + float64(w.Entries)*c.PerEntry)
}

// IPTablesRestoreCost prices what an iptables-restore pays by the size of
// what it changes and of the table it changes (measured on iptables-nft
// 1.8.9 with kube-proxy's iptables-mode tables: docs/kernel-costs.md). Per
// restore that flushes a chain that exists, Replace (iptables-nft reads the
// table back before it changes it). Per rule written, PerDeclared for each
// chain the payload declares (created or flushed: a rule's chain and its
// jump are looked up among them), PerChain for each chain its table holds
// after the restore, and PerDeclaredChain for each pair of those: a first
// sync of iptables mode, which declares every chain, grows with the cube
// of the cluster (4,000 services in 2.1 s, 10,000 in 23 s here).
type IPTablesRestoreCost struct {
	Replace          float64 `json:"replace"`
	PerDeclared      float64 `json:"per_rule_declared_chain"`
	PerChain         float64 `json:"per_rule_chain"`
	PerDeclaredChain float64 `json:"per_rule_declared_chain_chain"`
}

// Price is what writing written rules costs onto a table that holds chains
// chains once the payload, which declares declared of them, is restored.
func (c IPTablesRestoreCost) Price(written, declared, chains int) float64 {
	w, d, n := float64(written), float64(declared), float64(chains)
	return w * (c.PerDeclared*d + c.PerChain*n + c.PerDeclaredChain*d*n)
}

// NFTMapRuleCost prices what nf_tables does for a rule with a set or map of
// its own, beyond nft-map-rule's price: it finds the anonymous set the rule
// was sent with by going through its transaction from the start, a price
// per entry before the rule, and one per element of the sets of rules
// before it (PerElement: 6.1 keeps each element as an entry of the
// transaction, other kernels need not, so it has a price of its own);
// and it names that set by reading the name of every set the table holds,
// a price per rule with a map before it, in the table or earlier in the
// transaction (PerMap: the same list of sets either way; fitted apart, the
// two came out within a quarter of each other in three calibrations
// here). A table's rules with maps weigh on every transaction onto it
// too, PerTransaction each, whether or not it writes one (measured:
// docs/nftables.md).
type NFTMapRuleCost struct {
	PerEntry       float64 `json:"per_entry"`
	PerElement     float64 `json:"per_element"`
	PerMap         float64 `json:"per_map"`
	PerTransaction float64 `json:"per_transaction"`
}

// Price is what a rule with a map standing at at costs beyond its
// nft-map-rule price.
func (c NFTMapRuleCost) Price(at dataplane.NFTMapRule) time.Duration {
	return seconds(float64(at.Entries)*c.PerEntry + float64(at.Elements)*c.PerElement + float64(at.Maps+at.Table)*c.PerMap)
}

// Transaction is what a transaction onto a table holding maps rules with
// maps costs for them.
func (c NFTMapRuleCost) Transaction(maps int) time.Duration {
	return seconds(float64(maps) * c.PerTransaction)
}

// IPSetCost prices ipset work under one strategy.
type IPSetCost struct {
	// PerBatch is charged once per non-empty Apply (the one `ipset restore`
	// process; zero when every entry is its own call).
	PerBatch float64 `json:"per_batch"`
	// PerEntry is charged per entry added or deleted (a whole process for
	// exec, a netlink request for netlink, parsing and a request for restore).
	PerEntry float64 `json:"per_entry"`
	// PerCommand is charged per create or destroy (a process for exec and
	// restore, a request for netlink). Reads are one netlink dump whatever
	// the strategy, priced as ipset-list in Ops.
	PerCommand float64 `json:"per_command"`
}

// costTable is a Profile resolved for one strategy, indexed for the hot path.
type costTable struct {
	op [nOps]time.Duration
	// item is seconds per item, kept unrounded: a price of a fraction of
	// a nanosecond (nft-command's per object the table holds, 0.1 ns here)
	// adds seconds to a transaction of 200,000 commands onto as many
	// objects, and rounded to a time.Duration it was nothing.
	item    [nOps]float64
	pair    [nOps]float64 // seconds per pair of items (ListPairs)
	mapRule NFTMapRuleCost
	batch   time.Duration // once per non-empty ipset Apply
	restore IPTablesRestoreCost
}

// ProfileNames lists the embedded profiles.
func ProfileNames() []string {
	entries, err := embedded.ReadDir("profiles")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	slices.Sort(names)
	return names
}

// LoadProfile returns an embedded profile by name, or reads a JSON file when
// nameOrPath is not an embedded name. Unknown fields and unknown operation
// names are errors, so a typo cannot silently price something at zero.
func LoadProfile(nameOrPath string) (*Profile, error) {
	var data []byte
	var err error
	if slices.Contains(ProfileNames(), nameOrPath) {
		data, err = embedded.ReadFile(path.Join("profiles", nameOrPath+".json"))
	} else {
		data, err = os.ReadFile(nameOrPath)
		if errors.Is(err, os.ErrNotExist) && !strings.ContainsAny(nameOrPath, "/.") {
			return nil, fmt.Errorf("cost profile %q: not an embedded profile (%s) nor a file", nameOrPath, strings.Join(ProfileNames(), ", "))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cost profile %s: %w", nameOrPath, err)
	}
	p, err := ParseProfile(data)
	if err != nil {
		return nil, fmt.Errorf("cost profile %s: %w", nameOrPath, err)
	}
	return p, nil
}

// ParseProfile decodes and validates a profile.
func ParseProfile(data []byte) (*Profile, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Profile
	if err := dec.Decode(&p); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the profile object")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks that every name is known, every cost is a finite
// non-negative number and every ipset strategy is priced.
func (p *Profile) Validate() error {
	if p.Name == "" {
		return errors.New("profile has no name")
	}
	if strings.TrimSpace(p.Source) == "" {
		return fmt.Errorf("profile %s: source is empty: say where the numbers come from", p.Name)
	}
	check := func(field, name string, v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("profile %s: %s %q: cost %v must be a non-negative number of seconds", p.Name, field, name, v)
		}
		return nil
	}
	for field, m := range map[string]map[string]float64{"ops": p.Ops, "list_item": p.ListItem, "list_pairs": p.ListPairs} {
		for name, v := range m {
			op, err := dataplane.ParseOp(name)
			if err != nil {
				return fmt.Errorf("profile %s: %s: %w", p.Name, field, err)
			}
			if op == dataplane.OpIPSetAdd || op == dataplane.OpIPSetDel {
				return fmt.Errorf("profile %s: %s %q: ipset entries are priced per strategy under \"ipset\"", p.Name, field, name)
			}
			if op == dataplane.OpNFTMapRule && field != "ops" {
				return fmt.Errorf("profile %s: %s %q: a rule with a map is priced by where it stands, under \"nft_map_rule\"", p.Name, field, name)
			}
			if err := check(field, name, v); err != nil {
				return err
			}
		}
	}
	if r := p.IPTablesRestore; r != nil {
		for name, v := range map[string]float64{"replace": r.Replace, "per_rule_declared_chain": r.PerDeclared, "per_rule_chain": r.PerChain,
			"per_rule_declared_chain_chain": r.PerDeclaredChain} {
			if err := check("iptables_restore", name, v); err != nil {
				return err
			}
		}
	}
	for s, c := range p.IPSet {
		if !slices.Contains(dataplane.IPSetStrategies, s) {
			return fmt.Errorf("profile %s: ipset: unknown strategy %q (want one of %v)", p.Name, s, dataplane.IPSetStrategies)
		}
		for name, v := range map[string]float64{"per_batch": c.PerBatch, "per_entry": c.PerEntry, "per_command": c.PerCommand} {
			if err := check("ipset "+string(s), name, v); err != nil {
				return err
			}
		}
	}
	if c := p.NFTMapRule; c != nil {
		for name, v := range map[string]float64{"per_entry": c.PerEntry, "per_element": c.PerElement, "per_map": c.PerMap, "per_transaction": c.PerTransaction} {
			if err := check("nft_map_rule", name, v); err != nil {
				return err
			}
		}
	}
	for _, s := range dataplane.IPSetStrategies {
		if _, ok := p.IPSet[s]; !ok {
			return fmt.Errorf("profile %s: ipset: strategy %q is not priced", p.Name, s)
		}
	}
	checkWork := func(field string, c ProxierCost) error {
		if strings.TrimSpace(c.Source) == "" {
			return fmt.Errorf("profile %s: %s: source is empty: say where the numbers come from", p.Name, field)
		}
		for name, v := range map[string]float64{"per_sync": c.PerSync, "per_derived": c.PerDerived, "per_port": c.PerPort, "per_endpoint": c.PerEndpoint, "per_passed": c.PerPassed, "per_entry": c.PerEntry} {
			if err := check(field, name, v); err != nil {
				return err
			}
		}
		return nil
	}
	if c := p.Proxier; c != nil {
		if err := checkWork("proxier", *c); err != nil {
			return err
		}
	}
	for name, c := range p.Releases {
		if err := checkWork("releases "+name, c); err != nil {
			return err
		}
	}
	return nil
}

// ProxierWork returns how the profile prices the proxier's own work: its own
// proxier section, or the host profile's when it has none (noted in Source).
func (p *Profile) ProxierWork() (ProxierCost, error) {
	if p.Proxier != nil {
		return *p.Proxier, nil
	}
	host, err := LoadProfile(DefaultProfile)
	if err != nil {
		return ProxierCost{}, err
	}
	if host.Proxier == nil {
		return ProxierCost{}, fmt.Errorf("cost profile %s: no proxier section", DefaultProfile)
	}
	c := *host.Proxier
	c.Source = fmt.Sprintf("profile %s prices no proxier work; the %s profile's: %s", p.Name, DefaultProfile, c.Source)
	return c, nil
}

// PricesAny reports whether the profile prices any of ops above zero.
func (p *Profile) PricesAny(ops ...dataplane.Op) bool {
	return slices.ContainsFunc(ops, func(op dataplane.Op) bool { return p.Cost(op, dataplane.IPSetNetlink) > 0 })
}

// Cost returns the modeled cost of one operation of kind op, without list
// items or batch overhead; ipset operations are priced under strategy s.
func (p *Profile) Cost(op dataplane.Op, s dataplane.IPSetStrategy) time.Duration {
	switch op {
	case dataplane.OpIPSetAdd, dataplane.OpIPSetDel:
		return seconds(p.IPSet[s].PerEntry)
	case dataplane.OpIPSetCreate, dataplane.OpIPSetDestroy:
		return seconds(p.IPSet[s].PerCommand)
	}
	return seconds(p.Ops[op.String()])
}

func (p *Profile) table(s dataplane.IPSetStrategy) (costTable, error) {
	if err := p.Validate(); err != nil {
		return costTable{}, err
	}
	c, ok := p.IPSet[s]
	if !ok {
		return costTable{}, fmt.Errorf("sim: unknown ipset strategy %q (want one of %v)", s, dataplane.IPSetStrategies)
	}
	var t costTable
	for _, op := range dataplane.AllOps() {
		t.op[op] = p.Cost(op, s)
		t.item[op] = p.ListItem[op.String()]
		t.pair[op] = p.ListPairs[op.String()]
	}
	if p.NFTMapRule != nil {
		t.mapRule = *p.NFTMapRule
	}
	t.batch = seconds(c.PerBatch)
	if p.IPTablesRestore != nil {
		t.restore = *p.IPTablesRestore
	}
	return t, nil
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// Prices is every price the profile holds, keyed by its place in the
// profile's JSON ("ops.nft-command", "nft_map_rule.per_entry",
// "ipset.netlink.per_entry", "releases.kube-proxy@v1.37.1 nftables.per_sync"):
// what two calibrations are compared by.
func (p *Profile) Prices() map[string]float64 {
	raw, err := json.Marshal(p)
	if err != nil {
		panic(err) // a Profile is maps and numbers: it always marshals
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		panic(err)
	}
	out := map[string]float64{}
	var walk func(at string, v any)
	walk = func(at string, v any) {
		switch v := v.(type) {
		case float64:
			out[at] = v
		case map[string]any:
			for k, sub := range v {
				if at != "" {
					k = at + "." + k
				}
				walk(k, sub)
			}
		}
	}
	walk("", tree)
	return out
}
