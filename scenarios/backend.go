package scenarios

import (
	"context"
	"net/netip"
	"time"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/scenarios/objects"
	"github.com/kpsim/kpsim/sim"
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
	Prepare(ctx context.Context, c *objects.Set, probeTargets []results.Target) error
	// Probe makes one attempt against target; ready tells which endpoints
	// the API says are ready right now. The outcome is ProbeOK on success,
	// otherwise one of the results.Failure outcomes (refused, reset, timeout,
	// no-address, ...). err is for the backend failing, not the connection.
	Probe(ctx context.Context, target results.Target, ready func(netip.AddrPort) bool) (outcome string, latency time.Duration, err error)
	// Basis is results.Modeled or results.Measured.
	Basis() string
	// UseClock puts the backend's dataplane on a modeled clock when it can
	// run on one (the in-memory kernel at time scale 0), so that the run
	// goes as a discrete-event simulation, and reports whether it did. A
	// real kernel runs on the wall clock.
	UseClock(c sim.Clock) bool
	Close() error
}

// ProbeOK is the outcome of a successful probe.
const ProbeOK = "ok"

// ProfiledBackend is implemented by backends whose durations come from a cost
// profile (the in-memory kernel), so the results file can name it.
type ProfiledBackend interface {
	CostProfile() *results.ProfileRef
}
