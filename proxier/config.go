package proxier

import (
	"time"

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
}
