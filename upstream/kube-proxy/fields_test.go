package kubeproxy

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/internal/private"
)

// TestFields: every unexported field the adapter reaches is where it looks,
// in this module's release (make kube-proxy-test runs it in each), one
// subtest per proxier type and field, so a release that renames one fails
// here by name rather than in a run.
func TestFields(t *testing.T) {
	types := reached()
	require.Contains(t, types, reflect.TypeFor[ipvs.Proxier](), "IPVS mode, in every release")
	for in, paths := range types {
		for _, path := range paths {
			t.Run(in.String()+"."+path, func(t *testing.T) {
				_, err := private.TypeAt(in, path)
				require.NoError(t, err)
			})
		}
	}
	t.Run("knftables."+fieldKnftablesNL, func(t *testing.T) {
		var nft knftables.Interface
		require.NoError(t, standInNFT(func() (err error) {
			nft, err = knftables.New(knftables.IPv4Family, dataplane.NFTablesTable, knftables.UseNetlink)
			return err
		}))
		require.True(t, listsOverNetlink(nft), "made with UseNetlink")
		require.NoError(t, standInNFT(func() (err error) {
			nft, err = knftables.New(knftables.IPv4Family, dataplane.NFTablesTable)
			return err
		}))
		require.False(t, listsOverNetlink(nft))
	})
}
