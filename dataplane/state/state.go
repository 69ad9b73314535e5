// Package state dumps what a node's kernel holds for kube-proxy (virtual
// servers, ipsets, kube-ipvs0 addresses, iptables rules, and in nftables
// mode its nftables table) through the
// dataplane interfaces, canonically, so that two dumps compare with a plain
// diff as well as with Diff: a sim run and a kernel run, an incremental
// result and one from scratch, kpsim and kube-proxy. Rules are written in
// the one canonical form (dataplane.CanonicalRule), the one the kernel
// prints and the proxier compares in.
package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
)

// Version is bumped on any change that an older reader would misread.
// Version 2: rules in the form iptables-save prints (addresses with their
// prefix length, implicit protocol matches named), as the kernel prints them.
// Version 3: kube-proxy's nftables table (nftables mode).
const Version = 3

// Tables are the tables kube-proxy's IPVS mode writes.
var Tables = []string{"nat", "filter"}

// State is what a node's kernel holds for kube-proxy, canonically sorted so
// that two dumps (sim and kernel, incremental and from scratch) compare with
// a plain diff as well as with DiffStates.
type State struct {
	SchemaVersion  int                `json:"schemaVersion"`
	Families       []dataplane.Family `json:"families"`
	VirtualServers []VirtualServer    `json:"virtualServers"`
	IPSets         []IPSet            `json:"ipsets"`
	Addresses      []string           `json:"addresses"` // bound on kube-ipvs0
	// IPTables is, per family, each table as normalised iptables-save
	// output (NormalizeSave): chain declarations (":NAME POLICY")
	// sorted by name, then rules ("-A NAME ...", one a line, printed as
	// iptables-save prints them, so "--or-mark" reads "--set-xmark") grouped by
	// chain in that order, keeping their order within a chain (which is semantic).
	IPTables map[dataplane.Family]IPTables `json:"iptables"`
	// NFTables is, per family, kube-proxy's nftables table
	// (dataplane.NFTablesTable), where there is one.
	NFTables map[dataplane.Family]NFTable `json:"nftables,omitempty"`
}

// NFTable is an nftables table as knftables lists it back, which is what
// kube-proxy reads of it. nft gives a rule's comment and handle, not its
// text, so a rule is its chain, its place and its comment: "-A CHAIN #3
// comment". Rules lists every chain's declaration (":CHAIN") sorted by
// name, then each chain's rules in order; Sets holds the sets and maps with
// their elements, where nftables mode keeps most of what it programs per
// service (its service, endpoint and NodePort maps).
type NFTable struct {
	Rules []string `json:"rules"`
	Sets  []NFTSet `json:"sets"`
}

// NFTSet is an nftables set or map ("set", "map") with its elements sorted,
// each its key and, for a map, " : " and its value.
type NFTSet struct {
	Kind     string   `json:"kind"`
	Name     string   `json:"name"`
	Elements []string `json:"elements"`
}

// VirtualServer is an IPVS virtual server.
type VirtualServer struct {
	Address   string   `json:"address"`
	Port      uint16   `json:"port"`
	Protocol  string   `json:"protocol"`
	Scheduler string   `json:"scheduler"`
	Flags     []string `json:"flags"` // "persistent"; the kernel's "hashed" is dropped
	Timeout   uint32   `json:"timeout"`
	// Destinations sorted by address then port.
	Destinations []Dest `json:"destinations"`
}

// Dest is an IPVS real server.
type Dest struct {
	Address string `json:"address"`
	Port    uint16 `json:"port"`
	Weight  int    `json:"weight"`
}

// IPSet is an ipset with its entries sorted.
type IPSet struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Entries []string `json:"entries"`
}

// IPTables holds one family's tables.
type IPTables struct {
	NAT    []string `json:"nat"`
	Filter []string `json:"filter"`
}

func (t *IPTables) table(name string) *[]string {
	if name == "nat" {
		return &t.NAT
	}
	return &t.Filter
}

// Key identifies a virtual server as the diff and the sort see it.
func (v VirtualServer) Key() string {
	a, err := netip.ParseAddr(v.Address)
	if err != nil {
		return fmt.Sprintf("%s:%d/%s", v.Address, v.Port, v.Protocol)
	}
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(a, v.Port), v.Protocol)
}

// Read reads a node's kube-proxy state through the dataplane
// interfaces only, so that the in-memory kernel and a real kernel dump the
// same way. Every virtual server and ipset is read whatever its family (a
// namespace holds only what the run created); kube-ipvs0 addresses and
// iptables are read for the families given.
func Read(dp dataplane.Dataplane, families []dataplane.Family) (*State, error) {
	st := &State{
		SchemaVersion:  Version,
		Families:       slices.Clone(families),
		VirtualServers: []VirtualServer{},
		IPSets:         []IPSet{},
		Addresses:      []string{},
		IPTables:       map[dataplane.Family]IPTables{},
	}
	slices.Sort(st.Families)
	vss, err := dp.IPVS.Services()
	if err != nil && !errors.Is(err, unix.EPROTONOSUPPORT) { // a kernel without IPVS holds no virtual server
		return nil, fmt.Errorf("read state: ipvs services: %w", err)
	}
	for _, vs := range vss {
		out := VirtualServer{
			Address:      vs.Address.String(),
			Port:         vs.Port,
			Protocol:     string(vs.Protocol),
			Scheduler:    vs.Scheduler,
			Flags:        flagNames(vs.Flags),
			Timeout:      vs.Timeout,
			Destinations: make([]Dest, 0, len(vs.Destinations)),
		}
		for _, d := range vs.Destinations {
			out.Destinations = append(out.Destinations, Dest{Address: d.Address.String(), Port: d.Port, Weight: d.Weight})
		}
		st.VirtualServers = append(st.VirtualServers, out)
	}
	sets, err := dp.IPSet.Sets()
	if err != nil {
		return nil, fmt.Errorf("read state: ipsets: %w", err)
	}
	for _, s := range sets {
		st.IPSets = append(st.IPSets, IPSet{Name: s.Name, Type: string(s.Type), Entries: append([]string{}, s.Entries...)})
	}
	for _, f := range st.Families {
		addrs, err := dp.Links.Addresses(dataplane.DummyLink, f)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read state: addresses of %s (%s): %w", dataplane.DummyLink, f, err)
		}
		for _, a := range addrs {
			st.Addresses = append(st.Addresses, a.String())
		}
		var tabs IPTables
		for _, table := range Tables {
			out, err := dp.IPTables.Save(f, table)
			if err != nil {
				return nil, fmt.Errorf("read state: iptables-save %s %s: %w", f, table, err)
			}
			lines, err := NormalizeSave(f, table, out)
			if err != nil {
				return nil, fmt.Errorf("read state: iptables-save %s %s: %w", f, table, err)
			}
			*tabs.table(table) = lines
		}
		st.IPTables[f] = tabs
		t, err := readNFTable(dp, f)
		if err != nil {
			return nil, fmt.Errorf("read state: nftables %s: %w", f, err)
		}
		if t != nil {
			if st.NFTables == nil {
				st.NFTables = map[dataplane.Family]NFTable{}
			}
			st.NFTables[f] = *t
		}
	}
	st.Canonicalize()
	return st, nil
}

// readNFTable lists kube-proxy's nftables table of family f, or returns nil
// where the dataplane has no nftables (none, or a kernel without them) or
// the table does not exist.
func readNFTable(dp dataplane.Dataplane, f dataplane.Family) (*NFTable, error) {
	if dp.NFTables == nil {
		return nil, nil
	}
	nft, err := dp.NFTables.Table(dataplane.NFTablesFamily(f), dataplane.NFTablesTable)
	if errors.Is(err, unix.EPROTONOSUPPORT) {
		return nil, nil // a kernel without nftables holds no table
	}
	if err != nil {
		return nil, err
	}
	return ReadNFTable(nft)
}

// ReadNFTable lists the table nft is for, or returns nil if it does not
// exist.
func ReadNFTable(nft knftables.Interface) (*NFTable, error) {
	ctx := context.Background()
	chains, err := nft.List(ctx, "chain")
	if knftables.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t := &NFTable{Rules: []string{}, Sets: []NFTSet{}}
	slices.Sort(chains)
	for _, c := range chains {
		t.Rules = append(t.Rules, ":"+c)
	}
	// Every chain's rules in one listing (one nft process: a listing per
	// chain would take minutes at thousands of services), in order within
	// each chain.
	rules, err := nft.ListRules(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	byChain := map[string][]string{}
	for _, r := range rules {
		line := fmt.Sprintf("-A %s #%d", r.Chain, len(byChain[r.Chain])+1)
		if r.Comment != nil {
			line += " " + *r.Comment
		}
		byChain[r.Chain] = append(byChain[r.Chain], line)
	}
	for _, c := range chains {
		t.Rules = append(t.Rules, byChain[c]...)
	}
	for _, kind := range []string{"set", "map"} {
		names, err := nft.List(ctx, kind)
		if err != nil {
			return nil, fmt.Errorf("%ss: %w", kind, err)
		}
		for _, name := range names {
			elems, err := nft.ListElements(ctx, kind, name)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", kind, name, err)
			}
			set := NFTSet{Kind: kind, Name: name, Elements: make([]string, 0, len(elems))}
			for _, e := range elems {
				el := strings.Join(e.Key, " . ")
				if len(e.Value) > 0 {
					el += " : " + strings.Join(e.Value, " ")
				}
				set.Elements = append(set.Elements, el)
			}
			t.Sets = append(t.Sets, set)
		}
	}
	return t, nil
}

func flagNames(f dataplane.ServiceFlags) []string {
	out := []string{}
	f &^= dataplane.FlagHashed
	if f&dataplane.FlagPersistent != 0 {
		out = append(out, "persistent")
		f &^= dataplane.FlagPersistent
	}
	if f != 0 {
		out = append(out, fmt.Sprintf("%#x", uint32(f)))
	}
	return out
}

// Canonicalize sorts everything whose order carries no meaning. Addresses
// sort numerically (IPv4 before IPv6), so 10.0.0.9 comes before 10.0.0.10.
func (s *State) Canonicalize() {
	for i := range s.VirtualServers {
		v := &s.VirtualServers[i]
		slices.SortFunc(v.Destinations, func(a, b Dest) int {
			if c := compareAddr(a.Address, b.Address); c != 0 {
				return c
			}
			return int(a.Port) - int(b.Port)
		})
	}
	slices.SortFunc(s.VirtualServers, func(a, b VirtualServer) int {
		if c := compareAddr(a.Address, b.Address); c != 0 {
			return c
		}
		if a.Port != b.Port {
			return int(a.Port) - int(b.Port)
		}
		return strings.Compare(a.Protocol, b.Protocol)
	})
	for i := range s.IPSets {
		slices.Sort(s.IPSets[i].Entries)
	}
	slices.SortFunc(s.IPSets, func(a, b IPSet) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.Addresses, compareAddr)
	for _, t := range s.NFTables {
		for i := range t.Sets {
			slices.Sort(t.Sets[i].Elements)
		}
		slices.SortFunc(t.Sets, func(a, b NFTSet) int { return strings.Compare(a.Kind+" "+a.Name, b.Kind+" "+b.Name) })
	}
}

func compareAddr(a, b string) int {
	x, errx := netip.ParseAddr(a)
	y, erry := netip.ParseAddr(b)
	if errx != nil || erry != nil {
		return strings.Compare(a, b)
	}
	return x.Compare(y)
}

// NormalizeSave turns one table of iptables-save output of family f into
// the State's form: chain declarations (":NAME POLICY") sorted by name, then
// each chain's rules ("-A NAME ...") in canonical form, chains by name and
// rules in their order. Comments, counters, the header and COMMIT carry
// nothing a comparison needs.
func NormalizeSave(f dataplane.Family, table string, out []byte) ([]string, error) {
	tables, err := dataplane.ParseSave(f, out)
	if err != nil {
		return nil, err
	}
	t := tables[table]
	res := []string{}
	if t == nil {
		return res, nil
	}
	for _, c := range slices.Sorted(maps.Keys(t.Chains)) {
		res = append(res, ":"+c+" "+t.Chains[c])
	}
	for _, c := range slices.Sorted(maps.Keys(t.Rules)) {
		for _, r := range t.Rules[c] {
			res = append(res, "-A "+c+" "+r)
		}
	}
	return res, nil
}

// Write writes a state as indented JSON.
func Write(w io.Writer, s *State) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// ReadFile loads a dump written by Write (by kpsim state or a kernel run).
func ReadFile(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	var s State
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("read state %s: not a kpsim state dump: %w", path, err)
	}
	if s.SchemaVersion != Version {
		return nil, fmt.Errorf("read state %s: schemaVersion %d, this kpsim reads version %d only", path, s.SchemaVersion, Version)
	}
	s.Canonicalize()
	return &s, nil
}
