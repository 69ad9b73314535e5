package scenarios

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/scenarios/backend"
	"github.com/kpsim/kpsim/sim"
)

// TestReplayExpectsWhatTheProxierCounts holds the replay's expectation (what
// waitSynced waits for) against the proxier's own count on objects that
// kube-proxy's rules treat differently: a service of another proxy, a
// headless-labelled slice, a slice port without a name, an FQDN slice and
// a slice of the other family.
func TestReplayExpectsWhatTheProxierCounts(t *testing.T) {
	svc := func(name, ip string, labels map[string]string) *v1.Service {
		return &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip}, IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
				Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}},
		}
	}
	slice := func(svcName, name string, at discoveryv1.AddressType, portName *string, labels map[string]string, addrs ...string) *discoveryv1.EndpointSlice {
		l := map[string]string{discoveryv1.LabelServiceName: svcName}
		for k, v := range labels {
			l[k] = v
		}
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: l},
			AddressType: at,
			Ports:       []discoveryv1.EndpointPort{{Name: portName, Port: ptr(int32(8080)), Protocol: ptr(v1.ProtocolTCP)}},
		}
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
		}
		return s
	}
	http := ptr("http")
	live := map[*v1.Service][]*discoveryv1.EndpointSlice{
		svc("web", "10.96.0.1", nil): {
			slice("web", "web-1", discoveryv1.AddressTypeIPv4, http, nil, "10.0.0.1", "10.0.0.2"),
			slice("web", "web-2", discoveryv1.AddressTypeIPv4, http, map[string]string{objects.LabelServiceProxyName: "x"}, "10.0.0.3"),
			slice("web", "web-3", discoveryv1.AddressTypeIPv4, http, map[string]string{objects.LabelHeadless: ""}, "10.0.0.4"),
			slice("web", "web-4", discoveryv1.AddressTypeIPv4, nil, nil, "10.0.0.5"),
			slice("web", "web-5", discoveryv1.AddressTypeIPv6, http, nil, "fd00::6"),
			slice("web", "web-6", discoveryv1.AddressTypeFQDN, http, nil, "web.example.com"),
		},
		svc("mesh", "10.96.0.2", map[string]string{objects.LabelServiceProxyName: "mesh"}): {
			slice("mesh", "mesh-1", discoveryv1.AddressTypeIPv4, http, nil, "10.0.0.7"),
		},
	}
	r := &replay{services: map[string]*liveService{}, serving: map[string]map[netip.AddrPort]bool{}, fams: []dataplane.Family{dataplane.IPv4}}
	k, err := sim.New(sim.Options{})
	require.NoError(t, err)
	p, err := proxier.New(proxier.Config{}, dataplane.IPv4, k.Dataplane(), proxier.Options{})
	require.NoError(t, err)
	for s, eps := range live {
		k := key(s.Namespace, s.Name)
		r.services[k] = &liveService{namespace: s.Namespace, name: s.Name}
		r.observe(k, s, eps) // as createService counts what it wrote
		p.OnServiceAdd(s)
		for _, e := range eps {
			p.OnEndpointSliceAdd(e)
		}
	}
	p.OnServicesSynced()
	p.OnEndpointSlicesSynced()
	rec := p.Sync()
	require.Empty(t, rec.Error)
	want := r.expect(dataplane.IPv4)
	require.Equal(t, expectation{ports: 1, endpoints: 3}, want, "web's port, with 10.0.0.1-3")
	require.Equal(t, want, expectation{ports: rec.Services, endpoints: rec.Endpoints})
}

// TestReplayServingForProbedServices: the replay knows which endpoints the
// API says serve for the services a probe asked about, whether it asked
// before the service was created or after, and follows their changes.
func TestReplayServingForProbedServices(t *testing.T) {
	s, err := Load("smoke", []string{"cluster.services=3", "cluster.endpointsPerService=2", "probes.services=1"})
	require.NoError(t, err)
	r := newReplay(s, time.Now)
	bySvc, _ := clusterSlices(s.set)
	ctx := context.Background()
	keyOf := func(i int) string { return key(s.set.Services[i].Namespace, s.set.Services[i].Name) }
	before, after, unprobed := keyOf(0), keyOf(1), keyOf(2)
	servingBefore := r.servingFor(before)
	for _, svc := range s.set.Services {
		require.NoError(t, r.createService(svc, bySvc[key(svc.Namespace, svc.Name)]))
	}
	servingAfter := r.servingFor(after)

	for k, serving := range map[string]backend.Serving{before: servingBefore, after: servingAfter} {
		eps, err := r.currentSlices(r.service(k))
		require.NoError(t, err)
		want := servingOf(eps)
		require.NotEmpty(t, want, "%s: serving endpoints", k)
		for ap := range want {
			require.True(t, serving.Serves(ap), "%s: %s", k, ap)
		}
		require.ElementsMatch(t, slices.Collect(maps.Keys(want)), serving.Endpoints(), "%s: every serving endpoint listed", k)
		require.False(t, serving.Serves(netip.MustParseAddrPort("192.0.2.1:80")), k)
	}
	r.mu.RLock()
	_, kept := r.serving[unprobed]
	r.mu.RUnlock()
	require.False(t, kept, "no serving set is kept for a service no probe asked about")

	// A roll makes the oldest endpoint terminating: not ready, still
	// serving. The next roll removes it: then nothing answers there.
	eps, err := r.currentSlices(r.service(before))
	require.NoError(t, err)
	oldest := eps[0].Endpoints[0]
	ap := netip.AddrPortFrom(netip.MustParseAddr(oldest.Addresses[0]), uint16(*eps[0].Ports[0].Port))
	require.NoError(t, r.roll(ctx, before))
	require.True(t, servingBefore.Serves(ap), "the rolled endpoint %s is terminating, still serving", ap)
	require.Len(t, servingBefore.Endpoints(), 3*len(eps[0].Ports), "two ready and one terminating, on every port")
	require.NoError(t, r.roll(ctx, before))
	require.False(t, servingBefore.Serves(ap), "the rolled endpoint %s is gone", ap)
	require.NotContains(t, servingBefore.Endpoints(), ap)
}
