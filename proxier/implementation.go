package proxier

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/kpsim/kpsim/dataplane"
)

// Implementation is a proxier the harness can put under test: kpsim's own
// (Run), or a kube-proxy release, which a kpsim binary built from a nested
// module under upstream/ registers (Register) before it runs the command
// line. The same scenarios, probes, results and comparisons then apply to
// it. The registry is here, below the harness, so that a release's
// adapter (upstream/kube-proxy) registers without importing it.
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
	Run func(ctx context.Context, client kubernetes.Interface, dp dataplane.Dataplane, cfg Config, opts Options) error
	// Metrics, when set, is the registry the implementation exports its own
	// metrics to (kube-proxy's legacy registry): a run records its
	// histograms, and --metrics-addr serves it.
	Metrics prometheus.Gatherer
	// SyncedCalls is how many dataplane.Stepper.Synced calls a generation
	// makes on the modeled clock (a kube-proxy release:
	// dataplane.ReleaseSyncedCalls): the replay owes them as events.
	SyncedCalls int
}

var (
	implMu          sync.Mutex
	implementations = map[string]Implementation{
		ImplementationKpsim: {Name: ImplementationKpsim, Proxier: ImplementationKpsim, Run: Run},
	}
)

// Register adds an implementation to the binary; a nested module's main
// calls it before the command line runs. Registering a name twice, or one
// Config does not accept, is a programming error and panics.
func Register(impl Implementation) {
	if err := (Config{Implementation: impl.Name}).Defaults().Validate(); err != nil || impl.Run == nil {
		panic(fmt.Sprintf("proxier.Register(%q): not a valid implementation: %v", impl.Name, err))
	}
	if impl.Proxier == "" {
		impl.Proxier = impl.Name
	}
	implMu.Lock()
	defer implMu.Unlock()
	if _, dup := implementations[impl.Name]; dup {
		panic(fmt.Sprintf("proxier.Register(%q): registered twice", impl.Name))
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

// LookupImplementation is the implementation named, or why this binary
// cannot run it (HasImplementation).
func LookupImplementation(name string) (Implementation, error) {
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
	v, ok := strings.CutPrefix(name, KubeProxyImplementation(""))
	parts := strings.SplitN(v, ".", 3)
	if !ok || len(parts) != 3 {
		return nil
	}
	return []string{"kpsim-kube-proxy-" + v, "kpsim-kube-proxy-" + parts[0] + "." + parts[1]}
}
