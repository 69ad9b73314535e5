package proxier

import (
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/sim"
)

func key(s string) dataplane.ServiceKey {
	ap, proto, _ := cut(s, "/")
	a := netip.MustParseAddrPort(ap)
	return dataplane.ServiceKey{Address: a.Addr(), Port: a.Port(), Protocol: dataplane.Protocol(proto)}
}

func cut(s, sep string) (string, string, bool) {
	for i := len(s) - len(sep); i >= 0; i-- {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}

func TestIncrementalSyncTouchesOnlyChanges(t *testing.T) {
	e := newEnv(t, Config{})
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	for i := range 20 {
		p.OnServiceAdd(service("default", fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.0.%d", i+1)))
		p.OnEndpointSliceAdd(slice("default", fmt.Sprintf("s%d", i), fmt.Sprintf("s%d-1", i), 8080, v1.ProtocolTCP, eps("10.0.0.1", "10.0.0.2")...))
	}
	e.sync(p)

	tests := []struct {
		name   string
		change func()
		writes dataplane.Ops
	}{
		{
			name: "an endpoint added",
			change: func() {
				p.OnEndpointSliceUpdate(nil, slice("default", "s3", "s3-1", 8080, v1.ProtocolTCP, eps("10.0.0.1", "10.0.0.2", "10.0.0.3")...))
			},
			writes: ops(dataplane.OpIPVSDestinationAdd, 1),
		},
		{
			name: "an endpoint removed (no connections: deleted at once)",
			change: func() {
				p.OnEndpointSliceUpdate(nil, slice("default", "s3", "s3-1", 8080, v1.ProtocolTCP, eps("10.0.0.1", "10.0.0.2")...))
			},
			writes: ops(dataplane.OpIPVSDestinationDelete, 1),
		},
		{
			name:   "a service added",
			change: func() { p.OnServiceAdd(service("default", "new", "10.96.1.1")) },
			writes: ops(dataplane.OpIPVSServiceAdd, 1, dataplane.OpIPSetAdd, 2, dataplane.OpAddressBind, 1),
		},
		{
			name:   "a service deleted",
			change: func() { p.OnServiceDelete(service("default", "new", "10.96.1.1")) },
			writes: ops(dataplane.OpIPVSServiceDelete, 1, dataplane.OpIPSetDel, 2, dataplane.OpAddressUnbind, 1),
		},
		{
			name: "added then deleted before a sync: no change",
			change: func() {
				p.OnServiceAdd(service("default", "blip", "10.96.1.2"))
				p.OnServiceDelete(service("default", "blip", "10.96.1.2"))
			},
		},
		{
			name: "changed and changed back before a sync: no change",
			change: func() {
				p.OnEndpointSliceUpdate(nil, slice("default", "s4", "s4-1", 8080, v1.ProtocolTCP, eps("10.0.0.9")...))
				p.OnEndpointSliceUpdate(nil, slice("default", "s4", "s4-1", 8080, v1.ProtocolTCP, eps("10.0.0.1", "10.0.0.2")...))
			},
		},
		{
			name:   "the first NodePort service changes the iptables rules",
			change: func() { p.OnServiceUpdate(nil, service("default", "s5", "10.96.0.6", withNodePort(30005))) },
			writes: ops(dataplane.OpIPVSServiceAdd, 1, dataplane.OpIPVSDestinationAdd, 2, dataplane.OpIPSetAdd, 1, dataplane.OpIPTablesRestore, 1),
		},
		{name: "nothing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.change != nil {
				tc.change()
			}
			rec := e.sync(p)
			require.False(t, rec.Full)
			got := rec.Ops
			got[dataplane.OpIPTablesRestoreBytes] = 0
			for i := range got {
				if !dataplane.Op(i).IsWrite() {
					got[i] = 0
				}
			}
			require.Equal(t, tc.writes, got, "%v", rec.Ops)
			if writes(tc.writes) == 0 {
				// No kernel reads either outside full syncs.
				require.Zero(t, rec.Ops[dataplane.OpIPVSList]+rec.Ops[dataplane.OpIPSetList]+rec.Ops[dataplane.OpIPTablesSave]+rec.Ops[dataplane.OpAddressList])
			}
		})
	}
}

func ops(kv ...any) dataplane.Ops {
	var o dataplane.Ops
	for i := 0; i < len(kv); i += 2 {
		o[kv[i].(dataplane.Op)] = int64(kv[i+1].(int))
	}
	return o
}

func TestGracefulTermination(t *testing.T) {
	const vip = "10.96.0.10:80/TCP"
	b := netip.MustParseAddrPort("10.0.0.2:8080")
	tests := []struct {
		name  string
		proto v1.Protocol
		conns int
		// after the endpoint goes away; then after each retry interval
		afterRemove []string
		steps       []func(e *env, p *Proxier)
		final       []string
	}{
		{
			name: "no connections: deleted at once", proto: v1.ProtocolTCP,
			afterRemove: []string{"10.0.0.1:8080 w1"},
			final:       []string{"10.0.0.1:8080 w1"},
		},
		{
			name: "connections: drained at weight 0 until they are gone", proto: v1.ProtocolTCP, conns: 3,
			afterRemove: []string{"10.0.0.1:8080 w1", "10.0.0.2:8080 w0"},
			steps: []func(e *env, p *Proxier){
				func(e *env, p *Proxier) { // a retry interval later, still busy
					e.clock.Step(time.Minute)
					e.sync(p)
					require.Equal(t, []string{"10.0.0.1:8080 w1", "10.0.0.2:8080 w0"}, ipvsState(t, e.k, dataplane.IPv4)[vip])
				},
				func(e *env, p *Proxier) { // connections end; not checked before the interval
					require.NoError(t, e.k.SetConnections(key(vip), b, 0, 0))
					e.clock.Step(30 * time.Second)
					e.sync(p)
					require.Equal(t, []string{"10.0.0.1:8080 w1", "10.0.0.2:8080 w0"}, ipvsState(t, e.k, dataplane.IPv4)[vip])
					e.clock.Step(30 * time.Second)
					rec := e.sync(p)
					require.Equal(t, int64(1), rec.Ops[dataplane.OpIPVSDestinationDelete])
				},
			},
			final: []string{"10.0.0.1:8080 w1"},
		},
		{
			name: "an endpoint that comes back is restored to weight 1", proto: v1.ProtocolTCP, conns: 1,
			afterRemove: []string{"10.0.0.1:8080 w1", "10.0.0.2:8080 w0"},
			steps: []func(e *env, p *Proxier){
				func(e *env, p *Proxier) {
					p.OnEndpointSliceUpdate(nil, slice("default", "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1", "10.0.0.2")...))
					rec := e.sync(p)
					require.Equal(t, int64(1), rec.Ops[dataplane.OpIPVSDestinationUpdate])
					e.clock.Step(time.Hour)
					require.Zero(t, writes(e.sync(p).Ops), "no longer draining")
				},
			},
			final: []string{"10.0.0.1:8080 w1", "10.0.0.2:8080 w1"},
		},
		{
			name: "UDP: deleted at once even with connections", proto: v1.ProtocolUDP, conns: 5,
			afterRemove: []string{"10.0.0.1:8080 w1"},
			final:       []string{"10.0.0.1:8080 w1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			p := e.synced(e.proxier(dataplane.IPv4, 0))
			p.OnServiceAdd(service("default", "web", "10.96.0.10", withProtocol(tc.proto)))
			p.OnEndpointSliceAdd(slice("default", "web", "web-1", 8080, tc.proto, eps("10.0.0.1", "10.0.0.2")...))
			e.sync(p)
			k := key("10.96.0.10:80/" + string(tc.proto))
			if tc.conns > 0 {
				require.NoError(t, e.k.SetConnections(k, b, tc.conns, 0))
			}
			// The endpoint terminates.
			p.OnEndpointSliceUpdate(nil, slice("default", "web", "web-1", 8080, tc.proto, ep{ip: "10.0.0.1"}, ep{ip: "10.0.0.2", terminating: true, notReady: true}))
			e.sync(p)
			require.Equal(t, tc.afterRemove, ipvsState(t, e.k, dataplane.IPv4)[k.String()])
			for _, step := range tc.steps {
				step(e, p)
			}
			require.Equal(t, tc.final, ipvsState(t, e.k, dataplane.IPv4)[k.String()])
		})
	}
}

func TestGracefulTerminationAsksToRunAgain(t *testing.T) {
	e := newEnv(t, Config{GracefulTerminationRetry: 10 * time.Second})
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	p.OnServiceAdd(service("default", "web", "10.96.0.10"))
	p.OnEndpointSliceAdd(slice("default", "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...))
	_, again := p.sync(TriggerInitial)
	require.True(t, again.IsZero())
	require.NoError(t, e.k.SetConnections(key("10.96.0.10:80/TCP"), netip.MustParseAddrPort("10.0.0.1:8080"), 1, 1))
	p.OnEndpointSliceUpdate(nil, slice("default", "web", "web-1", 8080, v1.ProtocolTCP))
	_, again = p.sync(TriggerChanges)
	require.Equal(t, e.clock.Now().Add(10*time.Second), again)
}

func TestDualStack(t *testing.T) {
	e := newEnv(t, Config{Families: []dataplane.Family{dataplane.IPv4, dataplane.IPv6}, ClusterCIDRs: []string{"10.244.0.0/16", "fd00:244::/56"}})
	p4 := e.synced(e.proxier(dataplane.IPv4, 0))
	p6 := e.synced(e.proxier(dataplane.IPv6, 0))
	svc := service("default", "web", "10.96.0.10", withClusterIPs("10.96.0.10", "fd00:96::10"), withLB("198.51.100.1", "2001:db8::1"),
		withSourceRanges("203.0.113.0/24", "2001:db8:1::/48"))
	s4 := slice("default", "web", "web-v4", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)
	s6 := slice("default", "web", "web-v6", 8080, v1.ProtocolTCP, ep{ip: "fd00:1::1", local: true})
	for _, p := range []*Proxier{p4, p6} {
		p.OnServiceAdd(svc)
		p.OnEndpointSliceAdd(s4)
		p.OnEndpointSliceAdd(s6)
		e.sync(p)
	}
	require.Equal(t, map[string][]string{
		"10.96.0.10:80/TCP":      {"10.0.0.1:8080 w1"},
		"198.51.100.1:80/TCP":    {"10.0.0.1:8080 w1"},
		"192.168.0.10:30500/TCP": {"10.0.0.1:8080 w1"},
	}, ipvsState(t, e.k, dataplane.IPv4))
	require.Equal(t, map[string][]string{
		"[fd00:96::10]:80/TCP": {"[fd00:1::1]:8080 w1"},
		"[2001:db8::1]:80/TCP": {"[fd00:1::1]:8080 w1"},
		"[fd00::10]:30500/TCP": {"[fd00:1::1]:8080 w1"},
	}, ipvsState(t, e.k, dataplane.IPv6))
	require.Equal(t, map[string][]string{
		"KUBE-6-CLUSTER-IP":               {"fd00:96::10,tcp:80"},
		"KUBE-6-IPVS-IPS":                 {"2001:db8::1", "fd00:96::10"},
		"KUBE-6-LOAD-BALANCER":            {"2001:db8::1,tcp:80"},
		"KUBE-6-LOAD-BALANCER-FW":         {"2001:db8::1,tcp:80"},
		"KUBE-6-LOAD-BALANCER-SOURCE-CID": {"2001:db8::1,tcp:80,2001:db8:1::/48"},
		"KUBE-6-LOOP-BACK":                {"fd00:1::1,tcp:8080,fd00:1::1"},
		"KUBE-6-NODE-PORT-TCP":            {"30500"},
	}, setState(t, e.k, dataplane.IPv6))
	require.Equal(t, []string{"2001:db8::1", "fd00:96::10"}, boundAddrs(t, e.k, dataplane.IPv6))
	require.Equal(t, []string{"10.96.0.10", "198.51.100.1"}, boundAddrs(t, e.k, dataplane.IPv4))
	require.Contains(t, SetNames(dataplane.IPv6), "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS")

	nat6 := ruleLines(t, e.k, dataplane.IPv6, "nat")
	require.Contains(t, nat6, `-A KUBE-SERVICES -s ::1/128 -j RETURN`)
	require.Contains(t, nat6, `-A KUBE-SERVICES ! -s fd00:244::/56 -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-6-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ`)
	require.Contains(t, ruleLines(t, e.k, dataplane.IPv6, "filter"), `-A KUBE-IPVS-OUT-FILTER -s 2001:db8::1/128 -m ipvs --vproto 6 --vaddr 2001:db8::1 --vport 80 -j DROP`)
	require.Contains(t, ruleLines(t, e.k, dataplane.IPv4, "nat"), `-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ`)

	// Each family's full verification leaves the other's state alone.
	for _, p := range []*Proxier{p4, p6} {
		rec := p.SyncFull()
		require.Empty(t, rec.Error)
		require.Zero(t, writes(rec.Ops), "%s: %v", p.Family(), rec.Ops)
	}
	require.Len(t, ipvsState(t, e.k, dataplane.IPv4), 3)
	require.Len(t, ipvsState(t, e.k, dataplane.IPv6), 3)
}

// populate tells p about n ClusterIP services with 3 endpoints each.
func populate(p *Proxier, n int) { populateWith(p, n, 3, 0) }

// populateWith tells p about n services, each with the given number of
// endpoints and, when nodePortEvery > 0, a node port on every
// nodePortEvery-th.
func populateWith(p *Proxier, n, endpoints, nodePortEvery int) {
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		var opts []svcOpt
		if nodePortEvery > 0 && i%nodePortEvery == 0 {
			opts = append(opts, withNodePort(int32(30000+i%2000)))
		}
		p.OnServiceAdd(service("default", name, ip, opts...))
		addrs := make([]string, endpoints)
		for j := range addrs {
			addrs[j] = fmt.Sprintf("10.%d.%d.%d", 1+j, i/250, i%250+1)
		}
		p.OnEndpointSliceAdd(slice("default", name, name+"-1", 8080, v1.ProtocolTCP, eps(addrs...)...))
	}
}

func TestRestartOntoMatchingState(t *testing.T) {
	e := newEnv(t, Config{})
	p1 := e.synced(e.proxier(dataplane.IPv4, 0))
	populate(p1, 300)
	p1.OnServiceAdd(service("default", "lb", "10.97.0.1", withLB("198.51.100.1"), withSourceRanges("203.0.113.0/24"), withETPLocal(32000)))
	e.sync(p1)
	before := ipvsState(t, e.k, dataplane.IPv4)
	sets := setState(t, e.k, dataplane.IPv4)

	p2 := e.synced(e.proxier(dataplane.IPv4, 1))
	populate(p2, 300)
	p2.OnServiceAdd(service("default", "lb", "10.97.0.1", withLB("198.51.100.1"), withSourceRanges("203.0.113.0/24"), withETPLocal(32000)))
	rec := e.sync(p2)
	require.True(t, rec.Full)
	require.Equal(t, 1, rec.Proxier)
	require.Zero(t, writes(rec.Ops), "%v", rec.Ops)
	require.Equal(t, before, ipvsState(t, e.k, dataplane.IPv4))
	require.Equal(t, sets, setState(t, e.k, dataplane.IPv4))
}

func TestRestartOntoPartlyStaleState(t *testing.T) {
	e := newEnv(t, Config{})
	p1 := e.synced(e.proxier(dataplane.IPv4, 0))
	populate(p1, 10)
	e.sync(p1)

	// The restarted proxier's handlers have seen 5 of the services so far,
	// and svc-9 was deleted while it was down.
	p2 := e.proxier(dataplane.IPv4, 1)
	populate(p2, 5)
	early := e.sync(p2)
	require.True(t, early.Full)
	require.Zero(t, writes(early.Ops), "nothing deleted before the full picture: %v", early.Ops)
	require.Len(t, ipvsState(t, e.k, dataplane.IPv4), 10)

	// The handlers catch up.
	for i := 5; i < 9; i++ {
		name := fmt.Sprintf("svc-%d", i)
		p2.OnServiceAdd(service("default", name, fmt.Sprintf("10.96.0.%d", i+1)))
		p2.OnEndpointSliceAdd(slice("default", name, name+"-1", 8080, v1.ProtocolTCP,
			eps(fmt.Sprintf("10.1.0.%d", i+1), fmt.Sprintf("10.2.0.%d", i+1), fmt.Sprintf("10.3.0.%d", i+1))...))
	}
	e.synced(p2)
	rec := e.sync(p2)
	require.True(t, rec.Full, "the first sync with the full picture verifies everything")
	require.Equal(t, int64(4), writes(rec.Ops), "%v", rec.Ops)
	require.Equal(t, int64(1), rec.Ops[dataplane.OpIPVSServiceDelete])
	require.Equal(t, int64(2), rec.Ops[dataplane.OpIPSetDel])
	require.Equal(t, int64(1), rec.Ops[dataplane.OpAddressUnbind])
	vs := ipvsState(t, e.k, dataplane.IPv4)
	require.Len(t, vs, 9)
	require.NotContains(t, vs, "10.96.0.10:80/TCP")
	require.Zero(t, writes(e.churn.Readded()))
}

func TestLegacyInitialSyncDeletesWhatItHasNotSeen(t *testing.T) {
	e := newEnv(t, Config{InitialSync: InitialSyncLegacy})
	p1 := e.proxier(dataplane.IPv4, 0)
	populate(p1, 10)
	e.sync(p1)

	p2 := e.proxier(dataplane.IPv4, 1) // never told the handlers are synced: legacy does not ask
	populate(p2, 4)
	first := e.sync(p2)
	require.Equal(t, int64(6), first.Ops[dataplane.OpIPVSServiceDelete])
	require.Equal(t, int64(12), first.Ops[dataplane.OpIPSetDel], "KUBE-CLUSTER-IP and KUBE-IPVS-IPS entries")
	require.Equal(t, int64(6), first.Ops[dataplane.OpAddressUnbind])
	require.Len(t, ipvsState(t, e.k, dataplane.IPv4), 4)

	populate(p2, 10) // the rest of the add events arrive
	second := e.sync(p2)
	require.Equal(t, int64(6), second.Ops[dataplane.OpIPVSServiceAdd])
	require.Equal(t, int64(12), second.Ops[dataplane.OpIPSetAdd])
	require.Len(t, ipvsState(t, e.k, dataplane.IPv4), 10)
	readded := e.churn.Readded()
	require.Equal(t, int64(12), readded[dataplane.OpIPSetAdd], "the incident's signature: deleted then re-added")
	require.Equal(t, int64(6), readded[dataplane.OpIPVSServiceAdd])
}

func TestRecoveryAfterFaults(t *testing.T) {
	build := func(p *Proxier) {
		populate(p, 5)
		p.OnServiceAdd(service("default", "np", "10.97.0.1", withNodePort(30100)))
		p.OnEndpointSliceAdd(slice("default", "np", "np-1", 80, v1.ProtocolTCP, eps("10.9.0.1", "10.9.0.2")...))
	}
	// The reference: the same input without faults.
	ref := newEnv(t, Config{})
	rp := ref.synced(ref.proxier(dataplane.IPv4, 0))
	build(rp)
	ref.sync(rp)

	tests := []struct {
		name  string
		fault sim.Fault
	}{
		{"ipvs service add", sim.Fault{Op: dataplane.OpIPVSServiceAdd, Times: 1}},
		{"ipvs destination add", sim.Fault{Op: dataplane.OpIPVSDestinationAdd, Every: 3}},
		{"ipset add", sim.Fault{Op: dataplane.OpIPSetAdd, Object: "10.96.0.3", Times: 1}},
		{"ipset create", sim.Fault{Op: dataplane.OpIPSetCreate, Object: "KUBE-CLUSTER-IP", Times: 1}},
		{"address bind", sim.Fault{Op: dataplane.OpAddressBind, Times: 2}},
		{"iptables-restore", sim.Fault{Op: dataplane.OpIPTablesRestore, Times: 1}},
		{"iptables-save", sim.Fault{Op: dataplane.OpIPTablesSave, Times: 1}},
		{"ipvs list", sim.Fault{Op: dataplane.OpIPVSList, Times: 1}},
		{"address list", sim.Fault{Op: dataplane.OpAddressList, Times: 1, Err: syscall.EAGAIN}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			p := e.synced(e.proxier(dataplane.IPv4, 0))
			build(p)
			require.NoError(t, e.k.InjectFault(tc.fault))
			rec := p.Sync()
			require.NotEmpty(t, rec.Error, "the fault must surface in the record")
			e.k.ClearFaults()

			retry := e.sync(p)
			require.True(t, retry.Full, "a failed sync makes the next one re-read the kernel")
			require.Equal(t, ipvsState(t, ref.k, dataplane.IPv4), ipvsState(t, e.k, dataplane.IPv4))
			require.Equal(t, setState(t, ref.k, dataplane.IPv4), setState(t, e.k, dataplane.IPv4))
			require.Equal(t, boundAddrs(t, ref.k, dataplane.IPv4), boundAddrs(t, e.k, dataplane.IPv4))
			require.Equal(t, ruleLines(t, ref.k, dataplane.IPv4, "nat"), ruleLines(t, e.k, dataplane.IPv4, "nat"))
			require.Equal(t, ruleLines(t, ref.k, dataplane.IPv4, "filter"), ruleLines(t, e.k, dataplane.IPv4, "filter"))

			// Converged: the next syncs do nothing.
			require.Zero(t, writes(e.sync(p).Ops))
			require.Zero(t, writes(p.SyncFull().Ops))
		})
	}
}

func TestFailedNodeAddressReadDeletesNothing(t *testing.T) {
	e := newEnv(t, Config{})
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	p.OnServiceAdd(service("default", "np", "10.96.0.10", withNodePort(30080)))
	e.sync(p)
	before := ipvsState(t, e.k, dataplane.IPv4)
	require.Len(t, before, 2)
	require.NoError(t, e.k.InjectFault(sim.Fault{Op: dataplane.OpAddressList, Times: 1}))
	rec := p.SyncFull()
	require.NotEmpty(t, rec.Error)
	require.Zero(t, rec.Ops[dataplane.OpIPVSServiceDelete])
	require.Equal(t, before, ipvsState(t, e.k, dataplane.IPv4))
	require.Zero(t, writes(e.sync(p).Ops), "the retry finds everything in place")
}

func TestDriftIsRepairedByFullSync(t *testing.T) {
	e := newEnv(t, Config{})
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	populate(p, 3)
	e.sync(p)
	want := ipvsState(t, e.k, dataplane.IPv4)
	wantNat := ruleLines(t, e.k, dataplane.IPv4, "nat")

	// Someone else changes the kernel behind the proxier's back.
	require.NoError(t, e.k.DeleteService(key("10.96.0.1:80/TCP")))
	require.NoError(t, e.k.AddService(dataplane.VirtualServer{ServiceKey: key("10.96.9.9:80/TCP"), Scheduler: "rr", Netmask: 0xffffffff}))
	require.NoError(t, e.k.Apply([]dataplane.SetChange{{Set: "KUBE-CLUSTER-IP", Del: []string{"10.96.0.2,tcp:80"}}}))
	require.NoError(t, e.k.Restore(dataplane.IPv4, []byte("*nat\n:KUBE-MARK-MASQ - [0:0]\nCOMMIT\n")))
	require.NoError(t, e.k.DelAddress(dataplane.DummyLink, netip.MustParsePrefix("10.96.0.3/32")))

	require.Zero(t, writes(e.sync(p).Ops), "an incremental sync trusts its model")
	rec := p.SyncFull()
	require.Empty(t, rec.Error)
	require.Equal(t, TriggerPeriodic, rec.Trigger)
	require.Equal(t, want, ipvsState(t, e.k, dataplane.IPv4))
	require.Contains(t, setState(t, e.k, dataplane.IPv4)["KUBE-CLUSTER-IP"], "10.96.0.2,tcp:80")
	require.Equal(t, wantNat, ruleLines(t, e.k, dataplane.IPv4, "nat"))
	require.Contains(t, boundAddrs(t, e.k, dataplane.IPv4), "10.96.0.3")
}

func TestUDPConntrack(t *testing.T) {
	e := newEnv(t, Config{})
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	vip := netip.MustParseAddrPort("10.96.0.53:53")
	client := func(n int) netip.AddrPort {
		return netip.AddrPortFrom(netip.MustParseAddr("10.0.9.9"), uint16(40000+n))
	}
	a, b := netip.MustParseAddrPort("10.0.0.1:53"), netip.MustParseAddrPort("10.0.0.2:53")

	p.OnServiceAdd(service("kube-system", "dns", "10.96.0.53", withPorts(
		v1.ServicePort{Name: "http", Port: 53, Protocol: v1.ProtocolUDP}, v1.ServicePort{Name: "tcp", Port: 53, Protocol: v1.ProtocolTCP})))
	e.sync(p)
	// Packets to a service without endpoints leave entries that would stick.
	e.k.AddFlow(sim.Flow{Protocol: dataplane.UDP, Client: client(0), OrigDst: vip})
	p.OnEndpointSliceAdd(slice("kube-system", "dns", "dns-1", 53, v1.ProtocolUDP, eps("10.0.0.1", "10.0.0.2")...))
	rec := e.sync(p)
	require.Equal(t, int64(1), rec.Ops[dataplane.OpConntrackDelete])
	require.Empty(t, e.k.FlowTable())

	e.k.AddFlow(sim.Flow{Protocol: dataplane.UDP, Client: client(1), OrigDst: vip, ReplySrc: a})
	e.k.AddFlow(sim.Flow{Protocol: dataplane.UDP, Client: client(2), OrigDst: vip, ReplySrc: b})
	e.k.AddFlow(sim.Flow{Protocol: dataplane.TCP, Client: client(3), OrigDst: vip, ReplySrc: b})
	// Endpoint b goes: its UDP flows go with it, TCP ones are IPVS's business.
	p.OnEndpointSliceUpdate(nil, slice("kube-system", "dns", "dns-1", 53, v1.ProtocolUDP, eps("10.0.0.1")...))
	rec = e.sync(p)
	require.Equal(t, int64(1), rec.Ops[dataplane.OpConntrackDelete])
	require.Equal(t, []sim.Flow{
		{Protocol: dataplane.TCP, Client: client(3), OrigDst: vip, ReplySrc: b},
		{Protocol: dataplane.UDP, Client: client(1), OrigDst: vip, ReplySrc: a},
	}, e.k.FlowTable())
}

func TestDuplicateVirtualServerIsDeterministic(t *testing.T) {
	e := newEnv(t, Config{})
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	p.OnServiceAdd(service("default", "b", "10.96.0.2", withExternalIPs("203.0.113.5")))
	p.OnServiceAdd(service("default", "a", "10.96.0.1", withExternalIPs("203.0.113.5")))
	p.OnEndpointSliceAdd(slice("default", "a", "a-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...))
	p.OnEndpointSliceAdd(slice("default", "b", "b-1", 8080, v1.ProtocolTCP, eps("10.0.0.2")...))
	e.sync(p)
	require.Equal(t, []string{"10.0.0.1:8080 w1"}, ipvsState(t, e.k, dataplane.IPv4)["203.0.113.5:80/TCP"], "the name sorting first wins")
	require.Equal(t, []string{"203.0.113.5:80/TCP: default/a:http (also: [default/b:http])"}, p.Conflicts())
	for range 3 {
		require.Zero(t, writes(p.SyncFull().Ops), "no flip-flop")
	}
	p.OnServiceDelete(service("default", "a", "10.96.0.1"))
	e.sync(p)
	require.Equal(t, []string{"10.0.0.2:8080 w1"}, ipvsState(t, e.k, dataplane.IPv4)["203.0.113.5:80/TCP"])
	require.Empty(t, p.Conflicts())
	require.Contains(t, boundAddrs(t, e.k, dataplane.IPv4), "203.0.113.5", "still used by b")
}

func TestExcludeCIDRs(t *testing.T) {
	e := newEnv(t, Config{ExcludeCIDRs: []string{"10.200.0.0/16"}})
	// Someone else's virtual server inside the excluded range.
	require.NoError(t, e.k.AddService(dataplane.VirtualServer{ServiceKey: key("10.200.0.1:443/TCP"), Scheduler: "rr", Netmask: 0xffffffff}))
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	p.OnServiceAdd(service("default", "in", "10.200.0.5"))
	p.OnServiceAdd(service("default", "out", "10.96.0.5"))
	e.sync(p)
	require.Len(t, ipvsState(t, e.k, dataplane.IPv4), 3)

	p.OnServiceDelete(service("default", "in", "10.200.0.5"))
	p.OnServiceDelete(service("default", "out", "10.96.0.5"))
	e.sync(p)
	p.SyncFull()
	vs := ipvsState(t, e.k, dataplane.IPv4)
	require.Contains(t, vs, "10.200.0.1:443/TCP")
	require.Contains(t, vs, "10.200.0.5:80/TCP", "virtual servers inside excludeCIDRs are not cleaned up")
	require.NotContains(t, vs, "10.96.0.5:80/TCP")
}

func TestNodeEvents(t *testing.T) {
	e := newEnv(t, Config{})
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	p.OnServiceAdd(service("default", "lb", "10.96.0.10", withLB("198.51.100.1"), withSourceRanges("10.50.0.0/16")))
	e.sync(p)
	require.NotContains(t, setState(t, e.k, dataplane.IPv4), "KUBE-LOAD-BALANCER-SOURCE-IP")

	node := func(name, ip string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}}}}
	}
	p.OnNodeAdd(node("node-2", "10.50.0.7")) // another node: ignored
	require.Zero(t, writes(e.sync(p).Ops))
	p.OnNodeAdd(node(testNode, "10.50.0.9")) // this node's address is inside the range now
	rec := e.sync(p)
	require.Equal(t, []string{"198.51.100.1,tcp:80,198.51.100.1"}, setState(t, e.k, dataplane.IPv4)["KUBE-LOAD-BALANCER-SOURCE-IP"])
	require.Equal(t, int64(1), rec.Ops[dataplane.OpIPTablesRestore], "the out-filter rule goes")
	require.NotContains(t, fmt.Sprint(ruleLines(t, e.k, dataplane.IPv4, "filter")), "KUBE-IPVS-OUT-FILTER -s")
}

// TestNodeIP: kube-proxy's node IP, which decides whether a load
// balancer's source ranges let the node in, is the Node object's first
// address of the family, InternalIP before ExternalIP, and loopback
// without a Node object or without an address of the family.
func TestNodeIP(t *testing.T) {
	node := func(addrs ...v1.NodeAddress) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}, Status: v1.NodeStatus{Addresses: addrs}}
	}
	internal := func(ip string) v1.NodeAddress { return v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip} }
	external := func(ip string) v1.NodeAddress { return v1.NodeAddress{Type: v1.NodeExternalIP, Address: ip} }
	tests := []struct {
		name   string
		family dataplane.Family
		node   *v1.Node
		want   string
	}{
		{"IPv4, no Node object", dataplane.IPv4, nil, "127.0.0.1"},
		{"IPv4, InternalIP first", dataplane.IPv4, node(external("10.60.0.1"), internal("fd00::9"), internal("10.50.0.9")), "10.50.0.9"},
		{"IPv4, ExternalIP only", dataplane.IPv4, node(external("10.60.0.1")), "10.60.0.1"},
		{"IPv6, no address of the family", dataplane.IPv6, node(internal("10.50.0.9")), "::1"},
		{"IPv6, InternalIP", dataplane.IPv6, node(internal("10.50.0.9"), internal("fd00::9")), "fd00::9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{Families: []dataplane.Family{tc.family}})
			p := e.synced(e.proxier(tc.family, 0))
			want := netip.MustParseAddr(tc.want)
			lb, bits := "198.51.100.1", 16
			if tc.family == dataplane.IPv6 {
				lb, bits = "2001:db8::1", 112
			}
			// One range, holding the expected node IP and no other candidate.
			rng := netip.PrefixFrom(want, bits).Masked().String()
			p.OnServiceAdd(service("default", "lb", "10.96.0.10", withClusterIPs("10.96.0.10", "fd00:96::10"), withLB(lb), withSourceRanges(rng)))
			if tc.node != nil {
				p.OnNodeAdd(tc.node)
			}
			e.sync(p)
			sourceIP := func() []string {
				return setState(t, e.k, tc.family)[SetName("KUBE-LOAD-BALANCER-SOURCE-IP", tc.family)]
			}
			require.Equal(t, []string{lb + ",tcp:80," + lb}, sourceIP(), "range %s lets the node in", rng)

			// Without the Node object (kube-proxy exits when it goes, and
			// starts again without one) the node IP is loopback.
			if tc.node != nil && !want.IsLoopback() {
				p.OnNodeDelete(tc.node)
				e.sync(p)
				require.Empty(t, sourceIP())
			}
		})
	}
}

func writes(o dataplane.Ops) int64 { return o.Writes() }

// TestSharedLoadBalancerIPOutFilter: kube-proxy writes a KUBE-IPVS-OUT-FILTER
// rule for every load balancer IP of every service port whose source ranges
// keep the node out, so two services sharing an IP and port write it twice.
func TestSharedLoadBalancerIPOutFilter(t *testing.T) {
	e := newEnv(t, Config{})
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	p.OnServiceAdd(service("default", "a", "10.96.0.1", withLB("198.51.100.1"), withSourceRanges("203.0.113.0/24")))
	p.OnServiceAdd(service("default", "b", "10.96.0.2", withLB("198.51.100.1"), withSourceRanges("203.0.113.0/24")))
	e.sync(p)
	count := func() int {
		n := 0
		for _, l := range ruleLines(t, e.k, dataplane.IPv4, "filter") {
			if l == ruleOutFilter {
				n++
			}
		}
		return n
	}
	require.Equal(t, 2, count())
	p.OnServiceDelete(service("default", "b", "10.96.0.2"))
	e.sync(p)
	require.Equal(t, 1, count())
}

// TestStoppedSyncIsNotFailed: a sync whose proxier is stopped part way (a
// restart kills the process) is recorded as stopped, with where it stopped,
// and does not count as a failure; a sync that fails on its own does.
func TestStoppedSyncIsNotFailed(t *testing.T) {
	e := newEnv(t, Config{})
	dp, stop := dataplane.Stoppable(e.dp)
	e.dp = dp
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	p.OnServiceAdd(service("default", "s", "10.96.0.1"))
	stop()
	rec := p.Sync()
	require.Contains(t, rec.Error, "the proxier was stopped")
	require.True(t, rec.Stopped)
	require.False(t, rec.Failed())
	require.False(t, rec.Finished())
}
