// Package kubeproxytest runs a kube-proxy release on upstream's fakes
// (IPVS, ipset, iptables, sysctl, netlink, conntrack, the health server),
// through a kpsim scenario, so that each release module's tests check, on
// any machine, that its proxier is driven and measured as the kernel
// backend drives it, and that its own initial sync decides what a restart
// with lagging handlers does.
package kubeproxytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	sysctltest "k8s.io/component-helpers/node/util/sysctl/testing"
	"k8s.io/kubernetes/pkg/proxy/conntrack"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	ipsettest "k8s.io/kubernetes/pkg/proxy/ipvs/ipset/testing"
	netlinktest "k8s.io/kubernetes/pkg/proxy/ipvs/testing"
	ipvstest "k8s.io/kubernetes/pkg/proxy/ipvs/util/testing"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	iptablestest "k8s.io/kubernetes/pkg/util/iptables/testing"

	"github.com/kpsim/kpsim/calibrate"
	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/internal/hosttools"
	"github.com/kpsim/kpsim/internal/private"
	"github.com/kpsim/kpsim/kernel/netns"
	"github.com/kpsim/kpsim/kernel/netns/netnstest"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/scenarios/backend"
	"github.com/kpsim/kpsim/sim"
	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
)

// Fakes are one node's kernel as upstream's fakes: every generation of a
// run programs the same ones, as a restarted kube-proxy finds its node's
// kernel as the last one left it.
type Fakes struct {
	IPVS     *ipvstest.FakeIPVS
	IPSet    *ipsettest.FakeIPSet
	IPTables map[v1.IPFamily]*iptablestest.FakeIPTables
	Netlink  map[v1.IPFamily]*netlinktest.FakeNetlinkHandle
}

// NewFakes is an empty node whose eth0 has nodeIP.
func NewFakes(nodeIP string) *Fakes {
	f := &Fakes{IPVS: ipvstest.NewFake(), IPSet: ipsettest.NewFake(ipvs.MinIPSetCheckVersion),
		IPTables: map[v1.IPFamily]*iptablestest.FakeIPTables{v1.IPv4Protocol: iptablestest.NewFake(), v1.IPv6Protocol: iptablestest.NewIPv6Fake()},
		Netlink:  map[v1.IPFamily]*netlinktest.FakeNetlinkHandle{}}
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		nl := netlinktest.NewFakeNetlinkHandle(fam == v1.IPv6Protocol)
		if fam == v1.IPv4Protocol {
			_ = nl.SetLocalAddresses("eth0", nodeIP)
			_ = nl.SetLocalAddresses("lo", "127.0.0.1")
		}
		f.Netlink[fam] = nl
	}
	return f
}

// Kernel is the fakes as the generation's kernel: what NewProxier wires
// to the node itself is replaced before anything can use it.
func (f *Fakes) Kernel() kubeproxy.Kernel {
	return kubeproxy.Kernel{
		IPVS:     f.IPVS,
		IPSet:    f.IPSet,
		IPTables: func(fam v1.IPFamily) utiliptables.Interface { return f.IPTables[fam] },
		Sysctl:   sysctltest.NewFake(),
		Adopt: func(p any, fam v1.IPFamily) error { // upstream's fakes are IPVS mode's
			nl := f.Netlink[fam]
			return joinErrs(
				private.Wrap(p, "netlinkHandle", func(ipvs.NetLinkHandle) ipvs.NetLinkHandle { return nl }),
				private.Wrap(p, "conntrack", func(conntrack.Interface) conntrack.Interface { return conntrack.NewFake() }),
				private.Wrap(p, "serviceHealthServer", func(healthcheck.ServiceHealthServer) healthcheck.ServiceHealthServer {
					return healthcheck.NewFakeServiceHealthServer()
				}),
			)
		},
	}
}

func joinErrs(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

const services = 60

// The implementation is registered once per test binary (-count=N runs a
// test again); its kernel is the node of the test that runs.
var (
	registered sync.Once
	node       struct {
		sync.Mutex
		fakes *Fakes
		runs  int
	}
)

// restart is a restart at 36% knowledge, as in the incident.
var restart = fmt.Sprintf(`name: kube-proxy-restart
description: does the release's first sync after a restart delete what its handlers have not passed on yet?
seed: 5
backend: kernel
cluster:
  services: %d
  types: {nodePort: 0.2}
  nodes: 3
proxier:
  minSyncPeriod: 10ms
  syncPeriod: 1h
timeline:
  - createCluster
  - startProxier
  - waitSynced: {timeout: 1m}
  - restartProxier: {knownAtFirstSync: 0.36}
  - waitSynced: {timeout: 1m}
`, services)

// registerOnKernel registers release r (register) to run on each run's
// own kernel, in-memory or real, rather than on fakes a test set.
func registerOnKernel(r kubeproxy.Release) proxier.Implementation {
	node.Lock()
	node.fakes = nil
	node.Unlock()
	return register(r)
}

// register registers release r once per test binary: its kernel is each
// run's, the fakes a test set (RestartLagging), the in-memory kernel of a
// sim run (RestartOnSim) or the real one of a kernel run (NFTablesOnKernel).
func register(r kubeproxy.Release) proxier.Implementation {
	impl := r.ImplementationOn(func(dp dataplane.Dataplane) (kubeproxy.Kernel, error) {
		node.Lock()
		defer node.Unlock()
		switch {
		case node.fakes == nil && dp.Model == nil:
			return kubeproxy.RealKernel()
		case node.fakes == nil:
			return kubeproxy.SimKernel(dp), nil
		}
		return node.fakes.Kernel(), nil
	})
	registered.Do(func() { proxier.Register(impl) })
	return impl
}

// RestartLagging runs release r on fakes through a restart whose handlers
// lag (knownAtFirstSync 0.36) and checks what it did: a release that syncs
// on its informers' stores (racy) knows 36% of the services at its first
// sync after the restart and deletes the rest from the kernel, which later
// syncs put back; one that waits for its handlers knows them all and
// deletes nothing. Every sync is recorded, counted and consistent with the
// release's own histogram.
func RestartLagging(t *testing.T, r kubeproxy.Release, racy bool) *record.File {
	t.Helper()
	node.Lock()
	node.fakes = NewFakes(dataplane.DefaultNodeAddresses[dataplane.IPv4].Addr().String())
	node.Unlock()
	impl := register(r)
	// The in-memory kernel only stands in for the kernel backend the
	// scenario names: the release programs the fakes, and nothing probes.
	f := runOnSim(t, "restart.yaml", restart, impl)
	for _, s := range f.Syncs {
		t.Logf("proxier %d %s #%d %s: %d services, %.1fms, %v %s", s.Proxier, s.Family, s.Seq, s.Trigger, s.Services, s.Seconds*1e3, s.Ops, s.Error)
		if s.Failed() {
			// A sync the end of the run or the restart killed, and no other.
			require.Contains(t, s.Error, "the proxier was stopped", "%+v", s)
		}
	}

	var first [2]*record.Sync
	for i := range f.Syncs {
		s := &f.Syncs[i]
		require.Empty(t, s.Phases, "a release's sync is not phased")
		require.True(t, s.Full)
		if first[s.Proxier] == nil {
			first[s.Proxier] = s
			require.Equal(t, "initial", s.Trigger)
		}
	}
	require.NotNil(t, first[1], "no sync after the restart")
	start := first[0].Ops
	require.Equal(t, int64(1), start[dataplane.OpLinkCreate], "kube-ipvs0: %v", start)
	require.GreaterOrEqual(t, start[dataplane.OpIPVSServiceAdd], int64(services), "%v", start)
	require.GreaterOrEqual(t, start[dataplane.OpAddressBind], int64(services), "%v", start)
	require.Positive(t, start[dataplane.OpIPSetCreate], "%v", start)
	require.GreaterOrEqual(t, start[dataplane.OpIPSetAdd], int64(services), "%v", start)
	require.Positive(t, start[dataplane.OpIPTablesRestore], "%v", start)
	require.Positive(t, start[dataplane.OpIPTablesCommand], "%v", start)
	require.Positive(t, start[dataplane.OpSysctlWrite], "the constructor's sysctls count with the first sync: %v", start)

	after := first[1].Ops
	if racy {
		require.Equal(t, int(math.Round(0.36*services)), first[1].Services, "the first sync after the restart knew 36%% of the services")
		require.Positive(t, after[dataplane.OpIPSetDel], "it deleted the entries of services it had not heard of: %v", after)
		require.Positive(t, after[dataplane.OpIPVSServiceDelete], "%v", after)
		require.Positive(t, after[dataplane.OpAddressUnbind], "%v", after)
		require.Positive(t, f.Totals.Readded[dataplane.OpIPSetAdd], "later syncs put them back")
	} else {
		require.Equal(t, services, first[1].Services, "the first sync after the restart waited for every handler")
		require.Zero(t, after[dataplane.OpIPSetDel]+after[dataplane.OpIPVSServiceDelete]+after[dataplane.OpAddressUnbind], "%v", after)
		require.Zero(t, results.SumOps(f.Totals.Readded))
	}

	node.Lock()
	node.runs++
	firstRun := node.runs == 1
	node.Unlock()
	if !firstRun {
		return f // kube-proxy's registry is the process's: a second run adds to the first one's histograms
	}
	var checked bool
	for _, c := range results.CheckHistograms(f) {
		if c.Name == record.MetricSyncDuration {
			require.True(t, c.Consistent, "%+v", c)
			require.NotEmpty(t, c.Samples, "checked against the syncs' durations")
			checked = true
		}
	}
	require.True(t, checked, "the release's sync-duration histogram is in the results")
	return f
}

// restartOnSim is the incident's restart on the in-memory kernel at a
// size a test runs in seconds: every operation priced by the incident's
// profile, on the modeled clock, with probes.
var restartOnSim = `name: kube-proxy-restart-sim
description: the release's restart with lagging handlers on the in-memory kernel
question: restart
seed: 7
backend: sim
sim: {profile: incident, timeScale: 0}
cluster:
  services: 300
  types: {nodePort: 0.1}
  endpointsPerService: 2
  nodes: 3
proxier:
  minSyncPeriod: 1s
  syncPeriod: 30s
probes:
  interval: 100ms
  services: 30
  kinds: [clusterip, nodeport]
timeline:
  - createCluster
  - startProxier
  - waitSynced: {timeout: 5m}
  - probes: on
  - sleep: 500ms
  - restartProxier: {knownAtFirstSync: 0.36}
  - waitSynced: {timeout: 5m}
  - sleep: 1s
  - probes: off
`

// RestartOnSim runs release r on the in-memory kernel (SimKernel, the sim
// backend on the modeled clock) through the incident's restart, twice, and
// checks what its own code did there, as RestartLagging does on fakes:
// every kernel operation of the release reached the in-memory kernel (its
// first sync programmed every service; probes reached them), a racy
// release's first sync after the restart knew 36% of the services and
// broke traffic to the rest until later syncs put it back, a fixed one
// knew them all and broke nothing; and the two runs made the same syncs at
// the same modeled instants with the same operations (the order of
// operations within a sync follows the release's map iteration, which Go
// randomizes, so what a probe sees mid-sync is not compared).
func RestartOnSim(t *testing.T, r kubeproxy.Release, racy bool) *record.File {
	t.Helper()
	impl := registerOnKernel(r)
	var files [2]*record.File
	for i := range files {
		files[i] = runOnSim(t, "restart-sim.yaml", restartOnSim, impl)
		require.Equal(t, record.ClockModeled, files[i].Clock)
	}
	f := files[0]
	var first [2]*record.Sync
	for i := range f.Syncs {
		s := &f.Syncs[i]
		t.Logf("proxier %d %s #%d %s at %v: %d services, %.1fms modeled (%.1fms its own), %.1fms wall, %v %s", s.Proxier, s.Family, s.Seq, s.Trigger,
			s.Start.Sub(f.Start), s.Services, s.Seconds*1e3, s.ProxierSeconds*1e3, s.Wall*1e3, s.Ops, s.Error)
		require.Empty(t, s.Phases, "a release's sync is not phased")
		if first[s.Proxier] == nil {
			first[s.Proxier] = s
		}
	}
	require.NotNil(t, first[1], "no sync after the restart")
	require.Positive(t, first[0].KernelSeconds, "the kernel's part is priced by the profile")
	require.Positive(t, first[0].ProxierSeconds, "the release's own part is priced by the profile")
	require.InDelta(t, first[0].Seconds, first[0].KernelSeconds+first[0].ProxierSeconds, 1e-9)
	start := first[0].Ops
	require.GreaterOrEqual(t, start[dataplane.OpIPVSServiceAdd], int64(300), "%v", start)
	require.Positive(t, start[dataplane.OpIPTablesCommand], "%v", start)
	require.Positive(t, f.Probes.Attempts, "probes ran")

	after := first[1].Ops
	failed := len(f.Probes.Failures)
	if racy {
		require.Equal(t, int(math.Round(0.36*float64(first[0].Services))), first[1].Services, "the first sync after the restart knew 36%% of the service ports")
		require.Positive(t, after[dataplane.OpIPVSServiceDelete], "%v", after)
		require.Positive(t, failed, "traffic to the services it deleted broke")
		require.Positive(t, results.SumOps(f.Totals.Readded), "later syncs put them back")
	} else {
		require.Equal(t, first[0].Services, first[1].Services, "the first sync after the restart waited for every handler")
		require.Zero(t, after[dataplane.OpIPSetDel]+after[dataplane.OpIPVSServiceDelete]+after[dataplane.OpAddressUnbind], "%v", after)
		require.Zero(t, failed, "nothing broke: %v", f.Probes.Failures)
	}

	// The same syncs, at the same instants, with the same operations.
	sig := func(f *record.File) []string {
		var out []string
		for _, s := range f.Syncs {
			out = append(out, fmt.Sprintf("%d %s #%d %s at %v: %.9f s, %d services, %v", s.Proxier, s.Family, s.Seq, s.Trigger, s.Start.Sub(f.Start).Round(time.Microsecond), s.Seconds, s.Services, s.Ops))
		}
		return out
	}
	require.Equal(t, sig(files[0]), sig(files[1]), "a seed repeats: the same syncs")
	require.Equal(t, files[0].Probes.Attempts, files[1].Probes.Attempts)
	if kubeproxy.ClockOverlaid() {
		// Each generation's sync loop ended with it (releaseclock.Stop), the
		// restarted one's too: a loop left running holds its proxier.
		require.Eventually(t, func() bool { return syncLoops() == 0 }, 10*time.Second, 10*time.Millisecond,
			"%d of the release's sync loops outlived their generations", syncLoops())
	}
	return f
}

// syncLoops counts the goroutines in a release proxier's SyncLoop.
func syncLoops() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("k8s.io/kubernetes/pkg/proxy/")) && bytes.Contains(g, []byte(").SyncLoop(")) {
			n++
		}
	}
	return n
}

// runOnSim runs the scenario text with impl on the sim backend, with its
// settings overridden by sets (--set).
func runOnSim(t *testing.T, file, text string, impl proxier.Implementation, sets ...string) *record.File {
	t.Helper()
	s, err := scenarios.Parse(file, []byte(text), append([]string{"proxier.implementation=" + impl.Name}, sets...))
	require.NoError(t, err)
	return runScenario(t, s, impl, simBackend)
}

// simBackend is the sim backend for a spec, whatever backend it names: a
// release on fakes runs there too.
func simBackend(s backend.Spec) (backend.Backend, error) { return backend.NewSim(s) }

// runScenario runs s, whose proxier is impl, on the backend newBackend
// builds from its spec: simBackend, or backend.New (the kernel's, in a
// namespace the test process was isolated in).
func runScenario(t *testing.T, s *scenarios.Scenario, impl proxier.Implementation, newBackend func(backend.Spec) (backend.Backend, error)) *record.File {
	t.Helper()
	f, _ := runScenarioState(t, s, impl, newBackend)
	return f
}

// runScenarioState is runScenario that also reads back what the run left
// in the dataplane.
func runScenarioState(t *testing.T, s *scenarios.Scenario, impl proxier.Implementation, newBackend func(backend.Spec) (backend.Backend, error)) (*record.File, *state.State) {
	t.Helper()
	spec, err := s.BackendSpec()
	require.NoError(t, err)
	b, err := newBackend(spec)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	f, err := scenarios.Run(context.Background(), s, scenarios.RunOptions{Backend: b})
	require.NoError(t, err)
	require.Equal(t, impl.Name, f.Proxier)
	st, err := state.Read(b.Dataplane(), s.Proxier.Families)
	require.NoError(t, err)
	return f, st
}

// FitRelease prices release r's own work in IPVS and in nftables mode as
// `kpsim calibrate` does in its binary (calibrate.FitRelease), at a size a
// test runs in seconds: the fit prices its units without a negative price
// and says what it was fitted on.
func FitRelease(t *testing.T, r kubeproxy.Release) {
	t.Helper()
	impl := registerOnKernel(r)
	var log strings.Builder
	for _, mode := range []proxier.Mode{proxier.ModeIPVS, proxier.ModeNFTables} {
		price, err := calibrate.FitRelease(impl.Name, mode, []int{200, 600}, "a test", &log)
		require.NoError(t, err, log.String())
		t.Logf("%s\n%+v", log.String(), price)
		require.Positive(t, price.PerSync+price.PerDerived+price.PerEndpoint, "a release's syncs take time")
		require.Contains(t, price.Source, impl.Name+"'s own syncs in "+string(mode)+" mode on the in-memory kernel")
		require.Zero(t, price.PerEntry, "a release's sync is priced per sync, port derived or passed over and endpoint")
		if mode == proxier.ModeIPVS {
			require.Zero(t, price.PerPort+price.PerPassed, "IPVS mode derives every port in every sync")
			continue
		}
		// nftables mode syncs partially, and sorts the endpoints of every
		// port it passes over.
		m := regexp.MustCompile(`partial syncs 600x3 [^;]*; 1 syncs, \d+ ports derived, (\d+) visited, \d+ endpoints, (\d+) passed over`).FindStringSubmatch(price.Source)
		require.NotNil(t, m, "the partial syncs of 600 services of 3 endpoints: %s", price.Source)
		visited, _ := strconv.Atoi(m[1])
		passed, _ := strconv.Atoi(m[2])
		require.Positive(t, visited)
		require.GreaterOrEqual(t, passed, 3*visited, "every endpoint of a port passed over counts")
	}
}

// nftablesOnSim is a small cluster through churn, a restart and deleted
// services, in nftables mode on the in-memory kernel, TCP probes only.
var nftablesOnSim = `name: kube-proxy-nftables-sim
description: the release's nftables mode on the in-memory kernel
seed: 11
backend: sim
sim: {profile: host, timeScale: 0}
cluster:
  services: 300
  types: {nodePort: 0.1, loadBalancer: 0.05}
  endpointsPerService: 2
  nodes: 3
proxier:
  mode: nftables
  minSyncPeriod: 1s
  syncPeriod: 30s
probes:
  interval: 100ms
  services: 30
  kinds: [clusterip, nodeport]
timeline:
  - createCluster
  - startProxier
  - waitSynced: {timeout: 5m}
  - probes: on
  - churnEndpoints: {rate: 20, duration: 2s, share: 0.2}
  - waitSynced
  - restartProxier
  - waitSynced: {timeout: 5m}
  - deleteServices: {count: 10}
  - waitSynced
  - sleep: 1s
  - probes: off
`

// NFTablesOnSim runs release r in nftables mode on the in-memory kernel
// (its own nftables proxier, its knftables interface replaced by the
// kernel's table) and checks what its code did there: every sync is one
// transaction of nft commands (and one more that deletes the chains an
// earlier sync flushed, once a second has passed), priced, with nothing of IPVS mode's; a full
// sync (the first of each generation) lists the table's maps back; probes
// to ClusterIPs and NodePorts reach endpoints through its DNAT rules alone
// (nothing else is programmed), through churn, a restart and deletions.
// The release's own work is priced at 1 us per endpoint of a port passed
// over (about what calibrations here fit), and nothing else: a full
// sync's own work is free, a partial sync's is priced for the endpoints
// of the ports it did not derive.
func NFTablesOnSim(t *testing.T, r kubeproxy.Release) *record.File {
	t.Helper()
	impl := registerOnKernel(r)
	const perPassed = 1e-6
	profile := pricedOwnWork(t, proxier.Config{Implementation: impl.Name, Mode: proxier.ModeNFTables}.Priced(), sim.ProxierCost{PerPassed: perPassed})
	f := runOnSim(t, "nftables-sim.yaml", nftablesOnSim, impl, "sim.profile="+profile)
	partial := 0
	first := firstSyncs(t, f, func(s *record.Sync) {
		if s.Full {
			require.Zero(t, s.ProxierSeconds, "a full sync passes over no port")
		} else {
			partial++
			require.Positive(t, s.ProxierSeconds, "a partial sync passes over the endpoints of the ports it does not derive")
			require.LessOrEqual(t, s.ProxierSeconds, perPassed*float64(s.Endpoints)+1e-12, "at most every endpoint is passed over")
		}
		// A sync is one transaction, and a second of its own where it deletes
		// the chains an earlier sync flushed (a second or more before).
		require.Contains(t, []int64{1, 2}, s.Ops[dataplane.OpNFTTransaction], "a sync is one transaction, two to delete flushed chains: %v", s.Ops)
		if s.Ops[dataplane.OpNFTTransaction] == 2 {
			require.Positive(t, s.Ops[dataplane.OpNFTDeleting], "the second transaction deletes: %v", s.Ops)
		}
		require.Zero(t, s.Ops[dataplane.OpIPVSServiceAdd]+s.Ops[dataplane.OpIPSetAdd]+s.Ops[dataplane.OpAddressBind]+s.Ops[dataplane.OpIPTablesRestore], "%v", s.Ops)
	})
	for _, s := range first {
		require.Greater(t, s.Ops[dataplane.OpNFTCommand], int64(4*s.Services), "a full sync writes chains, rules and elements per service port: %v", s.Ops)
		require.Positive(t, s.Ops[dataplane.OpNFTListElements], "a full sync reads its maps back: %v", s.Ops)
		require.Positive(t, s.KernelSeconds, "the transaction is priced by the profile")
	}
	require.Positive(t, partial, "nftables mode syncs partially")
	require.Positive(t, f.Probes.Attempts, "probes ran")
	require.Empty(t, f.Probes.Failures, "nothing broke")
	return f
}

// pricedOwnWork writes a profile: the host profile with own as the prices
// of the proxier priced as priced (proxier.Config.Priced), and returns its
// path.
func pricedOwnWork(t *testing.T, priced string, own sim.ProxierCost) string {
	t.Helper()
	p, err := sim.LoadProfile("host")
	require.NoError(t, err)
	own.Source = "a test's"
	p.Releases = map[string]sim.ProxierCost{priced: own}
	data, err := json.Marshal(p)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "profile.json")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path
}

// firstSyncs logs every sync of a run of two generations, requires each to
// have succeeded and to pass check, and returns each generation's first.
func firstSyncs(t *testing.T, f *record.File, check func(*record.Sync)) [2]*record.Sync {
	t.Helper()
	var first [2]*record.Sync
	for i := range f.Syncs {
		s := &f.Syncs[i]
		t.Logf("proxier %d %s #%d %s at %v: %d services, %.1fms modeled (%.1fms kernel), %v %s", s.Proxier, s.Family, s.Seq, s.Trigger,
			s.Start.Sub(f.Start), s.Services, s.Seconds*1e3, s.KernelSeconds*1e3, s.Ops, s.Error)
		require.Empty(t, s.Error)
		check(s)
		if first[s.Proxier] == nil {
			first[s.Proxier] = s
		}
	}
	require.NotNil(t, first[1], "no sync after the restart")
	return first
}

// iptablesOnSim is nftablesOnSim in iptables mode.
var iptablesOnSim = strings.NewReplacer("mode: nftables", "mode: iptables", "kube-proxy-nftables-sim", "kube-proxy-iptables-sim",
	"nftables mode", "iptables mode").Replace(nftablesOnSim)

// IPTablesOnSim runs release r in iptables mode on the in-memory kernel
// (its own iptables proxier writing through iptables-restore into the
// kernel's tables) and checks what its code did there: every sync is one
// restore (and the jumps it ensures one command at a time), priced, with
// nothing of IPVS or nftables mode's; the nat table holds a service chain
// per service port with endpoints; probes to ClusterIPs and NodePorts
// reach endpoints through its DNAT rules alone, through churn, a restart
// and deletions.
func IPTablesOnSim(t *testing.T, r kubeproxy.Release) {
	t.Helper()
	impl := registerOnKernel(r)
	s, err := scenarios.Parse("iptables-sim.yaml", []byte(iptablesOnSim), []string{"proxier.implementation=" + impl.Name})
	require.NoError(t, err)
	f, st := runScenarioState(t, s, impl, simBackend)
	first := firstSyncs(t, f, func(s *record.Sync) {
		require.Equal(t, int64(1), s.Ops[dataplane.OpIPTablesRestore], "a sync is one iptables-restore: %v", s.Ops)
		require.Zero(t, s.Ops[dataplane.OpIPVSServiceAdd]+s.Ops[dataplane.OpIPSetAdd]+s.Ops[dataplane.OpAddressBind]+s.Ops[dataplane.OpNFTTransaction], "%v", s.Ops)
	})
	for _, s := range first {
		require.Greater(t, s.Ops[dataplane.OpIPTablesRestoreBytes], int64(200*s.Services), "a full sync writes chains and rules per service port: %v", s.Ops)
		require.Positive(t, s.KernelSeconds, "the restore is priced by the profile")
	}
	svcChains := 0
	for _, line := range st.IPTables[dataplane.IPv4].NAT {
		if strings.HasPrefix(line, ":KUBE-SVC-") {
			svcChains++
		}
	}
	require.Equal(t, 290, svcChains, "a chain per service port with endpoints: 300 less the 10 deleted")
	require.Positive(t, f.Probes.Attempts, "probes ran")
	require.Empty(t, f.Probes.Failures, "nothing broke")
}

// nftablesOverHours is two hours of a node in nftables mode: services
// deleted early on, then only the periodic syncs.
const nftablesOverHours = `name: nftables-over-hours
description: >-
  On the modeled clock, does the release delete the chains it flushed at the
  next sync a second later, and resync in full once an hour?
seed: 5
backend: sim
sim: {profile: host, timeScale: 0}
cluster:
  services: 40
  endpointsPerService: 2
  nodes: 3
proxier:
  mode: nftables
  minSyncPeriod: 1s
  syncPeriod: 30s
timeline:
  - createCluster
  - startProxier
  - waitSynced: {timeout: 5m}
  - deleteServices: {count: 5}
  - waitSynced
  - sleep: 2h5m
`

// NFTablesOnTheModeledClock runs release r in nftables mode for two hours
// of modeled time (nftablesOverHours) and checks that the release's own
// decisions by the time that passed follow the modeled clock
// (releaseclock, through the build's overlay): the chains of the deleted
// services, flushed by the sync that saw them go, are deleted by a later
// sync in a transaction of its own, at least a second later, and none is
// left empty; and the release resyncs in full once an hour, where a node
// would (within a sync period of each hour since its last full sync).
func NFTablesOnTheModeledClock(t *testing.T, r kubeproxy.Release) {
	t.Helper()
	if !kubeproxy.ClockOverlaid() {
		t.Skip("the release was built without its reads of the time on the run's clock: run make kube-proxy-test, which builds it so (clockoverlay)")
	}
	impl := registerOnKernel(r)
	s, err := scenarios.Parse("nftables-over-hours.yaml", []byte(nftablesOverHours), []string{"proxier.implementation=" + impl.Name})
	require.NoError(t, err)
	f, st := runScenarioState(t, s, impl, simBackend)
	var deletion time.Time
	for _, step := range f.Steps {
		if step.Kind == "delete-services" {
			deletion = step.Start
		}
	}
	require.False(t, deletion.IsZero())
	var full []time.Duration
	flushed, deleted := -1, -1 // the syncs that flushed the deleted services' chains, and deleted them
	for i := range f.Syncs {
		sy := &f.Syncs[i]
		require.Empty(t, sy.Error)
		if sy.Full {
			full = append(full, sy.Start.Sub(f.Start))
		}
		switch {
		case sy.Start.Before(deletion):
		case flushed < 0:
			flushed = i
		case deleted < 0 && sy.Ops[dataplane.OpNFTDeleting] > 0:
			deleted = i
			require.EqualValues(t, 2, sy.Ops[dataplane.OpNFTTransaction], "the flushed chains go in a transaction of their own: %v", sy.Ops)
		}
	}
	require.Positive(t, deleted, "no sync deleted the flushed chains")
	require.GreaterOrEqual(t, f.Syncs[deleted].Start.Sub(f.Syncs[flushed].Start), time.Second, "deleted a second after they were flushed, not sooner")
	t.Logf("full syncs at %v; the flushed chains deleted by sync #%d at %v", full, f.Syncs[deleted].Seq, f.Syncs[deleted].Start.Sub(f.Start))
	require.Len(t, full, 3, "the first sync, then one an hour: %v", full)
	for k := 1; k < len(full); k++ {
		require.InDelta(t, time.Hour.Seconds(), (full[k] - full[k-1]).Seconds(), 31, "a full sync an hour after the last (within a sync period): %v", full)
	}
	tab := st.NFTables[dataplane.IPv4]
	for _, line := range tab.Rules {
		name, ok := strings.CutPrefix(line, ":")
		if !ok || !(strings.HasPrefix(name, "service-") || strings.HasPrefix(name, "endpoint-") || strings.HasPrefix(name, "external-")) {
			continue
		}
		require.True(t, slices.ContainsFunc(tab.Rules, func(r string) bool { return strings.HasPrefix(r, "-A "+name+" ") }), "chain %s is left empty", name)
	}
}

// nftablesOnKernel is nftablesOnSim without the endpoint churn: the
// kernel backend stops an endpoint's server the moment the API calls it
// not ready, and a real client does not retry, so a connection the proxier
// sends there before its next sync fails (the sim's client retries).
var nftablesOnKernel = strings.Replace(nftablesOnSim, "  - churnEndpoints: {rate: 20, duration: 2s, share: 0.2}\n", "  - sleep: 1s\n", 1)

// NFTablesOnKernel runs release r in nftables mode on this machine's kernel
// (no IPVS needed), in a network namespace of the test's own, with real
// traffic: the nftablesOnKernel cluster, whose TCP probes must all succeed
// through a restart and deleted services, and the host's network namespace
// (its nftables ruleset included) must be as it was. The same scenario on
// the in-memory kernel makes a first sync of the same operations by kind
// (onKernelAndSim).
func NFTablesOnKernel(t *testing.T, r kubeproxy.Release) {
	t.Helper()
	hosttools.Require(t, "nft")
	ruleset := func() string {
		out, err := exec.Command("nft", "list", "ruleset").CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	kernelRun, _, _, _ := onKernelAndSim(t, r, "nftables", nftablesOnKernel, ruleset)
	if kernelRun == nil {
		return
	}
	for _, sy := range kernelRun.Syncs {
		if !sy.Stopped { // a sync the run's end cut short may have made one
			// One transaction, and one more where chains it flushed over a
			// second (of wall time) ago are deleted.
			require.Contains(t, []int64{1, 2}, sy.Ops[dataplane.OpNFTTransaction], "%v", sy.Ops)
		}
	}
}

// onKernelAndSim runs text (a scenario of release r in the given mode) on
// this machine's kernel, in a network namespace of the test's own, with
// real traffic, then on the in-memory kernel, and returns both runs and
// what each kernel held at the end; nil runs where the test ran in the
// host's namespace, where it checks that the run, moved to a namespace of
// its own, left the host's as it was (and what host, if not nil, reads).
// Every sync on the kernel succeeds, every TCP probe too, and the first
// sync makes the same operations by kind on both; its modeled duration
// next to the measured one is logged.
func onKernelAndSim(t *testing.T, r kubeproxy.Release, mode, text string, host func() string) (kernelRun, simRun *record.File, kernelState, simState *state.State) {
	t.Helper()
	if !netns.Isolated() {
		netnstest.RequireHostTools(t)
		before, hostBefore := netnstest.HostSnapshot(t), ""
		if host != nil {
			hostBefore = host()
		}
		netnstest.Private(t)
		require.Equal(t, before, netnstest.HostSnapshot(t), "the host's network namespace after the run")
		if host != nil {
			require.Equal(t, hostBefore, host(), "the host after the run")
		}
		return nil, nil, nil, nil
	}
	require.True(t, netnstest.Private(t))
	impl := registerOnKernel(r)
	s, err := scenarios.Parse(mode+"-kernel.yaml", []byte(text), []string{"proxier.implementation=" + impl.Name, "backend=kernel"})
	require.NoError(t, err)
	kernelRun, kernelState = runScenarioState(t, s, impl, backend.New)
	s, err = scenarios.Parse(mode+"-sim.yaml", []byte(text), []string{"proxier.implementation=" + impl.Name})
	require.NoError(t, err)
	simRun, simState = runScenarioState(t, s, impl, simBackend)
	require.Equal(t, record.Measured, kernelRun.Basis)
	for _, sy := range kernelRun.Syncs {
		t.Logf("proxier %d #%d %s at %v: %d services, %.1f ms, %v %s", sy.Proxier, sy.Seq, sy.Trigger, sy.Start.Sub(kernelRun.Start), sy.Services, sy.Seconds*1e3, sy.Ops, sy.Error)
		if !sy.Stopped { // cut short by the run's end
			require.Empty(t, sy.Error)
		}
	}
	require.Positive(t, kernelRun.Probes.Attempts, "probes ran")
	require.Empty(t, kernelRun.Probes.Failures, "real traffic: nothing broke")
	k, m := kernelRun.Syncs[0], simRun.Syncs[0]
	require.Equal(t, m.Ops, k.Ops, "the first sync: the same operations on the kernel and the sim")
	t.Logf("first sync: %d services, %v; measured %.1f ms on this kernel, modeled %.1f ms on the sim (%.2f)",
		k.Services, k.Ops, k.Seconds*1e3, m.Seconds*1e3, m.Seconds/k.Seconds)
	return kernelRun, simRun, kernelState, simState
}

// iptablesOnKernel is nftablesOnKernel in iptables mode.
var iptablesOnKernel = strings.Replace(iptablesOnSim, "  - churnEndpoints: {rate: 20, duration: 2s, share: 0.2}\n", "  - sleep: 1s\n", 1)

// IPTablesOnKernel runs release r in iptables mode on this machine's
// kernel, in a network namespace of the test's own, with real traffic (TCP
// probes through a restart and deleted services must all succeed), and
// the host's network namespace must be as it was. The same scenario on the
// in-memory kernel must end in the same tables (each chain's rules as a
// set: the release writes KUBE-SERVICES and KUBE-NODEPORTS in Go map
// order) after a first sync of the same operations by kind; its modeled
// duration next to the measured one is logged.
func IPTablesOnKernel(t *testing.T, r kubeproxy.Release) {
	t.Helper()
	hosttools.Require(t, "iptables-restore")
	kernelRun, _, kernelState, simState := onKernelAndSim(t, r, "iptables", iptablesOnKernel, nil)
	if kernelRun == nil {
		return
	}
	for _, f := range kernelState.Families {
		kt, mt := kernelState.IPTables[f], simState.IPTables[f]
		require.NotEmpty(t, kt.NAT)
		require.ElementsMatch(t, kt.NAT, mt.NAT, "%s nat: the sim's table is the kernel's", f)
		require.ElementsMatch(t, kt.Filter, mt.Filter, "%s filter: the sim's table is the kernel's", f)
	}
}

// SwitchToNFTablesOnSim runs the shipped migrate-to-nftables scenario,
// reduced to 500 services, with release r on the in-memory kernel: the
// restart in nftables mode removes IPVS mode's state as kube-proxy does
// (proxier.CleanupIPVSMode) before its first nftables sync commits, so
// every probed service breaks for a while and then recovers; no generation
// after the switch writes anything of IPVS mode; nothing of it is left on
// this IPv4 node.
func SwitchToNFTablesOnSim(t *testing.T, r kubeproxy.Release) *record.File {
	t.Helper()
	impl := registerOnKernel(r)
	s, err := scenarios.Load("migrate-to-nftables", []string{"cluster.services=500", "timeline[7].churnEndpoints.duration=2s"})
	require.NoError(t, err)
	f := runScenario(t, s, impl, simBackend)
	require.Equal(t, []string{record.NothingLeft}, f.Leftovers)
	for _, sy := range f.Syncs {
		require.Empty(t, sy.Error)
		if sy.Proxier == 0 {
			require.Positive(t, sy.Ops[dataplane.OpIPVSServiceAdd], "IPVS mode first: %v", sy.Ops)
			continue
		}
		require.Zero(t, sy.Ops[dataplane.OpIPVSServiceAdd]+sy.Ops[dataplane.OpIPSetAdd]+sy.Ops[dataplane.OpAddressBind], "nftables mode: %v", sy.Ops)
		require.Positive(t, sy.Ops[dataplane.OpNFTTransaction], "%v", sy.Ops)
	}
	v := results.View(f, "restart")
	require.NotNil(t, v)
	// The cleanup is a process on the modeled clock: nftables mode's first
	// sync begins once its commands have taken their modeled time.
	restart := v.Steps[0].Start
	first := v.Syncs[0]
	require.Greater(t, first.Start.Sub(restart), 100*time.Millisecond, "the cleanup took modeled time before nftables mode's first sync")
	broken := map[int]bool{}
	for _, fl := range v.Probes.Failures {
		require.Contains(t, []string{sim.ProbeNoAddress, sim.ProbeNoVirtualServer}, fl.Outcome, "IPVS mode's state is gone, nftables mode's not yet there")
		broken[fl.Target] = true
	}
	require.Len(t, broken, len(f.Probes.Targets), "the switch breaks every probed service")
	require.Zero(t, v.Summary.Unreachable, "and each recovers")
	return f
}

// IssueShapesOnSim runs the shipped scenarios that give two kubernetes
// issues' clusters (nft-one-endpoint-44k: #139513, nft-endpoint-heavy-5k:
// #135639) with release r in nftables mode on the in-memory kernel, reduced
// to a few hundred services: each runs to its end, every sync finishes, and
// a service of one endpoint is written without a map where one of 50 has
// one (v1.37.1's writeServiceToEndpointDNATs).
func IssueShapesOnSim(t *testing.T, r kubeproxy.Release) {
	t.Helper()
	impl := register(r)
	for _, tc := range []struct {
		name     string
		services int
		maps     bool // each service's DNAT rule carries a map
	}{{"nft-one-endpoint-44k", 300, false}, {"nft-endpoint-heavy-5k", 60, true}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := scenarios.Load(tc.name, []string{fmt.Sprintf("cluster.services=%d", tc.services), "timeline[4].churnEndpoints.duration=1s"})
			require.NoError(t, err)
			f := runScenario(t, s, impl, simBackend)
			require.Empty(t, f.Error)
			generations := map[int]bool{}
			for _, sy := range f.Syncs {
				require.Empty(t, sy.Error, "%+v", sy)
				require.False(t, sy.Stopped, "%+v", sy)
				generations[sy.Proxier] = true
			}
			require.Len(t, generations, 2, "the restart's generation synced")
			first := f.Syncs[0]
			require.Positive(t, first.Ops[dataplane.OpNFTTransaction])
			require.GreaterOrEqual(t, first.Services, tc.services)
			if tc.maps {
				require.GreaterOrEqual(t, first.Ops[dataplane.OpNFTMapRule], int64(tc.services), "a map a service")
			} else {
				require.Less(t, first.Ops[dataplane.OpNFTMapRule], int64(tc.services/10), "one endpoint, no map")
			}
		})
	}
}

// deadlineScenario is a first sync and nothing else, its wait's deadline
// set by the test.
const deadlineScenario = `
name: deadline
description: a first sync and waitSynced's deadline
seed: 1
backend: sim
sim: {profile: host, timeScale: 0}
cluster: {services: 1000, endpointsPerService: 2, nodes: 3}
timeline:
  - createCluster
  - startProxier
  - waitSynced: {timeout: 5m}
`

// DeadlineOnSim runs release r's first sync in mode on the modeled clock
// twice: to its end, then with waitSynced's deadline halfway through it.
// Cut, the run fails at the deadline, and the sync is recorded as stopped
// there, its modeled time so far its duration, never as a finished sync.
func DeadlineOnSim(t *testing.T, r kubeproxy.Release, mode string) {
	t.Helper()
	impl := register(r)
	sets := []string{"proxier.implementation=" + impl.Name, "proxier.mode=" + mode}
	s, err := scenarios.Parse("deadline.yaml", []byte(deadlineScenario), sets)
	require.NoError(t, err)
	whole := runScenario(t, s, impl, simBackend)
	require.Len(t, whole.Syncs, 1)
	first := whole.Syncs[0]
	require.Empty(t, first.Error)
	wait := whole.Steps[2].Start
	deadline := first.Start.Add(time.Duration(first.Seconds * float64(time.Second) / 2)).Sub(wait).Round(time.Millisecond)
	s, err = scenarios.Parse("deadline.yaml", []byte(deadlineScenario), append(sets, "timeline[2].waitSynced.timeout="+deadline.String()))
	require.NoError(t, err)
	spec, err := s.BackendSpec()
	require.NoError(t, err)
	b, err := backend.NewSim(spec)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	f, err := scenarios.Run(context.Background(), s, scenarios.RunOptions{Backend: b})
	require.ErrorContains(t, err, fmt.Sprintf("not synced after %s of modeled time", deadline))
	end := f.Steps[2].End
	require.Equal(t, deadline, end.Sub(f.Steps[2].Start), "the wait lasts until its deadline")
	require.Len(t, f.Syncs, 1)
	cut := f.Syncs[0]
	require.True(t, cut.Stopped, "%+v", cut)
	require.Contains(t, cut.Error, "unfinished")
	require.Empty(t, cut.Programmed)
	require.Equal(t, end, cut.Start.Add(time.Duration(cut.Seconds*float64(time.Second))), "cut at the deadline")
	require.Less(t, cut.Seconds, first.Seconds)
	require.GreaterOrEqual(t, cut.Wall, 0.0, "its measured wall time (measured once the run had ended, it was minus the run's modeled length)")
}

// FullIPSetOnSim runs release r in IPVS mode on the shipped ipset-limit,
// 4 service ports past its ipsets' maxelem: as on a node, it logs each
// entry that does not fit and goes on, its syncs complete, and their
// records count what it left out of KUBE-CLUSTER-IP and KUBE-IPVS-IPS, as
// kpsim's proxier's do.
func FullIPSetOnSim(t *testing.T, r kubeproxy.Release) {
	t.Helper()
	const over = 4
	impl := register(r)
	file, data, err := scenarios.Read("ipset-limit")
	require.NoError(t, err)
	s, err := scenarios.Parse(file, data, []string{"proxier.implementation=" + impl.Name, fmt.Sprintf("cluster.services=%d", dataplane.DefaultMaxElem+over)})
	require.NoError(t, err)
	f := runScenario(t, s, impl, simBackend)
	require.Empty(t, f.Error)
	first := f.Syncs[0]
	require.Empty(t, first.Error)
	for _, set := range []string{"KUBE-CLUSTER-IP", "KUBE-IPVS-IPS"} {
		require.Equal(t, over, first.Unfit[set].Entries, "%s: %+v", set, first.Unfit)
	}
}
