package proxier

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
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
	// about yet as stale: the pre-fix race behind the incident in docs/incident.md.
	InitialSyncLegacy InitialSyncMode = "legacy"
)

// Config is a node's proxier configuration: kube-proxy's IPVS options plus
// kpsim's own choices. The zero value is completed by Defaults. The YAML
// names are a scenario's proxier section (scenarios/README.md); JSON uses
// the same names, durations as Go duration strings ("1s") in both.
type Config struct {
	// Implementation is the proxier under test: ImplementationKpsim (this
	// package), or a kube-proxy release's own IPVS proxier,
	// "kube-proxy@v1.37.1", which runs in a kpsim binary built from a nested
	// module under upstream/ (the scenarios package has the registry).
	Implementation string `json:"implementation" yaml:"implementation"`
	// Mode is kube-proxy's proxy mode: ModeIPVS, or ModeNFTables or
	// ModeIPTables for a release from v1.33 on (nftables mode GA). kpsim's
	// own proxier is an IPVS proxier.
	Mode Mode `json:"mode" yaml:"mode"`
	// NodeName is the node the proxier plays; a scenario names it in
	// cluster.node, so it is not part of the proxier section.
	NodeName string             `json:"nodeName,omitempty" yaml:"-"`
	Families []dataplane.Family `json:"families" yaml:"families"` // one proxier per family; [IPv4] or [IPv4 IPv6]

	InitialSync   InitialSyncMode `json:"initialSync" yaml:"initialSync"`
	MinSyncPeriod time.Duration   `json:"minSyncPeriod" yaml:"minSyncPeriod"`
	SyncPeriod    time.Duration   `json:"syncPeriod" yaml:"syncPeriod"` // also the period of full verification

	Scheduler         string   `json:"scheduler" yaml:"scheduler"`                 // rr unless set
	NodePortAddresses []string `json:"nodePortAddresses" yaml:"nodePortAddresses"` // CIDRs; empty means every local address
	MasqueradeAll     bool     `json:"masqueradeAll" yaml:"masqueradeAll"`
	ClusterCIDRs      []string `json:"clusterCIDRs" yaml:"clusterCIDRs"` // at most one per family
	ExcludeCIDRs      []string `json:"excludeCIDRs" yaml:"excludeCIDRs"`
	StrictARP         bool     `json:"strictARP" yaml:"strictARP"`
	// GracefulTerminationRetry is how often drained real servers are checked
	// for remaining connections (kube-proxy: one minute).
	GracefulTerminationRetry time.Duration `json:"gracefulTerminationRetry" yaml:"gracefulTerminationRetry"`
}

// configJSON is Config with its durations as strings, as kube-proxy's own
// configuration file writes them: a results file records "1s", not 1000000000.
type configJSON struct {
	configFields
	MinSyncPeriod            string `json:"minSyncPeriod"`
	SyncPeriod               string `json:"syncPeriod"`
	GracefulTerminationRetry string `json:"gracefulTerminationRetry"`
}

// configFields is Config without its methods; configJSON's own duration
// fields, being shallower, take the place of its.
type configFields Config

func (cfg Config) MarshalJSON() ([]byte, error) {
	return json.Marshal(configJSON{configFields(cfg), cfg.MinSyncPeriod.String(), cfg.SyncPeriod.String(), cfg.GracefulTerminationRetry.String()})
}

func (cfg *Config) UnmarshalJSON(b []byte) error {
	var j configJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*cfg = Config(j.configFields)
	for _, d := range []struct {
		name string
		s    string
		to   *time.Duration
	}{{"minSyncPeriod", j.MinSyncPeriod, &cfg.MinSyncPeriod}, {"syncPeriod", j.SyncPeriod, &cfg.SyncPeriod},
		{"gracefulTerminationRetry", j.GracefulTerminationRetry, &cfg.GracefulTerminationRetry}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		*d.to = v
	}
	return nil
}

// ImplementationKpsim names this package's proxier as Config.Implementation
// and record.File.Proxier do.
const ImplementationKpsim = record.ProxierKpsim

// KubeProxyImplementation names a kube-proxy release as
// Config.Implementation does: "kube-proxy@" and its module version.
func KubeProxyImplementation(version string) string { return "kube-proxy@" + version }

// Mode is a kube-proxy proxy mode, as its --proxy-mode spells it.
type Mode string

const (
	ModeIPVS     Mode = "ipvs"
	ModeNFTables Mode = "nftables"
	ModeIPTables Mode = "iptables"
)

// nftablesSince is the first minor release of 1.x whose nftables mode is
// GA (before it, alpha and beta behind a feature gate): the first kpsim runs
// in nftables mode, and in iptables mode (kpsim's adapter for a release
// before it calls its IPVS constructor only).
const nftablesSince = 33

// HasNFTablesMode reports whether implementation impl runs in nftables
// mode, and in iptables mode: a release from v1.33 on.
func HasNFTablesMode(impl string) bool {
	return impl != ImplementationKpsim && releaseMinor(impl) >= nftablesSince
}

// Priced names what a cost profile prices the proxier's own work under
// (sim.Profile.Releases): its implementation, with " nftables" or
// " iptables" in those modes, whose syncs are other code than IPVS mode's.
func (cfg Config) Priced() string {
	if cfg.Mode != ModeIPVS && cfg.Mode != "" {
		return cfg.Implementation + " " + string(cfg.Mode)
	}
	return cfg.Implementation
}

// kubeProxyVersion is a release's module version: v1.37.1, v1.35.0-rc.1.
var kubeProxyVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)

// releaseMinor is the minor version of a kube-proxy release named as
// Implementation names it (37 for kube-proxy@v1.37.1), or -1.
func releaseMinor(impl string) int {
	v, ok := strings.CutPrefix(impl, KubeProxyImplementation("v1."))
	if !ok {
		return -1
	}
	minor, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(minor)
	if err != nil {
		return -1
	}
	return n
}

// Defaults returns cfg with kube-proxy's defaults filled in where unset.
func (cfg Config) Defaults() Config {
	if cfg.Implementation == "" {
		cfg.Implementation = ImplementationKpsim
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeIPVS
	}
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
	// it is copied into every record.Sync.
	Index int
	// OnSync receives every sync's record, from the proxier's sync goroutine.
	OnSync func(record.Sync)
	// Churn, shared across families and restarts, counts deleted-then-re-added kernel objects.
	Churn *dataplane.Churn
	// Metrics, shared across families and restarts; nil disables metrics.
	Metrics *Metrics
	// Clock drives the sync runner, graceful termination and timestamps;
	// nil means the real clock. Tests inject a fake one.
	Clock clock.WithTicker
	// Stepper, when set, steps the proxier through modeled time (kpsim's
	// sim on a modeled clock); nil means free-running, as kube-proxy runs.
	Stepper dataplane.Stepper
	// Handlers, when set, wraps each informer event handler before it is
	// registered (kind is "Service", "EndpointSlice" or "Node"): the replay
	// uses it to count events, and to make handlers lag behind the
	// informers' stores as they did in the incident.
	Handlers func(kind string, h cache.ResourceEventHandler) cache.ResourceEventHandler
}

// FieldError is one invalid field of a Config, named as in YAML and JSON
// (families[1], syncPeriod), so a scenario can place it at its file and line.
type FieldError struct {
	Field string
	Msg   string
}

func (e FieldError) Error() string { return e.Field + ": " + e.Msg }

// ConfigErrors are every invalid field of a Config, in field order.
type ConfigErrors []FieldError

func (es ConfigErrors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

// Validate reports every invalid field of a defaulted Config; the error is
// a ConfigErrors. This is the one place a proxier configuration is checked,
// whether it comes from a scenario, --set or code.
func (cfg Config) Validate() error {
	var errs ConfigErrors
	bad := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: field, Msg: fmt.Sprintf(format, a...)})
	}
	if v, ok := strings.CutPrefix(cfg.Implementation, KubeProxyImplementation("")); cfg.Implementation != ImplementationKpsim && (!ok || !kubeProxyVersion.MatchString(v)) {
		bad("implementation", "%q is not %s or kube-proxy@VERSION (a release, e.g. kube-proxy@v1.37.1)", cfg.Implementation, ImplementationKpsim)
	}
	switch {
	case cfg.Mode != ModeIPVS && cfg.Mode != ModeNFTables && cfg.Mode != ModeIPTables:
		bad("mode", "%q is not %s, %s or %s", cfg.Mode, ModeIPVS, ModeNFTables, ModeIPTables)
	case cfg.Mode != ModeIPVS && cfg.Implementation == ImplementationKpsim:
		bad("mode", "kpsim's own proxier is an IPVS proxier; %s mode runs a kube-proxy release (implementation: kube-proxy@v1.37.1)", cfg.Mode)
	case cfg.Mode == ModeNFTables && !HasNFTablesMode(cfg.Implementation):
		bad("mode", "%s has nftables mode only behind a feature gate (GA in v1.%d): kpsim runs nftables mode from kube-proxy v1.%d", cfg.Implementation, nftablesSince, nftablesSince)
	case cfg.Mode == ModeIPTables && !HasNFTablesMode(cfg.Implementation):
		bad("mode", "kpsim runs iptables mode from kube-proxy v1.%d (%s runs in IPVS mode)", nftablesSince, cfg.Implementation)
	}
	if cfg.NodeName == "" {
		bad("nodeName", "must not be empty")
	}
	if len(cfg.Families) == 0 || len(cfg.Families) > 2 {
		bad("families", "want one or two IP families, got %d", len(cfg.Families))
	}
	for i, f := range cfg.Families {
		switch {
		case f != dataplane.IPv4 && f != dataplane.IPv6:
			bad(fmt.Sprintf("families[%d]", i), "%q is not IPv4 or IPv6", f)
		case slices.Index(cfg.Families, f) != i:
			bad(fmt.Sprintf("families[%d]", i), "%s listed twice", f)
		}
	}
	switch cfg.InitialSync {
	case InitialSyncHandlers, InitialSyncLegacy:
	default:
		bad("initialSync", "%q is not one of %s, %s", cfg.InitialSync, InitialSyncHandlers, InitialSyncLegacy)
	}
	switch {
	case cfg.MinSyncPeriod < 0:
		bad("minSyncPeriod", "must not be negative")
	case cfg.SyncPeriod <= 0:
		bad("syncPeriod", "must be > 0")
	case cfg.SyncPeriod < cfg.MinSyncPeriod:
		bad("minSyncPeriod", "%s is longer than syncPeriod %s", cfg.MinSyncPeriod, cfg.SyncPeriod)
	}
	if !slices.Contains(dataplane.Schedulers, cfg.Scheduler) {
		bad("scheduler", "%q is not one of %s", cfg.Scheduler, strings.Join(dataplane.Schedulers, ", "))
	}
	cidrs := func(field string, list []string, onePerFamily bool) {
		seen := map[dataplane.Family]bool{}
		for i, c := range list {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				bad(fmt.Sprintf("%s[%d]", field, i), "not a CIDR: %q", c)
				continue
			}
			f := dataplane.FamilyOf(p.Addr())
			if onePerFamily && seen[f] {
				bad(fmt.Sprintf("%s[%d]", field, i), "a second %s CIDR; give one per family", f)
			}
			seen[f] = true
		}
	}
	cidrs("nodePortAddresses", cfg.NodePortAddresses, false)
	cidrs("clusterCIDRs", cfg.ClusterCIDRs, true)
	cidrs("excludeCIDRs", cfg.ExcludeCIDRs, false)
	if cfg.GracefulTerminationRetry <= 0 {
		bad("gracefulTerminationRetry", "must be > 0")
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}
