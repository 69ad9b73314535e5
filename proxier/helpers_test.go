package proxier

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/sim"
)

const testNode = "node-1"

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// env is a proxier on an in-memory kernel with a fake clock.
type env struct {
	t     testing.TB
	k     *sim.Kernel
	dp    dataplane.Dataplane
	clock *clocktesting.FakeClock
	cfg   Config
	churn *dataplane.Churn
	syncs []record.Sync
}

// newEnv returns an env; benchmarks leave out churn accounting, which is the
// harness's instrumentation rather than the proxier's work.
func newEnv(t testing.TB, cfg Config) *env {
	t.Helper()
	k, err := sim.New(sim.Options{})
	require.NoError(t, err)
	if cfg.NodeName == "" {
		cfg.NodeName = testNode
	}
	e := &env{t: t, k: k, dp: k.Dataplane(), clock: clocktesting.NewFakeClock(t0), cfg: cfg}
	if _, bench := t.(*testing.B); !bench {
		e.churn = dataplane.NewChurn()
	}
	return e
}

// proxier creates a proxier of the family on the env's kernel. Its
// handlers count as synced unless the test says otherwise.
func (e *env) proxier(f dataplane.Family, index int) *Proxier {
	e.t.Helper()
	p, err := New(e.cfg, f, e.dp, Options{
		Index: index, Clock: e.clock, Churn: e.churn,
		OnSync: func(s record.Sync) { e.syncs = append(e.syncs, s) },
	})
	require.NoError(e.t, err)
	return p
}

func (e *env) synced(p *Proxier) *Proxier {
	p.OnServicesSynced()
	p.OnEndpointSlicesSynced()
	return p
}

// sync runs a sync and requires it to succeed.
func (e *env) sync(p *Proxier) record.Sync {
	e.t.Helper()
	rec := p.Sync()
	require.Empty(e.t, rec.Error, "sync %d", rec.Seq)
	return rec
}

// ---------------------------------------------------------------------------
// Objects.

type svcOpt func(*v1.Service)

func service(ns, name, clusterIP string, opts ...svcOpt) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeClusterIP, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	// The API server records the family of each cluster IP; kube-proxy reads them by it.
	s.Spec.IPFamilies = nil
	for _, ip := range s.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			s.Spec.IPFamilies = append(s.Spec.IPFamilies, v1.IPFamily(dataplane.FamilyOf(a)))
		}
	}
	return s
}

func withPorts(ports ...v1.ServicePort) svcOpt { return func(s *v1.Service) { s.Spec.Ports = ports } }

func withType(t v1.ServiceType) svcOpt { return func(s *v1.Service) { s.Spec.Type = t } }

func withNodePort(n int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = n
	}
}

func withProtocol(p v1.Protocol) svcOpt { return func(s *v1.Service) { s.Spec.Ports[0].Protocol = p } }

func withExternalIPs(ips ...string) svcOpt {
	return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
}

func withLB(ips ...string) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		if s.Spec.Ports[0].NodePort == 0 {
			s.Spec.Ports[0].NodePort = 30500
		}
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
	}
}

func withIngress(ing v1.LoadBalancerIngress) svcOpt {
	return func(s *v1.Service) { s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, ing) }
}

func withSourceRanges(r ...string) svcOpt {
	return func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = r }
}

func withETPLocal(hc int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = hc
	}
}

func withITPLocal() svcOpt {
	return func(s *v1.Service) {
		p := v1.ServiceInternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = &p
	}
}

func withAffinity(timeout int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &timeout}}
	}
}

func withClusterIPs(ips ...string) svcOpt {
	return func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips }
}

// ep is an endpoint for slice(): "10.0.0.1" ready on another node;
// options mark it local, not ready, terminating.
type ep struct {
	ip                           string
	local, notReady, terminating bool
	unset                        bool // no conditions at all
}

func slice(ns, svc, name string, port int32, proto v1.Protocol, eps ...ep) *discoveryv1.EndpointSlice {
	pn := "http"
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pn, Port: &port, Protocol: &proto}},
	}
	for _, e := range eps {
		if a := netip.MustParseAddr(e.ip); a.Is6() {
			s.AddressType = discoveryv1.AddressTypeIPv6
		}
		node := "node-2"
		if e.local {
			node = testNode
		}
		d := discoveryv1.Endpoint{Addresses: []string{e.ip}, NodeName: &node}
		if !e.unset {
			ready, serving, term := !e.notReady && !e.terminating, !e.notReady, e.terminating
			d.Conditions = discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &term}
		}
		s.Endpoints = append(s.Endpoints, d)
	}
	return s
}

func eps(ips ...string) []ep {
	out := make([]ep, len(ips))
	for i, ip := range ips {
		out[i] = ep{ip: ip}
	}
	return out
}

// ---------------------------------------------------------------------------
// Reading the kernel back.

// ipvsState is the kernel's IPVS table of a family: "addr:port/PROTO" ->
// sorted "addr:port weight" destinations.
func ipvsState(t testing.TB, k *sim.Kernel, f dataplane.Family) map[string][]string {
	t.Helper()
	list, err := k.Services()
	require.NoError(t, err)
	out := map[string][]string{}
	for _, vs := range list {
		if dataplane.FamilyOf(vs.Address) != f {
			continue
		}
		dests := []string{}
		for _, d := range vs.Destinations {
			dests = append(dests, fmt.Sprintf("%s w%d", d.AddrPort(), d.Weight))
		}
		sort.Strings(dests)
		out[vs.ServiceKey.String()] = dests
	}
	return out
}

func virtualServer(t testing.TB, k *sim.Kernel, key string) dataplane.VirtualServer {
	t.Helper()
	list, err := k.Services()
	require.NoError(t, err)
	for _, vs := range list {
		if vs.ServiceKey.String() == key {
			return vs
		}
	}
	require.Failf(t, "no virtual server", "%s", key)
	return dataplane.VirtualServer{}
}

// setState lists the non-empty sets of a family with their sorted entries,
// and requires every one of the 17 sets to exist.
func setState(t testing.TB, k *sim.Kernel, f dataplane.Family) map[string][]string {
	t.Helper()
	sets, err := k.Sets()
	require.NoError(t, err)
	listed := map[string][]string{}
	for _, s := range sets {
		listed[s.Name] = s.Entries
	}
	out := map[string][]string{}
	for _, name := range SetNames(f) {
		es, ok := listed[name]
		require.True(t, ok, "set %s", name)
		if len(es) > 0 {
			es = slices.Clone(es)
			sort.Strings(es)
			out[name] = es
		}
	}
	return out
}

func boundAddrs(t testing.TB, k *sim.Kernel, f dataplane.Family) []string {
	t.Helper()
	as, err := k.Addresses(dataplane.DummyLink, f)
	require.NoError(t, err)
	out := []string{}
	for _, a := range as {
		out = append(out, a.String())
	}
	sort.Strings(out)
	return out
}

// ruleLines returns "-A CHAIN ..." lines of a table as iptables-save prints them.
func ruleLines(t testing.TB, k *sim.Kernel, f dataplane.Family, table string) []string {
	t.Helper()
	out, err := k.Save(f, table)
	require.NoError(t, err)
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "-A ") {
			lines = append(lines, l)
		}
	}
	return lines
}

// emptyKernel is a kernel with nothing programmed that takes every write
// without effect: a sync against it is the proxier's own work alone.
func emptyKernel(t testing.TB) *dataplane.Replay {
	t.Helper()
	k, err := sim.New(sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := dataplane.Capture(k.Dataplane(), dataplane.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// nullProxier is a proxier on replay k whose handlers count as synced.
func nullProxier(b testing.TB, k *dataplane.Replay) *Proxier {
	p, err := New(Config{NodeName: testNode}, dataplane.IPv4, k.Dataplane(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	p.OnServicesSynced()
	p.OnEndpointSlicesSynced()
	return p
}
