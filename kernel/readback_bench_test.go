package kernel

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/internal/hosttools"
	"github.com/kpsim/kpsim/kernel/netns/netnstest"
)

// BenchmarkReadBack measures the ways a full sync can read the whole kernel
// back, at the size of a large node: 5,000 ClusterIP virtual servers with 3
// real servers each, and kube-proxy's 17 sets with the entries those
// services put in them. The dataplane reads one way (Services: a netlink
// dump of the virtual servers and /proc/net/ip_vs for their real servers;
// Sets: one netlink dump of every set); the other candidates are here to
// show why. The IPVS part needs IPVS (make test-kernel runs it in the VM):
//
//	go test ./kernel -run '^$' -bench ReadBack -benchtime 5x
func BenchmarkReadBack(b *testing.B) {
	hosttools.Require(b, "ipset") // fills the sets with ipset restore, and is one of the reads
	if !netnstest.Private(b) {
		return
	}
	_, err := os.Stat(procIPVS)
	haveIPVS := err == nil
	const services, dests = 5000, 3
	k, err := New(Options{IPSetStrategy: dataplane.IPSetRestore})
	require.NoError(b, err)
	defer k.Close()
	dp := k.Dataplane()
	var script strings.Builder
	for _, s := range []string{"KUBE-CLUSTER-IP hash:ip,port", "KUBE-IPVS-IPS hash:ip", "KUBE-LOOP-BACK hash:ip,port,ip",
		"KUBE-EXTERNAL-IP hash:ip,port", "KUBE-EXTERNAL-IP-LOCAL hash:ip,port", "KUBE-LOAD-BALANCER hash:ip,port",
		"KUBE-LOAD-BALANCER-LOCAL hash:ip,port", "KUBE-LOAD-BALANCER-FW hash:ip,port", "KUBE-LOAD-BALANCER-SOURCE-IP hash:ip,port,ip",
		"KUBE-LOAD-BALANCER-SOURCE-CIDR hash:ip,port,net", "KUBE-NODE-PORT-LOCAL-SCTP-HASH hash:ip,port", "KUBE-NODE-PORT-SCTP-HASH hash:ip,port"} {
		fmt.Fprintf(&script, "create %s\n", s)
	}
	for _, s := range []string{"KUBE-NODE-PORT-TCP", "KUBE-NODE-PORT-UDP", "KUBE-NODE-PORT-LOCAL-TCP", "KUBE-NODE-PORT-LOCAL-UDP", "KUBE-HEALTH-CHECK-NODE-PORT"} {
		fmt.Fprintf(&script, "create %s bitmap:port range 0-65535\n", s)
	}
	for i := range services {
		vip := netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)})
		key := dataplane.ServiceKey{Address: vip, Port: 80, Protocol: dataplane.TCP}
		if haveIPVS {
			require.NoError(b, dp.IPVS.AddService(dataplane.VirtualServer{ServiceKey: key, Scheduler: "rr", Netmask: 0xffffffff}))
			for j := range dests {
				ep := netip.AddrFrom4([4]byte{10, byte(1 + j), byte(i / 250), byte(i%250 + 1)})
				require.NoError(b, dp.IPVS.AddDestination(key, dataplane.RealServer{Address: ep, Port: 8080, Weight: 1}))
			}
		}
		fmt.Fprintf(&script, "add KUBE-CLUSTER-IP %s,tcp:80\nadd KUBE-IPVS-IPS %s\n", vip, vip)
		if i%3 == 0 {
			ep := netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(i%250 + 1)})
			fmt.Fprintf(&script, "add KUBE-LOOP-BACK %s,tcp:8080,%s\n", ep, ep)
		}
	}
	_, err = run([]byte(script.String()), "ipset", "restore")
	require.NoError(b, err)

	wantDests := services * dests
	ipvsReads := []struct {
		name string
		read func() (int, error)
	}{
		{"ipvs/netlink-per-service", func() (int, error) {
			vss, err := dp.IPVS.Services()
			n := 0
			for _, vs := range vss {
				ds, err := dp.IPVS.Destinations(vs.ServiceKey)
				if err != nil {
					return 0, err
				}
				n += len(ds)
			}
			return n, err
		}},
		// Misses flags, the netmask and the timeout in seconds: not enough.
		{"ipvs/proc", func() (int, error) {
			dests, err := readProcDestinations()
			n := 0
			for _, ds := range dests {
				n += len(ds)
			}
			return n, err
		}},
		{"ipvs/netlink-services+proc (Services)", func() (int, error) {
			vss, err := dp.IPVS.Services()
			n := 0
			for _, vs := range vss {
				n += len(vs.Destinations)
			}
			return n, err
		}},
	}
	for _, r := range ipvsReads {
		b.Run(r.name, func(b *testing.B) {
			if !haveIPVS {
				b.Skip("needs IPVS")
			}
			for b.Loop() {
				n, err := r.read()
				require.NoError(b, err)
				require.Equal(b, wantDests, n)
			}
		})
	}

	wantEntries := 2*services + (services+2)/3
	ipsetReads := []struct {
		name string
		read func() (int, error)
	}{
		// kube-proxy's way: the header of every set, then `ipset list` per set.
		{"ipset/tool-per-set", func() (int, error) {
			out, err := run(nil, "ipset", "list", "-n")
			if err != nil {
				return 0, err
			}
			n := 0
			for _, name := range strings.Fields(string(out)) {
				out, err := run(nil, "ipset", "save", name)
				if err != nil {
					return 0, err
				}
				n += bytes.Count(out, []byte("\nadd "))
			}
			return n, nil
		}},
		{"ipset/tool-all", func() (int, error) {
			out, err := run(nil, "ipset", "save")
			return bytes.Count(out, []byte("\nadd ")), err
		}},
		{"ipset/netlink-per-set", func() (int, error) {
			sets, err := k.ipsetNL.Sets()
			if err != nil {
				return 0, err
			}
			n := 0
			for _, st := range sets {
				if err := k.ipsetNL.list(st.Name, 0, func(_ dataplane.Set, entries []setEntry) { n += len(entries) }); err != nil {
					return 0, err
				}
			}
			return n, nil
		}},
		{"ipset/netlink-all (Sets)", func() (int, error) {
			sets, err := dp.IPSet.Sets()
			n := 0
			for _, st := range sets {
				n += len(st.Entries)
			}
			return n, err
		}},
	}
	for _, r := range ipsetReads {
		b.Run(r.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				n, err := r.read()
				require.NoError(b, err)
				require.Equal(b, wantEntries, n)
			}
		})
	}
}
