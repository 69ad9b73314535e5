package objects

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Labels kube-proxy's informers select on.
const (
	// LabelServiceProxyName marks a Service as handled by another proxy;
	// kube-proxy's Service informer leaves such services out.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless is set by the EndpointSlice controller on a headless
	// service's slices; kube-proxy's EndpointSlice informer leaves them out.
	LabelHeadless = "service.kubernetes.io/headless"
	// LabelServiceName links an EndpointSlice to its Service.
	LabelServiceName = discoveryv1.LabelServiceName
)

// The rules below are the one place kpsim says which objects kube-proxy
// v1.37 acts on: the loader sets ignored objects aside with the reason, the
// proxier drops them, and the replay leaves them out of what it expects the
// proxier to count.

// ServiceIgnored says why kube-proxy ignores a service altogether, or "".
// Its Service informer selects services without the service-proxy-name
// label (whatever the label's value) and with a clusterIP other than None;
// its proxier then skips ExternalName services and services without a
// cluster IP. A service that turns ignored reaches the proxier as a delete
// (informer) or as an update it treats as one (proxier): either way it is gone.
func ServiceIgnored(svc *v1.Service) string {
	if v, ok := svc.Labels[LabelServiceProxyName]; ok {
		return fmt.Sprintf("labelled %s=%q: handled by another proxy", LabelServiceProxyName, v)
	}
	switch {
	case svc.Spec.ClusterIP == v1.ClusterIPNone:
		return "headless (clusterIP None): clients reach endpoints directly"
	case svc.Spec.Type == v1.ServiceTypeExternalName:
		return "type ExternalName: a DNS alias, nothing to proxy"
	case svc.Spec.ClusterIP == "":
		return "no clusterIP"
	}
	return ""
}

// SliceIgnored says why kube-proxy ignores an EndpointSlice, or "". Its
// EndpointSlice informer leaves out slices labelled headless (gone: a slice
// that gains the label reaches the handlers as a delete). Its endpoints
// cache ignores the events of slices without a service-name label and of
// FQDN slices (gone is false: what it had from the slice before stays).
// The service-proxy-name label is not looked at on slices: a slice of a
// service of another proxy matters only through its service, which is ignored.
func SliceIgnored(eps *discoveryv1.EndpointSlice) (reason string, gone bool) {
	if _, ok := eps.Labels[LabelHeadless]; ok {
		return "labelled " + LabelHeadless + ": belongs to a headless service", true
	}
	if eps.Labels[LabelServiceName] == "" {
		return "no " + LabelServiceName + " label: not tied to a service", false
	}
	if eps.AddressType == discoveryv1.AddressTypeFQDN {
		return "addressType FQDN: kube-proxy programs IP slices only", false
	}
	return "", false
}

// ExternallyAccessible is the API server's rule for the services that take
// an externalTrafficPolicy (it defaults it on them and refuses it on the
// rest), and kube-proxy's for the services its externalTrafficPolicy Local
// applies to: NodePort and LoadBalancer services, and ClusterIP services with
// external IPs.
func ExternallyAccessible(svc *v1.Service) bool {
	t := svc.Spec.Type
	return t == v1.ServiceTypeNodePort || t == v1.ServiceTypeLoadBalancer || t == v1.ServiceTypeClusterIP && len(svc.Spec.ExternalIPs) > 0
}

// ClusterIP is a service's cluster IP of family f, or the zero Addr: the
// clusterIPs entry at f's index in ipFamilies, or for a service without
// ipFamilies (written before dual-stack) its clusterIP when it is of f.
func ClusterIP(svc *v1.Service, f v1.IPFamily) netip.Addr {
	if len(svc.Spec.IPFamilies) == 0 {
		if a, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil && ipFamily(a) == f {
			return a
		}
		return netip.Addr{}
	}
	for i, fam := range svc.Spec.IPFamilies {
		if fam == f && i < len(svc.Spec.ClusterIPs) {
			if a, err := netip.ParseAddr(svc.Spec.ClusterIPs[i]); err == nil && ipFamily(a) == f {
				return a
			}
		}
	}
	return netip.Addr{}
}

// SlicePort is one port of an EndpointSlice as kube-proxy reads it: a port
// without a name (the API server defaults it to "") or without a number is
// skipped, and so is every endpoint of it.
type SlicePort struct {
	Name     string
	Port     uint16
	Protocol v1.Protocol
}

// SlicePorts lists the ports of a slice kube-proxy reads.
func SlicePorts(eps *discoveryv1.EndpointSlice) []SlicePort {
	out := make([]SlicePort, 0, len(eps.Ports))
	for _, p := range eps.Ports {
		if p.Name == nil || p.Port == nil || *p.Port <= 0 || *p.Port > 65535 {
			continue
		}
		proto := v1.ProtocolTCP // the API server's default
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		out = append(out, SlicePort{Name: *p.Name, Port: uint16(*p.Port), Protocol: proto})
	}
	return out
}

// EndpointAddress is the address kube-proxy takes for an endpoint: the
// first of its addresses; ok is false when it has none that parses.
func EndpointAddress(ep *discoveryv1.Endpoint) (netip.Addr, bool) {
	if len(ep.Addresses) == 0 {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(ep.Addresses[0])
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// ProxyConditions is an endpoint's conditions as kube-proxy reads them
// (its EndpointSlice cache): an unset ready or serving counts as true
// whatever the others say, an unset terminating as false. Whether the pod
// answers is another question (Serving).
func ProxyConditions(c discoveryv1.EndpointConditions) (ready, serving, terminating bool) {
	return c.Ready == nil || *c.Ready, c.Serving == nil || *c.Serving, c.Terminating != nil && *c.Terminating
}

// Serving says whether an endpoint's pod answers connections, by what the
// API says of it: its serving condition, or where that is unset its ready
// condition (unset counts as true), as the EndpointSlice API defines them.
// A terminating pod that still serves answers: it is not ready, so a
// proxier sends it no new connections while others are ready, but flows
// already on it go on (kube-proxy's nftables mode keeps their conntrack
// entries), and it is what a proxier falls back to when no endpoint is ready.
func Serving(c discoveryv1.EndpointConditions) bool {
	if c.Serving != nil {
		return *c.Serving
	}
	return c.Ready == nil || *c.Ready
}

// Known counts what a synced proxier of family f knows of one service and
// its slices, as kube-proxy's sync metrics and kpsim's sync records count
// it: the service ports of a service kube-proxy acts on that has a cluster
// IP of f, and their endpoints (every address of f, ready or not, from the
// slices of f it reads, deduplicated per port as the proxier merges slices).
func Known(svc *v1.Service, slices []*discoveryv1.EndpointSlice, f v1.IPFamily) (ports, endpoints int) {
	if ServiceIgnored(svc) != "" || !ClusterIP(svc, f).IsValid() {
		return 0, 0
	}
	for _, sp := range svc.Spec.Ports {
		ports++
		seen := map[netip.AddrPort]bool{}
		for _, s := range slices {
			if reason, _ := SliceIgnored(s); reason != "" || string(s.AddressType) != string(f) {
				continue
			}
			for _, p := range SlicePorts(s) {
				if p.Name != sp.Name || p.Protocol != sp.Protocol {
					continue
				}
				for i := range s.Endpoints {
					if a, ok := EndpointAddress(&s.Endpoints[i]); ok && (a.Is4() == (f == v1.IPv4Protocol)) {
						seen[netip.AddrPortFrom(a, p.Port)] = true
					}
				}
			}
		}
		endpoints += len(seen)
	}
	return ports, endpoints
}
