package scenarios

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/sim"
)

// Limits on generated clusters and timelines. They keep a typo from asking
// for a run that cannot fit in memory or time, not the proxier's limits.
// How many services and endpoints a cluster holds follows from its CIDRs
// and node port range (cluster_sizes.go).
const (
	maxPortsPerService     = 16
	maxEndpointsPerService = 1000 // the API's limit per EndpointSlice: the generator gives a service one slice per family
	maxNodes               = 5000
	maxNamespaces          = 10_000
	maxProbeTargets        = 256
	minProbeInterval       = 10 * time.Millisecond
	defaultProbeInterval   = 100 * time.Millisecond
	maxRepeatTimes         = 1000
	maxExpandedSteps       = 100_000
	maxWatchDelay          = 5 * time.Minute
	minMemoryLimit         = 64 << 20 // bytes: a smoke run's heap
	defaultWaitTimeout     = 5 * time.Minute

	defaultStopAfterFailedSyncs = 5
)

// fromFileExcludes are the cluster fields that generate services, which a
// cluster loaded from a file does not take: the file says what is there.
var fromFileExcludes = []string{"services", "kubeDNS", "apiServer"}

// ProbeKinds are the address kinds a probe target can have.
var ProbeKinds = []string{"clusterip", "nodeport", "external", "loadbalancer"}

// defaults fills what the scenario left out. present says whether the file
// (or an override) gave a value, for fields where zero is a valid choice.
func (s *Scenario) defaults(present func(string) bool) {
	if s.Backend == "" {
		s.Backend = dataplane.BackendSim
	}
	if s.Sim.Profile == "" {
		s.Sim.Profile = sim.DefaultProfile
	}
	if !present("stopAfterFailedSyncs") {
		s.StopAfterFailedSyncs = defaultStopAfterFailedSyncs
	}
	c := &s.Cluster
	if len(s.Proxier.Families) == 0 {
		s.Proxier.Families = []dataplane.Family{dataplane.IPv4}
		if c.DualStack > 0 {
			s.Proxier.Families = append(s.Proxier.Families, dataplane.IPv6)
		}
	}
	// With fromFile these still shape the services addServices generates.
	if !present("cluster.portsPerService") {
		c.PortsPerService = Fixed(1)
	}
	if !present("cluster.endpointsPerService") {
		c.EndpointsPerService = Fixed(2)
	}
	if !present("cluster.namespaces") {
		c.Namespaces = 1
	}
	if !present("cluster.nodes") {
		c.Nodes = 20 // the incident's cluster size
	}
	if len(c.ServiceCIDRs) == 0 {
		c.ServiceCIDRs = []string{"10.96.0.0/12", "fd00:10:96::/108"}
	}
	podCIDRsGiven := len(c.PodCIDRs) > 0
	if !podCIDRsGiven {
		c.PodCIDRs = []string{defaultPodCIDR4.String(), "fd00:10:244::/64"}
	}
	if len(c.ExternalCIDRs) == 0 {
		c.ExternalCIDRs = []string{"198.18.0.0/15", "fd00:198:18::/108"}
	}
	if c.Node.Name == "" {
		c.Node.Name = "node-1"
	}
	if len(c.Node.Addresses) == 0 {
		for _, f := range s.Proxier.Families {
			if p, ok := dataplane.DefaultNodeAddresses[dataplane.Family(f)]; ok {
				c.Node.Addresses = append(c.Node.Addresses, p.String())
			}
		}
	}
	s.defaultSections()
	s.sizeDefaults(podCIDRsGiven)

	if s.Probes.Interval == 0 {
		s.Probes.Interval = Duration(defaultProbeInterval)
	}
	if len(s.Probes.Kinds) == 0 {
		s.Probes.Kinds = []string{"clusterip"}
	}
	if len(s.Probes.From) == 0 {
		s.Probes.From = []string{record.FromPod}
	}
	// Only an absent timeout gets the default: a zero one is an error.
	walkSteps(s.Timeline, "timeline", func(st *Step, path string) {
		if st.WaitSynced != nil && !present(path+".waitSynced.timeout") {
			st.WaitSynced.Timeout = Duration(defaultWaitTimeout)
		}
	})
}

// refuseZeros refuses an explicit zero for the settings whose defaults take
// zero for "not given": let through, it would run with the default and say
// nothing (syncPeriod 0 ran with 30s). It runs before the defaults, which
// cannot tell the two apart. Zeros with a meaning (stopAfterFailedSyncs,
// sim.timeScale, a rate) are not listed.
func (s *Scenario) refuseZeros(v *validator) {
	def := proxier.Config{}.Defaults()
	for _, z := range []struct {
		path  string
		zero  bool
		want  string
		def   time.Duration
		extra string
	}{
		// kube-proxy gives --ipvs-min-sync-period=0 a meaning, a sync on
		// every change, but proxier.Config cannot hold it: its zero is
		// "not given", filled with 1s wherever the proxier starts.
		{"proxier.minSyncPeriod", s.Proxier.MinSyncPeriod == 0, "must be > 0", def.MinSyncPeriod,
			"; kube-proxy's 0, a sync on every change, is not available: 1ms comes closest"},
		{"proxier.syncPeriod", s.Proxier.SyncPeriod == 0, "must be > 0", def.SyncPeriod, ""},
		{"proxier.gracefulTerminationRetry", s.Proxier.GracefulTerminationRetry == 0, "must be > 0", def.GracefulTerminationRetry, ""},
		{"probes.interval", s.Probes.Interval == 0, "must be at least " + minProbeInterval.String(), defaultProbeInterval, ""},
	} {
		if z.zero && v.d.present(z.path) {
			v.errf(z.path, "%s (default %s)%s", z.want, z.def, z.extra)
		}
	}
}

// defaultSections fills kube-proxy's defaults into the proxier section, as
// proxier.Run would, so that the scenario as run shows them (its node stays
// cluster.node's), and the dataplane's.
func (s *Scenario) defaultSections() {
	s.Proxier = s.Proxier.Defaults()
	s.Proxier.NodeName = ""
	if s.Dataplane.IPSet == "" {
		s.Dataplane.IPSet = dataplane.DefaultIPSetStrategy
		if upstream(s.Proxier.Implementation) {
			s.Dataplane.IPSet = dataplane.IPSetExec // what a release does: one ipset process per entry
		}
	}
}

// validateSections checks the proxier section with the proxier's own
// Validate, placing each problem at its field's line, and the dataplane's.
func (s *Scenario) validateSections(v *validator) {
	var ce proxier.ConfigErrors
	if errors.As(s.proxierConfig().Validate(), &ce) {
		for _, e := range ce {
			if e.Field != "nodeName" { // cluster.node.name is checked with the cluster
				v.errf("proxier."+e.Field, "%s", e.Msg)
			}
		}
	}
	if impl := s.Proxier.Implementation; upstream(impl) {
		if s.Backend == dataplane.BackendSim && s.Dataplane.IPSet != dataplane.IPSetExec {
			s.warnings = append(s.warnings, fmt.Sprintf("dataplane.ipset: %s writes ipsets one `ipset add|del` process per entry, which the sim prices as %s (the default for a release); %s prices them as batches it does not make",
				impl, dataplane.IPSetExec, s.Dataplane.IPSet))
		}
		for _, own := range []string{"initialSync", "gracefulTerminationRetry"} {
			if v.d.present("proxier." + own) {
				s.warnings = append(s.warnings, fmt.Sprintf("proxier.%s is a setting of kpsim's proxier: %s does what its own code does", own, impl))
			}
		}
	}
	var strategies []string
	for _, st := range dataplane.IPSetStrategies {
		strategies = append(strategies, string(st))
	}
	v.oneOf("dataplane.ipset", string(s.Dataplane.IPSet), strategies)
}

// walkSteps calls f with every step, repeats' steps included, and its path.
func walkSteps(steps []Step, path string, f func(st *Step, path string)) {
	for i := range steps {
		p := fmt.Sprintf("%s[%d]", path, i)
		f(&steps[i], p)
		if r := steps[i].Repeat; r != nil {
			walkSteps(r.Steps, p+".repeat.steps", f)
		}
	}
}

// validator collects errors by field path; the decoder locates them.
type validator struct {
	d    *decoder
	errs Errors
}

func (v *validator) errf(path, format string, a ...any) {
	v.errs = append(v.errs, v.d.errPath(path, format, a...))
}

// errfFrom is errf for a problem that follows from other fields' values
// too (see decoder.errFrom).
func (v *validator) errfFrom(deps []string, path, format string, a ...any) {
	v.errs = append(v.errs, v.d.errFrom(deps, path, format, a...))
}

func (v *validator) share(path string, x float64) {
	if x < 0 || x > 1 {
		v.errf(path, "must be a share between 0 and 1, got %v", x)
	}
}

func (v *validator) intRange(path string, x, lo, hi int) {
	if x < lo || x > hi {
		v.errf(path, "must be between %d and %d, got %d", lo, hi, x)
	}
}

// perServiceRange checks every number a per-service count can take.
func (v *validator) perServiceRange(path string, p PerService, lo, hi int) {
	for _, x := range p.Values {
		v.intRange(path, x, lo, hi)
	}
}

func (v *validator) oneOf(path, x string, allowed []string) {
	if !slices.Contains(allowed, x) {
		v.errf(path, "%s is not one of %s", quote(x), strings.Join(allowed, ", "))
	}
}

// cidrs checks a per-family CIDR list: parseable, at most one per family, and
// one for each family in need. It returns them by family.
func (v *validator) cidrs(path string, list []string, need []dataplane.Family) map[dataplane.Family]netip.Prefix {
	out := map[dataplane.Family]netip.Prefix{}
	for i, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			v.errf(fmt.Sprintf("%s[%d]", path, i), "not a CIDR: %q", s)
			continue
		}
		f := dataplane.FamilyOf(p.Addr())
		if _, dup := out[f]; dup {
			v.errf(fmt.Sprintf("%s[%d]", path, i), "a second %s CIDR; give one per family", f)
			continue
		}
		out[f] = p.Masked()
	}
	for _, f := range need {
		if _, ok := out[f]; !ok && len(list) > 0 {
			v.errf(path, "needs an %s CIDR (the proxier runs %s)", f, f)
		}
	}
	return out
}

func (s *Scenario) validate(v *validator) {
	if strings.TrimSpace(s.Name) == "" {
		v.errf("name", "required")
	}
	if strings.TrimSpace(s.Description) == "" {
		v.errf("description", "required: say what question the scenario answers")
	}
	v.oneOf("backend", s.Backend, dataplane.Backends)
	if profile, err := sim.LoadProfile(s.Sim.Profile); err != nil {
		v.errf("sim.profile", "%v", err)
	} else if s.Backend == dataplane.BackendSim {
		for _, m := range s.Modes() {
			if !profile.PricesAny(modeOps[m]...) {
				v.errf("sim.profile", "cost profile %s prices none of %s mode's operations (%s): its syncs would take no modeled time; use a profile that prices them (%s) or calibrate this kernel's (sudo kpsim calibrate -o FILE)",
					profile.Name, m, opNames(modeOps[m]), strings.Join(profilesPricing(modeOps[m]), ", "))
			}
		}
	}
	if s.Sim.TimeScale < 0 || s.Sim.TimeScale > 1 {
		v.errf("sim.timeScale", "must be between 0 (no waiting) and 1 (real time), got %v", s.Sim.TimeScale)
	}
	if s.StopAfterFailedSyncs < 0 {
		v.errf("stopAfterFailedSyncs", "must not be negative (0: never stop)")
	}
	if s.MemoryLimit != "" {
		if q, err := resource.ParseQuantity(s.MemoryLimit); err != nil {
			v.errf("memoryLimit", "%q is not a quantity of bytes (e.g. 1200Mi, 2Gi)", s.MemoryLimit)
		} else if q.Value() < minMemoryLimit {
			v.errf("memoryLimit", "%s is less than %dMi: the collector would run without pause", s.MemoryLimit, minMemoryLimit>>20)
		}
	}

	// The proxier section is checked by the proxier package, once; its
	// node is cluster.node.
	var fams []dataplane.Family
	for _, f := range s.Proxier.Families {
		if (f == dataplane.IPv4 || f == dataplane.IPv6) && !slices.Contains(fams, f) {
			fams = append(fams, f)
		}
	}
	s.validateSections(v)
	s.Cluster.validate(v, fams)
	s.Probes.validate(v, &s.Cluster)
	s.validateTimeline(v)
	if len(v.errs) == 0 {
		s.validateSizes(v)
	}
}

func (c *Cluster) validate(v *validator, fams []dataplane.Family) {
	if c.FromFile != "" {
		for _, k := range fromFileExcludes {
			if v.d.present("cluster." + k) {
				v.errf("cluster."+k, "not allowed with cluster.fromFile: the file says what the cluster is")
			}
		}
	}
	if c.Services < 0 {
		v.errf("cluster.services", "must not be negative, got %d", c.Services)
	}
	v.share("cluster.types.nodePort", c.Types.NodePort)
	v.share("cluster.types.loadBalancer", c.Types.LoadBalancer)
	v.share("cluster.types.externalIPs", c.Types.ExternalIPs)
	if sum := c.Types.NodePort + c.Types.LoadBalancer + c.Types.ExternalIPs; sum > 1+1e-9 {
		v.errf("cluster.types", "shares add up to %v, more than 1", sum)
	}
	v.perServiceRange("cluster.portsPerService", c.PortsPerService, 1, maxPortsPerService)
	v.perServiceRange("cluster.endpointsPerService", c.EndpointsPerService, 0, maxEndpointsPerService)
	v.intRange("cluster.namespaces", c.Namespaces, 1, maxNamespaces)
	v.intRange("cluster.nodes", c.Nodes, 1, maxNodes)
	v.share("cluster.dualStack", c.DualStack)
	v.share("cluster.udp", c.UDP)
	v.share("cluster.sctp", c.SCTP)
	if c.UDP+c.SCTP > 1+1e-9 {
		v.errf("cluster.sctp", "udp and sctp shares add up to %v, more than 1", c.UDP+c.SCTP)
	}
	v.share("cluster.sessionAffinity", c.SessionAffinity)
	v.share("cluster.externalTrafficPolicyLocal", c.ExternalTrafficPolicyLocal)
	if c.DualStack > 0 && len(fams) < 2 {
		v.errf("cluster.dualStack", "dual-stack services need proxier.families [IPv4, IPv6]")
	}
	v.cidrs("cluster.serviceCIDRs", c.ServiceCIDRs, fams)
	v.cidrs("cluster.podCIDRs", c.PodCIDRs, fams)
	v.cidrs("cluster.externalCIDRs", c.ExternalCIDRs, fams)
	if strings.TrimSpace(c.Node.Name) == "" {
		v.errf("cluster.node.name", "must not be empty")
	}
	have := map[dataplane.Family]bool{}
	for i, a := range c.Node.Addresses {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			v.errf(fmt.Sprintf("cluster.node.addresses[%d]", i), "must be an address with its prefix length, e.g. 192.168.0.10/24: %q", a)
			continue
		}
		have[dataplane.FamilyOf(p.Addr())] = true
	}
	for _, f := range fams {
		if !have[f] && len(c.Node.Addresses) > 0 {
			v.errf("cluster.node.addresses", "needs an %s address (the proxier runs %s)", f, f)
		}
	}
}

func (p *Probes) validate(v *validator, c *Cluster) {
	if p.Interval.D() < minProbeInterval {
		v.errf("probes.interval", "must be at least %s", minProbeInterval)
	}
	validateSelector(v, "probes.services", p.Services, maxProbeTargets)
	for i, k := range p.Kinds {
		v.oneOf(fmt.Sprintf("probes.kinds[%d]", i), k, ProbeKinds)
	}
	for i, f := range p.From {
		v.oneOf(fmt.Sprintf("probes.from[%d]", i), f, ProbeFroms)
	}
}

func validateSelector(v *validator, path string, s Selector, maxCount int) {
	v.intRange(path, s.Count, 0, maxCount)
	for i, n := range s.Names {
		ns, name, ok := strings.Cut(n, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			v.errf(fmt.Sprintf("%s[%d]", path, i), "must be namespace/name, got %s", quote(n))
		}
	}
}

// validateTimeline checks each step and the order of steps: the cluster is
// created once, the proxier is started before it is restarted, probes are
// configured before they are switched on.
func (s *Scenario) validateTimeline(v *validator) {
	if len(s.Timeline) == 0 {
		v.errf("timeline", "required: at least one step")
		return
	}
	st := timelineState{started: true}
	for _, step := range s.Timeline {
		if step.StartProxier != nil {
			st.started = false // it starts at that step, not before the timeline
		}
	}
	st.expanded = s.checkSteps(v, s.Timeline, "timeline", &st, 1)
	if st.expanded > maxExpandedSteps {
		v.errf("timeline", "expands to %d steps with its repeats, more than %d", st.expanded, maxExpandedSteps)
		return
	}
	if s.Question != "" {
		var kinds, labels []string
		expandSteps(s.Timeline, func(st *Step) {
			kinds = append(kinds, st.resultKind())
			labels = append(labels, st.String())
		})
		if names := results.SegmentNames(kinds, labels); !slices.Contains(names, s.Question) {
			v.errf("question", "%q is not a segment of the timeline, which has %s", s.Question, strings.Join(names, ", "))
		}
	}
}

// expandSteps calls fn for each step the timeline runs, in order, with
// repeats expanded, as the run records them.
func expandSteps(steps []Step, fn func(*Step)) {
	for i := range steps {
		if r := steps[i].Repeat; r != nil {
			for range r.Times {
				expandSteps(r.Steps, fn)
			}
			continue
		}
		fn(&steps[i])
	}
}

// modeOps are the operations every sync of a proxy mode issues: a cost
// profile that prices none of them models that mode's syncs as free.
var modeOps = map[proxier.Mode][]dataplane.Op{
	proxier.ModeIPVS:     {dataplane.OpIPVSServiceAdd, dataplane.OpIPVSList, dataplane.OpIPTablesRestore},
	proxier.ModeNFTables: {dataplane.OpNFTTransaction, dataplane.OpNFTCommand},
	proxier.ModeIPTables: {dataplane.OpIPTablesRestore},
}

func opNames(ops []dataplane.Op) string {
	names := make([]string, len(ops))
	for i, op := range ops {
		names[i] = op.String()
	}
	return strings.Join(names, ", ")
}

// profilesPricing names the shipped profiles that price any of ops.
func profilesPricing(ops []dataplane.Op) []string {
	var out []string
	for _, name := range sim.ProfileNames() {
		if p, err := sim.LoadProfile(name); err == nil && p.PricesAny(ops...) {
			out = append(out, name)
		}
	}
	return out
}

// Repeats reports whether a run of the scenario repeats exactly, seed for
// seed: kpsim's own proxier on the modeled clock. A kube-proxy release
// iterates Go maps, whose order Go randomizes in every run, and the wall
// clock never repeats: their runs are samples, to be run several times.
func (s *Scenario) Repeats() bool {
	return s.modeledClock() && s.Proxier.Implementation == proxier.ImplementationKpsim
}

// modeledClock reports whether the scenario runs on the modeled clock:
// on the sim, at a time scale the sim keeps a modeled clock at, with a
// timeline that allows it.
func (s *Scenario) modeledClock() bool {
	return s.Backend == dataplane.BackendSim && sim.ModeledAt(s.Sim.TimeScale) && s.timelineModeled()
}

// timelineModeled reports whether the timeline lets a run go on the
// modeled clock: not when an API fault is on it, which delays and relists
// in wall time, outside the replay's control.
func (s *Scenario) timelineModeled() bool {
	return !hasStep(s.Timeline, func(st *Step) bool { return st.APIFault != nil })
}

// warnSetSizes warns when the cluster needs more KUBE-CLUSTER-IP entries
// (one per service port with a ClusterIP of the family) than an ipset holds
// by default. kube-proxy creates its sets with that default, so this is a
// finding about kube-proxy on such a cluster, not an error in the scenario:
// the run shows what happens (the entries past it are not programmed). Only
// IPVS mode keeps ipsets: a run that never runs it gets no warning.
func (s *Scenario) warnSetSizes() {
	ipvs := s.Proxier.Defaults().Mode == proxier.ModeIPVS
	walkSteps(s.Timeline, "timeline", func(st *Step, _ string) {
		for _, a := range []*StartProxier{st.StartProxier, (*StartProxier)(st.RestartProxier)} {
			ipvs = ipvs || a != nil && a.Mode == proxier.ModeIPVS
		}
	})
	if !ipvs {
		return
	}
	entries := map[dataplane.Family]int{}
	for _, svc := range s.set.Services {
		for _, ip := range svc.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				entries[dataplane.FamilyOf(a)] += len(svc.Spec.Ports)
			}
		}
	}
	added := 0
	walkSteps(s.Timeline, "timeline", func(st *Step, _ string) {
		if st.AddServices != nil {
			added += int(float64(st.AddServices.Count) * s.Cluster.PortsPerService.Mean())
		}
	})
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		n := entries[f]
		if f == s.Proxier.Families[0] {
			n += added // generated services take the first family (dual-stack ones both: a lower bound)
		}
		if n > dataplane.DefaultMaxElem {
			s.warnings = append(s.warnings, fmt.Sprintf(
				"cluster: %s needs %d entries (one per service port), more than an ipset holds by default (maxelem %d). "+
					"Real kube-proxy creates its sets with that default, so on this cluster it logs each entry past it (\"set is full\") and goes on without them, "+
					"and so will this run (its summary's \"ipsets full\" line counts them): a finding about kube-proxy, not an error in the scenario",
				proxier.SetName("KUBE-CLUSTER-IP", f), n, dataplane.DefaultMaxElem))
		}
	}
}
