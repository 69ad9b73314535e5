package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/kpsim/kpsim/proxier/dataplane"
)

// StateSchemaVersion is bumped on any change that an older reader would misread.
const StateSchemaVersion = 1

// StateTables are the tables kube-proxy's IPVS mode writes.
var StateTables = []string{"nat", "filter"}

// State is what a node's kernel holds for kube-proxy, canonically sorted so
// that two dumps (sim and kernel, incremental and from scratch) compare with
// a plain diff as well as with DiffStates.
type State struct {
	SchemaVersion  int                `json:"schemaVersion"`
	Families       []dataplane.Family `json:"families"`
	VirtualServers []StateVS          `json:"virtualServers"`
	IPSets         []StateIPSet       `json:"ipsets"`
	Addresses      []string           `json:"addresses"` // bound on kube-ipvs0
	// IPTables is, per family, each table as normalised iptables-save
	// output (NormalizeIPTablesSave): chain declarations (":NAME POLICY")
	// sorted by name, then rules ("-A NAME ...", one a line, printed as
	// iptables-save prints them, so "--or-mark" reads "--set-xmark") grouped by
	// chain in that order, keeping their order within a chain (which is semantic).
	IPTables map[dataplane.Family]StateIPTables `json:"iptables"`
}

// StateVS is an IPVS virtual server.
type StateVS struct {
	Address   string   `json:"address"`
	Port      uint16   `json:"port"`
	Protocol  string   `json:"protocol"`
	Scheduler string   `json:"scheduler"`
	Flags     []string `json:"flags"` // "persistent"; the kernel's "hashed" is dropped
	Timeout   uint32   `json:"timeout"`
	// Destinations sorted by address then port.
	Destinations []StateDest `json:"destinations"`
}

// StateDest is an IPVS real server.
type StateDest struct {
	Address string `json:"address"`
	Port    uint16 `json:"port"`
	Weight  int    `json:"weight"`
}

// StateIPSet is an ipset with its entries sorted.
type StateIPSet struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Entries []string `json:"entries"`
}

// StateIPTables holds one family's tables.
type StateIPTables struct {
	NAT    []string `json:"nat"`
	Filter []string `json:"filter"`
}

func (t *StateIPTables) table(name string) *[]string {
	if name == "nat" {
		return &t.NAT
	}
	return &t.Filter
}

// Key identifies a virtual server as the diff and the sort see it.
func (v StateVS) Key() string {
	a, err := netip.ParseAddr(v.Address)
	if err != nil {
		return fmt.Sprintf("%s:%d/%s", v.Address, v.Port, v.Protocol)
	}
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(a, v.Port), v.Protocol)
}

// ReadState reads a node's kube-proxy state through the dataplane
// interfaces only, so that the in-memory kernel and a real kernel dump the
// same way. Every virtual server and ipset is read whatever its family (a
// namespace holds only what the run created); kube-ipvs0 addresses and
// iptables are read for the families given.
func ReadState(dp dataplane.Dataplane, families []dataplane.Family) (*State, error) {
	st := &State{
		SchemaVersion:  StateSchemaVersion,
		Families:       slices.Clone(families),
		VirtualServers: []StateVS{},
		IPSets:         []StateIPSet{},
		Addresses:      []string{},
		IPTables:       map[dataplane.Family]StateIPTables{},
	}
	slices.Sort(st.Families)
	vss, err := dp.IPVS.Services()
	if err != nil {
		return nil, fmt.Errorf("read state: ipvs services: %w", err)
	}
	for _, vs := range vss {
		dests, err := dp.IPVS.Destinations(vs.ServiceKey)
		if err != nil {
			return nil, fmt.Errorf("read state: ipvs destinations of %s: %w", vs.ServiceKey, err)
		}
		out := StateVS{
			Address:      vs.Address.String(),
			Port:         vs.Port,
			Protocol:     string(vs.Protocol),
			Scheduler:    vs.Scheduler,
			Flags:        flagNames(vs.Flags),
			Timeout:      vs.Timeout,
			Destinations: make([]StateDest, 0, len(dests)),
		}
		for _, d := range dests {
			out.Destinations = append(out.Destinations, StateDest{Address: d.Address.String(), Port: d.Port, Weight: d.Weight})
		}
		st.VirtualServers = append(st.VirtualServers, out)
	}
	sets, err := dp.IPSet.Sets()
	if err != nil {
		return nil, fmt.Errorf("read state: ipsets: %w", err)
	}
	for _, s := range sets {
		entries, err := dp.IPSet.Entries(s.Name)
		if err != nil {
			return nil, fmt.Errorf("read state: ipset list %s: %w", s.Name, err)
		}
		st.IPSets = append(st.IPSets, StateIPSet{Name: s.Name, Type: string(s.Type), Entries: append([]string{}, entries...)})
	}
	for _, f := range st.Families {
		addrs, err := dp.Links.Addresses(dataplane.DummyLink, f)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read state: addresses of %s (%s): %w", dataplane.DummyLink, f, err)
		}
		for _, a := range addrs {
			st.Addresses = append(st.Addresses, a.String())
		}
		var tabs StateIPTables
		for _, table := range StateTables {
			out, err := dp.IPTables.Save(f, table)
			if err != nil {
				return nil, fmt.Errorf("read state: iptables-save %s %s: %w", f, table, err)
			}
			*tabs.table(table) = NormalizeIPTablesSave(out)
		}
		st.IPTables[f] = tabs
	}
	st.Canonicalize()
	return st, nil
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
		slices.SortFunc(v.Destinations, func(a, b StateDest) int {
			if c := compareAddr(a.Address, b.Address); c != 0 {
				return c
			}
			return int(a.Port) - int(b.Port)
		})
	}
	slices.SortFunc(s.VirtualServers, func(a, b StateVS) int {
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
	slices.SortFunc(s.IPSets, func(a, b StateIPSet) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.Addresses, compareAddr)
}

func compareAddr(a, b string) int {
	x, errx := netip.ParseAddr(a)
	y, erry := netip.ParseAddr(b)
	if errx != nil || erry != nil {
		return strings.Compare(a, b)
	}
	return x.Compare(y)
}

// NormalizeIPTablesSave turns iptables-save output into the State's form, so
// that a real kernel's dump and the sim's compare equal when the rules are
// the same: comment lines, the table header and COMMIT dropped, packet
// counters dropped, chains sorted by name (rules keep their order within a
// chain), and each rule printed as iptables-save prints it (see normalizeRule)
// with words re-quoted one way.
func NormalizeIPTablesSave(out []byte) []string {
	var decls []string
	rules := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == '*' || line == "COMMIT" {
			continue
		}
		if line[0] == '[' { // iptables-save -c: "[packets:bytes] -A ..."
			if i := strings.IndexByte(line, ']'); i >= 0 {
				line = strings.TrimSpace(line[i+1:])
			}
		}
		if line[0] == ':' {
			f := strings.Fields(line)
			decl := f[0]
			if len(f) > 1 {
				decl += " " + f[1]
			}
			decls = append(decls, decl)
			continue
		}
		words, err := dataplane.SplitRule(line)
		if err != nil { // iptables-save never writes this; keep the line readable anyway
			words = strings.Fields(line)
		}
		if len(words) >= 2 && words[0] == "-A" {
			rules[words[1]] = append(rules[words[1]], dataplane.JoinRule(normalizeRule(words)))
		}
	}
	slices.Sort(decls)
	res := make([]string, 0, len(decls)+len(rules))
	res = append(res, decls...)
	chains := make([]string, 0, len(rules))
	for c := range rules {
		chains = append(chains, c)
	}
	slices.Sort(chains)
	for _, c := range chains {
		res = append(res, rules[c]...)
	}
	return res
}

// genericOptions are the options iptables-save prints first, in this order,
// whatever order the rule was written in; the long forms map to the short.
var genericOptions = map[string]string{
	"-s": "-s", "--source": "-s", "-d": "-d", "--destination": "-d",
	"-i": "-i", "--in-interface": "-i", "-o": "-o", "--out-interface": "-o",
	"-p": "-p", "--protocol": "-p",
}

var genericOrder = []string{"-s", "-d", "-i", "-o", "-p"}

// normalizeRule rewrites "-A CHAIN ..." the way iptables-save would print
// it: generic options first, the implicit protocol match and single-address
// masks dropped, MARK targets as --set-xmark with canonical hex.
func normalizeRule(w []string) []string {
	generic := map[string][]string{} // canonical option -> ["!",] option, value
	rest := make([]string, 0, len(w))
	for i := 2; i < len(w); i++ {
		opt, ok := genericOptions[w[i]]
		if !ok || i+1 >= len(w) {
			rest = append(rest, w[i])
			continue
		}
		v := w[i+1]
		if opt == "-s" || opt == "-d" {
			v = strings.TrimSuffix(strings.TrimSuffix(v, "/32"), "/128")
		}
		if opt == "-p" {
			v = strings.ToLower(v)
		}
		g := []string{opt, v}
		if n := len(rest); n > 0 && rest[n-1] == "!" {
			rest = rest[:n-1]
			g = append([]string{"!"}, g...)
		}
		generic[opt] = g
		i++
	}
	out := append(make([]string, 0, len(w)+2), w[0], w[1])
	for _, o := range genericOrder {
		out = append(out, generic[o]...)
	}
	proto := ""
	if g := generic["-p"]; len(g) > 0 {
		proto = g[len(g)-1]
	}
	for i := 0; i < len(rest); i++ {
		x := rest[i]
		if i+1 < len(rest) {
			next := rest[i+1]
			switch x {
			case "-m", "--match":
				if proto != "" && strings.EqualFold(next, proto) {
					i++ // the protocol match "-p tcp --dport" loads implicitly
					continue
				}
			case "--or-mark":
				out = append(out, "--set-xmark", hexMark(next)+"/"+hexMark(next))
				i++
				continue
			case "--xor-mark":
				out = append(out, "--set-xmark", hexMark(next)+"/0x0")
				i++
				continue
			case "--set-mark":
				if !strings.Contains(next, "/") {
					out = append(out, "--set-xmark", hexMark(next)+"/0xffffffff")
					i++
					continue
				}
				out = append(out, "--set-xmark", hexMark(next))
				i++
				continue
			case "--mark", "--set-xmark":
				out = append(out, x, hexMark(next))
				i++
				continue
			}
		}
		out = append(out, x)
	}
	return out
}

// hexMark canonicalises a mark or mark/mask: 0x00004000 -> 0x4000.
func hexMark(s string) string {
	parts := strings.Split(s, "/")
	for i, p := range parts {
		if v, err := strconv.ParseUint(p, 0, 32); err == nil {
			parts[i] = fmt.Sprintf("%#x", v)
			if v == 0 {
				parts[i] = "0x0"
			}
		}
	}
	return strings.Join(parts, "/")
}

// WriteState writes a state as indented JSON.
func WriteState(w io.Writer, s *State) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// ReadStateFile loads a dump written by WriteState (by kpsim state or a kernel run).
func ReadStateFile(path string) (*State, error) {
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
	if s.SchemaVersion != StateSchemaVersion {
		return nil, fmt.Errorf("read state %s: schemaVersion %d, this kpsim reads version %d only", path, s.SchemaVersion, StateSchemaVersion)
	}
	s.Canonicalize()
	return &s, nil
}
