package kernel

import (
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/internal/hosttools"
	"github.com/kpsim/kpsim/kernel/netns"
	"github.com/kpsim/kpsim/kernel/netns/netnstest"
)

func TestNewRefusesTheStartingNamespace(t *testing.T) {
	if netns.Isolated() {
		t.Skip("already isolated")
	}
	_, err := New(Options{})
	require.ErrorIs(t, err, netns.ErrNotIsolated)
}

func TestNewRejectsBadOptions(t *testing.T) {
	if !netnstest.Private(t) {
		return
	}
	_, err := New(Options{IPTablesMode: "xtables"})
	require.ErrorContains(t, err, "want legacy or nft")
	_, err = New(Options{IPSetStrategy: "carrier-pigeon"})
	require.ErrorContains(t, err, "want one of")
}

// TestLinksOnVeth covers what the host kernel can do without dummy links:
// addresses on a veth link, node addresses, and the clear error a dummy
// create gets here.
func TestLinksOnVeth(t *testing.T) {
	if !netnstest.Private(t) {
		return
	}
	k, err := New(Options{})
	require.NoError(t, err)
	defer k.Close()
	links := k.Dataplane().Links
	require.NoError(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0-peer"}))
	eth0, err := netlink.LinkByName("eth0")
	require.NoError(t, err)
	require.NoError(t, netlink.LinkSetUp(eth0))

	for _, tc := range []struct {
		f    dataplane.Family
		node netip.Prefix
	}{
		{dataplane.IPv4, netip.MustParsePrefix("192.168.0.10/24")},
		{dataplane.IPv6, netip.MustParsePrefix("fd00::10/64")},
	} {
		t.Run(string(tc.f), func(t *testing.T) {
			require.NoError(t, links.AddAddress("eth0", tc.node))
			require.ErrorIs(t, links.AddAddress("eth0", tc.node), fs.ErrExist)
			got, err := links.Addresses("eth0", tc.f)
			require.NoError(t, err)
			require.Contains(t, got, tc.node.Addr())
			local, err := links.LocalAddresses(tc.f)
			require.NoError(t, err)
			require.Contains(t, local, dataplane.InterfaceAddr{Link: "eth0", Prefix: tc.node})
			local, err = links.LocalAddresses(tc.f, "eth0")
			require.NoError(t, err)
			require.NotContains(t, local, dataplane.InterfaceAddr{Link: "eth0", Prefix: tc.node})
			require.NoError(t, links.DelAddress("eth0", tc.node))
			err = links.DelAddress("eth0", tc.node)
			require.ErrorIs(t, err, fs.ErrNotExist)
			require.ErrorIs(t, err, unix.EADDRNOTAVAIL, "the kernel's own answer is kept")
		})
	}
	_, err = links.Addresses("nope0", dataplane.IPv4)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorIs(t, links.DeleteLink("nope0"), fs.ErrNotExist)

	_, err = links.EnsureDummy("eth0")
	require.ErrorIs(t, err, fs.ErrExist, "a veth holds the name")
	created, err := links.EnsureDummy("kube-ipvs0")
	if Detect().Dummy.OK {
		require.NoError(t, err)
		require.True(t, created)
	} else {
		require.ErrorIs(t, err, errNoDummy)
		require.ErrorIs(t, err, unix.EOPNOTSUPP)
	}
	require.NoError(t, links.DeleteLink("eth0"))
}

func TestSysctlKeys(t *testing.T) {
	for _, tc := range []struct {
		key, path string
	}{
		{"net/ipv4/vs/conntrack", "/proc/sys/net/ipv4/vs/conntrack"},
		{"net.ipv4.ip_forward", "/proc/sys/net/ipv4/ip_forward"},
		{"net/ipv4/conf/eth0.100/arp_ignore", "/proc/sys/net/ipv4/conf/eth0.100/arp_ignore"},
		{"net/../../etc/passwd", ""},
		{"/net/ipv4/ip_forward", ""},
		{"", ""},
	} {
		t.Run(tc.key, func(t *testing.T) {
			p, err := sysctlPath(tc.key)
			if tc.path == "" {
				require.ErrorIs(t, err, unix.EINVAL)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.path, p)
		})
	}
}

func TestSysctlsPerNamespace(t *testing.T) {
	if !netnstest.Private(t) {
		return
	}
	k, err := New(Options{})
	require.NoError(t, err)
	defer k.Close()
	s := k.Dataplane().Sysctls
	require.NoError(t, s.SetSysctl("net/ipv4/ip_forward", "1"))
	got, err := s.Sysctl("net.ipv4.ip_forward")
	require.NoError(t, err)
	require.Equal(t, "1", got)
	require.ErrorIs(t, s.SetSysctl("net/ipv4/no_such_key_kpsim", "1"), fs.ErrNotExist)
}

// TestConntrackDelete creates flows through ctnetlink and deletes them by
// the filters kube-proxy uses, reply source port included.
func TestConntrackDelete(t *testing.T) {
	if !netnstest.Private(t) {
		return
	}
	if c := Detect().Conntrack; !c.OK {
		t.Skip("needs conntrack: " + c.Detail)
	}
	k, err := New(Options{})
	require.NoError(t, err)
	defer k.Close()
	ct := k.Dataplane().Conntrack
	// netlink encodes an address by its length: IPv4 must be 4 bytes.
	ip4 := func(s string) net.IP { return net.ParseIP(s).To4() }
	flow := func(client string, sport uint16, vip string, vport uint16, ep string, eport uint16) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{
			FamilyType: unix.AF_INET,
			Forward: netlink.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: ip4(client), SrcPort: sport,
				DstIP: ip4(vip), DstPort: vport},
			Reverse: netlink.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: ip4(ep), SrcPort: eport,
				DstIP: ip4(client), DstPort: sport},
			TimeOut: 120,
		}
	}
	flows := []*netlink.ConntrackFlow{
		flow("10.0.0.2", 40001, "10.96.0.10", 53, "10.244.1.5", 53),
		flow("10.0.0.2", 40002, "10.96.0.10", 53, "10.244.1.6", 53),
		flow("10.0.0.2", 40003, "10.96.0.10", 5353, "10.244.1.5", 5353),
		flow("10.0.0.3", 40004, "10.96.0.11", 53, "10.244.1.5", 53),
	}
	for _, f := range flows {
		require.NoError(t, k.link.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, f))
	}
	for _, tc := range []struct {
		name   string
		filter dataplane.ConntrackFilter
		want   int
	}{
		{"other protocol", dataplane.ConntrackFilter{Protocol: dataplane.TCP, OrigDst: netip.MustParseAddr("10.96.0.10")}, 0},
		{"service port", dataplane.ConntrackFilter{Protocol: dataplane.UDP, OrigDst: netip.MustParseAddr("10.96.0.10"), OrigDstPort: 5353}, 1},
		{"endpoint and port", dataplane.ConntrackFilter{Protocol: dataplane.UDP, ReplySrc: netip.MustParseAddr("10.244.1.6"), ReplySrcPort: 53}, 1},
		{"service", dataplane.ConntrackFilter{Protocol: dataplane.UDP, OrigDst: netip.MustParseAddr("10.96.0.10")}, 1},
		{"again", dataplane.ConntrackFilter{Protocol: dataplane.UDP, OrigDst: netip.MustParseAddr("10.96.0.10")}, 0},
		{"endpoint", dataplane.ConntrackFilter{ReplySrc: netip.MustParseAddr("10.244.1.5")}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := ct.Delete(tc.filter)
			require.NoError(t, err)
			require.Equal(t, tc.want, n)
		})
	}
	left, err := k.link.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	require.NoError(t, err)
	require.Empty(t, left)
	_, err = ct.Delete(dataplane.ConntrackFilter{Protocol: dataplane.UDP})
	require.ErrorIs(t, err, unix.EINVAL)
}

// TestDetectIPTablesMode follows kube-proxy's image: kubelet's hint chain
// decides, nft first; nothing found means nft.
func TestDetectIPTablesMode(t *testing.T) {
	if !netnstest.Private(t) {
		return
	}
	hosttools.Require(t, "iptables-legacy-save", "ip6tables-legacy-save", "iptables-legacy-restore",
		"iptables-nft-save", "ip6tables-nft-save", "iptables-nft-restore")
	require.Equal(t, "nft", DetectIPTablesMode(), "no rules anywhere")
	hint := func(mode string) {
		_, err := run([]byte("*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n"), "iptables-"+mode+"-restore", "--noflush")
		require.NoError(t, err)
	}
	hint("legacy")
	require.Equal(t, "legacy", DetectIPTablesMode(), "kubelet's hint in legacy")
	hint("nft")
	require.Equal(t, "nft", DetectIPTablesMode(), "kubelet's hint in both: nft is asked first")
	k, err := New(Options{})
	require.NoError(t, err)
	defer k.Close()
	require.Equal(t, "nft", k.IPTablesMode(), "New detects when not told")
	k2, err := New(Options{IPTablesMode: "legacy"})
	require.NoError(t, err)
	defer k2.Close()
	require.Equal(t, "legacy", k2.IPTablesMode())
}

func TestToolErrorErrno(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want error
	}{
		{"ipset v7.17: The set with the given name does not exist", unix.ENOENT},
		{"ipset v7.17: Set cannot be created: set with the same name already exists", unix.EEXIST},
		{"ipset v7.17: Syntax error: cannot parse 10.0.0.300: resolving to IPv4 address failed", unix.EINVAL},
		{"ipset v7.17: Hash is full, cannot add more elements", unix.ENOSPC},
		{"ipset v7.17: Set cannot be destroyed: it is in use by a kernel component", unix.EBUSY},
		{"iptables-restore: line 3 failed", nil},
	} {
		t.Run(tc.msg, func(t *testing.T) {
			err := &toolError{tool: "ipset", msg: tc.msg}
			require.Equal(t, tc.want, err.Unwrap())
			require.True(t, strings.HasPrefix(err.Error(), "ipset: "))
		})
	}
}

// TestIPVSReadBack checks what the kernel adds on its own: the hashed flag,
// and that a netmask, a persistence timeout and weights come back as written.
// Without IPVS (the host kernel) every call says why.
func TestIPVSReadBack(t *testing.T) {
	if !netnstest.Private(t) {
		return
	}
	k, err := New(Options{})
	require.NoError(t, err)
	defer k.Close()
	ipvs := k.Dataplane().IPVS
	vs := dataplane.VirtualServer{
		ServiceKey: dataplane.ServiceKey{Address: netip.MustParseAddr("fd00:10:96::a"), Port: 443, Protocol: dataplane.TCP},
		Scheduler:  "rr", Flags: dataplane.FlagPersistent | dataplane.FlagHashed, Timeout: 10800, Netmask: 128,
	}
	if c := Detect().IPVS; !c.OK {
		err := ipvs.AddService(vs)
		require.ErrorIs(t, err, unix.EPROTONOSUPPORT)
		require.ErrorContains(t, err, "ipvs add-service [fd00:10:96::a]:443/TCP: module ip_vs not available")
		_, err = ipvs.Services()
		require.ErrorIs(t, err, unix.EPROTONOSUPPORT)
		return
	}
	require.NoError(t, ipvs.AddService(vs))
	list, err := ipvs.Services()
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, vs, list[0])
	require.NoError(t, ipvs.AddDestination(vs.ServiceKey, dataplane.RealServer{Address: netip.MustParseAddr("fd00:10:244::5"), Port: 8443, Weight: 3}))
	dsts, err := ipvs.Destinations(vs.ServiceKey)
	require.NoError(t, err)
	require.Equal(t, []dataplane.RealServer{{Address: netip.MustParseAddr("fd00:10:244::5"), Port: 8443, Weight: 3}}, dsts)

	missing := vs.ServiceKey
	missing.Port = 444
	err = ipvs.UpdateService(dataplane.VirtualServer{ServiceKey: missing, Scheduler: "rr", Netmask: 128})
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorIs(t, err, unix.ENOENT, "IPVS says ESRCH; the contract says ENOENT")
	_, err = ipvs.Destinations(missing)
	require.ErrorIs(t, err, unix.ENOENT)
}

// TestParseProcDestinations reads /proc/net/ip_vs as Debian's 6.1 kernel
// printed it in the VM for IPv4, IPv6, persistent, firewall-mark and
// destination-less services.
func TestParseProcDestinations(t *testing.T) {
	const proc = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
SCTP  0A600004:0050 rr  
TCP  [fd00:0000:0000:0000:0000:0000:0000:0001]:0050 rr persistent 75000 80000000
  -> [fd00:0001:0000:0000:0000:0000:0000:0001]:1F90      Masq    1      0          0         
TCP  0A600001:0050 rr  persistent 2700000 FFFFFFFF
  -> 0A000002:1F90      Masq    0      3          7         
  -> 0A000001:1F90      Masq    1      0          0         
FWM  00000001 rr  
  -> 0A000003:1F90      Masq    1      0          0         
UDP  0A600003:0035 rr  
`
	key := func(a string, port uint16, p dataplane.Protocol) dataplane.ServiceKey {
		return dataplane.ServiceKey{Address: netip.MustParseAddr(a), Port: port, Protocol: p}
	}
	rs := func(a string, port uint16, w, active, inactive int) dataplane.RealServer {
		return dataplane.RealServer{Address: netip.MustParseAddr(a), Port: port, Weight: w, ActiveConns: active, InactiveConns: inactive}
	}
	got, err := parseProcDestinations([]byte(proc))
	require.NoError(t, err)
	require.Equal(t, map[dataplane.ServiceKey][]dataplane.RealServer{
		key("fd00::1", 80, dataplane.TCP):   {rs("fd00:1::1", 8080, 1, 0, 0)},
		key("10.96.0.1", 80, dataplane.TCP): {rs("10.0.0.2", 8080, 0, 3, 7), rs("10.0.0.1", 8080, 1, 0, 0)},
	}, got)

	_, err = parseProcDestinations([]byte("TCP  0A6000:0050 rr\n"))
	require.ErrorContains(t, err, "/proc/net/ip_vs")
	_, err = parseProcDestinations([]byte("TCP  0A600001:0050 rr\n  -> 0A000001:1F90 Masq x 0 0\n"))
	require.ErrorIs(t, err, unix.EINVAL)
}

func TestRedump(t *testing.T) {
	other := errors.New("netlink: no buffer space")
	for _, tc := range []struct {
		name      string
		answers   []error // per call; the last one repeats
		wantCalls int
		wantErr   error
	}{
		{"first answer", []error{nil}, 1, nil},
		{"interrupted twice", []error{nl.ErrDumpInterrupted, nl.ErrDumpInterrupted, nil}, 3, nil},
		{"always interrupted", []error{nl.ErrDumpInterrupted}, dumpAttempts, nl.ErrDumpInterrupted},
		{"other errors are not retried", []error{other}, 1, other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			v, err := redump(func() (int, error) {
				err := tc.answers[min(calls, len(tc.answers)-1)]
				calls++
				return calls, err
			})
			require.Equal(t, tc.wantCalls, calls)
			require.Equal(t, calls, v, "the last answer is returned")
			if tc.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.wantErr)
			}
		})
	}
}
