package conformance

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
)

// setCase is one set type and family with entries as kube-proxy writes
// them, entries the kernel canonicalises, and entries it refuses.
type setCase struct {
	name string
	set  dataplane.Set
	// entries are kube-proxy-format entries, already canonical.
	entries []string
	// canonical maps an accepted spelling to the form the kernel lists.
	canonical map[string]string
	bad       []string
}

var setCases = []setCase{
	{
		name: "hash:ip,port inet",
		set:  dataplane.Set{Name: "KUBE-CLUSTER-IP", Type: dataplane.HashIPPort, Family: dataplane.IPv4, Comment: "Kubernetes service cluster ip + port for masquerade purpose"},
		entries: []string{
			"10.96.0.10,tcp:53", "10.96.0.10,udp:53", "10.96.0.11,sctp:9000", "10.96.0.12,tcp:443",
		},
		canonical: map[string]string{"10.96.0.13,TCP:80": "10.96.0.13,tcp:80", "10.96.0.14,8080": "10.96.0.14,tcp:8080"},
		bad:       []string{"10.96.0.10", "10.96.0.10,tcp:65536", "10.96.0.10,tcp:http-nope", "fd00::1,tcp:80", "10.96.0.300,tcp:80", ""},
	},
	{
		name:      "hash:ip,port inet6",
		set:       dataplane.Set{Name: "KUBE-6-CLUSTER-IP", Type: dataplane.HashIPPort, Family: dataplane.IPv6},
		entries:   []string{"fd00:10:96::a,tcp:53", "fd00:10:96::a,udp:53", "2001:db8::1,sctp:9000"},
		canonical: map[string]string{"fd00:10:96:0:0:0:0:b,tcp:80": "fd00:10:96::b,tcp:80", "FD00:10:96::C,UDP:53": "fd00:10:96::c,udp:53"},
		bad:       []string{"10.96.0.10,tcp:80", "[fd00::1],tcp:80", "fd00::1"},
	},
	{
		name:    "hash:ip,port,ip inet",
		set:     dataplane.Set{Name: "KUBE-LOOP-BACK", Type: dataplane.HashIPPortIP, Family: dataplane.IPv4},
		entries: []string{"10.244.1.5,tcp:8080,10.244.1.5", "10.244.1.6,udp:53,10.244.1.6"},
		bad:     []string{"10.244.1.5,tcp:8080", "10.244.1.5,tcp:8080,fd00::5", "10.244.1.5,tcp:8080,10.244.1.0/24"},
	},
	{
		name:    "hash:ip,port,ip inet6",
		set:     dataplane.Set{Name: "KUBE-6-LOOP-BACK", Type: dataplane.HashIPPortIP, Family: dataplane.IPv6},
		entries: []string{"fd00:10:244::5,tcp:8080,fd00:10:244::5"},
		bad:     []string{"fd00:10:244::5,tcp:8080,10.244.1.5"},
	},
	{
		name:      "hash:ip,port,net inet",
		set:       dataplane.Set{Name: "KUBE-LOAD-BALANCER-SOURCE-CIDR", Type: dataplane.HashIPPortNet, Family: dataplane.IPv4},
		entries:   []string{"203.0.113.10,tcp:443,192.168.0.0/16", "203.0.113.10,tcp:443,10.1.2.3"},
		canonical: map[string]string{"203.0.113.11,tcp:80,10.0.0.7/32": "203.0.113.11,tcp:80,10.0.0.7", "203.0.113.11,tcp:80,172.16.5.9/12": "203.0.113.11,tcp:80,172.16.0.0/12"},
		bad:       []string{"203.0.113.10,tcp:443", "203.0.113.10,tcp:443,10.0.0.0/33", "203.0.113.10,tcp:443,fd00::/64"},
	},
	{
		name:      "hash:ip,port,net inet6",
		set:       dataplane.Set{Name: "KUBE-6-LOAD-BALANCER-SOURCE-CID", Type: dataplane.HashIPPortNet, Family: dataplane.IPv6},
		entries:   []string{"2001:db8::10,tcp:443,fd00:1::/64"},
		canonical: map[string]string{"2001:db8::10,tcp:443,fd00:2::1/128": "2001:db8::10,tcp:443,fd00:2::1"},
		bad:       []string{"2001:db8::10,tcp:443,fd00::/129"},
	},
	{
		name:    "hash:ip inet",
		set:     dataplane.Set{Name: "KUBE-IPVS-IPS", Type: dataplane.HashIP, Family: dataplane.IPv4},
		entries: []string{"10.96.0.10", "10.96.0.11", "203.0.113.10"},
		bad:     []string{"10.96.0.10,tcp:80", "fd00::1", "nope"},
	},
	{
		name:    "hash:ip inet6",
		set:     dataplane.Set{Name: "KUBE-6-IPVS-IPS", Type: dataplane.HashIP, Family: dataplane.IPv6},
		entries: []string{"fd00:10:96::a", "2001:db8::10"},
		bad:     []string{"10.96.0.10"},
	},
	{
		name:      "hash:net inet",
		set:       dataplane.Set{Name: "KUBE-TEST-NET", Type: dataplane.HashNet, Family: dataplane.IPv4},
		entries:   []string{"10.0.0.0/8", "192.168.1.0/24", "10.1.2.3"},
		canonical: map[string]string{"172.16.0.9/32": "172.16.0.9", "172.16.77.1/16": "172.16.0.0/16"},
		bad:       []string{"10.0.0.0/33", "fd00::/64", "10.0.0.0/x"},
	},
	{
		name:      "hash:net inet6",
		set:       dataplane.Set{Name: "KUBE-6-TEST-NET", Type: dataplane.HashNet, Family: dataplane.IPv6},
		entries:   []string{"fd00::/64", "2001:db8::1"},
		canonical: map[string]string{"2001:db8::2/128": "2001:db8::2", "2001:db8:1:2::5/48": "2001:db8:1::/48"},
		bad:       []string{"10.0.0.0/8"},
	},
	{
		name:    "bitmap:port",
		set:     dataplane.Set{Name: "KUBE-NODE-PORT-TCP", Type: dataplane.BitmapPort, PortFrom: 0, PortTo: 65535},
		entries: []string{"30080", "32767", "0", "65535"},
		bad:     []string{"65536", "-1", "10.0.0.1", "port"},
	},
	{
		name:    "bitmap:port narrow range",
		set:     dataplane.Set{Name: "KUBE-HEALTH-CHECK-NODE-PORT", Type: dataplane.BitmapPort, PortFrom: 30000, PortTo: 32767},
		entries: []string{"30000", "31000", "32767"},
		bad:     []string{"29999", "32768"},
	},
}

func runIPSet(t *testing.T, newDataplane func(t *testing.T) dataplane.Dataplane, have Capabilities) {
	for _, tc := range setCases {
		t.Run(tc.name, func(t *testing.T) {
			have.need(t, "ipset:"+string(tc.set.Type), have.hasSet(tc.set.Type))
			runSetCase(t, newDataplane(t).IPSet, tc)
		})
	}

	// The remaining tests use hash:ip,port, the type kube-proxy uses most.
	needIPPort := func(t *testing.T) dataplane.IPSet {
		have.need(t, "ipset:"+string(dataplane.HashIPPort), have.hasSet(dataplane.HashIPPort))
		return newDataplane(t).IPSet
	}
	set := dataplane.Set{Name: "KUBE-CLUSTER-IP", Type: dataplane.HashIPPort, Family: dataplane.IPv4}

	t.Run("missing set", func(t *testing.T) {
		ipset := needIPPort(t)
		_, listed := entries(t, ipset, "KUBE-NO-SUCH-SET")
		require.False(t, listed)
		requireNotExist(t, ipset.Apply([]dataplane.SetChange{{Set: "KUBE-NO-SUCH-SET", Add: []string{"10.96.0.10,tcp:80"}}}))
		requireNotExist(t, ipset.DestroySet("KUBE-NO-SUCH-SET"))
	})

	t.Run("create existing", func(t *testing.T) {
		ipset := needIPPort(t)
		require.NoError(t, ipset.CreateSet(set))
		requireExist(t, ipset.CreateSet(set))
		other := set
		other.Type = dataplane.HashIP
		requireExist(t, ipset.CreateSet(other), "a name in use is EEXIST whatever the type")
	})

	t.Run("batch across sets", func(t *testing.T) {
		ipset := needIPPort(t)
		second := set
		second.Name = "KUBE-EXTERNAL-IP"
		require.NoError(t, ipset.CreateSet(set))
		require.NoError(t, ipset.CreateSet(second))
		require.NoError(t, ipset.Apply([]dataplane.SetChange{
			{Set: set.Name, Add: []string{"10.96.0.10,tcp:80", "10.96.0.11,tcp:80"}},
			{Set: second.Name, Add: []string{"203.0.113.10,tcp:80"}},
		}))
		require.NoError(t, ipset.Apply([]dataplane.SetChange{
			{Set: set.Name, Add: []string{"10.96.0.12,tcp:80"}, Del: []string{"10.96.0.10,tcp:80"}},
		}))
		got, _ := entries(t, ipset, set.Name)
		require.ElementsMatch(t, []string{"10.96.0.11,tcp:80", "10.96.0.12,tcp:80"}, got)
		got, _ = entries(t, ipset, second.Name)
		require.Equal(t, []string{"203.0.113.10,tcp:80"}, got)
	})

	t.Run("maxelem", func(t *testing.T) {
		ipset := needIPPort(t)
		small := set
		small.MaxElem = 4
		require.NoError(t, ipset.CreateSet(small))
		var full []string
		for i := range 4 {
			full = append(full, fmt.Sprintf("10.96.0.%d,tcp:80", i+1))
		}
		require.NoError(t, ipset.Apply([]dataplane.SetChange{{Set: small.Name, Add: full}}))
		requireErrno(t, ipset.Apply([]dataplane.SetChange{{Set: small.Name, Add: []string{"10.96.0.200,tcp:80"}}}), syscall.ENOSPC, "add to a full set")
		require.NoError(t, ipset.Apply([]dataplane.SetChange{{Set: small.Name, Add: full[:1]}}), "re-adding a present entry to a full set is not an error")
		got, _ := entries(t, ipset, small.Name)
		require.Len(t, got, 4)
	})
}

func runSetCase(t *testing.T, ipset dataplane.IPSet, tc setCase) {
	require.NoError(t, ipset.CreateSet(tc.set))
	sets, err := ipset.Sets()
	require.NoError(t, err)
	var listed *dataplane.Set
	for i := range sets {
		if sets[i].Name == tc.set.Name {
			listed = &sets[i]
		}
	}
	require.NotNil(t, listed, "created set %s not listed", tc.set.Name)
	require.Equal(t, tc.set.Type, listed.Type)
	if tc.set.Type != dataplane.BitmapPort {
		require.Equal(t, tc.set.Family, listed.Family)
	}

	require.Empty(t, listed.Entries)

	require.NoError(t, ipset.Apply([]dataplane.SetChange{{Set: tc.set.Name, Add: tc.entries}}))
	got, _ := entries(t, ipset, tc.set.Name)
	require.ElementsMatch(t, tc.entries, got)

	// Idempotence: adding present entries and deleting absent ones is not an error.
	require.NoError(t, ipset.Apply([]dataplane.SetChange{{Set: tc.set.Name, Add: tc.entries[:1]}}))
	require.NoError(t, ipset.Apply([]dataplane.SetChange{{Set: tc.set.Name, Del: tc.entries[:1]}}))
	require.NoError(t, ipset.Apply([]dataplane.SetChange{{Set: tc.set.Name, Del: tc.entries[:1]}}))
	got, _ = entries(t, ipset, tc.set.Name)
	require.ElementsMatch(t, tc.entries[1:], got)

	for in, want := range tc.canonical {
		require.NoError(t, ipset.Apply([]dataplane.SetChange{{Set: tc.set.Name, Add: []string{in}}}), "add %q", in)
		got, _ := entries(t, ipset, tc.set.Name)
		require.Contains(t, got, want, "%q must list as %q", in, want)
		require.NoError(t, ipset.Apply([]dataplane.SetChange{{Set: tc.set.Name, Del: []string{want}}}))
	}

	for _, bad := range tc.bad {
		requireErrno(t, ipset.Apply([]dataplane.SetChange{{Set: tc.set.Name, Add: []string{bad}}}), syscall.EINVAL, "add %q", bad)
	}
	got, _ = entries(t, ipset, tc.set.Name)
	require.ElementsMatch(t, tc.entries[1:], got, "refused entries must leave the set alone")

	one, err := ipset.Entries(tc.set.Name)
	require.NoError(t, err)
	require.ElementsMatch(t, got, one, "Entries reads the set as Sets lists it")

	require.NoError(t, ipset.DestroySet(tc.set.Name))
	_, still := entries(t, ipset, tc.set.Name)
	require.False(t, still, "a destroyed set is not listed")
	_, err = ipset.Entries(tc.set.Name)
	requireErrno(t, err, syscall.ENOENT, "Entries of a destroyed set")
}

// Entries lists a set's entries as Sets reads them; the set must be listed.
func Entries(t *testing.T, ipset dataplane.IPSet, name string) []string {
	t.Helper()
	es, ok := entries(t, ipset, name)
	require.True(t, ok, "set %s not listed", name)
	return es
}

// entries lists a set's entries as Sets reads them, and whether it is listed.
func entries(t *testing.T, ipset dataplane.IPSet, name string) ([]string, bool) {
	t.Helper()
	sets, err := ipset.Sets()
	require.NoError(t, err)
	for _, s := range sets {
		if s.Name == name {
			return s.Entries, true
		}
	}
	return nil, false
}
