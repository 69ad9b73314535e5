package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
)

// Implementation is a proxier the harness can put under test: kpsim's own,
// or a kube-proxy release, which a kpsim binary built from a nested module
// under upstream/ registers (Register) before it runs the command line.
// The same scenarios, probes, results and comparisons then apply to it.
type Implementation struct {
	// Name is what proxier.implementation asks for: "kpsim", "kube-proxy@v1.37.1".
	Name string
	// Proxier names the code in results (record.File.Proxier): Name, or
	// more where the binary's code is not the release's own (a local
	// replace of k8s.io/kubernetes says where it came from).
	Proxier string
	// Run runs one proxier generation until ctx is done, as proxier.Run
	// does: informers on client, the kernel behind dp, the options'
	// OnSync, Index and Handlers honoured.
	Run func(ctx context.Context, client kubernetes.Interface, dp dataplane.Dataplane, cfg proxier.Config, opts proxier.Options) error
	// Metrics, when set, is the registry the implementation exports its own
	// metrics to (kube-proxy's legacy registry): a run records its
	// histograms, and --metrics-addr serves it.
	Metrics prometheus.Gatherer
	// SyncedCalls is how many dataplane.Stepper.Synced calls a generation
	// makes on the modeled clock (a kube-proxy release:
	// dataplane.ReleaseSyncedCalls): the replay owes them as events.
	SyncedCalls int
}

// upstream reports code kpsim runs but did not write: a kube-proxy release.
// On the kernel backend it programs the kernel through its own netlink
// handle and utilities, in the network namespace the run re-executes in;
// on the sim its utilities are adapters onto the in-memory kernel
// (upstream/kube-proxy). Its code decides when its first sync may run,
// whatever proxier.initialSync says, so handlers that lag
// (knownAtFirstSync) are blocked rather than queued: see holdBack.
func upstream(name string) bool { return name != proxier.ImplementationKpsim }

var (
	implMu          sync.Mutex
	implementations = map[string]Implementation{
		proxier.ImplementationKpsim: {Name: proxier.ImplementationKpsim, Proxier: proxier.ImplementationKpsim, Run: proxier.Run},
	}
)

// Register adds an implementation to the binary; a nested module's main
// calls it before the command line runs. Registering a name twice, or one
// proxier.Config does not accept, is a programming error and panics.
func Register(impl Implementation) {
	if err := (proxier.Config{Implementation: impl.Name}).Defaults().Validate(); err != nil || impl.Run == nil {
		panic(fmt.Sprintf("scenarios.Register(%q): not a valid implementation: %v", impl.Name, err))
	}
	if impl.Proxier == "" {
		impl.Proxier = impl.Name
	}
	implMu.Lock()
	defer implMu.Unlock()
	if _, dup := implementations[impl.Name]; dup {
		panic(fmt.Sprintf("scenarios.Register(%q): registered twice", impl.Name))
	}
	implementations[impl.Name] = impl
}

// Implementations lists the names this binary has, sorted.
func Implementations() []string {
	implMu.Lock()
	defer implMu.Unlock()
	var out []string
	for n := range implementations {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Implementation is the scenario's proxier implementation, or why this
// binary cannot run it (see HasImplementation).
func (s *Scenario) Implementation() (Implementation, error) {
	name := s.Proxier.Defaults().Implementation
	if err := HasImplementation(name); err != nil {
		return Implementation{}, err
	}
	implMu.Lock()
	defer implMu.Unlock()
	return implementations[name], nil
}

// HasImplementation says why this binary cannot run the implementation
// named, or nil: a kube-proxy release runs only in the binary built from
// its nested module (upstream/kube-proxy-vMAJOR.MINOR).
func HasImplementation(name string) error {
	implMu.Lock()
	_, ok := implementations[name]
	implMu.Unlock()
	if ok {
		return nil
	}
	msg := fmt.Sprintf("proxier.implementation %s is not in this kpsim binary, which has %s", name, strings.Join(Implementations(), ", "))
	if bins := ReleaseBinaries(name); bins != nil {
		release, minor := strings.TrimPrefix(bins[0], "kpsim-kube-proxy-"), strings.TrimPrefix(bins[1], "kpsim-kube-proxy-")
		msg += fmt.Sprintf("; kube-proxy %s runs in bin/%s (make kube-proxy RELEASE=%s), or in bin/%s when upstream/kube-proxy-%s pins it (make kube-proxy)", release, bins[0], release, bins[1], minor)
	}
	return fmt.Errorf("%s", msg)
}

// ReleaseBinaries are the names of the kpsim binaries that may have the
// kube-proxy release name ("kube-proxy@v1.37.1"), built next to kpsim's own:
// the one `make kube-proxy RELEASE=v1.37.1` builds (kpsim-kube-proxy-v1.37.1),
// then the checked-in minor's (make kube-proxy: kpsim-kube-proxy-v1.37);
// none when name is not a release.
func ReleaseBinaries(name string) []string {
	v, ok := strings.CutPrefix(name, proxier.KubeProxyImplementation(""))
	parts := strings.SplitN(v, ".", 3)
	if !ok || len(parts) != 3 {
		return nil
	}
	return []string{"kpsim-kube-proxy-" + v, "kpsim-kube-proxy-" + parts[0] + "." + parts[1]}
}
