package kubeproxy

import (
	"reflect"
	"slices"

	"k8s.io/kubernetes/pkg/proxy/ipvs"
)

// The release's unexported fields the adapter reaches (package private),
// each named once: the calls use these names, and TestFields checks every
// one against the release's own types in each release's module, so a
// release that renames one fails there, naming it.
const (
	fieldSyncFn       = "syncRunner.fn"       // every proxier's sync, hooked (observed.Family.Sync)
	fieldInterfaces   = "networkInterfacer"   // the node's addresses
	fieldConntrack    = "conntrack"           // flows it lists and deletes
	fieldHealthServer = "serviceHealthServer" // it would listen on health check node ports
	fieldNetlink      = "netlinkHandle"       // IPVS mode's kube-ipvs0 and its addresses
	fieldNFTables     = "nftables"            // nftables mode's knftables interface
	fieldNFAcct       = "nfacct"              // iptables mode's counters
	fieldKnftablesNL  = "nl"                  // knftables' netlink adapter: set when it lists over netlink
)

// reached is every field of each of the release's proxier types the
// adapter reaches: those of every mode, the sync runner's of the release's
// era (runnerFields), and each mode's own (modeFields).
func reached() map[reflect.Type][]string {
	common := slices.Concat([]string{fieldSyncFn, fieldInterfaces, fieldConntrack, fieldHealthServer}, runnerFields)
	out := map[reflect.Type][]string{reflect.TypeFor[ipvs.Proxier](): append(slices.Clone(common), fieldNetlink)}
	for t, own := range modeFields() {
		out[t] = append(slices.Clone(common), own)
	}
	return out
}
