package scenarios

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
)

// base is a valid scenario; tests append to it or replace parts of it.
const base = `name: t
description: a test scenario
seed: 3
cluster:
  services: 10
  types: {nodePort: 0.5}
probes:
  services: 2
timeline:
  - createCluster
  - startProxier
  - waitSynced
  - probes: on
  - churnEndpoints: {rate: 5, duration: 1s, share: 0.5}
`

func TestParseValid(t *testing.T) {
	s, err := Parse("x.yaml", []byte(base), nil)
	require.NoError(t, err)
	require.Equal(t, "sim", s.Backend)
	require.Equal(t, "host", s.Sim.Profile)
	require.Equal(t, []dataplane.Family{"IPv4"}, s.Proxier.Families)
	require.Equal(t, proxier.InitialSyncMode("handlers"), s.Proxier.InitialSync)
	require.Equal(t, dataplane.DefaultIPSetStrategy, s.Dataplane.IPSet)
	require.Equal(t, time.Second, s.Proxier.MinSyncPeriod)
	require.Equal(t, 30*time.Second, s.Proxier.SyncPeriod)
	require.Equal(t, 5*time.Minute, s.Timeline[2].WaitSynced.Timeout.D(), "waitSynced default timeout")
	require.True(t, bool(*s.Timeline[3].Probes))
	require.Equal(t, Fixed(1), s.Cluster.PortsPerService)
	require.Len(t, s.set.Services, 10)
	require.Len(t, s.set.EndpointSlices, 10)
	require.Len(t, s.set.Nodes, 1)
	np := 0
	for _, svc := range s.set.Services {
		if svc.Spec.Type == v1.ServiceTypeNodePort {
			np++
			require.GreaterOrEqual(t, svc.Spec.Ports[0].NodePort, int32(defaultNodePortMin))
		}
	}
	require.Positive(t, np)
}

// TestParseErrors checks every kind of error, each located by file, line
// and field path.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		sets       []string
		want       []string // each must appear in the error text
	}{
		{"unknown field", strings.Replace(base, "  services: 10", "  services: 10\n  servcies: 4", 1), nil,
			[]string{"x.yaml:6: cluster.servcies: unknown field (known: fromFile, services,"}},
		{"unknown top-level field", base + "extra: 1\n", nil, []string{"x.yaml:15: extra: unknown field"}},
		{"wrong type int", strings.Replace(base, "services: 10", "services: many", 1), nil,
			[]string{`x.yaml:5: cluster.services: must be a whole number, got the string "many"`}},
		{"wrong type float for int", strings.Replace(base, "services: 10", "services: 1.5", 1), nil,
			[]string{"x.yaml:5: cluster.services: must be a whole number, got the number 1.5"}},
		{"wrong type mapping", strings.Replace(base, "seed: 3", "seed: {a: 1}", 1), nil,
			[]string{"x.yaml:3: seed: must be a whole number, got a mapping"}},
		{"wrong type bool", base + "proxier: {masqueradeAll: yes}\n", nil,
			[]string{`x.yaml:15: proxier.masqueradeAll: must be true or false, got the string "yes"`}},
		{"impossible rate", strings.Replace(base, "rate: 5", "rate: 0", 1), nil,
			[]string{"x.yaml:14: timeline[4].churnEndpoints.rate: must be > 0"}},
		{"impossible share", strings.Replace(base, "nodePort: 0.5", "nodePort: 1.5", 1), nil,
			[]string{"x.yaml:6: cluster.types.nodePort: must be a share between 0 and 1, got 1.5"}},
		{"shares over one", strings.Replace(base, "nodePort: 0.5", "nodePort: 0.5, loadBalancer: 0.6", 1), nil,
			[]string{"x.yaml:6: cluster.types: shares add up to 1.1, more than 1"}},
		{"bad duration", strings.Replace(base, "duration: 1s", "duration: 1 second", 1), nil,
			[]string{`x.yaml:14: timeline[4].churnEndpoints.duration: must be a duration such as "500ms" or "2m": "1 second"`}},
		{"duration as number", strings.Replace(base, "duration: 1s", "duration: 5", 1), nil,
			[]string{`x.yaml:14: timeline[4].churnEndpoints.duration: must be a duration such as "500ms" or "2m", got the number 5`}},
		{"negative duration", base + "  - sleep: -1s\n", nil, []string{"x.yaml:15: timeline[5].sleep: must not be negative"}},
		{"zero sleep", base + "  - sleep: 0s\n", nil, []string{"x.yaml:15: timeline[5].sleep: must be > 0"}},
		{"duplicate key", strings.Replace(base, "seed: 3", "seed: 3\nseed: 4", 1), nil,
			[]string{"x.yaml:4: seed: given twice"}},
		{"syntax error", "name: t\ncluster:\n  services: [1,\n", nil, []string{"x.yaml:"}},
		// yaml.v3 numbers parser errors (unlike scanner errors) from 0: the lines here are the true ones.
		// A zero waitSynced timeout is refused however it is written; only an absent one means 5m.
		{"wait timeout 0s", strings.Replace(base, "  - waitSynced\n", "  - waitSynced: {timeout: 0s}\n", 1), nil,
			[]string{"x.yaml:12: timeline[2].waitSynced.timeout: must be > 0 (leave it out for the default, 5m0s)"}},
		{"wait timeout 0", strings.Replace(base, "  - waitSynced\n", "  - waitSynced: {timeout: 0}\n", 1), nil,
			[]string{"x.yaml:12: timeline[2].waitSynced.timeout: must be > 0 (leave it out for the default, 5m0s)"}},
		{"wait timeout 0 in a repeat", base + "  - repeat: {times: 2, steps: [waitSynced: {timeout: 0s}]}\n", nil,
			[]string{"x.yaml:15: timeline[5].repeat.steps[0].waitSynced.timeout: must be > 0"}},
		{"unclosed flow list", "name: t\ndescription: d\ncluster:\n  podCIDRs: [10.0.0.0/8\nproxier: {}\n", nil,
			[]string{"x.yaml:4: did not find expected ',' or ']'"}},
		{"list item among keys", "name: t\ndescription: d\n- createCluster\n", nil, []string{"x.yaml:3: did not find expected key"}},
		{"bad indentation (scanner)", "name: t\ndescription: d\n  seed: 1\n", nil, []string{"x.yaml:3: mapping values are not allowed in this context"}},
		{"unknown step", base + "  - explode: {}\n", nil, []string{"x.yaml:15: timeline[5].explode: unknown field"}},
		{"two kinds in one step", base + "  - sleep: 1s\n    probes: off\n", nil,
			[]string{"x.yaml:15: timeline[5]: a step has exactly one kind (one key), got 2"}},
		{"step not a mapping", base + "  - [1, 2]\n", nil, []string{"x.yaml:15: timeline[5]: a step must be a step name"}},
		{"bare step needs a value", base + "  - sleep\n", nil, []string{"x.yaml:15: timeline[5].sleep: must be a duration"}},
		{"probes switch", base + "  - probes: maybe\n", nil, []string{`x.yaml:15: timeline[5].probes: must be on or off, got the string "maybe"`}},
		{"alias", strings.Replace(base, "seed: 3", "seed: &s 3\nx: *s", 1), nil, []string{"x.yaml:4: x: unknown field"}},
		{"alias value", strings.Replace(base, "description: a test scenario", "description: &d hello\nname2: *d", 1), nil, []string{"x.yaml:3: name2"}},
		{"second document", base + "---\nname: u\n", nil, []string{"x.yaml:15: a second YAML document"}},
		{"empty", "", nil, []string{"x.yaml: empty scenario"}},
		{"not a mapping", "- a\n- b\n", nil, []string{"x.yaml:1: must be a mapping, got a list"}},
		{"missing name and description", strings.Replace(strings.Replace(base, "name: t\n", "", 1), "description: a test scenario\n", "", 1), nil,
			[]string{"x.yaml: name: required", "x.yaml: description: required"}},
		{"bad cidr", base + "  # comment\nproxier:\n  excludeCIDRs: [10.0.0.0/33]\n", nil,
			[]string{`x.yaml:17: proxier.excludeCIDRs[0]: not a CIDR: "10.0.0.0/33"`}},
		{"unknown backend", base + "backend: vm\n", nil, []string{`x.yaml:15: backend: "vm" is not one of sim, kernel`}},
		{"unknown profile", base + "sim: {profile: nope}\n", nil, []string{`x.yaml:15: sim.profile: cost profile "nope"`}},
		{"time scale", base + "sim: {timeScale: 2}\n", nil, []string{"x.yaml:15: sim.timeScale: must be between 0"}},
		{"memory limit", base + "memoryLimit: lots\n", nil, []string{`x.yaml:15: memoryLimit: "lots" is not a quantity of bytes (e.g. 1200Mi, 2Gi)`}},
		{"memory limit too small", base + "memoryLimit: 1Mi\n", nil, []string{"x.yaml:15: memoryLimit: 1Mi is less than 64Mi"}},
		// The incident's profile prices IPVS mode only: nftables mode's syncs would be free.
		{"a profile that cannot price the mode", base + "sim: {profile: incident}\n", []string{"proxier.implementation=kube-proxy@v1.37.1", "proxier.mode=nftables"},
			[]string{"x.yaml:15: sim.profile: cost profile incident prices none of nftables mode's operations (nft-transaction, nft-command): its syncs would take no modeled time; use a profile that prices them (calibrated-vm-tcg, host) or calibrate this kernel's (sudo kpsim calibrate -o FILE)"}},
		{"dual-stack needs two families", base + "  # x\n", []string{"cluster.dualStack=0.5", "proxier.families=[IPv4]"},
			[]string{"--set cluster.dualStack=0.5: cluster.dualStack: dual-stack services need proxier.families [IPv4, IPv6]"}},
		{"restart before start", strings.Replace(base, "  - createCluster\n", "  - createCluster\n  - restartProxier\n", 1), nil,
			[]string{"x.yaml:11: timeline[1]: restartProxier before startProxier"}},
		{"wait before start", strings.Replace(base, "  - startProxier\n  - waitSynced\n", "  - waitSynced\n  - startProxier\n", 1), nil,
			[]string{"x.yaml:11: timeline[1]: waitSynced before startProxier"}},
		{"probes without services", strings.Replace(base, "  services: 2\n", "  interval: 1s\n", 1), nil,
			[]string{"x.yaml:13: timeline[3]: probes on, but probes.services selects nothing"}},
		{"probe interval", strings.Replace(base, "  services: 2\n", "  services: 2\n  interval: 1ms\n", 1), nil,
			[]string{"x.yaml:9: probes.interval: must be at least 10ms"}},
		{"probe service missing", strings.Replace(base, "  services: 2\n", "  services: [ns-000/nope]\n", 1), nil,
			[]string{"x.yaml:8: probes.services[0]: no service ns-000/nope in the cluster"}},
		{"probe service name form", strings.Replace(base, "  services: 2\n", "  services: [justname]\n", 1), nil,
			[]string{`x.yaml:8: probes.services[0]: must be namespace/name, got "justname"`}},
		{"churn needs a target", strings.Replace(base, ", share: 0.5", "", 1), nil,
			[]string{"x.yaml:14: timeline[4].churnEndpoints: give share (of the cluster's services) or services"}},
		{"repeat", base + "  - repeat: {times: 0, steps: []}\n", nil,
			[]string{"x.yaml:15: timeline[5].repeat.times: must be between 1 and 1000, got 0", "x.yaml:15: timeline[5].repeat.steps: required"}},
		{"repeat inner step", base + "  - repeat:\n      times: 2\n      steps:\n        - sleep: 0s\n", nil,
			[]string{"x.yaml:18: timeline[5].repeat.steps[0].sleep: must be > 0"}},
		{"negative services", strings.Replace(base, "services: 10", "services: -1", 1), nil,
			[]string{"x.yaml:5: cluster.services: must not be negative, got -1"}},
		{"fromFile excludes generator", strings.Replace(base, "cluster:\n", "cluster:\n  fromFile: nowhere.json\n", 1), nil,
			[]string{"x.yaml:6: cluster.services: not allowed with cluster.fromFile"}},
		{"fromFile missing", strings.Replace(base, "  services: 10\n  types: {nodePort: 0.5}\n", "  fromFile: nowhere.json\n", 1), nil,
			[]string{"x.yaml:5: cluster.fromFile: load objects:"}},
		{"several errors reported together", strings.Replace(strings.Replace(base, "rate: 5", "rate: -1", 1), "seed: 3", "seed: x", 1), nil,
			[]string{`x.yaml:3: seed: must be a whole number`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(tc.yaml), tc.sets)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestErrorsAreListed(t *testing.T) {
	y := strings.Replace(strings.Replace(base, "rate: 5", "rate: 0", 1), "nodePort: 0.5", "nodePort: -1", 1)
	_, err := Parse("x.yaml", []byte(y), nil)
	var es Errors
	require.True(t, errors.As(err, &es))
	require.Len(t, es, 2)
	require.Equal(t, 6, es[0].Line, "sorted by line")
	require.Equal(t, "cluster.types.nodePort", es[0].Path)
	require.Equal(t, 14, es[1].Line)
	require.Equal(t, "timeline[4].churnEndpoints.rate", es[1].Path)
}

func TestSetOverrides(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sets  []string
		check func(t *testing.T, s *Scenario)
	}{
		{"string", []string{"proxier.initialSync=legacy", "proxier.ipset=exec"}, func(t *testing.T, s *Scenario) {
			require.Equal(t, proxier.InitialSyncMode("legacy"), s.Proxier.InitialSync)
			require.Equal(t, dataplane.IPSetStrategy("exec"), s.Dataplane.IPSet)
		}},
		{"number into an existing field", []string{"cluster.services=25"}, func(t *testing.T, s *Scenario) {
			require.Equal(t, 25, s.Cluster.Services)
			require.Len(t, s.set.Services, 25)
		}},
		{"a block the file does not have", []string{"sim.timeScale=1", "sim.profile=incident"}, func(t *testing.T, s *Scenario) {
			require.Equal(t, 1.0, s.Sim.TimeScale)
			require.Equal(t, "incident", s.Sim.Profile)
		}},
		{"a list", []string{"proxier.families=[IPv4, IPv6]", "cluster.dualStack=1"}, func(t *testing.T, s *Scenario) {
			require.Equal(t, []dataplane.Family{"IPv4", "IPv6"}, s.Proxier.Families)
			require.Len(t, s.set.EndpointSlices, 20)
		}},
		{"inside the timeline", []string{"timeline[4].churnEndpoints.rate=9"}, func(t *testing.T, s *Scenario) {
			require.Equal(t, 9.0, s.Timeline[4].ChurnEndpoints.Rate)
		}},
		{"replace a step", []string{"timeline[3]={sleep: 2s}"}, func(t *testing.T, s *Scenario) {
			require.Equal(t, 2*time.Second, Duration(*s.Timeline[3].Sleep).D())
		}},
		{"last one wins", []string{"seed=1", "seed=2"}, func(t *testing.T, s *Scenario) {
			require.Equal(t, int64(2), s.Seed)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("x.yaml", []byte(base), tc.sets)
			require.NoError(t, err)
			tc.check(t, s)
		})
	}
}

func TestSetErrors(t *testing.T) {
	for _, tc := range []struct {
		set, want string
	}{
		{"proxier.initialsync=legacy", "--set proxier.initialsync=legacy: proxier.initialsync: unknown field (known: implementation, mode, families, initialSync,"},
		{"proxier.ipset=bogus", `--set proxier.ipset=bogus: proxier.ipset: "bogus" is not one of exec, restore, netlink`},
		{"cluster.services=lots", `--set cluster.services=lots: cluster.services: must be a whole number, got the string "lots"`},
		{"sim.timeScale=-1", "--set sim.timeScale=-1: sim.timeScale: must be between 0 (no waiting) and 1 (real time), got -1"},
		{"proxier.minSyncPeriod=fast", `--set proxier.minSyncPeriod=fast: proxier.minSyncPeriod: must be a duration such as "500ms" or "2m": "fast"`},
		{"noequals", "--set noequals: must be key=value"},
		{"=x", "--set =x: empty key"},
		{"a..b=1", `--set a..b=1: empty field name in "a..b"`},
		{"timeline[99].sleep=1s", "--set timeline[99].sleep=1s: timeline[99]: the list has 5 items"},
		{"timeline[x]=1", `--set timeline[x]=1: list index "x" in "timeline[x]": must be a number >= 0`},
		{"name.first=x", `--set name.first=x: name: is the string "t", not a mapping`},
		{"cluster[0]=x", "--set cluster[0]=x: cluster: is not a list"},
		{"seed=[1", "--set seed=[1: value is not valid YAML"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(base), []string{tc.set})
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestShippedScenarios(t *testing.T) {
	list, err := ShippedScenarios()
	require.NoError(t, err)
	var names []string
	for _, s := range list {
		names = append(names, s.Name)
		require.NotEmpty(t, s.Purpose, "%s: the file must open with a comment saying what question it answers", s.Name)
		require.True(t, strings.HasSuffix(strings.TrimSpace(s.Purpose), "?") || strings.Contains(s.Purpose, "?"), "%s: purpose %q asks no question", s.Name, s.Purpose)
		sc, err := Load(s.Name, nil)
		require.NoError(t, err, s.Name)
		require.Equal(t, s.Name, sc.Name, "the name field matches the file name")
		// The embedded copy is the file in the source tree.
		disk, err := os.ReadFile(s.Name + ".yaml")
		require.NoError(t, err)
		_, embedded, err := Read(s.Name)
		if _, statErr := os.Stat(s.Name); statErr != nil {
			require.NoError(t, err)
			require.Equal(t, string(disk), string(embedded))
		}
	}
	for _, want := range []string{"smoke", "scale-10k", "restart-stale-ipsets", "churn-endpoints", "coredns-restart", "dual-stack"} {
		require.Contains(t, names, want)
	}
	_, err = Load("no-such-scenario", nil)
	require.ErrorContains(t, err, `scenario "no-such-scenario": no such file, and not a shipped scenario (churn-endpoints, coredns-restart`)
}

func TestReadPrefersFiles(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "smoke.yaml")
	require.NoError(t, os.WriteFile(p, []byte(base), 0o644))
	file, data, err := Read(p)
	require.NoError(t, err)
	require.Equal(t, p, file)
	require.Equal(t, base, string(data))
	file, _, err = Read(filepath.Join(dir, "nothere", "smoke.yaml"))
	require.NoError(t, err)
	require.Equal(t, "scenarios/smoke.yaml", file, "a missing path named like a shipped scenario falls back to it")
}

func TestGeneratorIsAFunctionOfTheSeed(t *testing.T) {
	sets := []string{"cluster.services=200", "cluster.dualStack=0.5", "proxier.families=[IPv4, IPv6]", "cluster.udp=0.3",
		"cluster.sessionAffinity=0.2", "cluster.types={nodePort: 0.2, loadBalancer: 0.2, externalIPs: 0.2}", "cluster.kubeDNS=true"}
	a, err := Parse("x.yaml", []byte(base), sets)
	require.NoError(t, err)
	b, err := Parse("x.yaml", []byte(base), sets)
	require.NoError(t, err)
	require.Equal(t, a.set, b.set)
	c, err := Parse("x.yaml", []byte(base), append(sets, "seed=4"))
	require.NoError(t, err)
	require.NotEqual(t, a.set.EndpointSlices, c.set.EndpointSlices)

	seen := map[string]bool{}
	kinds := map[string]int{}
	for _, svc := range a.set.Services {
		for _, ip := range svc.Spec.ClusterIPs {
			require.False(t, seen[ip], "cluster IP %s handed out twice", ip)
			seen[ip] = true
		}
		kinds[string(svc.Spec.Type)]++
		if len(svc.Spec.ExternalIPs) > 0 {
			kinds["external"]++
		}
		if len(svc.Spec.IPFamilies) == 2 {
			kinds["dual"]++
		}
	}
	for _, k := range []string{"ClusterIP", "NodePort", "LoadBalancer", "external", "dual"} {
		require.Positive(t, kinds[k], k)
	}
	require.Equal(t, "10.96.0.10", a.set.Services[0].Spec.ClusterIP, "kube-dns at the service CIDR's tenth address")
}

// FuzzParse feeds arbitrary bytes and overrides to the loader: it must
// return a scenario or an error, never panic.
func FuzzParse(f *testing.F) {
	list, err := ShippedScenarios()
	require.NoError(f, err)
	for _, s := range list {
		_, data, err := Read(s.Name)
		require.NoError(f, err)
		f.Add(data, "cluster.services=3")
	}
	f.Add([]byte(base), "timeline[0]=x")
	f.Add([]byte("a: &x [*x]\n"), "a.b=1")
	f.Add([]byte("timeline:\n  - repeat: {times: 1000, steps: [{repeat: {times: 1000, steps: [sleep: 1s]}}]}\n"), "seed=1")
	f.Fuzz(func(t *testing.T, data []byte, set string) {
		s, err := Parse("f.yaml", data, []string{set})
		if err == nil {
			require.NotNil(t, s.set)
		}
	})
}

// TestProxierOverrides: the proxier settings `kpsim state --set` takes are
// the scenario's proxier section, decoded and checked alike.
func TestProxierOverrides(t *testing.T) {
	for _, tc := range []struct {
		kv   string
		want func(*proxier.Config) any
		val  any
		err  string
	}{
		{kv: "proxier.scheduler=wrr", want: func(c *proxier.Config) any { return c.Scheduler }, val: "wrr"},
		{kv: "proxier.masqueradeAll=true", want: func(c *proxier.Config) any { return c.MasqueradeAll }, val: true},
		{kv: "proxier.clusterCIDRs=[10.244.0.0/16, fd00:244::/56]", want: func(c *proxier.Config) any { return c.ClusterCIDRs },
			val: []string{"10.244.0.0/16", "fd00:244::/56"}},
		{kv: "proxier.families=[IPv4, IPv6]", want: func(c *proxier.Config) any { return c.Families },
			val: []dataplane.Family{dataplane.IPv4, dataplane.IPv6}},
		{kv: "proxier.minSyncPeriod=250ms", want: func(c *proxier.Config) any { return c.MinSyncPeriod.String() }, val: "250ms"},
		{kv: "proxier.initialSync=legacy", want: func(c *proxier.Config) any { return c.InitialSync }, val: proxier.InitialSyncLegacy},
		{kv: "scheduler=wrr", err: "--set scheduler=wrr: only proxier.* keys apply here"},
		{kv: "proxier.scheduler", err: "--set proxier.scheduler: must be key=value"},
		{kv: "proxier.masqueradeAll=maybe", err: `proxier.masqueradeAll: must be true or false, got the string "maybe"`},
		{kv: "proxier.syncPeriod=30", err: "proxier.syncPeriod: must be a duration"},
		{kv: "proxier.ipset=fast", err: `proxier.ipset: "fast" is not one of exec, restore, netlink`},
		{kv: "proxier.clusterCIDRs=[nope]", err: `proxier.clusterCIDRs[0]: not a CIDR: "nope"`},
	} {
		t.Run(tc.kv, func(t *testing.T) {
			cfg, _, _, err := ProxierOverrides([]string{tc.kv})
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.val, tc.want(&cfg))
		})
	}
	// Without overrides: kube-proxy's defaults and kpsim's ipset strategy.
	cfg, strategy, _, err := ProxierOverrides(nil)
	require.NoError(t, err)
	require.Equal(t, proxier.Config{}.Defaults().SyncPeriod, cfg.SyncPeriod)
	require.Equal(t, "rr", cfg.Scheduler)
	require.Equal(t, dataplane.DefaultIPSetStrategy, strategy)
	require.Empty(t, cfg.Families, "families are the caller's to decide")
}

// TestProbeClients: the probing pod takes each pod CIDR's last address but
// one; the sim and the kernel topology both use it.
func TestProbeClients(t *testing.T) {
	c := Cluster{PodCIDRs: []string{"10.244.0.0/16", "10.244.3.7/24", "fd00:244::/64", "fd00:10:244::/64"}}
	var got []string
	for _, a := range c.ProbeClients() {
		got = append(got, a.String())
	}
	require.Equal(t, []string{"10.244.255.254", "10.244.3.254", "fd00:244::ffff:ffff:ffff:fffe", "fd00:10:244:0:ffff:ffff:ffff:fffe"}, got)
}

// TestOversizeBlamesWhatExceeds: an out-of-range service count is reported
// once, on the field given, not also on endpointsPerService (a default the
// user never wrote).
func TestOversizeBlamesWhatExceeds(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want []string
	}{
		{[]string{"cluster.services=100000000"},
			[]string{"--set cluster.services=100000000: cluster.services: 100000000 services is more than kpsim's memory cap of 1000000"}},
		{[]string{"cluster.services=1000000", "cluster.endpointsPerService=20"},
			[]string{"--set cluster.endpointsPerService=20: cluster.endpointsPerService: 1000000 services x 20 endpoints is 20000000 endpoints, more than kpsim's memory cap of 10000000"}},
		{[]string{"cluster.endpointsPerService=1001", "cluster.services=600"},
			[]string{"--set cluster.endpointsPerService=1001: cluster.endpointsPerService: must be between 0 and 1000, got 1001"}},
	} {
		t.Run(strings.Join(tc.sets, " "), func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(base), tc.sets)
			var es Errors
			require.ErrorAs(t, err, &es)
			require.Len(t, es, len(tc.want), "%v", es)
			for i, w := range tc.want {
				require.Contains(t, es[i].Error(), w)
			}
		})
	}
}

// TestWarnsBeyondMaxElem: a cluster needing more KUBE-CLUSTER-IP entries
// than an ipset holds by default loads, with a warning saying it is
// kube-proxy's limit too; a cluster within it has no warning.
func TestWarnsBeyondMaxElem(t *testing.T) {
	s, err := Parse("x.yaml", []byte(base), nil)
	require.NoError(t, err)
	require.Empty(t, s.Warnings())

	s, err = Parse("x.yaml", []byte(base), []string{"cluster.services=33000", "cluster.portsPerService=2", "cluster.types={nodePort: 0}", "cluster.podCIDRs=[10.128.0.0/10]"})
	require.NoError(t, err)
	require.Len(t, s.Warnings(), 1)
	w := s.Warnings()[0]
	require.Contains(t, w, "KUBE-CLUSTER-IP needs 66000 entries (one per service port), more than an ipset holds by default (maxelem 65536)")
	require.Contains(t, w, "Real kube-proxy creates its sets with that default")
	require.Contains(t, w, "not an error in the scenario")

	// nftables mode keeps no ipset: no warning, unless the run switches
	// to IPVS mode.
	big := []string{"cluster.services=33000", "cluster.portsPerService=2", "cluster.types={nodePort: 0}", "cluster.podCIDRs=[10.128.0.0/10]",
		"proxier.implementation=kube-proxy@v1.37.1", "proxier.mode=nftables"}
	s, err = Parse("x.yaml", []byte(base), big)
	require.NoError(t, err)
	require.Empty(t, s.Warnings())
	s, err = Parse("x.yaml", []byte(base), append(big, "timeline[1]={startProxier: {mode: ipvs}}"))
	require.NoError(t, err)
	require.Len(t, s.Warnings(), 1)
}

// TestDataplaneSection: the ipset strategy is the dataplane section's, with
// one default; proxier.ipset still works, with a warning naming where it
// was written, and errors about it keep the spelling the user wrote.
func TestDataplaneSection(t *testing.T) {
	for _, tc := range []struct {
		name    string
		yaml    string
		sets    []string
		want    dataplane.IPSetStrategy
		warning string
		err     string
	}{
		{name: "default", yaml: base, want: dataplane.DefaultIPSetStrategy},
		{name: "dataplane section", yaml: base + "dataplane: {ipset: exec}\n", want: dataplane.IPSetExec},
		{name: "--set dataplane.ipset", yaml: base, sets: []string{"dataplane.ipset=netlink"}, want: dataplane.IPSetNetlink},
		{name: "deprecated in the file", yaml: base + "proxier:\n  scheduler: wrr\n  ipset: exec\n", want: dataplane.IPSetExec,
			warning: "x.yaml:17: proxier.ipset is deprecated, write dataplane.ipset (it will keep working)"},
		{name: "deprecated --set", yaml: base, sets: []string{"proxier.ipset=exec"}, want: dataplane.IPSetExec,
			warning: "--set proxier.ipset=exec: proxier.ipset is deprecated, write dataplane.ipset"},
		{name: "deprecated --set over the file's section", yaml: base + "dataplane: {ipset: restore}\n", sets: []string{"proxier.ipset=exec"},
			want: dataplane.IPSetExec, warning: "--set proxier.ipset=exec: proxier.ipset is deprecated"},
		{name: "--set over the file's deprecated key", yaml: base + "proxier: {ipset: exec}\n", sets: []string{"dataplane.ipset=netlink"},
			want: dataplane.IPSetNetlink, warning: "x.yaml:15: proxier.ipset is deprecated"},
		{name: "both in the file", yaml: base + "proxier: {ipset: exec}\ndataplane: {ipset: restore}\n",
			err: "x.yaml:15: proxier.ipset: given twice: as proxier.ipset and as dataplane.ipset"},
		{name: "bad value, old spelling", yaml: base + "proxier: {ipset: fast}\n",
			err: `x.yaml:15: proxier.ipset: "fast" is not one of exec, restore, netlink`},
		{name: "bad value, new spelling", yaml: base + "dataplane: {ipset: fast}\n",
			err: `x.yaml:15: dataplane.ipset: "fast" is not one of exec, restore, netlink`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("x.yaml", []byte(tc.yaml), tc.sets)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, s.Dataplane.IPSet)
			if tc.warning == "" {
				require.Empty(t, s.Warnings())
				return
			}
			require.Len(t, s.Warnings(), 1)
			require.Contains(t, s.Warnings()[0], tc.warning)
		})
	}
}

// TestProxierSectionIsProxierConfig: the proxier section is proxier.Config,
// validated by it, each problem at its line; durations read as strings and
// are written so in the scenario as run.
func TestProxierSectionIsProxierConfig(t *testing.T) {
	_, err := Parse("x.yaml", []byte(base+"proxier:\n  scheduler: fifo\n  families: [IPv4, IPv4]\n  syncPeriod: 1s\n  minSyncPeriod: 2s\n"), nil)
	var es Errors
	require.ErrorAs(t, err, &es)
	var got []string
	for _, e := range es {
		got = append(got, e.Error())
	}
	require.Equal(t, []string{
		`x.yaml:16: proxier.scheduler: "fifo" is not one of rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, mh`,
		"x.yaml:17: proxier.families[1]: IPv4 listed twice",
		"x.yaml:19: proxier.minSyncPeriod: 2s is longer than syncPeriod 1s",
	}, got)

	s, err := Parse("x.yaml", []byte(base+"proxier: {minSyncPeriod: 250ms}\n"), nil)
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, s.Proxier.MinSyncPeriod)
	require.Equal(t, "node-1", s.proxierConfig().NodeName, "the proxier plays cluster.node")
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.Contains(t, string(b), `"minSyncPeriod":"250ms"`)
	require.Contains(t, string(b), `"dataplane":{"ipset":"restore"}`)
	require.NotContains(t, string(b), `nodeName`)
}

// TestLoadNodeSettings: what doctor asks, through the same loader, without
// building the cluster.
func TestLoadNodeSettings(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.yaml")
	require.NoError(t, os.WriteFile(p, []byte(base+"backend: kernel\nproxier: {scheduler: sh, ipset: netlink}\n"), 0o644))
	ns, err := LoadNodeSettings(p)
	require.NoError(t, err)
	require.Equal(t, "kernel", ns.Backend)
	require.Equal(t, "sh", ns.Proxier.Scheduler)
	require.Equal(t, dataplane.IPSetNetlink, ns.Dataplane.IPSet)
	require.Equal(t, []dataplane.Family{dataplane.IPv4}, ns.Proxier.Families)

	require.NoError(t, os.WriteFile(p, []byte(base+"proxier: {scheduler: fifo}\n"), 0o644))
	_, err = LoadNodeSettings(p)
	require.ErrorContains(t, err, p+`:15: proxier.scheduler: "fifo" is not one of`)
}
