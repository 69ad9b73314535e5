package sim_test

import (
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/sim"
)

func TestRestoreCommands(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		want    []string // lines Save must contain, in this order
	}{
		{
			name: "insert at an index and at the top",
			payload: "*filter\n:KUBE-FORWARD - [0:0]\n-A KUBE-FORWARD -j RETURN\n-A KUBE-FORWARD -j DROP\n" +
				"-I KUBE-FORWARD 2 -m mark --mark 0x4000/0x4000 -j ACCEPT\n-I KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
			want: []string{
				"-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
				"-A KUBE-FORWARD -j RETURN",
				"-A KUBE-FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT",
				"-A KUBE-FORWARD -j DROP",
			},
		},
		{
			name:    "per-rule counters and comments with spaces",
			payload: "*filter\n:KUBE-FIREWALL - [0:0]\n[12:3456] -A KUBE-FIREWALL -m comment --comment \"kube-proxy  firewall\" -j DROP\nCOMMIT\n",
			want:    []string{`-A KUBE-FIREWALL -m comment --comment "kube-proxy  firewall" -j DROP`},
		},
		{
			name:    "new chain, policy, delete by spec",
			payload: "*filter\n-N KUBE-A\n-A INPUT -j KUBE-A\n-A INPUT -j ACCEPT\n-D INPUT -j ACCEPT\n-P FORWARD DROP\nCOMMIT\n",
			want:    []string{":FORWARD DROP [0:0]", ":KUBE-A - [0:0]", "-A INPUT -j KUBE-A"},
		},
		{
			name:    "one table twice in a payload",
			payload: "*nat\n:KUBE-A - [0:0]\nCOMMIT\n*nat\n-A KUBE-A -j RETURN\nCOMMIT\n",
			want:    []string{"-A KUBE-A -j RETURN"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newKernel(t, sim.Options{})
			require.NoError(t, k.Restore(dataplane.IPv4, []byte(tc.payload)))
			table := strings.TrimPrefix(strings.SplitN(tc.payload, "\n", 2)[0], "*")
			out, err := k.Save(dataplane.IPv4, table)
			require.NoError(t, err)
			rest := string(out)
			for _, w := range tc.want {
				i := strings.Index(rest, w+"\n")
				require.GreaterOrEqual(t, i, 0, "missing or out of order: %s\nsaved:\n%s", w, out)
				rest = rest[i+len(w):]
			}
		})
	}
}

func TestRestoreErrors(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		line    string
	}{
		{"unknown table", "*security\nCOMMIT\n", "line 1"},
		{"rule outside a table", "-A INPUT -j ACCEPT\n", "line 1"},
		{"missing chain", "*filter\n-A KUBE-NOPE -j ACCEPT\nCOMMIT\n", "line 2"},
		{"jump to undeclared chain", "*filter\n# comment\n:KUBE-A - [0:0]\n-A KUBE-A -j KUBE-B\nCOMMIT\n", "line 4"},
		{"jump to a built-in chain", "*filter\n-A INPUT -j FORWARD\nCOMMIT\n", "line 2"},
		{"missing set", "*filter\n-A INPUT -m set --match-set NOPE dst -j DROP\nCOMMIT\n", "line 2"},
		{"set of the other family", "*filter\n-A INPUT -m set --match-set V6 dst -j DROP\nCOMMIT\n", "line 2"},
		{"policy on a user chain", "*filter\n:KUBE-A ACCEPT [0:0]\nCOMMIT\n", "line 2"},
		{"chain name too long", "*filter\n:KUBE-A-CHAIN-NAME-OVER-28-BYTES - [0:0]\nCOMMIT\n", "line 2"},
		{"delete a non-empty chain", "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j RETURN\n-X KUBE-A\nCOMMIT\n", "line 4"},
		{"delete a built-in chain", "*filter\n-X INPUT\nCOMMIT\n", "line 2"},
		{"delete a missing rule", "*filter\n-D INPUT -j ACCEPT\nCOMMIT\n", "line 2"},
		{"insert past the end", "*filter\n-I INPUT 3 -j ACCEPT\nCOMMIT\n", "line 2"},
		{"unterminated quote", "*filter\n-A INPUT -m comment --comment \"x -j ACCEPT\nCOMMIT\n", "line 2"},
		{"no commit", "*filter\n-A INPUT -j ACCEPT\n", "line 3"},
		{"second table before commit", "*filter\n*nat\nCOMMIT\n", "line 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newKernel(t, sim.Options{})
			require.NoError(t, k.CreateSet(dataplane.Set{Name: "V6", Type: dataplane.HashIP, Family: dataplane.IPv6}))
			before, err := k.Save(dataplane.IPv4, "filter")
			require.NoError(t, err)
			err = k.Restore(dataplane.IPv4, []byte(tc.payload))
			require.ErrorIs(t, err, syscall.EINVAL)
			require.ErrorContains(t, err, tc.line+":")
			after, err := k.Save(dataplane.IPv4, "filter")
			require.NoError(t, err)
			require.Equal(t, string(before), string(after), "a failed payload changes nothing")
		})
	}
}

// TestRestoreAtomicAcrossTables: a failure in a later table undoes the
// earlier, committed one too (the contract's payload atomicity).
func TestRestoreAtomicAcrossTables(t *testing.T) {
	k := newKernel(t, sim.Options{})
	err := k.Restore(dataplane.IPv4, []byte("*nat\n:KUBE-A - [0:0]\nCOMMIT\n*filter\n-A INPUT -j KUBE-NOPE\nCOMMIT\n"))
	require.ErrorIs(t, err, syscall.EINVAL)
	out, err := k.Save(dataplane.IPv4, "nat")
	require.NoError(t, err)
	require.NotContains(t, string(out), "KUBE-A")
}
