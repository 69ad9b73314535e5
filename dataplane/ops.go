package dataplane

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/knftables"
)

// Op is a kind of kernel operation. Every write the proxier issues is counted
// under one of these; reads are counted too but are not writes.
type Op int

const (
	OpIPVSServiceAdd Op = iota
	OpIPVSServiceUpdate
	OpIPVSServiceDelete
	OpIPVSDestinationAdd
	OpIPVSDestinationUpdate
	OpIPVSDestinationDelete
	OpIPSetCreate
	OpIPSetDestroy
	OpIPSetAdd // one per entry
	OpIPSetDel // one per entry
	OpLinkCreate
	OpAddressBind
	OpAddressUnbind
	OpIPTablesRestore      // one per payload
	OpIPTablesRestoreBytes // payload bytes
	// OpIPTablesCommand is one iptables command other than a restore or a
	// save (-N, -C then -I, -D, ...): kpsim writes only by restore; a
	// kube-proxy release ensures its chains and jumps one command at a time.
	OpIPTablesCommand
	OpSysctlWrite
	OpConntrackDelete // one per entry deleted
	// OpNFTTransaction is one nftables transaction (one `nft -f`), however
	// many commands it holds; OpNFTCommand one command in it (an add,
	// create, insert, replace, flush or delete of a table, chain, rule,
	// set, map or element).
	OpNFTTransaction
	OpNFTCommand
	// OpNFTDeleting is a transaction that deletes something (a delete or
	// destroy command), counted besides its OpNFTTransaction: nf_tables
	// commits it more slowly (on this project's host kernel two to three
	// times an adding one, docs/nftables.md). A measure of a transaction,
	// not a write of its own.
	OpNFTDeleting
	// OpNFTMapRule is a rule written with a set or map of its own (`numgen
	// random mod 2 map { 0 : … , 1 : … }`: kube-proxy's DNAT to a service's
	// several endpoints), counted besides its OpNFTCommand: nf_tables
	// takes the longer over one the more its transaction holds before it
	// and the more such rules come before it (NFTMapRule). A measure of a
	// command, not a write of its own.
	OpNFTMapRule
	// Reads.
	OpIPVSList            // one per Services call (the whole table) or Service call (one)
	OpIPVSDestinationList // one per Destinations call: one virtual server's real servers
	OpIPSetList           // one per Sets call (every set and its entries) or Entries call (one set)
	OpAddressList
	OpIPTablesSave
	OpConntrackList // one per Flows call: the family's conntrack table
	// OpNFTList is one listing of a table's chains, sets or other names by
	// the nft binary, which reads and prints the whole table (knftables
	// runs `nft --json --terse list table`); OpNFTListNetlink the same
	// names read over netlink (knftables.UseNetlink: kube-proxy's
	// NFTablesNetlink gate, on by default from v1.37).
	OpNFTList
	OpNFTListNetlink
	OpNFTListElements // one per listing of one set's or map's elements (nft list set/map NAME)
	numOps
)

var opNames = [numOps]string{
	"ipvs-service-add", "ipvs-service-update", "ipvs-service-delete",
	"ipvs-destination-add", "ipvs-destination-update", "ipvs-destination-delete",
	"ipset-create", "ipset-destroy", "ipset-add", "ipset-del",
	"link-create", "address-bind", "address-unbind",
	"iptables-restore", "iptables-restore-bytes", "iptables-command", "sysctl-write", "conntrack-delete",
	"nft-transaction", "nft-command", "nft-deleting", "nft-map-rule",
	"ipvs-list", "ipvs-destination-list", "ipset-list", "address-list", "iptables-save",
	"conntrack-list", "nft-list", "nft-list-netlink", "nft-list-elements",
}

func (o Op) String() string {
	if o < 0 || o >= numOps {
		return fmt.Sprintf("op(%d)", int(o))
	}
	return opNames[o]
}

// IsWrite reports whether the operation changes kernel state.
// iptables-restore-bytes, nft-deleting and nft-map-rule are measures of
// writes, not writes of their own.
func (o Op) IsWrite() bool {
	return o < OpIPVSList && o != OpIPTablesRestoreBytes && o != OpNFTDeleting && o != OpNFTMapRule
}

// NFTMapRule is where a rule with a set or map of its own stands in its
// transaction: how many commands and anonymous sets nf_tables'
// transaction holds before it (Entries), how many elements of those sets
// (Elements), how many rules with their own set or map come before it in
// the same transaction (Maps), and how many the table held when the
// transaction began (Table). nf_tables finds the anonymous set such a
// rule was sent with by walking its transaction from the start, and names
// that set by reading the name of every set the table holds, so what the
// rule costs grows with all of them. The elements are counted apart
// because kernels keep them differently (6.1 as one transaction entry
// each), so what one costs the walk is each kernel's calibration to say
// (docs/nftables.md).
type NFTMapRule struct {
	Entries, Elements, Maps, Table int
}

// NFTTransactionOps counts what a transaction holds besides its commands:
// whether it deletes anything (OpNFTDeleting), and where each rule it
// writes with a set or map of its own (OpNFTMapRule) stands in it (the
// table's maps are the caller's to add). Each command
// is one entry (a flush is taken as one: what it removes is not in the
// transaction); a rule with a set or map of its own adds one more entry
// (its set) and its set's elements to the elements. It reads the commands
// themselves: rendering the transaction's text to read it back took a
// tenth of a large run's wall time.
func NFTTransactionOps(tx *knftables.Transaction) (deletes bool, mapRules []NFTMapRule) {
	cmds, _ := NFTCommands(tx) // one built with an error: the commands before it
	entries, elements := 0, 0
	for _, c := range cmds {
		rule, isRule := c.Obj.(*knftables.Rule)
		switch {
		case c.Verb == "delete" || c.Verb == "destroy":
			deletes = true
		case (c.Verb == "add" || c.Verb == "insert" || c.Verb == "replace") && isRule && HasMap(rule.Rule):
			_, set, _ := strings.Cut(rule.Rule, "{")
			set, _, _ = strings.Cut(set, "}")
			mapRules = append(mapRules, NFTMapRule{Entries: entries, Elements: elements, Maps: len(mapRules)})
			entries++ // the set
			elements += strings.Count(set, ",") + 1
		}
		entries++
	}
	return deletes, mapRules
}

// NFTTransaction counts one nftables transaction as every counter counts
// it (the counted dataplane, the in-memory kernel, a release's counted
// knftables): one transaction, its commands, one deleting transaction when
// it deletes anything, and its rules with a set or map of their own. It
// returns where each of those stands, for the in-memory kernel's price.
func (o *Ops) NFTTransaction(tx *knftables.Transaction) []NFTMapRule {
	deletes, mapRules := NFTTransactionOps(tx)
	o[OpNFTTransaction]++
	o[OpNFTCommand] += int64(tx.NumOperations())
	if deletes {
		o[OpNFTDeleting]++
	}
	o[OpNFTMapRule] += int64(len(mapRules))
	return mapRules
}

// HasMap reports whether an nft rule holds a set or map of its own.
func HasMap(rule string) bool { return strings.Contains(rule, "{") }

// Ops returns every operation kind in order.
func AllOps() []Op {
	out := make([]Op, numOps)
	for i := range out {
		out[i] = Op(i)
	}
	return out
}

// ParseOp returns the Op with the given name.
func ParseOp(name string) (Op, error) {
	for i, n := range opNames {
		if n == name {
			return Op(i), nil
		}
	}
	return 0, fmt.Errorf("unknown kernel operation %q", name)
}

// Ops counts kernel operations by kind. It marshals to a JSON object of the
// non-zero counts keyed by operation name.
type Ops [numOps]int64

// Writes is the number of write operations (excluding restore bytes).
func (o *Ops) Writes() int64 {
	var n int64
	for i, c := range o {
		if Op(i).IsWrite() {
			n += c
		}
	}
	return n
}

// Add adds b into o.
func (o *Ops) Add(b *Ops) {
	for i := range o {
		o[i] += b[i]
	}
}

// Sub returns o - b.
func (o Ops) Sub(b Ops) Ops {
	for i := range o {
		o[i] -= b[i]
	}
	return o
}

func (o Ops) MarshalJSON() ([]byte, error) {
	m := make(map[string]int64)
	for i, c := range o {
		if c != 0 {
			m[Op(i).String()] = c
		}
	}
	return json.Marshal(m)
}

func (o *Ops) UnmarshalJSON(b []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*o = Ops{}
	for k, v := range m {
		op, err := ParseOp(k)
		if err != nil {
			return err
		}
		o[op] = v
	}
	return nil
}

// String lists the non-zero counts, sorted by name, for logs and test failures.
func (o Ops) String() string {
	var parts []string
	for i, c := range o {
		if c != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", Op(i), c))
		}
	}
	sort.Strings(parts)
	return fmt.Sprint(parts)
}
