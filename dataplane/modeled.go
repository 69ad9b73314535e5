package dataplane

import "time"

// The modeled-time contract: what a proxier, a dataplane and the replay
// that drives them on a modeled clock (a discrete-event run at time scale
// 0, scenarios/replay_clock.go) agree on. The in-memory kernel prices every
// operation (Model) and spends it on the Clock; the proxier prices its own
// work (Work) through the same Model; the replay (Stepper) decides when
// each sync may start. Together they make a run repeat exactly: the same
// scenario and seed give the same syncs at the same modeled instants.

// Model is how an in-memory kernel accounts for time it does not spend.
//
// At a time scale below 1 the kernel's modeled cost is partly not slept: a
// proxier adds the unspent part to its measured durations. On a modeled
// clock (a discrete-event run at time scale 0) nothing is measured: each
// kernel operation moves the clock by its cost when issued, and the proxier
// reports its own work through Compute, which moves the clock by the work's
// modeled price, so that a run repeats exactly.
type Model interface {
	// Kernel returns the modeled cost of every kernel operation so far, and
	// the part of it not spent as wall time.
	Kernel() (total, unspent time.Duration)
	// Clocked reports whether the kernel runs on a modeled clock.
	Clocked() bool
	// Compute prices the proxier's own work and, on a modeled clock, moves
	// the clock by that much and returns it; otherwise it returns 0.
	Compute(Work) time.Duration
	// ComputeAs is Compute for the work of the proxier implementation
	// named (a kube-proxy release, "kube-proxy@v1.37.1"): priced by the
	// profile's prices for it where it has them, else as Compute prices.
	ComputeAs(impl string, w Work) time.Duration
}

// Work is a proxier's own work in a phase of a sync, in the units a cost
// profile prices: a fixed cost per sync, per service port whose wants are
// derived (from its Service, EndpointSlices and the node), per virtual
// server visited (read back or reconciled), per endpoint or real server
// visited and per ipset entry or bound address compared. Deriving a port's wants costs a few
// times a visit, so they are priced apart. A release's partial sync
// (nftables and iptables modes) derives the ports of the services that
// changed and visits, to pass over, the others: Ports. It sorts each
// passed-over port's endpoints (local, cluster, ready) before it decides
// to pass it over: Passed, priced apart from the endpoints of a derived
// port, which it writes rules for.
type Work struct {
	Syncs     int `json:"syncs,omitempty"`
	Derived   int `json:"derived,omitempty"`
	Ports     int `json:"ports,omitempty"`
	Endpoints int `json:"endpoints,omitempty"`
	Passed    int `json:"passed,omitempty"`
	Entries   int `json:"entries,omitempty"`
}

// Add adds o's units to w's.
func (w *Work) Add(o Work) {
	w.Syncs += o.Syncs
	w.Derived += o.Derived
	w.Ports += o.Ports
	w.Endpoints += o.Endpoints
	w.Passed += o.Passed
	w.Entries += o.Entries
}

// Clock is a discrete-event clock: Spend returns once d of modeled time has
// passed for the caller, which may be at once or after other events due
// earlier have happened.
type Clock interface {
	Spend(d time.Duration)
}

// Stepper is a replay that moves a proxier through modeled time, so that a
// run repeats exactly: the same scenario gives the same syncs, applying the
// same changes at the same modeled instants. It decides when each sync may
// start and learns when a runner has nothing left to do; it never changes
// what a sync does. The replay that implements it also drives the
// proxier's clock (proxier.Options.Clock), and the modeled clock (Clock)
// moves with every kernel operation and every unit of the proxier's own
// work (Model).
type Stepper interface {
	// Begin is called by a family's runner before each sync and returns
	// when the sync may start: once everything the replay did before this
	// modeled instant has reached the handlers.
	Begin(f Family)
	// Turn returns the family's current turn and a channel closed when its
	// next turn starts: the replay lets one runner at a time look for work,
	// so that what runners do (arm timers, begin syncs) is in a fixed order.
	Turn(f Family) (turn uint64, next <-chan struct{})
	// Idle is called by a family's sync runner when, during turn, it found
	// nothing to do: no request, no due timer. It then waits for its next turn.
	Idle(f Family, turn uint64)
	// Synced is called once a kube-proxy release's proxier was told that an
	// informer it depends on has synced (OnServiceSynced,
	// OnEndpointSlicesSynced: ReleaseSyncedCalls of them per generation).
	// Its configs make those calls when they see their informer synced,
	// on their own schedule, and the release's first sync follows from
	// them: the replay owes them as it owes the listed objects' events.
	Synced()
}

// ReleaseSyncedCalls is how many Synced calls a kube-proxy release's
// generation makes: one for its Service config, one for its EndpointSlice
// config (its node config's OnNodeSynced starts no sync and is not counted).
const ReleaseSyncedCalls = 2
