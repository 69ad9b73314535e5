package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/scenarios"
)

const (
	exampleDir     = "../../../objects/testdata/example"
	exampleChanges = "../../../objects/testdata/example-changes.yaml"
)

// vsLine is a virtual server in one line: "ADDR:PORT/PROTO SCHED[ FLAGS/TIMEOUT] -> DEST@WEIGHT ...".
func vsLine(v state.VirtualServer) string {
	var b strings.Builder
	b.WriteString(v.Key() + " " + v.Scheduler)
	if len(v.Flags) > 0 {
		fmt.Fprintf(&b, " %s/%d", strings.Join(v.Flags, ","), v.Timeout)
	}
	b.WriteString(" ->")
	for _, d := range v.Destinations {
		fmt.Fprintf(&b, " %s@%d", formatDest(d), d.Weight)
	}
	return b.String()
}

func formatDest(d state.Dest) string {
	if strings.Contains(d.Address, ":") {
		return fmt.Sprintf("[%s]:%d", d.Address, d.Port)
	}
	return fmt.Sprintf("%s:%d", d.Address, d.Port)
}

func stateOf(t *testing.T, set *objects.Set, cfg proxier.Config) *state.State {
	t.Helper()
	r, err := scenarios.NewStateRun(set, cfg, "")
	require.NoError(t, err)
	st, err := r.First(set)
	require.NoError(t, err)
	return st
}

func vsLines(st *state.State) map[string]string {
	out := map[string]string{}
	for _, v := range st.VirtualServers {
		out[v.Key()] = vsLine(v)
	}
	return out
}

func setEntries(st *state.State) map[string][]string {
	out := map[string][]string{}
	for _, s := range st.IPSets {
		out[s.Name] = s.Entries
	}
	return out
}

// TestStateExample runs the example export (every service type and option
// of the proxier) through Load and the proxier on node-a, and checks what
// kube-proxy's IPVS mode would program there.
func TestStateExample(t *testing.T) {
	set, err := objects.Load(exampleDir)
	require.NoError(t, err)
	st := stateOf(t, set, proxier.Config{})
	require.Equal(t, []dataplane.Family{dataplane.IPv4, dataplane.IPv6}, st.Families)

	vs := vsLines(st)
	for _, want := range []string{
		// default/kubernetes: endpoint without a node.
		"10.96.0.1:443/TCP rr -> 10.0.0.11:6443@1",
		// kube-dns: one virtual server per port and protocol.
		"10.96.0.10:53/UDP rr -> 10.244.1.5:53@1 10.244.1.6:53@1 10.244.2.7:53@1",
		"10.96.0.10:53/TCP rr -> 10.244.1.5:53@1 10.244.1.6:53@1 10.244.2.7:53@1",
		"10.96.0.10:9153/TCP rr -> 10.244.1.5:9153@1 10.244.1.6:9153@1 10.244.2.7:9153@1",
		// web (NodePort): the not-ready endpoint on node-c is no destination; the
		// node port listens on the node's address.
		"10.96.10.20:80/TCP rr -> 10.244.1.10:8080@1 10.244.2.10:8080@1",
		"10.0.0.11:30080/TCP rr -> 10.244.1.10:8080@1 10.244.2.10:8080@1",
		// frontend (LoadBalancer, externalTrafficPolicy Local): the cluster IP
		// reaches every ready endpoint, not the terminating one; the LB IP and
		// the node port only the local one.
		"10.96.10.30:443/TCP rr -> 10.244.1.20:8443@1 10.244.2.20:8443@1",
		"203.0.113.10:443/TCP rr -> 10.244.1.20:8443@1",
		"10.0.0.11:31443/TCP rr -> 10.244.1.20:8443@1",
		// edge-proxy (ipMode Proxy) and edge-hostname (hostname only): cluster IP and node port only.
		"10.96.10.31:80/TCP rr -> 10.244.2.30:8080@1",
		"10.0.0.11:31080/TCP rr -> 10.244.2.30:8080@1",
		"10.96.10.32:80/TCP rr -> 10.244.2.30:8080@1",
		"10.0.0.11:31081/TCP rr -> 10.244.2.30:8080@1",
		// legacy: ClientIP affinity on every address, including both external
		// IPs. Its externalTrafficPolicy Local (a ClusterIP service with external
		// IPs takes one) finds no endpoint on node-a: the external IPs, reachable
		// from outside, fall back to every endpoint.
		"10.96.10.40:8080/TCP rr persistent/600 -> 10.244.3.30:8080@1",
		"198.51.100.5:8080/TCP rr persistent/600 -> 10.244.3.30:8080@1",
		"10.0.0.11:8080/TCP rr persistent/600 -> 10.244.3.30:8080@1",
		// cache: internalTrafficPolicy Local keeps node-a's endpoint only.
		"10.96.10.50:6379/TCP rr -> 10.244.1.40:6379@1",
		// UDP and SCTP node ports.
		"10.96.20.10:8125/UDP rr -> 10.244.2.50:8125@1",
		"10.0.0.11:30125/UDP rr -> 10.244.2.50:8125@1",
		"10.96.20.20:3868/SCTP rr -> 10.244.3.60:3868@1",
		"10.0.0.11:30868/SCTP rr -> 10.244.3.60:3868@1",
		// catalog: dual-stack, one virtual server per family.
		"10.96.10.60:80/TCP rr -> 10.244.1.60:8080@1 10.244.2.60:8080@1",
		"[fd00:96::60]:80/TCP rr -> [fd00:244:1::60]:8080@1 [fd00:244:2::60]:8080@1",
	} {
		key := strings.Fields(want)[0]
		require.Equal(t, want, vs[key], "virtual server %s", key)
	}
	for _, absent := range []string{
		"203.0.113.11:80/TCP", // ipMode Proxy
		"10.96.30.10:80/TCP",  // service-proxy-name
		"10.0.0.11:32000/TCP", // the health check port is not a virtual server
		"127.0.0.1:30080/TCP", // kube-proxy's node addresses leave loopback out
		"[::1]:30080/TCP",
	} {
		require.NotContains(t, vs, absent)
	}
	require.Len(t, st.VirtualServers, 23, "every virtual server is accounted for above")

	sets := setEntries(st)
	require.Len(t, sets, 34, "all 17 sets per family exist, even empty ones")
	for name, want := range map[string][]string{
		"KUBE-CLUSTER-IP": {"10.96.0.1,tcp:443", "10.96.0.10,tcp:53", "10.96.0.10,tcp:9153", "10.96.0.10,udp:53",
			"10.96.10.20,tcp:80", "10.96.10.30,tcp:443", "10.96.10.31,tcp:80", "10.96.10.32,tcp:80", "10.96.10.40,tcp:8080",
			"10.96.10.50,tcp:6379", "10.96.10.60,tcp:80", "10.96.20.10,udp:8125", "10.96.20.20,sctp:3868"},
		"KUBE-6-CLUSTER-IP":              {"fd00:96::60,tcp:80"},
		"KUBE-EXTERNAL-IP":               {},
		"KUBE-EXTERNAL-IP-LOCAL":         {"10.0.0.11,tcp:8080", "198.51.100.5,tcp:8080"},
		"KUBE-LOAD-BALANCER":             {"203.0.113.10,tcp:443"},
		"KUBE-LOAD-BALANCER-LOCAL":       {"203.0.113.10,tcp:443"},
		"KUBE-LOAD-BALANCER-FW":          {"203.0.113.10,tcp:443"},
		"KUBE-LOAD-BALANCER-SOURCE-CIDR": {"203.0.113.10,tcp:443,10.0.0.0/16", "203.0.113.10,tcp:443,192.0.2.0/24"},
		// 10.0.0.0/16 holds the node's address: the LB IP may talk to itself.
		"KUBE-LOAD-BALANCER-SOURCE-IP": {"203.0.113.10,tcp:443,203.0.113.10"},
		"KUBE-NODE-PORT-TCP":           {"30080", "31080", "31081", "31443"},
		"KUBE-NODE-PORT-LOCAL-TCP":     {"31443"},
		"KUBE-NODE-PORT-UDP":           {"30125"},
		"KUBE-NODE-PORT-SCTP-HASH":     {"10.0.0.11,sctp:30868"},
		"KUBE-HEALTH-CHECK-NODE-PORT":  {"32000"},
		// Every local endpoint, terminating (10.244.1.21) included.
		"KUBE-LOOP-BACK": {"10.244.1.10,tcp:8080,10.244.1.10", "10.244.1.20,tcp:8443,10.244.1.20", "10.244.1.21,tcp:8443,10.244.1.21",
			"10.244.1.40,tcp:6379,10.244.1.40", "10.244.1.5,tcp:53,10.244.1.5", "10.244.1.5,tcp:9153,10.244.1.5", "10.244.1.5,udp:53,10.244.1.5",
			"10.244.1.6,tcp:53,10.244.1.6", "10.244.1.6,tcp:9153,10.244.1.6", "10.244.1.6,udp:53,10.244.1.6", "10.244.1.60,tcp:8080,10.244.1.60"},
		"KUBE-6-LOOP-BACK": {"fd00:244:1::60,tcp:8080,fd00:244:1::60"},
	} {
		require.Contains(t, sets, name)
		require.Equal(t, want, sets[name], "ipset %s", name)
	}

	// Service addresses are bound, except the external IP that is the node's own.
	require.Equal(t, []string{"10.96.0.1", "10.96.0.10", "10.96.10.20", "10.96.10.30", "10.96.10.31", "10.96.10.32",
		"10.96.10.40", "10.96.10.50", "10.96.10.60", "10.96.20.10", "10.96.20.20", "198.51.100.5", "203.0.113.10", "fd00:96::60"}, st.Addresses)

	nat, filter := st.IPTables[dataplane.IPv4].NAT, st.IPTables[dataplane.IPv4].Filter
	for _, r := range []string{
		`-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ`,
		`-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000`, // --or-mark, as iptables-save prints it
		`-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`,
		`-A KUBE-LOAD-BALANCER -m comment --comment "Kubernetes service load balancer ip + port with externalTrafficPolicy=local" -m set --match-set KUBE-LOAD-BALANCER-LOCAL dst,dst -j RETURN`,
		`-A KUBE-NODE-PORT -p sctp -m comment --comment "Kubernetes nodeport SCTP port for masquerade purpose with type \'hash ip:port\'" -m set --match-set KUBE-NODE-PORT-SCTP-HASH dst,dst -j KUBE-MARK-MASQ`,
		`-A KUBE-SERVICES -m comment --comment "Kubernetes service external ip + port with externalTrafficPolicy=local" -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -m addrtype --dst-type LOCAL -j ACCEPT`,
	} {
		require.Contains(t, nat, r)
	}
	for _, r := range nat {
		require.NotContains(t, r, "--match-set KUBE-EXTERNAL-IP dst,dst", "no external IP is masqueraded: legacy's are Local")
	}
	for _, r := range []string{
		`-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable`,
		`-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT`,
		`-A KUBE-SOURCE-RANGES-FIREWALL -j DROP`,
	} {
		require.Contains(t, filter, r)
	}
	// A source range holds the node IP, so no out-filter DROP rule is needed.
	for _, r := range filter {
		require.NotContains(t, r, "-A KUBE-IPVS-OUT-FILTER")
	}
	// The set-matching rules of sets that are empty are not written (IPv6 has no LB).
	for _, r := range st.IPTables[dataplane.IPv6].NAT {
		require.NotContains(t, r, "KUBE-6-LOAD-BALANCER-LOCAL")
	}
}

func TestStateExampleOtherNodeAndSettings(t *testing.T) {
	set, err := objects.Load(exampleDir)
	require.NoError(t, err)
	st := stateOf(t, set, proxier.Config{NodeName: "node-b", Scheduler: "wrr", ClusterCIDRs: []string{"10.244.0.0/16"},
		Families: []dataplane.Family{dataplane.IPv4}})
	vs := vsLines(st)
	// On node-b the Local policies select node-b's endpoints; node ports listen on node-b's address.
	require.Equal(t, "203.0.113.10:443/TCP wrr -> 10.244.2.20:8443@1", vs["203.0.113.10:443/TCP"])
	require.Equal(t, "10.0.0.12:31443/TCP wrr -> 10.244.2.20:8443@1", vs["10.0.0.12:31443/TCP"])
	require.NotContains(t, vs, "10.0.0.11:31443/TCP")
	// cache has no endpoint on node-b: internalTrafficPolicy Local on a service
	// not reachable from outside leaves its virtual server without a destination.
	require.Equal(t, "10.96.10.50:6379/TCP wrr ->", vs["10.96.10.50:6379/TCP"])
	// 10.0.0.11 is no longer a node address: it is bound like any external IP.
	require.Contains(t, st.Addresses, "10.0.0.11")
	require.Equal(t, []dataplane.Family{dataplane.IPv4}, st.Families)
	require.NotContains(t, setEntries(st), "KUBE-6-CLUSTER-IP")
	require.Contains(t, st.IPTables[dataplane.IPv4].NAT,
		`-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ`)
}

// incrementalVersusScratch runs base, then changes (an incremental sync), and
// compares the dump with a fresh proxier given the final objects.
func incrementalVersusScratch(t *testing.T, base, changes *objects.Set, cfg proxier.Config) (incremental *state.State) {
	t.Helper()
	r, err := scenarios.NewStateRun(base, cfg, "")
	require.NoError(t, err)
	_, err = r.First(base)
	require.NoError(t, err)
	inc, err := r.Then(base, changes)
	require.NoError(t, err)
	final, _ := base.Apply(changes)
	cfg.Families = r.Families // the final objects may no longer use a family the node runs
	scratch := stateOf(t, final, cfg)
	diffs := resultsDiff(scratch, inc)
	require.Empty(t, diffs, "incremental (B) differs from a from-scratch run on the final objects (A):\n%s", diffs)
	return inc
}

// resultsDiff is DiffStates as text, one difference a line; empty if equal.
func resultsDiff(a, b *state.State) string {
	var s strings.Builder
	for _, x := range state.Diff(a, b) {
		s.WriteString(x.String() + "\n")
	}
	return s.String()
}

func TestStateThenExample(t *testing.T) {
	base, err := objects.Load(exampleDir)
	require.NoError(t, err)
	changes, err := objects.Load(exampleChanges)
	require.NoError(t, err)
	require.Equal(t, []objects.Deletion{{Kind: "EndpointSlice", Namespace: "shop", Name: "legacy-q2n7c"},
		{Kind: "Service", Namespace: "shop", Name: "legacy"}}, changes.Deletions)
	inc := incrementalVersusScratch(t, base, changes, proxier.Config{})
	vs := vsLines(inc)
	require.NotContains(t, vs, "10.96.10.40:8080/TCP", "legacy deleted")
	require.NotContains(t, vs, "198.51.100.5:8080/TCP")
	require.NotContains(t, vs, "10.96.10.60:80/TCP", "catalog handed to another proxy")
	require.NotContains(t, vs, "[fd00:96::60]:80/TCP")
	require.Equal(t, "10.96.10.20:80/TCP rr -> 10.244.1.10:8080@1 10.244.2.10:8080@1 10.244.3.10:8080@1", vs["10.96.10.20:80/TCP"])
	require.Equal(t, "203.0.113.10:443/TCP rr -> 10.244.1.20:8443@1 10.244.2.20:8443@1", vs["203.0.113.10:443/TCP"])
	require.Equal(t, "10.96.20.30:514/UDP rr -> 10.244.1.90:514@1", vs["10.96.20.30:514/UDP"])
	require.Empty(t, setEntries(inc)["KUBE-HEALTH-CHECK-NODE-PORT"])
	require.NotContains(t, inc.Addresses, "198.51.100.5")
}

func TestStateCommand(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"default"},
		"spec":{"clusterIP":"10.96.0.1","ports":[{"name":"a","port":80},{"name":"b","port":70000}]}}`), 0o644))

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"dump", []string{"state", "-f", exampleDir, "-o", a}, 0, "", "ignored 1 x Service: type ExternalName"},
		{"dump after changes", []string{"state", "-f", exampleDir, "--then", exampleChanges, "-o", b}, 0, "", ""},
		{"same", []string{"state", "--diff", a, a}, 0, "hold the same state", ""},
		{"differs", []string{"state", "--diff", a, b}, 1,
			"virtual-server 198.51.100.5:8080/TCP: only in A: rr, 1 destinations, flags [persistent], timeout 600", "differences"},
		{"settings", []string{"state", "-f", exampleDir, "--set", "proxier.scheduler=lc", "--set", "proxier.masqueradeAll=true",
			"--set", "proxier.ipset=restore", "--family", "IPv4", "--node", "node-c"}, 0, `"scheduler": "lc"`, ""},
		{"scaled", []string{"state", "-f", exampleDir, "--scale", "3", "--family", "IPv4"}, 0, `"address": "10.96.0.2"`,
			"scale: 2 x external IP equal to a node address"},
		{"bad scale", []string{"state", "-f", exampleDir, "--scale", "0"}, 2, "", "the factor must be at least 1"},
		{"bad object", []string{"state", "-f", bad}, 2, "", "services default/web: spec.ports[1].port: 70000 is not a valid port"},
		{"bad key", []string{"state", "-f", exampleDir, "--set", "proxier.nope=1"}, 2, "", "proxier.nope: unknown field (known: implementation, mode, families, initialSync, minSyncPeriod"},
		{"bad family", []string{"state", "-f", exampleDir, "--family", "IPv5"}, 2, "", "want IPv4, IPv6 or dual"},
		{"no input", []string{"state"}, 2, "", "want -f OBJECTS"},
		{"diff arity", []string{"state", "--diff", a}, 2, "", "exactly two dump files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb)
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			require.Contains(t, out.String(), tc.stdout)
			require.Contains(t, errb.String(), tc.stderr)
		})
	}
	// The written dump reads back to what a direct run produces.
	set, err := objects.Load(exampleDir)
	require.NoError(t, err)
	got, err := state.ReadFile(a)
	require.NoError(t, err)
	require.Empty(t, state.Diff(stateOf(t, set, proxier.Config{}), got))
}

// TestStateDefaultNode: without --node, kpsim state plays the node hosting
// the most endpoints among the Node objects (not the first one), and its
// help says so.
func TestStateDefaultNode(t *testing.T) {
	in := filepath.Join(t.TempDir(), "in.yaml")
	require.NoError(t, os.WriteFile(in, []byte(`
apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 10.0.0.11}]}
---
apiVersion: v1
kind: Node
metadata: {name: node-b}
status: {addresses: [{type: InternalIP, address: 10.0.0.12}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {clusterIP: 10.96.0.10, ports: [{port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{port: 80}]
endpoints:
- {addresses: [10.244.1.5], nodeName: node-b}
- {addresses: [10.244.1.6], nodeName: node-b}
- {addresses: [10.244.1.7], nodeName: node-a}
`), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"state", "-f", in}, &out, &errb), errb.String())
	require.Contains(t, errb.String(), "node node-b [10.0.0.12]")

	out.Reset()
	errb.Reset()
	require.Equal(t, 0, run([]string{"state", "--help"}, &out, &errb))
	help := out.String()
	require.Contains(t, help, "the node hosting the most endpoints (among the Node objects")
	require.NotContains(t, help, "the first Node object")
}

func TestAnonymizeCommand(t *testing.T) {
	dir := t.TempDir()
	out1, out2 := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	for _, o := range []string{out1, out2} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, run([]string{"anonymize", exampleDir, "-o", o, "--seed", "42"}, &stdout, &stderr), stderr.String())
		require.Contains(t, stderr.String(), "wrote 11 services, 14 endpoint slices, 3 nodes")
	}
	b1, err := os.ReadFile(out1)
	require.NoError(t, err)
	b2, err := os.ReadFile(out2)
	require.NoError(t, err)
	require.Equal(t, b1, b2, "same seed, same output")
	require.NotContains(t, string(b1), "frontend")

	// The anonymized cluster programs the same shape: as many virtual servers
	// and destinations, set entries per set, addresses and rules.
	orig, err := objects.Load(exampleDir)
	require.NoError(t, err)
	anon, err := objects.Load(out1)
	require.NoError(t, err)
	require.Equal(t, shape(stateOf(t, orig, proxier.Config{})), shape(stateOf(t, anon, proxier.Config{})))

	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"anonymize", exampleDir, "-o", "-"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "seed ")
	require.Equal(t, 2, run([]string{"anonymize", exampleDir}, &stdout, &stderr))
}

// shape is a dump with every name and address left out.
func shape(st *state.State) []string {
	var out []string
	for _, v := range st.VirtualServers {
		out = append(out, fmt.Sprintf("vs %d/%s %s %v %d %d", v.Port, v.Protocol, v.Scheduler, v.Flags, v.Timeout, len(v.Destinations)))
	}
	for _, s := range st.IPSets {
		out = append(out, fmt.Sprintf("set %s %s %d", s.Name, s.Type, len(s.Entries)))
	}
	out = append(out, fmt.Sprintf("addresses %d", len(st.Addresses)))
	for f, tabs := range st.IPTables {
		out = append(out, fmt.Sprintf("rules %s %d %d", f, len(tabs.NAT), len(tabs.Filter)))
	}
	slices.Sort(out)
	return out
}

// BenchmarkState10k loads a 10,010-service kubectl-style export (the example
// scaled 910 times, 62 MB of JSON), runs the proxier on it and writes the
// dump: what `kpsim state -f big.json -o state.json` does.
func BenchmarkState10k(b *testing.B) {
	set, err := objects.Load(exampleDir)
	require.NoError(b, err)
	big, err := set.Scale(910)
	require.NoError(b, err)
	path := filepath.Join(b.TempDir(), "big.json")
	f, err := os.Create(path)
	require.NoError(b, err)
	require.NoError(b, objects.Write(f, big))
	require.NoError(b, f.Close())
	b.ResetTimer()
	for range b.N {
		var out bytes.Buffer
		require.Equal(b, 0, run([]string{"state", "-f", path}, &out, io.Discard))
		require.Greater(b, out.Len(), 1<<20)
	}
}
