// Package kubeproxy runs a kube-proxy release's own proxier (IPVS mode, or
// from v1.33 its nftables or iptables mode) as kpsim's proxier under test,
// on the real kernel or on the in-memory one (sim.go): built by its exported
// constructor and wired as cmd/kube-proxy wires it (real ipvs, ipset,
// iptables and sysctl utilities, its own netlink handle and conntrack, its
// pkg/proxy/config Service, EndpointSlice and Node configs driven by
// informers on the harness's fake clientset), so that the release's own
// code decides everything, its initial sync included. Every kernel
// operation is counted and every sync recorded from its own metrics
// (package observed).
//
// This module is compiled against the release of the module that uses it:
// each upstream/kube-proxy-vX.Y module pins one k8s.io/kubernetes release
// and supplies what differs between releases (Release); the rest is here,
// once. Its own go.mod requires the oldest release it supports; releases
// before 1.33 build with the tag kpsim_k8s_before_1_33 (release_before_1_33.go).
package kubeproxy

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics/legacyregistry"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/proxy"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
	"k8s.io/kubernetes/pkg/proxy/metaproxier"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	utilnode "k8s.io/kubernetes/pkg/util/node"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/internal/private"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/proxier/observed"
	"github.com/kpsim/kpsim/upstream/kube-proxy/releaseclock"
)

// Release is what differs between releases: the constructors' signatures.
type Release struct {
	// NewProxier calls the release's ipvs.NewProxier for one family with
	// the given utilities and kpsim's configuration, translated to
	// kube-proxy's (its defaults elsewhere), as cmd/kube-proxy does.
	NewProxier func(ctx context.Context, p Params) (*ipvs.Proxier, error)
	// NewNFTablesProxier calls the release's nftables.NewProxier for one
	// family, as cmd/kube-proxy does in nftables mode (the IPVS utilities
	// of p unused: it makes its own knftables interface, which the
	// generation then replaces, see nftablesProxier); nil for a release
	// kpsim does not run in nftables mode (proxier.Config refuses it).
	NewNFTablesProxier func(ctx context.Context, p Params) (proxy.Provider, error)
	// NewIPTablesProxier calls the release's iptables.NewProxier for one
	// family, as cmd/kube-proxy does in iptables mode (p's IPTables and
	// Sysctl used); nil for a release kpsim does not run in iptables mode.
	NewIPTablesProxier func(ctx context.Context, p Params) (proxy.Provider, error)
}

// Params are one family's proxier's arguments.
type Params struct {
	Family   v1.IPFamily
	Config   proxier.Config // kpsim's, defaulted
	NodeIP   net.IP
	IPTables utiliptables.Interface
	IPVS     utilipvs.Interface
	IPSet    utilipset.Interface
	Sysctl   utilsysctl.Interface
	Recorder events.EventRecorder
}

// MasqueradeBit is kube-proxy's default --iptables-masquerade-bit.
const MasqueradeBit = 14

// ExcludeCIDRs are the configuration's excludeCIDRs of the family, as
// NewDualStackProxier hands each family's proxier its own.
func (p Params) ExcludeCIDRs() []string { return p.ofFamily(p.Config.ExcludeCIDRs) }

// ClusterCIDR is the family's cluster CIDR, for the local traffic
// detector (kube-proxy detects local traffic by it), or "" for none.
func (p Params) ClusterCIDR() string {
	if cs := p.ofFamily(p.Config.ClusterCIDRs); len(cs) > 0 {
		return cs[0]
	}
	return ""
}

func (p Params) ofFamily(cidrs []string) []string {
	var out []string
	for _, c := range cidrs {
		if pf, err := netip.ParsePrefix(c); err == nil && pf.Addr().Is4() == (p.Family == v1.IPv4Protocol) {
			out = append(out, c)
		}
	}
	return out
}

// configSyncPeriod is kube-proxy's default --config-sync-period: its
// informers' resync.
const configSyncPeriod = 15 * time.Minute

// Register adds the release to the proxier implementations a scenario can
// ask for. A release module's main calls it, then kpsim's command line
// (cli.Main): this library sits below the command line and does not
// import it.
func (r Release) Register() { proxier.Register(r.Implementation()) }

// Implementation is the release as a proxier implementation of the
// harness, on the run's kernel (the in-memory one of the sim backend,
// SimKernel, or the real one of the kernel backend, RealKernel), named by the
// k8s.io/kubernetes module the binary was built with (kube-proxy@v1.37.1):
// what a scenario's proxier.implementation asks for. Where that module is
// replaced by a directory (a local patch), results say so.
//
// kube-proxy narrates every sync through klog; kpsim records syncs
// itself, so the narration goes to the file $KPSIM_KUBE_PROXY_LOG names
// (at -v=$KPSIM_KUBE_PROXY_V, default 2), or nowhere.
func (r Release) Implementation() proxier.Implementation { return r.ImplementationOn(nodeKernel) }

// ImplementationOn is Implementation on another kernel (upstream's fakes,
// in tests). kernel is called as each generation starts, with the run's
// dataplane, in the network namespace the run programs: kube-proxy makes
// its utilities as it starts.
func (r Release) ImplementationOn(kernel func(dataplane.Dataplane) (Kernel, error)) proxier.Implementation {
	quietKlog()
	version, replaced := kubernetesModule()
	impl := proxier.Implementation{
		Name: proxier.KubeProxyImplementation(version),
		Run: func(ctx context.Context, client kubernetes.Interface, dp dataplane.Dataplane, cfg proxier.Config, opts proxier.Options) error {
			k, err := kernel(dp)
			if err != nil {
				return err
			}
			if k.Close != nil {
				defer k.Close()
			}
			return r.run(ctx, k, dp.Model, client, cfg, opts)
		},
		Metrics:     observed.Prefixed(legacyregistry.DefaultGatherer, "kubeproxy_"),
		SyncedCalls: dataplane.ReleaseSyncedCalls,
	}
	if replaced != "" {
		impl.Proxier = fmt.Sprintf("%s (k8s.io/kubernetes replaced by %s)", impl.Name, replaced)
	}
	return impl
}

// quietKlog sends kube-proxy's klog narration to $KPSIM_KUBE_PROXY_LOG, or nowhere.
func quietKlog() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	var out io.Writer = io.Discard
	if file := os.Getenv("KPSIM_KUBE_PROXY_LOG"); file != "" {
		if f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			out = f // for the process's life, as kube-proxy's own log file
			_ = fs.Set("v", cmp.Or(os.Getenv("KPSIM_KUBE_PROXY_V"), "2"))
		}
	}
	klog.SetOutput(out)
}

// replacedBy is the directory the release module replaced
// k8s.io/kubernetes with (a local checkout), as make kube-proxy stamps it:
// the build itself replaces k8s.io/kubernetes with clockoverlay's copy.
var replacedBy string

// clockTree reports whether dir is clockoverlay's copy of k8s.io/kubernetes
// (CLOCK_OVERLAY/RELEASE/kubernetes@VERSION).
func clockTree(dir string) bool {
	return filepath.Base(filepath.Dir(filepath.Dir(dir))) == "clock-overlay"
}

// ClockOverlaid reports whether the release was built with its reads of
// the time on the run's clock (make kube-proxy, kube-proxy-test).
func ClockOverlaid() bool {
	bi, ok := debug.ReadBuildInfo()
	return ok && slices.ContainsFunc(bi.Deps, func(m *debug.Module) bool {
		return m.Path == "k8s.io/kubernetes" && m.Replace != nil && clockTree(m.Replace.Path)
	})
}

// kubernetesModule is the k8s.io/kubernetes version the binary was built
// with, and the directory that replaced it, if any: the local checkout
// make kube-proxy made its copy of, or a directory a build by hand
// replaced it with.
func kubernetesModule() (version, replaced string) {
	version = "v0.0.0-unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, ""
	}
	for _, m := range bi.Deps {
		if m.Path != "k8s.io/kubernetes" {
			continue
		}
		version = m.Version
		switch {
		case m.Replace == nil:
		case clockTree(m.Replace.Path):
			// clockoverlay's copy, named for the version it holds (the
			// build says "(devel)" of a directory).
			_, v, _ := strings.Cut(filepath.Base(m.Replace.Path), "@")
			return v, replacedBy
		case m.Replace.Version != "":
			return m.Replace.Version, ""
		default:
			return version, m.Replace.Path
		}
	}
	return version, ""
}

// Kernel is what a generation programs the node through: cmd/kube-proxy's
// utilities on the real kernel (RealKernel), or upstream's fakes in tests.
type Kernel struct {
	IPVS     utilipvs.Interface
	IPSet    utilipset.Interface
	IPTables func(v1.IPFamily) utiliptables.Interface
	Sysctl   utilsysctl.Interface
	// NFTables is the kernel's nf_tables for a proxier in nftables mode;
	// nil on the real node, where the release's own knftables interface
	// (the nft binary in the run's namespace) is kept.
	NFTables dataplane.NFTables
	// Adopt replaces, in a new proxier (an *ipvs.Proxier, or an
	// *nftables.Proxier of the release), what its constructor wired to the
	// node itself (the netlink handle, conntrack, the health server), for
	// tests and the in-memory kernel; nil on the real node.
	Adopt func(p any, f v1.IPFamily) error
	// CleanupIPVSMode removes what IPVS mode left on the node, as
	// kube-proxy does as it starts in nftables mode (cmd/kube-proxy's
	// platformCleanup: the release's own code on the real node, kpsim's
	// proxier.CleanupIPVSMode on the in-memory one). Best effort, as
	// kube-proxy's: it reports whether it met errors, which kube-proxy
	// logs and ignores. Nil: nothing is cleaned up.
	CleanupIPVSMode func(ctx context.Context) (failed bool)
	// CleanupNFTablesMode removes nftables mode's tables, as kube-proxy
	// does as it starts in iptables mode; the same contract.
	CleanupNFTablesMode func(ctx context.Context) (failed bool)
	// Close undoes what making the kernel did, when the generation ends; nil for nothing.
	Close func()
}

// RealKernel is cmd/kube-proxy's: real utilities, in the network namespace
// the process runs in (the kernel backend's own), with iptables commands
// of the variant the kernel backend reads (iptablesVariant). On a kernel
// without IPVS (nftables mode on one, which the kernel backend allows)
// there is no IPVS utility: making one would try to load the module.
func RealKernel() (Kernel, error) {
	undo, err := iptablesVariant()
	if err != nil {
		return Kernel{}, err
	}
	k := Kernel{IPSet: newIPSet(), IPTables: newIPTables, Sysctl: utilsysctl.New(),
		CleanupIPVSMode: releaseCleanupIPVSMode, CleanupNFTablesMode: releaseCleanupNFTablesMode, Close: undo}
	if _, err := os.Stat("/proc/net/ip_vs"); err == nil {
		k.IPVS = utilipvs.New()
	}
	return k, nil
}

// ipvsProxier is the release's IPVS proxier for one family on k, its
// netlink handle counted.
func (r Release) ipvsProxier(ctx context.Context, k Kernel, params Params, fam *observed.Family) (proxy.Provider, error) {
	if k.IPVS == nil {
		return nil, fmt.Errorf("kube-proxy %s: IPVS mode on a kernel without IPVS (/proc/net/ip_vs)", params.Family)
	}
	p, err := r.NewProxier(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy %s: ipvs.NewProxier: %w", params.Family, err)
	}
	if k.Adopt != nil {
		if err := k.Adopt(p, params.Family); err != nil {
			return nil, err
		}
	}
	if err := private.Wrap(p, fieldNetlink, func(h ipvs.NetLinkHandle) ipvs.NetLinkHandle { return countedNetlink{h, fam} }); err != nil {
		return nil, fmt.Errorf("kube-proxy %s: %w", params.Family, err)
	}
	return p, nil
}

// run runs one generation, as kube-proxy's server runs: it reads its
// Node (node IPs, as detectNodeIPs does), builds a proxier per family
// (NewDualStackProxier's way, a meta proxier over both), registers it with
// its configs on the informers, and runs until ctx is done. Killed, it
// waits for a sync in progress, whose operations fail from then on.
func (r Release) run(ctx context.Context, k Kernel, model dataplane.Model, client kubernetes.Interface, cfg proxier.Config, opts proxier.Options) error {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("proxier config: %w", err)
	}
	registerReleaseMetrics(cfg.Mode)
	// The loops the release starts stop when this generation ends.
	releaseclock.Begin(ctx.Done())
	g := observed.New(ctx, cfg, opts, model, legacyregistry.DefaultGatherer, labelledMetrics)
	defer g.Wait()
	if g.Modeled() {
		// The release's own reads of the time (its full-sync hour, its
		// stale chains' second) follow the modeled clock: releaseclock.
		defer releaseclock.Use(opts.Clock)()
	}

	// cmd/kube-proxy's platformCleanup as it starts: in nftables mode it
	// removes what iptables and IPVS mode left; in iptables mode (and IPVS
	// mode) what nftables mode left, and nothing of IPVS mode's, which
	// stays. kpsim runs no cleanup as IPVS mode starts, so that its runs,
	// the harness's oldest, keep the operations they always had.
	cleanup, what := k.CleanupIPVSMode, "IPVS mode"
	if cfg.Mode == proxier.ModeIPTables {
		cleanup, what = k.CleanupNFTablesMode, "nftables mode"
	}
	if cfg.Mode != proxier.ModeIPVS && cleanup != nil {
		g.Family(cfg.Families[0]).Startup(func() {
			if cleanup(ctx) {
				klog.FromContext(ctx).Info("kube-proxy's cleanup of " + what + " met errors; ignored, as kube-proxy does")
			}
		})
	}
	node, err := client.CoreV1().Nodes().Get(ctx, cfg.NodeName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kube-proxy: get node %s: %w", cfg.NodeName, err)
	}
	ips := NodeIPs(node)
	var providers []proxy.Provider
	for _, f := range cfg.Families {
		fam := g.Family(f)
		family := v1.IPFamily(f)
		params := Params{
			Family:   family,
			Config:   cfg,
			NodeIP:   ips[family],
			IPTables: countedIPTables{Interface: k.IPTables(family), f: fam, family: f},
			IPVS:     countedIPVS{k.IPVS, fam},
			IPSet:    countedIPSet{k.IPSet, fam},
			Sysctl:   countedSysctl{k.Sysctl, fam},
			Recorder: &events.FakeRecorder{},
		}
		var p proxy.Provider
		switch cfg.Mode {
		case proxier.ModeNFTables:
			p, err = r.nftablesProxier(ctx, k, params, fam)
		case proxier.ModeIPTables:
			p, err = r.iptablesProxier(ctx, k, params)
		default:
			p, err = r.ipvsProxier(ctx, k, params, fam)
		}
		if err != nil {
			return err
		}
		if err := errors.Join(
			private.Hook(p, fieldSyncFn, fam.Sync),
			modelRunner(p, fam),
		); err != nil {
			return fmt.Errorf("kube-proxy %s: %w", f, err)
		}
		providers = append(providers, synced{p, fam})
	}
	provider := providers[0]
	if len(providers) == 2 {
		provider = metaproxier.NewMetaProxier(providers[0], providers[1])
	}

	factory := informers.NewSharedInformerFactory(client, configSyncPeriod)
	runConfigs(ctx, g.Services(factory.Core().V1().Services()), g.EndpointSlices(factory.Discovery().V1().EndpointSlices()),
		g.Nodes(factory.Core().V1().Nodes()), syncedDone{provider, g})
	if err := g.Registered(); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	go provider.SyncLoop() // returns when ctx is done (its wait.NeverStop is releaseclock.Stop in kpsim's build)
	<-ctx.Done()
	return nil
}

// synced sends the calls that sync at once, outside the runner (the first
// sync, when both initial lists are in), through the sync observer
// (observed.Family.Synced: on the modeled clock, the family's runner makes
// them at its next turn).
type synced struct {
	proxy.Provider
	f *observed.Family
}

func (s synced) OnServiceSynced() {
	s.f.Synced(func() { _ = s.f.Sync(func() error { s.Provider.OnServiceSynced(); return nil }) })
}

func (s synced) OnEndpointSlicesSynced() {
	s.f.Synced(func() { _ = s.f.Sync(func() error { s.Provider.OnEndpointSlicesSynced(); return nil }) })
}

// syncedDone is the provider the configs call: once a config's synced
// call has reached every family, the replay hears of it.
type syncedDone struct {
	proxy.Provider
	g *observed.Generation
}

func (s syncedDone) OnServiceSynced() {
	s.Provider.OnServiceSynced()
	s.g.SyncedDone()
}

func (s syncedDone) OnEndpointSlicesSynced() {
	s.Provider.OnEndpointSlicesSynced()
	s.g.SyncedDone()
}

// NodeIPs are kube-proxy's node IPs: per family the Node's first address
// of it (InternalIP before ExternalIP, upstream's GetNodeHostIPs), else
// loopback, as its server's detectNodeIPs falls back without a Node.
func NodeIPs(node *v1.Node) map[v1.IPFamily]net.IP {
	out := map[v1.IPFamily]net.IP{v1.IPv4Protocol: net.IPv4(127, 0, 0, 1), v1.IPv6Protocol: net.IPv6loopback}
	if node == nil {
		return out
	}
	ips, err := utilnode.GetNodeHostIPs(node)
	if err != nil {
		return out
	}
	for _, ip := range ips {
		if ip.To4() != nil {
			out[v1.IPv4Protocol] = ip
		} else {
			out[v1.IPv6Protocol] = ip
		}
	}
	return out
}
