package scenarios

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kpsim/kpsim/dataplane"
)

// What a generated cluster can hold follows from the pools the generator
// allocates from: the service, pod and external CIDRs and the node port
// range. cluster_sizes.go works out, from the scenario alone and before anything is
// built, how much of each the cluster and its timeline take, grows the
// defaults to fit, and refuses what does not fit, naming the key that moves
// the limit: 17,117 services built to learn the node ports ran out helped
// nobody.

const (
	// The default node port range, kube-apiserver's
	// --service-node-port-range.
	defaultNodePortMin = 30000
	defaultNodePortMax = 32767
	maxPort            = 65535

	// drawSigmas bounds a count the seed draws (how many services are
	// NodePort, dual-stack, ...): the mean plus this many standard
	// deviations, a bound one scenario in ~30,000 exceeds, which the
	// build then reports.
	drawSigmas = 4
)

// defaultPodCIDR4 is the IPv4 pod CIDR when the scenario gives none (kind's
// and kubeadm's examples); a cluster with more endpoints than it holds
// gets a larger prefix around it (growPodCIDR).
var defaultPodCIDR4 = netip.MustParsePrefix("10.244.0.0/16")

// drawn bounds how many of n services a share p of them turns out to be.
// The generator draws each service's type, families and traffic policy
// from the seed, so the count is known only once built.
func drawn(n, p float64) float64 {
	p = min(max(p, 0), 1)
	if n <= 0 || p == 0 {
		return 0
	}
	return min(n, math.Ceil(n*p+drawSigmas*math.Sqrt(n*p*(1-p))))
}

// demand is what a scenario's cluster and timeline take from the pools,
// upper bounds by family. Counts are floats: they come from unvalidated
// input (defaults grow before validation) and must not overflow.
type demand struct {
	services  float64 // generated: the cluster's and addServices'
	added     float64 // of those, addServices'
	endpoints float64 // of those services, as generated
	churn     float64 // endpoints that churnEndpoints visits add
	svcIPs    map[dataplane.Family]float64
	podIPs    map[dataplane.Family]float64
	extIPs    map[dataplane.Family]float64
	nodePorts float64
}

// demand works out what the scenario takes from the generator's pools. A
// cluster from a file brings its own addresses (reserved when loaded); only
// what the timeline adds to it is counted.
func (s *Scenario) demand() demand {
	c := &s.Cluster
	d := demand{svcIPs: map[dataplane.Family]float64{}, podIPs: map[dataplane.Family]float64{}, extIPs: map[dataplane.Family]float64{}}
	if c.FromFile == "" {
		d.services = float64(max(c.Services, 0))
	}
	timelineDemand(s.Timeline, 1, &d)
	d.endpoints = c.EndpointsPerService.Bound(d.services)
	if len(s.Proxier.Families) == 0 {
		return d
	}
	// The well-known services take the first family's addresses (cluster.go).
	var wkSvcs, wkEps float64
	if c.FromFile == "" && c.APIServer {
		wkSvcs, wkEps = wkSvcs+1, wkEps+3
	}
	if c.FromFile == "" && c.KubeDNS {
		wkSvcs, wkEps = wkSvcs+1, wkEps+float64(kubeDNSEndpoints(c))
	}
	external := c.Types.LoadBalancer + c.Types.ExternalIPs
	first := s.Proxier.Families[0]
	d.svcIPs[first] = d.services + wkSvcs
	d.podIPs[first] = d.endpoints + wkEps + d.churn
	d.extIPs[first] = drawn(d.services, external)
	if len(s.Proxier.Families) > 1 && c.DualStack > 0 {
		second, dual := s.Proxier.Families[1], drawn(d.services, c.DualStack)
		d.svcIPs[second] = dual
		d.podIPs[second] = c.EndpointsPerService.Bound(dual) + d.churn
		d.extIPs[second] = drawn(d.services, external*c.DualStack)
	}
	d.nodePorts = nodePortsFor(c, d.services)
	return d
}

// what says where the services come from, for messages.
func (d demand) what() string {
	if d.added == 0 {
		return nServices(int(d.services))
	}
	return fmt.Sprintf("%s (%.0f of them from addServices steps)", nServices(int(d.services)), d.added)
}

// nodePortsFor bounds the node ports n generated services take: one per
// port of each NodePort and LoadBalancer service, and a health check port
// for each LoadBalancer service with externalTrafficPolicy Local.
func nodePortsFor(c *Cluster, n float64) float64 {
	return c.PortsPerService.Bound(drawn(n, c.Types.NodePort+c.Types.LoadBalancer)) +
		drawn(n, c.Types.LoadBalancer*c.ExternalTrafficPolicyLocal)
}

// timelineDemand adds what the steps generate, repeats multiplied rather
// than expanded (a repeat's times are not validated yet).
func timelineDemand(steps []Step, mult float64, d *demand) {
	for i := range steps {
		st := &steps[i]
		switch {
		case st.AddServices != nil:
			d.added += mult * float64(max(st.AddServices.Count, 0))
			d.services += mult * float64(max(st.AddServices.Count, 0))
		case st.ChurnEndpoints != nil:
			// pace visits at i/rate for i/rate < duration; each visit adds
			// one endpoint to each of the service's slices.
			if ch := st.ChurnEndpoints; ch.Rate > 0 && ch.Duration > 0 {
				d.churn += mult * math.Ceil(ch.Rate*ch.Duration.D().Seconds())
			}
		case st.Repeat != nil:
			timelineDemand(st.Repeat.Steps, mult*float64(max(st.Repeat.Times, 0)), d)
		}
	}
}

// hostAddrs is how many addresses the generator hands out of p: all but the
// network address and, for IPv4, the broadcast address (ipAlloc).
func hostAddrs(p netip.Prefix) float64 {
	n := math.Ldexp(1, p.Addr().BitLen()-p.Bits()) - 1
	if p.Addr().Is4() {
		n--
	}
	return max(n, 0)
}

// podAddrs is how many endpoints a pod CIDR holds: one address, the last
// but one, is the probing pod's (Cluster.ProbeClients).
func podAddrs(p netip.Prefix) float64 { return max(hostAddrs(p)-1, 0) }

// prefixFor is the longest prefix length of the family whose CIDR holds
// need addresses, given what holds says a prefix holds.
func prefixFor(f dataplane.Family, need float64, holds func(netip.Prefix) float64) int {
	addr := netip.IPv4Unspecified()
	if f == dataplane.IPv6 {
		addr = netip.IPv6Unspecified()
	}
	bits := addr.BitLen()
	for bits > 0 && holds(netip.PrefixFrom(addr, bits)) < need {
		bits--
	}
	return bits
}

// growPodCIDR returns the default IPv4 pod CIDR for a cluster that needs
// need pod addresses: 10.244.0.0/16, or the smallest prefix around it that
// holds them, overlaps none of the cluster's other CIDRs and stays in the
// private 10.0.0.0/8 (with the default CIDRs, up to 10.128.0.0/9: 8,388,605
// endpoints). When none does, the largest that qualifies, and validation
// says so.
func growPodCIDR(need float64, others []netip.Prefix) netip.Prefix {
	best := defaultPodCIDR4
	for bits := defaultPodCIDR4.Bits(); bits >= 8; bits-- {
		p, _ := defaultPodCIDR4.Addr().Prefix(bits)
		for _, o := range others {
			if o.Overlaps(p) {
				return best
			}
		}
		best = p
		if podAddrs(p) >= need {
			break
		}
	}
	return best
}

// nodePortRange is a parsed cluster.nodePortRange, "30000-32767".
type nodePortRange struct{ lo, hi int }

func (r nodePortRange) size() int      { return r.hi - r.lo + 1 }
func (r nodePortRange) String() string { return fmt.Sprintf("%d-%d", r.lo, r.hi) }

func parseNodePortRange(s string) (nodePortRange, error) {
	lo, hi, ok := strings.Cut(s, "-")
	a, errA := strconv.Atoi(strings.TrimSpace(lo))
	b, errB := strconv.Atoi(strings.TrimSpace(hi))
	if !ok || errA != nil || errB != nil || a < 1 || b > maxPort || a > b {
		return nodePortRange{}, fmt.Errorf("want a port range such as %d-%d, within 1-%d, got %q", defaultNodePortMin, defaultNodePortMax, maxPort, s)
	}
	return nodePortRange{a, b}, nil
}

// growNodePortRange returns the default node port range for a cluster that
// needs need node ports: kube-apiserver's default, 30000-32767, or one
// reaching as far above it as needed, up to 65535, as a cluster with that
// many NodePorts must configure its API server. It stays above 30000:
// below lie well-known ports and the node's own services.
func growNodePortRange(need float64) nodePortRange {
	r := nodePortRange{defaultNodePortMin, defaultNodePortMax}
	if need > float64(r.size()) {
		r.hi = int(min(float64(maxPort), float64(r.lo)+need-1))
	}
	return r
}

// sizeDefaults fills the pools the scenario leaves out, sized for what its
// cluster and timeline take: the IPv4 pod CIDR and the node port range
// grow from Kubernetes' defaults. It runs after the other defaults.
func (s *Scenario) sizeDefaults(podCIDRsGiven bool) {
	c := &s.Cluster
	d := s.demand()
	if !podCIDRsGiven {
		var others []netip.Prefix
		for _, cidr := range append(append([]string{}, c.ServiceCIDRs...), c.ExternalCIDRs...) {
			if p, err := netip.ParsePrefix(cidr); err == nil {
				others = append(others, p.Masked())
			}
		}
		for i, cidr := range c.PodCIDRs {
			if cidr == defaultPodCIDR4.String() {
				c.PodCIDRs[i] = growPodCIDR(d.podIPs[dataplane.IPv4], others).String()
			}
		}
	}
	if c.NodePortRange == "" {
		c.NodePortRange = growNodePortRange(d.nodePorts).String()
	}
}

// Memory caps: no address space bounds a cluster with IPv6 CIDRs, or with
// IPv4 ones larger than the defaults, yet kpsim holds every service and
// endpoint several times over (the generator's objects, the fake API's
// store, the informers' caches, the proxier's maps): about 27 KiB a service
// and 2.5 KiB an endpoint at peak, measured on the sim (100,000 services of
// 3 endpoints: 3.4 GiB; 5,000 of 50: 0.8 GiB). Each cap is about 25 GiB:
// they keep a typo from asking for more than a large machine has, and are
// kpsim's, not Kubernetes' or kube-proxy's.
const (
	memoryMaxServices  = 1_000_000
	memoryMaxEndpoints = 10_000_000
)

// validateSizes checks that the cluster and timeline fit the pools and the
// memory caps. It runs once everything else is valid: from an out-of-range
// share or a bad CIDR no size follows.
func (s *Scenario) validateSizes(v *validator) {
	c := &s.Cluster
	d := s.demand()
	// What a pool must hold follows from the whole cluster and what the
	// timeline adds to it: an error at one field names the overrides of
	// the others.
	errf := func(path, format string, a ...any) {
		v.errfFrom(append([]string{"timeline"}, clusterFrom...), path, format, a...)
	}
	if d.services > memoryMaxServices {
		errf("cluster.services", "%s is more than kpsim's memory cap of %d "+
			"(kpsim holds every object several times over; a cap of kpsim's, not of Kubernetes): lower cluster.services or the addServices counts",
			d.what(), memoryMaxServices)
		return
	}
	if d.endpoints > memoryMaxEndpoints {
		errf("cluster.endpointsPerService", "%s x %s is %.0f endpoints, more than kpsim's memory cap of %d "+
			"(kpsim holds every object several times over; a cap of kpsim's, not of Kubernetes): lower cluster.endpointsPerService or cluster.services",
			d.what(), c.EndpointsPerService.Of("endpoint", "endpoints"), d.endpoints, memoryMaxEndpoints)
		return
	}
	fits := func(path, what string, cidrs []string, need map[dataplane.Family]float64, holds func(netip.Prefix) float64, why, hint string) {
		for _, cidr := range cidrs {
			p, err := netip.ParsePrefix(cidr)
			if err != nil {
				continue
			}
			p = p.Masked()
			f := dataplane.FamilyOf(p.Addr())
			if n := need[f]; n > holds(p) {
				errf(path, "%s holds %.0f %s, the cluster needs up to %.0f (%s): give a /%d or larger, %s",
					p, holds(p), what, n, why, prefixFor(f, n, holds), hint)
			}
		}
	}
	fits("cluster.serviceCIDRs", "service addresses", c.ServiceCIDRs, d.svcIPs, hostAddrs,
		"one per service, dual-stack ones in each family", "or fewer services")
	podsWhy := fmt.Sprintf("%s x %s", d.what(), c.EndpointsPerService.Of("endpoint", "endpoints"))
	if d.churn > 0 {
		podsWhy += fmt.Sprintf(", and %.0f that churnEndpoints adds", d.churn)
	}
	podsHint := "or fewer endpoints"
	if !v.d.present("cluster.podCIDRs") {
		podsHint = "or fewer endpoints (the default grows only as far as it overlaps no service or external CIDR)"
	}
	fits("cluster.podCIDRs", "pod addresses (one kept for the probing pod)", c.PodCIDRs, d.podIPs, podAddrs, podsWhy, podsHint)
	fits("cluster.externalCIDRs", "external addresses", c.ExternalCIDRs, d.extIPs, hostAddrs,
		"one per LoadBalancer service and per service with cluster.types.externalIPs", "or lower those shares")

	r, err := parseNodePortRange(c.NodePortRange)
	if err != nil {
		v.errf("cluster.nodePortRange", "%v", err)
		return
	}
	if def := (nodePortRange{defaultNodePortMin, defaultNodePortMax}); r != def && !v.d.present("cluster.nodePortRange") && d.nodePorts <= float64(r.size()) {
		// Not an error, but not Kubernetes' default either: say so, as the
		// API server of such a cluster must be told.
		s.warnings = append(s.warnings, fmt.Sprintf("cluster: up to %.0f node ports do not fit kube-apiserver's default range %s; "+
			"the cluster uses %s (cluster.nodePortRange), as its API server's --service-node-port-range would have to", d.nodePorts, def, r))
	}
	if d.nodePorts > float64(r.size()) {
		// How many services of these shares the range holds.
		lo, hi := 0.0, d.services
		for hi-lo > 1 {
			if mid := math.Floor((lo + hi) / 2); nodePortsFor(c, mid) <= float64(r.size()) {
				lo = mid
			} else {
				hi = mid
			}
		}
		widen := "widen cluster.nodePortRange"
		if !v.d.present("cluster.nodePortRange") {
			widen = fmt.Sprintf("give cluster.nodePortRange (the default grows from %d-%d only up to %d)", defaultNodePortMin, defaultNodePortMax, maxPort)
		}
		errf("cluster.types", "%s at these nodePort and loadBalancer shares take up to %.0f node ports "+
			"(one per port, and a health check port per LoadBalancer service with externalTrafficPolicy Local); "+
			"the node port range %s holds %d, enough for about %.0f services at these shares: lower cluster.types.nodePort and cluster.types.loadBalancer, or %s",
			d.what(), d.nodePorts, r, r.size(), lo, widen)
	}
}
