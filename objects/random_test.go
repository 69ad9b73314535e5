package objects

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
)

// TestRandomCoversEveryOption draws a few clusters and their changes and
// checks that they load, that the seed alone decides them, and that what
// the parity corpus relies on shows up: every service type, both families
// and dual-stack, Local policies, topology hints, a reused address, ignored
// objects, and clusters without Node objects.
func TestRandomCoversEveryOption(t *testing.T) {
	seen := map[string]bool{}
	for seed := range uint64(30) {
		g := NewRandom(seed)
		base, err := g.Cluster(40)
		require.NoError(t, err, "seed %d", seed)
		changes, err := g.Changes(base, 15)
		require.NoError(t, err, "seed %d", seed)

		again := NewRandom(seed)
		base2, err := again.Cluster(40)
		require.NoError(t, err)
		var a, b bytes.Buffer
		require.NoError(t, Write(&a, base))
		require.NoError(t, Write(&b, base2))
		require.Equal(t, a.String(), b.String(), "seed %d: the same seed draws the same cluster", seed)

		if len(base.Nodes) == 0 {
			seen["no Node objects"] = true
		}
		if len(changes.Deletions) > 0 {
			seen["deletions"] = true
		}
		for _, ig := range base.Ignored {
			seen["ignored "+ig.Kind] = true
		}
		for _, svc := range base.Services {
			seen["type "+string(svc.Spec.Type)] = true
			seen["families "+string(svc.Spec.IPFamilies[0])+string(svc.Spec.IPFamilies[len(svc.Spec.IPFamilies)-1])] = true
			if svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
				seen["externalTrafficPolicy Local on "+string(svc.Spec.Type)] = true
			}
			if *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal {
				seen["internalTrafficPolicy Local"] = true
			}
		}
		for _, eps := range base.EndpointSlices {
			addrs := map[string]bool{}
			for _, ep := range eps.Endpoints {
				if ep.Hints != nil && len(ep.Hints.ForZones) > 0 {
					seen["zone hints"] = true
				}
				if ep.Hints != nil && len(ep.Hints.ForNodes) > 0 {
					seen["node hints"] = true
				}
				if addrs[ep.Addresses[0]] {
					seen["an address twice in a slice"] = true
				}
				addrs[ep.Addresses[0]] = true
			}
		}
	}
	for _, want := range []string{
		"no Node objects", "deletions", "ignored Service", "ignored EndpointSlice",
		"type ClusterIP", "type NodePort", "type LoadBalancer",
		"families IPv4IPv4", "families IPv6IPv6", "families IPv4IPv6", "families IPv6IPv4",
		"externalTrafficPolicy Local on ClusterIP", "externalTrafficPolicy Local on NodePort", "externalTrafficPolicy Local on LoadBalancer",
		"internalTrafficPolicy Local", "zone hints", "node hints", "an address twice in a slice",
	} {
		require.True(t, seen[want], "no cluster of the first 30 seeds has %s", want)
	}
}
