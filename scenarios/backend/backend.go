// Package backend builds the node a scenario runs on, whichever it names:
// the in-memory kernel of sim/ (Sim) or the real kernel in network
// namespaces of its own (kernel/testbed), both behind one interface.
package backend

import (
	"context"
	"errors"
	"fmt"
	"github.com/kpsim/kpsim/proxier"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/kpsim/kpsim/kernel"
	"github.com/kpsim/kpsim/kernel/netns"
	"github.com/kpsim/kpsim/kernel/testbed"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/record"
)

// Backend is the node a scenario runs on: the dataplane the proxier
// programs, and the means to ask whether a new connection to a service would
// succeed right now. The in-memory kernel answers from its model; the kernel
// backend makes real connections. Keeping both behind one interface is what
// lets the same scenario report modeled and measured disruption side by side.
type Backend interface {
	// Dataplane is handed to every proxier generation of the run; the kernel
	// state it holds outlives proxier restarts.
	Dataplane() dataplane.Dataplane
	// Prepare is called once with the cluster before the proxier starts: the
	// kernel backend creates backend pods (namespaces, servers) for the
	// probe targets' endpoints.
	Prepare(ctx context.Context, c *objects.Set, probeTargets []record.Target) error
	// Probe makes one attempt against target; serving tells which endpoints
	// the API says serve right now, and lists them. The outcome is ProbeOK on success,
	// otherwise one of the record.Failure outcomes (refused, reset, timeout,
	// no-address, ...). err is for the backend failing, not the connection.
	Probe(ctx context.Context, target record.Target, serving Serving) (outcome string, latency time.Duration, err error)
	// Basis is record.Modeled or record.Measured.
	Basis() string
	// UseClock puts the backend's dataplane on a modeled clock when it can
	// run on one (the in-memory kernel at time scale 0), so that the run
	// goes as a discrete-event simulation, and reports whether it did. A
	// real kernel runs on the wall clock.
	UseClock(c dataplane.Clock) bool
	Close() error
}

// Serving is what the API says of a probed service's endpoints right now
// (the kernel backend starts and stops their servers by it).
type Serving = testbed.Serving

// ProbeOK is the outcome of a successful probe.
const ProbeOK = "ok"

// Profiled is implemented by backends whose durations come from a cost
// profile (the in-memory kernel), so the results file can name it.
type Profiled interface {
	CostProfile() *record.ProfileRef
}

// Spec is what a backend is built from: a scenario's backend settings.
type Spec struct {
	Name string // one of dataplane.Backends
	// Profile and TimeScale price and pace the in-memory kernel (sim only).
	Profile   string
	TimeScale float64
	// IPSet is how ipset batches reach the kernel; empty means
	// dataplane.DefaultIPSetStrategy.
	IPSet dataplane.IPSetStrategy
	// NodeAddresses are the node's own addresses on its eth0; empty means
	// dataplane.DefaultNodeAddresses.
	NodeAddresses []netip.Prefix
	// Clients are the probing pod's addresses, one per family.
	Clients []netip.Addr
	// Modes are the proxy modes the run's proxiers run in: the kernel
	// backend needs IPVS for IPVS mode, nf_tables for nftables mode
	// (kernel.Needs).
	Modes []proxier.Mode
}

// needs is what the spec's modes ask of the kernel.
func (s Spec) needs() kernel.Needs {
	return kernel.Needs{NFTables: slices.Contains(s.Modes, proxier.ModeNFTables), NoIPVS: len(s.Modes) > 0 && !slices.Contains(s.Modes, proxier.ModeIPVS)}
}

// ErrIsolate is New's answer for the kernel backend outside an isolated
// process (netns.RunIsolated): the kernel can run the scenario, and the
// caller must run itself again in a network namespace of its own, where New
// builds the backend. Kernel work never happens in the namespace kpsim was
// started in.
var ErrIsolate = errors.New("the kernel backend runs only in a network namespace of its own")

// New builds the backend s names.
func New(s Spec) (Backend, error) {
	switch s.Name {
	case dataplane.BackendSim:
		return NewSim(s)
	case dataplane.BackendKernel:
		return newKernel(s)
	}
	return nil, fmt.Errorf("unknown backend %q (want one of %v)", s.Name, dataplane.Backends)
}

// newKernel checks, outside isolation, that this kernel can run the scenario
// (failing at once with everything missing) and asks for isolation; inside,
// it builds the testbed.
func newKernel(s Spec) (Backend, error) {
	if !netns.Isolated() {
		if missing := kernel.Detect().MissingFor(dataplane.BackendKernel, s.needs()); len(missing) > 0 {
			return nil, fmt.Errorf("this kernel cannot run kernel scenarios (see `kpsim doctor`); missing: %s", strings.Join(missing, "; "))
		}
		return nil, ErrIsolate
	}
	return testbed.NewBackend(testbed.BackendOptions{
		Kernel:   kernel.Options{IPSetStrategy: s.IPSet},
		Needs:    s.needs(),
		Topology: testbed.TopologyConfig{NodeAddresses: s.NodeAddresses, Clients: s.Clients},
	})
}
