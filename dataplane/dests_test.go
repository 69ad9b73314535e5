package dataplane

import (
	"maps"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDestsIsAMap holds Dests to a Go map through random sets, changes and
// deletes, across the size where it turns from a slice into a map.
func TestDestsIsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s Dests
	want := map[netip.AddrPort]int{}
	addr := func() netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(3 * destsFew))}), 80)
	}
	for i := range 5000 {
		d := addr()
		if rng.IntN(3) == 0 {
			s.Delete(d)
			delete(want, d)
		} else {
			s.Set(d, i)
			want[d] = i
		}
		require.Equal(t, len(want), s.Len())
		w, ok := s.Get(d)
		ww, wok := want[d]
		require.Equal(t, wok, ok)
		require.Equal(t, ww, w)
	}
	require.Equal(t, want, maps.Collect(s.All()))
	require.NotNil(t, s.many, "the draws went past destsFew")
}
