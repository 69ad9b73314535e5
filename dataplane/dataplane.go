// Package dataplane is the contract between the proxier and a node's kernel.
//
// The proxier programs IPVS, ipsets, iptables, addresses on the kube-ipvs0
// link, sysctls and conntrack only through the interfaces here. Two
// implementations exist: the in-memory kernel in sim/ and the Linux kernel in
// kernel/. Both pass the same conformance suite (dataplane/conformance), so the
// interfaces stay small and every method mirrors one kernel operation.
//
// Errors follow the kernel: a create of something that exists wraps
// syscall.EEXIST, a delete or update of something missing wraps
// syscall.ENOENT, a malformed argument wraps syscall.EINVAL. Test with
// errors.Is(err, fs.ErrExist) / errors.Is(err, fs.ErrNotExist) or against
// the errno itself.
package dataplane

import (
	"fmt"
	"net/netip"

	"sigs.k8s.io/knftables"
)

// Family is an IP family. Dual-stack nodes run one proxier per family.
type Family string

const (
	IPv4 Family = "IPv4"
	IPv6 Family = "IPv6"
)

// FamilyOf returns the family of an address.
func FamilyOf(a netip.Addr) Family {
	if a.Is4() || a.Is4In6() {
		return IPv4
	}
	return IPv6
}

// Protocol is a transport protocol as Kubernetes spells it.
type Protocol string

const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// ---------------------------------------------------------------------------
// IPVS

// ServiceKey identifies an IPVS virtual server.
type ServiceKey struct {
	Address  netip.Addr
	Port     uint16
	Protocol Protocol
}

func (k ServiceKey) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.Address, k.Port), k.Protocol)
}

// ServiceFlags are IPVS virtual server flags (include/uapi/linux/ip_vs.h).
type ServiceFlags uint32

const (
	FlagPersistent ServiceFlags = 0x1 // IP_VS_SVC_F_PERSISTENT: session affinity
	FlagHashed     ServiceFlags = 0x2 // IP_VS_SVC_F_HASHED: set by the kernel on every service
	// FlagSchedPort is IP_VS_SVC_F_SCHED2: the sh and mh schedulers hash the
	// source port with the source address. kube-proxy sets it with mh.
	FlagSchedPort ServiceFlags = 0x10
)

// VirtualServer is an IPVS virtual server.
type VirtualServer struct {
	ServiceKey
	Scheduler string       // rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, mh
	Flags     ServiceFlags // FlagHashed is ignored on write and may be set on read
	Timeout   uint32       // persistence timeout in seconds; 0 unless FlagPersistent
	Netmask   uint32       // 0xffffffff for IPv4, 128 for IPv6, as kube-proxy sets it (Netmask)
	// Destinations are the real servers, read back by Services in the
	// kernel's order; ignored on write.
	Destinations []RealServer
}

// RealServer is an IPVS destination (a real server) of a virtual server.
type RealServer struct {
	Address netip.Addr
	Port    uint16
	Weight  int
	// Connection counters, read back from the kernel; ignored on write.
	ActiveConns   int
	InactiveConns int
}

// AddrPort returns the destination's address and port, its identity within a virtual server.
func (r RealServer) AddrPort() netip.AddrPort { return netip.AddrPortFrom(r.Address, r.Port) }

// Netmask is the netmask kube-proxy gives a virtual server of a's family
// (VirtualServer.Netmask).
func Netmask(a netip.Addr) uint32 {
	if a.Is4() {
		return 0xffffffff
	}
	return 128
}

// IPVS is the kernel's IPVS table. One handle is shared by both families'
// proxiers on a dual-stack node; each lists all services and keeps to its own family.
type IPVS interface {
	// Services reads the whole table at once: every virtual server with its
	// real servers (Destinations). It is how a full sync reads the kernel
	// back, in one read whatever the table's size.
	Services() ([]VirtualServer, error)
	// Service reads one virtual server, without its destinations: how a
	// kube-proxy release reads a service back before it adds or updates
	// it. ENOENT if missing.
	Service(ServiceKey) (VirtualServer, error)
	AddService(VirtualServer) error    // EEXIST if the key exists
	UpdateService(VirtualServer) error // ENOENT if missing
	DeleteService(ServiceKey) error    // ENOENT if missing; removes its destinations
	// Destinations reads one virtual server's real servers, with their
	// connection counters; ENOENT if missing.
	Destinations(ServiceKey) ([]RealServer, error)
	AddDestination(ServiceKey, RealServer) error    // EEXIST / ENOENT (no service)
	UpdateDestination(ServiceKey, RealServer) error // ENOENT
	DeleteDestination(ServiceKey, RealServer) error // ENOENT; identity is AddrPort
}

// ---------------------------------------------------------------------------
// ipset

// SetType is an ipset type name as the ipset tool spells it.
type SetType string

const (
	HashIP        SetType = "hash:ip"
	HashIPPort    SetType = "hash:ip,port"
	HashIPPortIP  SetType = "hash:ip,port,ip"
	HashIPPortNet SetType = "hash:ip,port,net"
	HashNet       SetType = "hash:net"
	BitmapPort    SetType = "bitmap:port"
)

// Set describes an ipset. Entries are strings in the ipset tool's syntax,
// the way kube-proxy writes them: "10.96.0.10,tcp:80" (hash:ip,port),
// "10.0.0.5,tcp:80,10.0.0.5" (hash:ip,port,ip), "10.96.0.10,tcp:80,192.168.0.0/16"
// (hash:ip,port,net), "10.96.0.10" (hash:ip), "30080" (bitmap:port). IPv6
// addresses are not bracketed. Implementations canonicalise entries the way
// the kernel does (lower-case protocol, /32 dropped from hash:net) so that a
// listed entry equals the string the proxier wrote.
type Set struct {
	Name    string
	Type    SetType
	Family  Family // hash types: inet or inet6; ignored for bitmap:port
	Comment string // kube-proxy's set comment, informational
	// PortRange is the range of a bitmap:port set; kube-proxy uses 0-65535.
	PortFrom, PortTo uint16
	MaxElem          int // 0 means the kernel default (DefaultMaxElem)
	// Entries are the set's members in canonical form, read back by Sets;
	// ignored by CreateSet.
	Entries []string
}

// DefaultMaxElem is the kernel's default maxelem of a hash set, and the
// size of every set kube-proxy creates (no flag changes it: kubernetes
// #129389).
const DefaultMaxElem = 65536

// SetChange is one set's part of a batch: entries to add and delete.
// Add of a present entry and Del of an absent one are not errors inside a
// batch (the proxier computes the difference; a restarting proxier may race
// with state it has not yet read), matching `ipset restore -exist`.
type SetChange struct {
	Set string
	Add []string
	Del []string
}

// IPSetStrategy is how a batch of set changes reaches the kernel. The proxier
// does not care; the cost (and on the real kernel the time) differs a lot.
type IPSetStrategy string

const (
	// IPSetExec runs one `ipset add|del` process per entry, as kube-proxy does.
	IPSetExec IPSetStrategy = "exec"
	// IPSetRestore feeds the whole batch to one `ipset restore` process.
	IPSetRestore IPSetStrategy = "restore"
	// IPSetNetlink sends one netlink request per entry from the process itself.
	IPSetNetlink IPSetStrategy = "netlink"
)

// DefaultIPSetStrategy is kpsim's choice wherever none is given (scenarios,
// kpsim state, the sim, the kernel dataplane): one `ipset restore` per sync.
// kube-proxy itself runs one process per entry (IPSetExec), the incident's
// cost (docs/incident.md); a scenario asks for it with dataplane.ipset: exec.
const DefaultIPSetStrategy = IPSetRestore

// IPSetStrategies lists every strategy, in the order docs and flags show them.
var IPSetStrategies = []IPSetStrategy{IPSetExec, IPSetRestore, IPSetNetlink}

// IPSet is the kernel's ipset facility.
type IPSet interface {
	// Sets reads every set with its entries at once: how a full sync reads
	// the sets back, in one read whatever their size. However entries are
	// written (IPSetStrategy), they are read this way.
	Sets() ([]Set, error)
	// Entries reads one set's entries, as Sets lists them: how a kube-proxy
	// release reads its sets back, one `ipset list NAME` each. ENOENT if
	// the set is missing.
	Entries(name string) ([]string, error)
	CreateSet(Set) error          // EEXIST if a set of that name exists (of any type)
	DestroySet(name string) error // ENOENT if missing
	// Apply applies a batch of changes across sets. A missing set is ENOENT;
	// an entry that does not parse for the set's type is EINVAL. On error,
	// a prefix of the batch may have been applied (as with the real tools).
	Apply([]SetChange) error
}

// ---------------------------------------------------------------------------
// iptables

// IPTables is iptables for one family (iptables or ip6tables), legacy or nft.
type IPTables interface {
	// Restore applies an iptables-restore payload with --noflush --counters:
	// tables not named are untouched; a chain declared with ":NAME" is
	// created or flushed; "-X NAME" deletes a chain. The payload is atomic.
	Restore(family Family, payload []byte) error
	// Save returns iptables-save output for one table.
	Save(family Family, table string) ([]byte, error)
	// Command runs one iptables command on table, as one iptables process:
	// args as iptables takes them after -t TABLE (-N, -X, -F, -A, -I, -D,
	// -C with a chain and a rule). A command that finds no such chain, or
	// no such rule (-C, -D), fails with an error matching fs.ErrNotExist;
	// -N of a chain that exists, with one matching fs.ErrExist. How a
	// kube-proxy release ensures its chains and jumps, and cleans up.
	Command(family Family, table string, args ...string) error
}

// ---------------------------------------------------------------------------
// Links and addresses

// InterfaceAddr is an address on a named link.
type InterfaceAddr struct {
	Link   string
	Prefix netip.Prefix
}

// Links covers the dummy link kube-proxy binds service addresses to and the
// node's own addresses (NodePort binds to those).
type Links interface {
	// EnsureDummy creates a dummy link if it does not exist and sets it up;
	// it reports whether it created one.
	EnsureDummy(name string) (created bool, err error)
	DeleteLink(name string) error                          // ENOENT if missing
	Addresses(link string, f Family) ([]netip.Addr, error) // ENOENT if the link is missing
	AddAddress(link string, p netip.Prefix) error          // EEXIST if bound
	DelAddress(link string, p netip.Prefix) error          // not bound: an error matching fs.ErrNotExist (the kernel says EADDRNOTAVAIL; wrap ENOENT too)
	// LocalAddresses lists every address of the family on every link that is
	// up, excluding the named dummy links (kube-ipvs0 is not a node address).
	LocalAddresses(f Family, exclude ...string) ([]InterfaceAddr, error)
}

// ---------------------------------------------------------------------------
// Sysctls and conntrack

// Sysctls reads and writes /proc/sys keys such as "net/ipv4/vs/conntrack".
type Sysctls interface {
	Sysctl(key string) (string, error) // ENOENT if unknown
	SetSysctl(key, value string) error
}

// ConntrackFilter selects conntrack entries to delete. Zero fields match anything;
// at least one address must be set.
type ConntrackFilter struct {
	Protocol Protocol
	// OrigDst / OrigDstPort: the address the client dialled (a service address).
	OrigDst     netip.Addr
	OrigDstPort uint16
	// ReplySrc / ReplySrcPort: the endpoint that answered.
	ReplySrc     netip.Addr
	ReplySrcPort uint16
}

// ConntrackFlow is a conntrack entry: a client's flow to the address it
// dialled, and the endpoint that answers it.
type ConntrackFlow struct {
	Protocol Protocol
	Client   netip.AddrPort
	OrigDst  netip.AddrPort // the service address the client dialled
	ReplySrc netip.AddrPort // the endpoint that answers
}

// Conntrack lists and deletes connection tracking entries (kube-proxy
// clears stale UDP flows: kpsim's proxier by filter, a kube-proxy release
// since 1.31 by listing the table and deleting what it finds stale).
type Conntrack interface {
	// Flows lists the family's entries, as `conntrack -L` does.
	Flows(Family) ([]ConntrackFlow, error)
	Delete(ConntrackFilter) (deleted int, err error)
}

// ---------------------------------------------------------------------------
// nftables

// NFTables is nf_tables: tables of chains, rules, sets and maps, changed by
// transactions that apply atomically, as `nft -f` applies them, and read by
// listings. kube-proxy's nftables mode programs it through
// sigs.k8s.io/knftables, one knftables.Interface per table; so does
// everything here: the in-memory kernel holds each table in knftables' own
// types (sim/nftstate.go), the real kernel runs the nft binary in the run's
// namespace. kpsim's own proxier is an IPVS proxier and does not
// use it.
type NFTables interface {
	// Table is nft for one table of a family, as knftables.New(family,
	// name, options...) is (knftables.UseNetlink lists names over
	// netlink). The table need not exist; a transaction creates it.
	Table(family knftables.Family, name string, options ...knftables.Option) (knftables.Interface, error)
}

// NFTablesTable is the table kube-proxy's nftables mode programs, in the
// ip and the ip6 family.
const NFTablesTable = "kube-proxy"

// NFTablesFamily is the nftables family of an IP family.
func NFTablesFamily(f Family) knftables.Family {
	if f == IPv6 {
		return knftables.IPv6Family
	}
	return knftables.IPv4Family
}

// ---------------------------------------------------------------------------

// Dataplane is one node's kernel as the proxier sees it.
type Dataplane struct {
	IPVS      IPVS
	IPSet     IPSet
	IPTables  IPTables
	Links     Links
	Sysctls   Sysctls
	Conntrack Conntrack
	// NFTables is nf_tables; nil where the dataplane has none (the replay
	// of kpsim's IPVS proxier).
	NFTables NFTables
	// Model, when set, is the in-memory kernel's account of the time a real
	// node would take; nil for the real kernel, where time is measured.
	Model Model
}

// Backend names: the dataplane a run programs, as scenarios, results,
// sweeps and the command line spell it, declared once.
const (
	BackendSim    = "sim"    // the in-memory kernel (sim/)
	BackendKernel = "kernel" // the real kernel, in the run's network namespaces (kernel/)
)

// Backends lists the backend names.
var Backends = []string{BackendSim, BackendKernel}

// Basis says whether a duration was measured on a kernel or includes modeled cost.
func (d Dataplane) Basis() string {
	if d.Model != nil {
		return "modeled"
	}
	return "measured"
}
