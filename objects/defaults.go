package objects

import (
	"fmt"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DefaultAffinityTimeout is the API server's default ClientIP affinity timeout (3 hours).
const DefaultAffinityTimeout = 10800

// maxAffinityTimeout is the API server's upper bound (one day).
const maxAffinityTimeout = 86400

// defaultService fills what the API server would have filled in before
// kube-proxy ever saw the object. Exports carry these already; hand-written
// files usually do not, and the proxier must not guess differently.
func defaultService(svc *v1.Service) {
	if svc.Namespace == "" {
		svc.Namespace = v1.NamespaceDefault
	}
	sp := &svc.Spec
	if sp.Type == "" {
		sp.Type = v1.ServiceTypeClusterIP
	}
	if sp.SessionAffinity == "" {
		sp.SessionAffinity = v1.ServiceAffinityNone
	}
	if sp.SessionAffinity == v1.ServiceAffinityClientIP {
		if sp.SessionAffinityConfig == nil {
			sp.SessionAffinityConfig = &v1.SessionAffinityConfig{}
		}
		if sp.SessionAffinityConfig.ClientIP == nil {
			sp.SessionAffinityConfig.ClientIP = &v1.ClientIPConfig{}
		}
		if sp.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil {
			t := int32(DefaultAffinityTimeout)
			sp.SessionAffinityConfig.ClientIP.TimeoutSeconds = &t
		}
	}
	for i := range sp.Ports {
		p := &sp.Ports[i]
		if p.Protocol == "" {
			p.Protocol = v1.ProtocolTCP
		}
		if p.TargetPort.Type == intstr.Int && p.TargetPort.IntVal == 0 ||
			p.TargetPort.Type == intstr.String && p.TargetPort.StrVal == "" {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if sp.Type == v1.ServiceTypeExternalName {
		return
	}
	if len(sp.ClusterIPs) == 0 && sp.ClusterIP != "" {
		sp.ClusterIPs = []string{sp.ClusterIP}
	}
	if sp.ClusterIP == "" && len(sp.ClusterIPs) > 0 {
		sp.ClusterIP = sp.ClusterIPs[0]
	}
	if len(sp.IPFamilies) == 0 && sp.ClusterIP != v1.ClusterIPNone {
		for _, ip := range sp.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				sp.IPFamilies = append(sp.IPFamilies, ipFamily(a))
			}
		}
	}
	if sp.IPFamilyPolicy == nil && len(sp.IPFamilies) > 0 {
		p := v1.IPFamilyPolicySingleStack
		if len(sp.IPFamilies) > 1 {
			p = v1.IPFamilyPolicyRequireDualStack
		}
		sp.IPFamilyPolicy = &p
	}
	if sp.InternalTrafficPolicy == nil {
		p := v1.ServiceInternalTrafficPolicyCluster
		sp.InternalTrafficPolicy = &p
	}
	if ExternallyAccessible(svc) && sp.ExternalTrafficPolicy == "" {
		sp.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
	}
	if sp.Type == v1.ServiceTypeLoadBalancer && sp.AllocateLoadBalancerNodePorts == nil {
		t := true
		sp.AllocateLoadBalancerNodePorts = &t
	}
	for i := range svc.Status.LoadBalancer.Ingress {
		in := &svc.Status.LoadBalancer.Ingress[i]
		if in.IP != "" && in.IPMode == nil {
			m := v1.LoadBalancerIPModeVIP
			in.IPMode = &m
		}
	}
}

func validateService(svc *v1.Service) error {
	sp := &svc.Spec
	switch sp.Type {
	case v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer:
	default:
		return fmt.Errorf("spec.type: %q is not one of ClusterIP, NodePort, LoadBalancer, ExternalName", sp.Type)
	}
	if len(sp.ClusterIPs) > 2 {
		return fmt.Errorf("spec.clusterIPs: %d addresses, at most 2 (one per family)", len(sp.ClusterIPs))
	}
	fams := map[v1.IPFamily]bool{}
	for i, ip := range sp.ClusterIPs {
		a, err := parseAddr(ip)
		if err != nil {
			return fmt.Errorf("spec.clusterIPs[%d]: %w", i, err)
		}
		f := ipFamily(a)
		if fams[f] {
			return fmt.Errorf("spec.clusterIPs[%d]: a second %s address; dual-stack takes one of each family", i, f)
		}
		fams[f] = true
		if i < len(sp.IPFamilies) && sp.IPFamilies[i] != f {
			return fmt.Errorf("spec.ipFamilies[%d]: %s, but spec.clusterIPs[%d] is %s (%s)", i, sp.IPFamilies[i], i, f, ip)
		}
	}
	if sp.ClusterIP != sp.ClusterIPs[0] {
		return fmt.Errorf("spec.clusterIP: %q differs from spec.clusterIPs[0] %q", sp.ClusterIP, sp.ClusterIPs[0])
	}
	if len(sp.IPFamilies) != len(sp.ClusterIPs) {
		return fmt.Errorf("spec.ipFamilies: %d families for %d clusterIPs", len(sp.IPFamilies), len(sp.ClusterIPs))
	}
	if len(sp.Ports) == 0 {
		return fmt.Errorf("spec.ports: required")
	}
	type pp struct {
		port  int32
		proto v1.Protocol
	}
	seenPort := map[pp]int{}
	seenName := map[string]int{}
	for i, p := range sp.Ports {
		field := fmt.Sprintf("spec.ports[%d]", i)
		if err := checkPort(p.Port, false); err != nil {
			return fmt.Errorf("%s.port: %w", field, err)
		}
		if err := checkProtocol(p.Protocol); err != nil {
			return fmt.Errorf("%s.protocol: %w", field, err)
		}
		if err := checkPort(p.NodePort, true); err != nil {
			return fmt.Errorf("%s.nodePort: %w", field, err)
		}
		if p.NodePort != 0 && sp.Type == v1.ServiceTypeClusterIP {
			return fmt.Errorf("%s.nodePort: %d set on a ClusterIP service", field, p.NodePort)
		}
		if p.TargetPort.Type == intstr.Int {
			if err := checkPort(p.TargetPort.IntVal, false); err != nil {
				return fmt.Errorf("%s.targetPort: %w", field, err)
			}
		}
		if j, ok := seenPort[pp{p.Port, p.Protocol}]; ok {
			return fmt.Errorf("%s: port %d/%s duplicates spec.ports[%d]", field, p.Port, p.Protocol, j)
		}
		seenPort[pp{p.Port, p.Protocol}] = i
		if len(sp.Ports) > 1 && p.Name == "" {
			return fmt.Errorf("%s.name: required when a service has several ports", field)
		}
		if j, ok := seenName[p.Name]; ok {
			return fmt.Errorf("%s.name: %q duplicates spec.ports[%d]", field, p.Name, j)
		}
		seenName[p.Name] = i
	}
	for i, ip := range sp.ExternalIPs {
		if _, err := parseAddr(ip); err != nil {
			return fmt.Errorf("spec.externalIPs[%d]: %w", i, err)
		}
	}
	if sp.LoadBalancerIP != "" {
		if _, err := parseAddr(sp.LoadBalancerIP); err != nil {
			return fmt.Errorf("spec.loadBalancerIP: %w", err)
		}
	}
	for i, r := range sp.LoadBalancerSourceRanges {
		if _, err := netip.ParsePrefix(strings.TrimSpace(r)); err != nil {
			return fmt.Errorf("spec.loadBalancerSourceRanges[%d]: %q is not a CIDR", i, r)
		}
	}
	switch sp.SessionAffinity {
	case v1.ServiceAffinityNone:
	case v1.ServiceAffinityClientIP:
		t := *sp.SessionAffinityConfig.ClientIP.TimeoutSeconds
		if t < 1 || t > maxAffinityTimeout {
			return fmt.Errorf("spec.sessionAffinityConfig.clientIP.timeoutSeconds: %d is not in 1-%d", t, maxAffinityTimeout)
		}
	default:
		return fmt.Errorf("spec.sessionAffinity: %q is not None or ClientIP", sp.SessionAffinity)
	}
	switch sp.ExternalTrafficPolicy {
	case "":
	case v1.ServiceExternalTrafficPolicyCluster, v1.ServiceExternalTrafficPolicyLocal:
		if !ExternallyAccessible(svc) {
			return fmt.Errorf("spec.externalTrafficPolicy: may only be set on an externally reachable service (NodePort, LoadBalancer, or with externalIPs)")
		}
	default:
		return fmt.Errorf("spec.externalTrafficPolicy: %q is not Cluster or Local", sp.ExternalTrafficPolicy)
	}
	switch *sp.InternalTrafficPolicy {
	case v1.ServiceInternalTrafficPolicyCluster, v1.ServiceInternalTrafficPolicyLocal:
	default:
		return fmt.Errorf("spec.internalTrafficPolicy: %q is not Cluster or Local", *sp.InternalTrafficPolicy)
	}
	if err := checkPort(sp.HealthCheckNodePort, true); err != nil {
		return fmt.Errorf("spec.healthCheckNodePort: %w", err)
	}
	for i, in := range svc.Status.LoadBalancer.Ingress {
		field := fmt.Sprintf("status.loadBalancer.ingress[%d]", i)
		if in.IP == "" && in.Hostname == "" {
			return fmt.Errorf("%s: neither ip nor hostname", field)
		}
		if in.IP != "" {
			if _, err := parseAddr(in.IP); err != nil {
				return fmt.Errorf("%s.ip: %w", field, err)
			}
		}
		if in.IPMode != nil && *in.IPMode != v1.LoadBalancerIPModeVIP && *in.IPMode != v1.LoadBalancerIPModeProxy {
			return fmt.Errorf("%s.ipMode: %q is not VIP or Proxy", field, *in.IPMode)
		}
	}
	return nil
}

// defaultSlice fills the API server's EndpointSlice defaults. Endpoint
// conditions are left alone: an unset condition has a meaning of its own
// (kube-proxy treats unset ready as ready).
func defaultSlice(eps *discoveryv1.EndpointSlice) {
	if eps.Namespace == "" {
		eps.Namespace = v1.NamespaceDefault
	}
	for i := range eps.Ports {
		p := &eps.Ports[i]
		if p.Protocol == nil {
			tcp := v1.ProtocolTCP
			p.Protocol = &tcp
		}
		if p.Name == nil {
			empty := ""
			p.Name = &empty
		}
	}
}

func validateSlice(eps *discoveryv1.EndpointSlice) error {
	var fam v1.IPFamily
	switch eps.AddressType {
	case discoveryv1.AddressTypeIPv4:
		fam = v1.IPv4Protocol
	case discoveryv1.AddressTypeIPv6:
		fam = v1.IPv6Protocol
	default:
		return fmt.Errorf("addressType: %q is not IPv4, IPv6 or FQDN", eps.AddressType)
	}
	for i, p := range eps.Ports {
		field := fmt.Sprintf("ports[%d]", i)
		if p.Port != nil {
			if err := checkPort(*p.Port, false); err != nil {
				return fmt.Errorf("%s.port: %w", field, err)
			}
		}
		if err := checkProtocol(*p.Protocol); err != nil {
			return fmt.Errorf("%s.protocol: %w", field, err)
		}
	}
	for i, ep := range eps.Endpoints {
		if len(ep.Addresses) == 0 {
			return fmt.Errorf("endpoints[%d].addresses: required", i)
		}
		for j, s := range ep.Addresses {
			a, err := parseAddr(s)
			if err != nil {
				return fmt.Errorf("endpoints[%d].addresses[%d]: %w", i, j, err)
			}
			if ipFamily(a) != fam {
				return fmt.Errorf("endpoints[%d].addresses[%d]: %s in an %s slice", i, j, s, eps.AddressType)
			}
		}
	}
	return nil
}

func validateNode(n *v1.Node) error {
	for i, a := range n.Status.Addresses {
		if a.Type != v1.NodeInternalIP && a.Type != v1.NodeExternalIP {
			continue
		}
		if _, err := parseAddr(a.Address); err != nil {
			return fmt.Errorf("status.addresses[%d].address: %w", i, err)
		}
	}
	return nil
}

func checkPort(p int32, zeroOK bool) error {
	if p == 0 && zeroOK {
		return nil
	}
	if p < 1 || p > 65535 {
		return fmt.Errorf("%d is not a valid port", p)
	}
	return nil
}

func checkProtocol(p v1.Protocol) error {
	switch p {
	case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
		return nil
	}
	return fmt.Errorf("%q is not TCP, UDP or SCTP", p)
}

// parseAddr parses an IP address the way the API server accepts it (no zone,
// no IPv4-mapped IPv6).
func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%q is not a valid IP address", s)
	}
	return a, nil
}

func ipFamily(a netip.Addr) v1.IPFamily {
	if a.Is4() {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}
