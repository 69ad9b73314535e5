package scenarios

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
)

// TestSizesRefusedBeforeBuilding: a cluster or timeline that does not fit
// its pools is refused by validation, Check included (which builds
// nothing), naming the key that moves the limit. Before, each was found
// while building, thousands of services in, or not until the run, or was
// refused by a round-number cap; the comment of each case says what kpsim
// printed.
func TestSizesRefusedBeforeBuilding(t *testing.T) {
	add := strings.Replace(base, "  - churnEndpoints: {rate: 5, duration: 1s, share: 0.5}\n", "  - addServices: {count: 40000}\n", 1)
	for _, tc := range []struct {
		name string
		yaml string
		sets []string
		want string
	}{
		// Before: cluster.nodePortRange: unknown field; without it,
		// "cluster.types: node port range 30000-32767 exhausted (after 5389 of 6000 services)".
		{"node ports, range given", base, []string{"cluster.services=6000", "cluster.nodePortRange=30000-32767"},
			"x.yaml:6: cluster.types: 6000 services at these nodePort and loadBalancer shares take up to 3155 node ports " +
				"(one per port, and a health check port per LoadBalancer service with externalTrafficPolicy Local); " +
				"the node port range 30000-32767 holds 2768, enough for about 5246 services at these shares: " +
				"lower cluster.types.nodePort and cluster.types.loadBalancer, or widen cluster.nodePortRange"},
		// Before: "cluster.services: must be between 0 and 50000, got 250000".
		{"node ports, default range at its widest", base, []string{"cluster.services=250000", "cluster.types={nodePort: 0.1, loadBalancer: 0.05}"},
			"--set cluster.types={nodePort: 0.1, loadBalancer: 0.05}: cluster.types: 250000 services at these nodePort and loadBalancer shares take up to 38215 node ports " +
				"(one per port, and a health check port per LoadBalancer service with externalTrafficPolicy Local); " +
				"the node port range 30000-65535 holds 35536, enough for about 232317 services at these shares: " +
				"lower cluster.types.nodePort and cluster.types.loadBalancer, or give cluster.nodePortRange (the default grows from 30000-32767 only up to 65535)"},
		// Before: "cluster.podCIDRs: CIDR 10.244.0.0/16 has no free address left (after 32767 of 50000 services)".
		{"pod CIDR given", base, []string{"cluster.services=50000", "cluster.types={nodePort: 0}", "cluster.podCIDRs=[10.244.0.0/16]"},
			"--set cluster.podCIDRs=[10.244.0.0/16]: cluster.podCIDRs: 10.244.0.0/16 holds 65533 pod addresses (one kept for the probing pod), " +
				"the cluster needs up to 100005 (50000 services x 2 endpoints, and 5 that churnEndpoints adds): give a /15 or larger, or fewer endpoints"},
		// Before: "cluster.services: must be between 0 and 50000, got 1000000".
		{"pod CIDR default at its widest", base, []string{"cluster.services=1000000", "cluster.endpointsPerService=9", "cluster.types={nodePort: 0}"},
			"x.yaml:5: cluster.podCIDRs: 10.128.0.0/9 holds 8388605 pod addresses (one kept for the probing pod), " +
				"the cluster needs up to 9000005 (1000000 services x 9 endpoints, and 5 that churnEndpoints adds): give a /8 or larger, " +
				"or fewer endpoints (the default grows only as far as it overlaps no service or external CIDR)"},
		// Before: validated, and the run failed at the addServices step
		// when the pod CIDR ran out.
		{"addServices counted", add, []string{"cluster.types={nodePort: 0}", "cluster.podCIDRs=[10.244.0.0/16]"},
			"--set cluster.podCIDRs=[10.244.0.0/16]: cluster.podCIDRs: 10.244.0.0/16 holds 65533 pod addresses (one kept for the probing pod), " +
				"the cluster needs up to 80020 (40010 services (40000 of them from addServices steps) x 2 endpoints): give a /15 or larger"},
		// Before: "cluster.serviceCIDRs: CIDR 10.96.0.0/29 has no free address left (after 6 of 10 services)".
		{"service CIDR", base, []string{"cluster.serviceCIDRs=[10.96.0.0/29]"},
			"--set cluster.serviceCIDRs=[10.96.0.0/29]: cluster.serviceCIDRs: 10.96.0.0/29 holds 6 service addresses, " +
				"the cluster needs up to 10 (one per service, dual-stack ones in each family): give a /28 or larger, or fewer services"},
		// Before: "cluster.externalCIDRs: CIDR 198.18.0.0/29 has no free address left (after 14 of 40 services)".
		{"external CIDR", base, []string{"cluster.services=40", "cluster.externalCIDRs=[198.18.0.0/29]", "cluster.types={loadBalancer: 0.5}"},
			"--set cluster.externalCIDRs=[198.18.0.0/29]: cluster.externalCIDRs: 198.18.0.0/29 holds 6 external addresses, the cluster needs up to 33"},
		// Before: "cluster.services: must be between 0 and 50000, got 2000000".
		{"memory cap, services", base, []string{"cluster.services=2000000"},
			"--set cluster.services=2000000: cluster.services: 2000000 services is more than kpsim's memory cap of 1000000"},
		// Before: "cluster.services: must be between 0 and 50000, got 1000000".
		{"memory cap, endpoints", base, []string{"cluster.services=1000000", "cluster.endpointsPerService=11", "cluster.types={nodePort: 0}", "cluster.podCIDRs=[10.0.0.0/8]", "cluster.serviceCIDRs=[172.16.0.0/12]"},
			"--set cluster.endpointsPerService=11: cluster.endpointsPerService: 1000000 services x 11 endpoints is 11000000 endpoints, more than kpsim's memory cap of 10000000"},
		// Before: unknown field.
		{"node port range", base, []string{"cluster.nodePortRange=32767-30000"},
			`--set cluster.nodePortRange=32767-30000: cluster.nodePortRange: want a port range such as 30000-32767, within 1-65535, got "32767-30000"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, check := range []func() error{
				func() error { _, err := Parse("x.yaml", []byte(tc.yaml), tc.sets); return err },
				func() error { _, err := parse("x.yaml", []byte(tc.yaml), tc.sets, false); return err },
			} {
				err := check()
				var es Errors
				require.ErrorAs(t, err, &es)
				require.Len(t, es, 1, "%v", es)
				require.Contains(t, es[0].Error(), tc.want)
			}
		})
	}
}

// TestDefaultPodCIDRGrows: with no cluster.podCIDRs, a cluster with more
// endpoints than 10.244.0.0/16 holds gets the smallest prefix around it
// that holds them, and builds. Before: "cluster.podCIDRs: CIDR
// 10.244.0.0/16 has no free address left (after 32767 of 35000 services)".
func TestDefaultPodCIDRGrows(t *testing.T) {
	s, err := Parse("x.yaml", []byte(base), []string{"cluster.services=35000", "cluster.types={nodePort: 0}"})
	require.NoError(t, err)
	require.Equal(t, "10.244.0.0/15", s.Cluster.PodCIDRs[0])
	wide, beyond := netip.MustParsePrefix("10.244.0.0/15"), 0
	for _, eps := range s.set.EndpointSlices {
		for _, ep := range eps.Endpoints {
			a := netip.MustParseAddr(ep.Addresses[0])
			require.True(t, wide.Contains(a), a)
			if !defaultPodCIDR4.Contains(a) {
				beyond++
			}
		}
	}
	require.Positive(t, beyond, "endpoints beyond the /16")

	s, err = Parse("x.yaml", []byte(base), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"10.244.0.0/16"}, s.Cluster.PodCIDRs[:1], "a cluster that fits keeps the default")

	// Growth stops short of the service CIDR: with the defaults, at /9
	// (10.0.0.0/8 would hold 10.96.0.0/12).
	others := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("198.18.0.0/15")}
	require.Equal(t, "10.244.0.0/14", growPodCIDR(200_000, others).String())
	require.Equal(t, "10.128.0.0/9", growPodCIDR(9e6, others).String())
	require.Equal(t, "10.0.0.0/8", growPodCIDR(9e6, others[1:]).String(), "in 10.0.0.0/8")
	require.Equal(t, "10.0.0.0/8", growPodCIDR(1e9, others[1:]).String(), "never beyond 10.0.0.0/8")
}

// TestDefaultPodCIDRGrowsFull: 100,000 services x 3 endpoints, as
// scale-100k has, build with the default pod CIDR.
func TestDefaultPodCIDRGrowsFull(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 100,000 services: skipped with -short")
	}
	s, err := Parse("x.yaml", []byte(base), []string{"cluster.services=100000", "cluster.endpointsPerService=3", "cluster.types={nodePort: 0}"})
	require.NoError(t, err)
	require.Equal(t, "10.240.0.0/13", s.Cluster.PodCIDRs[0], "300,000 endpoints need a /13")
	require.Len(t, s.set.Services, 100_000)
}

// TestNodePortRangeGrows: with no cluster.nodePortRange, NodePorts beyond
// kube-apiserver's default range get a wider one, with a warning saying
// so; every NodePort is in it and unique. Before: "cluster.types: node
// port range 30000-32767 exhausted (after 5389 of 6000 services)".
func TestNodePortRangeGrows(t *testing.T) {
	s, err := Parse("x.yaml", []byte(base), []string{"cluster.services=6000"})
	require.NoError(t, err)
	require.Equal(t, "30000-33154", s.Cluster.NodePortRange)
	require.Len(t, s.Warnings(), 1)
	require.Contains(t, s.Warnings()[0], "up to 3155 node ports do not fit kube-apiserver's default range 30000-32767; the cluster uses 30000-33154 (cluster.nodePortRange)")
	seen := map[int32]bool{}
	for _, svc := range s.set.Services {
		for _, p := range svc.Spec.Ports {
			if svc.Spec.Type == v1.ServiceTypeNodePort {
				require.True(t, p.NodePort >= 30000 && p.NodePort <= 33154, p.NodePort)
				require.False(t, seen[p.NodePort], p.NodePort)
				seen[p.NodePort] = true
			}
		}
	}
	require.Greater(t, len(seen), 2768, "more NodePorts than the default range holds")

	s, err = Parse("x.yaml", []byte(base), nil)
	require.NoError(t, err)
	require.Equal(t, "30000-32767", s.Cluster.NodePortRange, "a cluster that fits keeps kube-apiserver's default")
	require.Empty(t, s.Warnings())

	s, err = Parse("x.yaml", []byte(base), []string{"cluster.nodePortRange=40000-40009"})
	require.NoError(t, err)
	for _, svc := range s.set.Services {
		if svc.Spec.Type == v1.ServiceTypeNodePort {
			require.True(t, svc.Spec.Ports[0].NodePort >= 40000 && svc.Spec.Ports[0].NodePort <= 40009)
		}
	}
}

// TestLargeClustersValidate: 250,000 services, and 250,000 x 10
// endpoints, validate when the address space allows; before, both were
// refused: "cluster.services: must be between 0 and 50000, got 250000".
func TestLargeClustersValidate(t *testing.T) {
	for _, sets := range [][]string{
		{"cluster.services=250000", "cluster.types={nodePort: 0.05, loadBalancer: 0.03}"},
		{"cluster.services=250000", "cluster.endpointsPerService=10", "cluster.types={nodePort: 0}"},
	} {
		s, err := parse("x.yaml", []byte(base), sets, false)
		require.NoError(t, err, sets)
		if s.Cluster.EndpointsPerService.Max() == 10 {
			require.Equal(t, "10.192.0.0/10", s.Cluster.PodCIDRs[0], "2,500,005 endpoints need a /10")
		}
	}
}
