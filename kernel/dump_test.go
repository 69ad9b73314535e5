package kernel

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel/netns/netnstest"
)

// TestLargeDumps reads back more addresses and set entries than one
// datagram holds, from two goroutines at once on the same sockets and
// buffers, and checks every one arrives exactly once.
func TestLargeDumps(t *testing.T) {
	if !netnstest.Private(t) {
		return
	}
	k, err := New(Options{IPSetStrategy: dataplane.IPSetNetlink})
	require.NoError(t, err)
	defer k.Close()
	dp := k.Dataplane()
	require.NoError(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0-peer"}))

	const n = 3000
	want := map[netip.Addr]bool{}
	var entries []string
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)})
		require.NoError(t, dp.Links.AddAddress("eth0", netip.PrefixFrom(a, 32)))
		want[a] = true
		entries = append(entries, fmt.Sprintf("%s,tcp:%d", a, 1000+i))
	}
	set := dataplane.Set{Name: "KPSIM-DUMP", Type: dataplane.HashIPPort, Family: dataplane.IPv4, MaxElem: 65536}
	require.NoError(t, dp.IPSet.CreateSet(set))
	require.NoError(t, dp.IPSet.Apply([]dataplane.SetChange{{Set: set.Name, Add: entries}}))

	// assert, not require: these run off the test's goroutine.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 3 {
				got, err := dp.Links.Addresses("eth0", dataplane.IPv4)
				assert.NoError(t, err)
				seen := map[netip.Addr]bool{}
				for _, a := range got {
					assert.False(t, seen[a], "%s twice", a)
					seen[a] = true
				}
				assert.Equal(t, want, seen)

				sets, err := dp.IPSet.Sets()
				if assert.NoError(t, err) && assert.Len(t, sets, 1) {
					assert.ElementsMatch(t, entries, sets[0].Entries)
				}
			}
		})
	}
	wg.Wait()
}
