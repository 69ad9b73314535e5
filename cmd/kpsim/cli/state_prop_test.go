package cli

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/scenarios"
)

// TestIncrementalEqualsScratch is the --then property: for random clusters
// and random changes, the state after an incremental sync equals the state a
// fresh proxier programs for the final objects.
func TestIncrementalEqualsScratch(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			g := objects.NewRandom(seed)
			base, err := g.Cluster(300)
			require.NoError(t, err)
			cfg := proxier.Config{NodeName: objects.RandomNodes[seed%3]}
			current := base
			// Two rounds of changes: the second lands on a proxier that already synced incrementally.
			r, err := scenarios.NewStateRun(current, cfg, "")
			require.NoError(t, err)
			_, err = r.First(current)
			require.NoError(t, err)
			for round := range 2 {
				changes, err := g.Changes(current, 120)
				require.NoError(t, err)
				keepKernelAddresses(current, changes)
				inc, err := r.Then(current, changes)
				require.NoError(t, err)
				current, _ = current.Apply(changes)
				scratchCfg := cfg
				scratchCfg.Families = r.Families
				scratch := stateOf(t, current, scratchCfg)
				diffs := resultsDiff(scratch, inc)
				require.Empty(t, diffs, "round %d: incremental (B) differs from scratch (A):\n%s", round, diffs)
				require.NotEmpty(t, inc.VirtualServers)
			}
		})
	}
}

// keepKernelAddresses drops the node changes that would move the node's own
// addresses: a scratch run puts the final Node object's addresses on the
// node's links, while under a running proxier the links stay as they were
// (an address change is not something the API makes happen).
func keepKernelAddresses(base, changes *objects.Set) {
	addrs := map[string]string{}
	for _, n := range base.Nodes {
		addrs[n.Name] = fmt.Sprint(n.Status.Addresses)
	}
	changes.Nodes = slices.DeleteFunc(changes.Nodes, func(n *v1.Node) bool { return addrs[n.Name] != fmt.Sprint(n.Status.Addresses) })
	changes.Deletions = slices.DeleteFunc(changes.Deletions, func(d objects.Deletion) bool { return d.Kind == "Node" })
}
