package proxier

import (
	"strings"

	"github.com/kpsim/kpsim/dataplane"
)

// Phase names of a sync, in the order they run. Metrics, logs, results and
// reports all use these names.
const (
	PhaseApplyChanges        = "apply-changes"
	PhaseEnsureChains        = "ensure-chains"
	PhaseEnsureLink          = "ensure-link" // also the IPVS sysctls: node-level setup
	PhaseEnsureIPSets        = "ensure-ipsets"
	PhaseIPVSServices        = "ipvs-services" // virtual servers and their destinations
	PhaseIPSetEntries        = "ipset-entries"
	PhaseIPTablesRestore     = "iptables-restore"
	PhaseCleanupStale        = "cleanup-stale" // virtual servers and addresses no service wants
	PhaseConntrack           = "conntrack"
	PhaseGracefulTermination = "graceful-termination" // drained real servers whose connections are gone
)

// Phases lists every phase in order.
var Phases = []string{
	PhaseApplyChanges, PhaseEnsureChains, PhaseEnsureLink, PhaseEnsureIPSets,
	PhaseIPVSServices, PhaseIPSetEntries, PhaseIPTablesRestore, PhaseCleanupStale,
	PhaseConntrack, PhaseGracefulTermination,
}

// Sync triggers as recorded in record.Sync.Trigger.
const (
	TriggerInitial  = "initial"
	TriggerChanges  = "changes"
	TriggerPeriodic = "periodic"
	TriggerRetry    = "retry"
)

// masqMark is kube-proxy's masquerade mark (bit 14) as it writes it.
const masqMark = "0x00004000"

// setID indexes the ipsets kube-proxy's IPVS mode maintains.
type setID int

const (
	setLoopBack setID = iota
	setClusterIP
	setExternalIP
	setExternalIPLocal
	setLoadBalancer
	setLoadBalancerFW
	setLoadBalancerLocal
	setLoadBalancerSourceIP
	setLoadBalancerSourceCIDR
	setNodePortTCP
	setNodePortLocalTCP
	setNodePortUDP
	setNodePortLocalUDP
	setNodePortSCTP
	setNodePortLocalSCTP
	setHealthCheckNodePort
	setIPVSIPs
	numSets
)

// setInfo is one ipset as kube-proxy names, types and comments it (pkg/proxy/ipvs/ipset.go).
type setInfo struct {
	name    string // IPv4 name; IPv6 names are derived by setName
	typ     dataplane.SetType
	comment string
}

var setInfos = [numSets]setInfo{
	setLoopBack:               {"KUBE-LOOP-BACK", dataplane.HashIPPortIP, "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"},
	setClusterIP:              {"KUBE-CLUSTER-IP", dataplane.HashIPPort, "Kubernetes service cluster ip + port for masquerade purpose"},
	setExternalIP:             {"KUBE-EXTERNAL-IP", dataplane.HashIPPort, "Kubernetes service external ip + port for masquerade and filter purpose"},
	setExternalIPLocal:        {"KUBE-EXTERNAL-IP-LOCAL", dataplane.HashIPPort, "Kubernetes service external ip + port with externalTrafficPolicy=local"},
	setLoadBalancer:           {"KUBE-LOAD-BALANCER", dataplane.HashIPPort, "Kubernetes service lb portal"},
	setLoadBalancerFW:         {"KUBE-LOAD-BALANCER-FW", dataplane.HashIPPort, "Kubernetes service load balancer ip + port for load balancer with sourceRange"},
	setLoadBalancerLocal:      {"KUBE-LOAD-BALANCER-LOCAL", dataplane.HashIPPort, "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"},
	setLoadBalancerSourceIP:   {"KUBE-LOAD-BALANCER-SOURCE-IP", dataplane.HashIPPortIP, "Kubernetes service load balancer ip + port + source IP for packet filter purpose"},
	setLoadBalancerSourceCIDR: {"KUBE-LOAD-BALANCER-SOURCE-CIDR", dataplane.HashIPPortNet, "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"},
	setNodePortTCP:            {"KUBE-NODE-PORT-TCP", dataplane.BitmapPort, "Kubernetes nodeport TCP port for masquerade purpose"},
	setNodePortLocalTCP:       {"KUBE-NODE-PORT-LOCAL-TCP", dataplane.BitmapPort, "Kubernetes nodeport TCP port with externalTrafficPolicy=local"},
	setNodePortUDP:            {"KUBE-NODE-PORT-UDP", dataplane.BitmapPort, "Kubernetes nodeport UDP port for masquerade purpose"},
	setNodePortLocalUDP:       {"KUBE-NODE-PORT-LOCAL-UDP", dataplane.BitmapPort, "Kubernetes nodeport UDP port with externalTrafficPolicy=local"},
	setNodePortSCTP:           {"KUBE-NODE-PORT-SCTP-HASH", dataplane.HashIPPort, "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"},
	setNodePortLocalSCTP:      {"KUBE-NODE-PORT-LOCAL-SCTP-HASH", dataplane.HashIPPort, "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'"},
	setHealthCheckNodePort:    {"KUBE-HEALTH-CHECK-NODE-PORT", dataplane.BitmapPort, "Kubernetes health check node port"},
	setIPVSIPs:                {"KUBE-IPVS-IPS", dataplane.HashIP, "Addresses on the ipvs interface"},
}

// SetName is the name kube-proxy gives an ipset in a family: IPv6 sets
// replace the "KUBE-" prefix with "KUBE-6-" and are cut to ipset's 31
// characters (KUBE-6-LOAD-BALANCER-SOURCE-CID).
func SetName(ipv4Name string, f dataplane.Family) string {
	if f != dataplane.IPv6 || !strings.HasPrefix(ipv4Name, "KUBE-") {
		return ipv4Name
	}
	n := "KUBE-6-" + strings.TrimPrefix(ipv4Name, "KUBE-")
	if len(n) > 31 {
		n = n[:31]
	}
	return n
}

// SetNames lists the names of every ipset a proxier of the family maintains.
func SetNames(f dataplane.Family) []string {
	out := make([]string, numSets)
	for i, s := range setInfos {
		out[i] = SetName(s.name, f)
	}
	return out
}

// iptables chains kube-proxy's IPVS mode owns, per table, in declaration order.
const (
	chainServices           = "KUBE-SERVICES"
	chainPostrouting        = "KUBE-POSTROUTING"
	chainNodePort           = "KUBE-NODE-PORT"
	chainLoadBalancer       = "KUBE-LOAD-BALANCER"
	chainMarkMasq           = "KUBE-MARK-MASQ"
	chainForward            = "KUBE-FORWARD"
	chainProxyFirewall      = "KUBE-PROXY-FIREWALL"
	chainSourceRangesFW     = "KUBE-SOURCE-RANGES-FIREWALL"
	chainIPVSFilter         = "KUBE-IPVS-FILTER"
	chainIPVSOutFilter      = "KUBE-IPVS-OUT-FILTER"
	tableNAT, tableFilter   = "nat", "filter"
	commentServicePortals   = "kubernetes service portals"
	commentPostrouting      = "kubernetes postrouting rules"
	commentForwarding       = "kubernetes forwarding rules"
	commentHealthCheck      = "kubernetes health check rules"
	commentProxyFirewall    = "kube-proxy firewall rules"
	commentIPVSAccessFilter = "kubernetes ipvs access filter"
)

var natChains = []string{chainServices, chainPostrouting, chainNodePort, chainLoadBalancer, chainMarkMasq}
var filterChains = []string{chainForward, chainNodePort, chainProxyFirewall, chainSourceRangesFW, chainIPVSFilter, chainIPVSOutFilter}

// jumpRule links a built-in chain to one of kube-proxy's, inserted at the top.
type jumpRule struct {
	table, from, to, comment string
}

var jumpRules = []jumpRule{
	{tableNAT, "OUTPUT", chainServices, commentServicePortals},
	{tableNAT, "PREROUTING", chainServices, commentServicePortals},
	{tableNAT, "POSTROUTING", chainPostrouting, commentPostrouting},
	{tableFilter, "FORWARD", chainForward, commentForwarding},
	{tableFilter, "INPUT", chainNodePort, commentHealthCheck},
	{tableFilter, "INPUT", chainProxyFirewall, commentProxyFirewall},
	{tableFilter, "FORWARD", chainProxyFirewall, commentProxyFirewall},
	{tableFilter, "INPUT", chainIPVSFilter, commentIPVSAccessFilter},
	{tableFilter, "OUTPUT", chainIPVSOutFilter, commentIPVSAccessFilter},
}

// args is the rule text after "-A <from>" / "-I <from>".
func (j jumpRule) args() string {
	return `-m comment --comment "` + j.comment + `" -j ` + j.to
}

// Sysctls kube-proxy's IPVS mode sets (NewProxier), with the values it wants.
var ipvsSysctls = []struct{ key, value string }{
	{"net/ipv4/vs/conntrack", "1"},
	{"net/ipv4/vs/expire_nodest_conn", "1"},
	{"net/ipv4/vs/expire_quiescent_template", "1"},
	{"net/ipv4/ip_forward", "1"},
}

var strictARPSysctls = []struct{ key, value string }{
	{"net/ipv4/conf/all/arp_ignore", "1"},
	{"net/ipv4/conf/all/arp_announce", "2"},
}

// bridgeSysctl is only set where the key exists (br_netfilter loaded).
const bridgeSysctl = "net/bridge/bridge-nf-call-iptables"
