package proxier

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/results"
)

// InitialSyncMode decides when the first sync may run.
type InitialSyncMode string

const (
	// InitialSyncHandlers waits until every event handler registration has
	// seen the informers' initial list (ResourceEventHandlerRegistration.HasSynced),
	// as kube-proxy does since kubernetes PR #126532.
	InitialSyncHandlers InitialSyncMode = "handlers"
	// InitialSyncLegacy syncs as soon as the informers' stores are full, while
	// handlers may still be behind, and treats whatever it has not been told
	// about yet as stale: the pre-fix race behind the incident in field-notes.md.
	InitialSyncLegacy InitialSyncMode = "legacy"
)

// Config is a node's proxier configuration: kube-proxy's IPVS options plus
// kpsim's own choices. The zero value is completed by Defaults.
type Config struct {
	NodeName string             `json:"nodeName"`
	Families []dataplane.Family `json:"families"` // one proxier per family; [IPv4] or [IPv4 IPv6]

	InitialSync   InitialSyncMode `json:"initialSync"`
	MinSyncPeriod time.Duration   `json:"minSyncPeriod"`
	SyncPeriod    time.Duration   `json:"syncPeriod"` // also the period of full verification

	Scheduler         string   `json:"scheduler"`         // rr unless set
	NodePortAddresses []string `json:"nodePortAddresses"` // CIDRs; empty means every local address
	MasqueradeAll     bool     `json:"masqueradeAll"`
	ClusterCIDRs      []string `json:"clusterCIDRs"` // at most one per family
	ExcludeCIDRs      []string `json:"excludeCIDRs"`
	StrictARP         bool     `json:"strictARP"`
	// GracefulTerminationRetry is how often drained real servers are checked
	// for remaining connections (kube-proxy: one minute).
	GracefulTerminationRetry time.Duration `json:"gracefulTerminationRetry"`
}

// Defaults returns cfg with kube-proxy's defaults filled in where unset.
func (cfg Config) Defaults() Config {
	if cfg.NodeName == "" {
		cfg.NodeName = "node-1"
	}
	if len(cfg.Families) == 0 {
		cfg.Families = []dataplane.Family{dataplane.IPv4}
	}
	if cfg.InitialSync == "" {
		cfg.InitialSync = InitialSyncHandlers
	}
	if cfg.MinSyncPeriod == 0 {
		cfg.MinSyncPeriod = time.Second
	}
	if cfg.SyncPeriod == 0 {
		cfg.SyncPeriod = 30 * time.Second
	}
	if cfg.Scheduler == "" {
		cfg.Scheduler = "rr"
	}
	if cfg.GracefulTerminationRetry == 0 {
		cfg.GracefulTerminationRetry = time.Minute
	}
	return cfg
}

// Options connect a proxier to the rest of a run. None of them changes what
// the proxier programs.
type Options struct {
	// Index numbers proxier generations within a run (0, then +1 per restart);
	// it is copied into every results.Sync.
	Index int
	// OnSync receives every sync's record, from the proxier's sync goroutine.
	OnSync func(results.Sync)
	// Churn, shared across families and restarts, counts deleted-then-re-added kernel objects.
	Churn *dataplane.Churn
	// Metrics, shared across families and restarts; nil disables metrics.
	Metrics *Metrics
	// HandlerDelay is slept by every informer event handler before it
	// processes an event: a slow handler (in the incident, handlers waiting
	// for the proxier's lock while a long sync ran), so that handlers lag
	// behind the informers' stores.
	HandlerDelay time.Duration
	// Clock drives the sync runner, graceful termination and timestamps;
	// nil means the real clock. Tests inject a fake one.
	Clock clock.WithTicker
	// Lockstep, when set, lets a replay step the proxier (kpsim's sim at
	// time scale 0); nil means free-running, as kube-proxy runs.
	Lockstep Lockstep
}

// Lockstep is a replay hook that makes a run repeatable: the same scenario
// gives the same syncs, each applying the same changes, every time. It
// decides when a sync may start and learns when the proxier has nothing left
// to do; it never changes what a sync does. Free-running, which API changes
// share a sync depends on goroutine timing. The replay that implements it
// also drives Options.Clock, so timers fire at points it chooses.
type Lockstep interface {
	// SyncGate is held by each sync of the runner from its start to its
	// end. The replay holds it while it writes a batch of API changes and
	// until every handler has recorded them, so no sync sees half a batch.
	SyncGate() sync.Locker
	// Handled is called after each informer event (the initial list's
	// adds included) has been passed to every family's handler, so the
	// replay can count the objects and writes it made through.
	Handled()
	// Turn returns the replay's current turn and a channel closed when the
	// next turn starts (the replay changed something: wrote, moved the clock).
	Turn() (turn uint64, next <-chan struct{})
	// Idle is called by a family's sync runner when, during turn, it found
	// nothing to do: no request, no due timer. The replay's step is over
	// when every family is idle in its current turn.
	Idle(f dataplane.Family, turn uint64)
}

// Validate reports the first invalid field of a defaulted Config, by its JSON name.
func (cfg Config) Validate() error {
	if cfg.NodeName == "" {
		return fmt.Errorf("nodeName: must not be empty")
	}
	if len(cfg.Families) == 0 || len(cfg.Families) > 2 {
		return fmt.Errorf("families: want one or two IP families, got %d", len(cfg.Families))
	}
	for i, f := range cfg.Families {
		if f != dataplane.IPv4 && f != dataplane.IPv6 {
			return fmt.Errorf("families[%d]: unknown IP family %q", i, f)
		}
		if slices.Index(cfg.Families, f) != i {
			return fmt.Errorf("families[%d]: %s listed twice", i, f)
		}
	}
	switch cfg.InitialSync {
	case InitialSyncHandlers, InitialSyncLegacy:
	default:
		return fmt.Errorf("initialSync: %q is neither %q nor %q", cfg.InitialSync, InitialSyncHandlers, InitialSyncLegacy)
	}
	if cfg.MinSyncPeriod < 0 {
		return fmt.Errorf("minSyncPeriod: must not be negative")
	}
	if cfg.SyncPeriod <= 0 || cfg.SyncPeriod < cfg.MinSyncPeriod {
		return fmt.Errorf("syncPeriod: %v must be positive and at least minSyncPeriod (%v)", cfg.SyncPeriod, cfg.MinSyncPeriod)
	}
	if !slices.Contains(dataplane.Schedulers, cfg.Scheduler) {
		return fmt.Errorf("scheduler: unknown IPVS scheduler %q", cfg.Scheduler)
	}
	for i, c := range cfg.NodePortAddresses {
		if _, err := netip.ParsePrefix(c); err != nil {
			return fmt.Errorf("nodePortAddresses[%d]: %w", i, err)
		}
	}
	seen := map[dataplane.Family]bool{}
	for i, c := range cfg.ClusterCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("clusterCIDRs[%d]: %w", i, err)
		}
		f := dataplane.FamilyOf(p.Addr())
		if seen[f] {
			return fmt.Errorf("clusterCIDRs[%d]: more than one %s cluster CIDR", i, f)
		}
		seen[f] = true
	}
	for i, c := range cfg.ExcludeCIDRs {
		if _, err := netip.ParsePrefix(c); err != nil {
			return fmt.Errorf("excludeCIDRs[%d]: %w", i, err)
		}
	}
	if cfg.GracefulTerminationRetry <= 0 {
		return fmt.Errorf("gracefulTerminationRetry: must be positive")
	}
	return nil
}
