package sim_test

import (
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestIPTablesCommandCharge: one iptables command costs its process
// whether it finds what it looks for or not, and a command that removes
// pays per rule or chain removed; nothing is priced as a save or a
// restore.
func TestIPTablesCommandCharge(t *testing.T) {
	p, err := sim.LoadProfile("host")
	require.NoError(t, err)
	p.Ops[dataplane.OpIPTablesCommand.String()] = 5e-3
	p.ListItem[dataplane.OpIPTablesCommand.String()] = 10e-3
	p.IPTablesRestore = &sim.IPTablesRestoreCost{PerChain: 1e-6} // per rule written and chain of its table
	k, err := sim.New(sim.Options{Profile: p})
	require.NoError(t, err)
	cost := func(want error, args ...string) time.Duration {
		t.Helper()
		_, before := k.Kernel()
		require.ErrorIs(t, k.Command(dataplane.IPv4, "nat", args...), want, "%q", args)
		_, after := k.Kernel()
		return after - before
	}
	const process, removal = 5 * time.Millisecond, 10 * time.Millisecond
	require.Equal(t, process, cost(fs.ErrNotExist, "-C", "PREROUTING", "-j", "KUBE-SERVICES"))
	require.Equal(t, process, cost(nil, "-N", "KUBE-SERVICES"))
	require.Equal(t, process, cost(fs.ErrExist, "-N", "KUBE-SERVICES"))
	written := 5 * time.Microsecond // nat's four built-in chains and KUBE-SERVICES
	require.Equal(t, process+written, cost(nil, "-A", "KUBE-SERVICES", "-j", "RETURN"))
	require.Equal(t, process+written, cost(nil, "-I", "KUBE-SERVICES", "-d", "10.96.0.1/32", "-j", "RETURN"))
	require.Equal(t, process, cost(nil, "-C", "KUBE-SERVICES", "-j", "RETURN"))
	require.Equal(t, process+removal, cost(nil, "-D", "KUBE-SERVICES", "-j", "RETURN"))
	require.Equal(t, process+removal, cost(nil, "-F", "KUBE-SERVICES"), "one rule left")
	require.Equal(t, process, cost(nil, "-F", "KUBE-SERVICES"), "an empty chain's flush removes nothing")
	require.Equal(t, process+removal, cost(nil, "-X", "KUBE-SERVICES"))
	require.Equal(t, process, cost(fs.ErrNotExist, "-X", "KUBE-SERVICES"))
	ops := k.Ops()
	require.EqualValues(t, 11, ops[dataplane.OpIPTablesCommand])
	require.Zero(t, ops[dataplane.OpIPTablesSave]+ops[dataplane.OpIPTablesRestore])
}
