package objects

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kpsim/kpsim/internal/k8sapi"
)

// annotationsKept are the only annotations an anonymized object keeps: the
// ones that change what kpsim measures, none of which names anything.
var annotationsKept = map[string]bool{
	v1.EndpointsLastChangeTriggerTime: true,
}

// labelValuesKept are well-known labels whose values are structure, not names.
var labelValuesKept = map[string]bool{
	discoveryv1.LabelManagedBy: true,
	LabelHeadless:              true,
}

// Anonymize returns a copy of the set that can be shared: every name,
// namespace, label value, hostname and address is replaced by a keyed hash of
// the original, so the same input maps to the same output for the same seed
// (two exports of one cluster anonymized with one seed still line up), and
// what kube-proxy acts on is kept: ports, protocols, types, policies, counts,
// endpoint conditions, and which service owns which slice.
//
// Addresses are mapped prefix-preserving (each bit flipped by a keyed
// function of the bits before it), so two addresses that shared a /n share a
// mapped /n, a CIDR maps to a CIDR of the same length and containment is kept:
// a node address inside a loadBalancerSourceRange stays inside it. The first
// octet of IPv4 addresses and the first 16 bits of IPv6 addresses are kept so
// that private ranges stay private.
//
// Annotations (but the trigger time), managed fields, finalizers and Node
// details other than addresses and pod CIDRs are dropped; ignored objects and
// notes are not carried over (a note says how many).
func Anonymize(in *Set, seed int64) *Set {
	a := &anonymizer{addrs: map[netip.Addr]netip.Addr{}}
	binary.BigEndian.PutUint64(a.key[:], uint64(seed))
	out := &Set{}
	for _, n := range in.Nodes {
		out.Nodes = append(out.Nodes, a.node(n))
	}
	for _, svc := range in.Services {
		out.Services = append(out.Services, a.service(svc))
	}
	for _, eps := range in.EndpointSlices {
		out.EndpointSlices = append(out.EndpointSlices, a.slice(eps))
	}
	if len(in.Ignored) > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("anonymize: %d ignored objects not carried over", len(in.Ignored)))
	}
	out.sort()
	return out
}

type anonymizer struct {
	key   [8]byte
	addrs map[netip.Addr]netip.Addr
}

func (a *anonymizer) sum(kind, s string) [32]byte {
	h := sha256.New()
	h.Write(a.key[:])
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(s))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// name maps a name of one kind; empty stays empty.
func (a *anonymizer) name(kind, s string) string {
	if s == "" {
		return ""
	}
	sum := a.sum(kind, s)
	return kind + "-" + hex.EncodeToString(sum[:5])
}

func (a *anonymizer) namep(kind string, s *string) *string {
	if s == nil {
		return nil
	}
	v := a.name(kind, *s)
	return &v
}

func (a *anonymizer) uid(u types.UID) types.UID {
	if u == "" {
		return ""
	}
	sum := a.sum("uid", string(u))
	h := hex.EncodeToString(sum[:16])
	return types.UID(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
}

// addr maps an address prefix-preservingly.
func (a *anonymizer) addr(ip netip.Addr) netip.Addr {
	if m, ok := a.addrs[ip]; ok {
		return m
	}
	b := ip.As16()
	start, bits := 0, 128 // byte offset of the address in b, and its length
	keep := 16
	if ip.Is4() {
		start, bits, keep = 12, 32, 8
	}
	src := b
	var prefix [17]byte
	for i := keep; i < bits; i++ {
		// The flip of bit i depends on the original bits before it only.
		copy(prefix[:16], src[:])
		maskFrom(prefix[:16], start*8+i)
		prefix[16] = byte(i)
		sum := a.sum("addr", string(prefix[:]))
		if sum[0]&1 == 1 {
			pos := start*8 + i
			b[pos/8] ^= 0x80 >> (pos % 8)
		}
	}
	var m netip.Addr
	if ip.Is4() {
		m = netip.AddrFrom4([4]byte(b[12:16]))
	} else {
		m = netip.AddrFrom16(b)
	}
	a.addrs[ip] = m
	return m
}

// maskFrom clears every bit of b from bit position n on.
func maskFrom(b []byte, n int) {
	for i := range b {
		switch {
		case i*8 >= n:
			b[i] = 0
		case i*8+8 > n:
			b[i] &= ^byte(0xff >> (n - i*8))
		}
	}
}

func (a *anonymizer) addrString(s string) string {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return s // unreachable for a loaded Set; keep rather than invent
	}
	return a.addr(ip).String()
}

func (a *anonymizer) addrStrings(in []string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = a.addrString(s)
	}
	return out
}

func (a *anonymizer) cidr(s string) string {
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		return s
	}
	m, _ := a.addr(p.Masked().Addr()).Prefix(p.Bits())
	return m.String()
}

func isWellKnownKey(k string) bool {
	prefix, _, ok := strings.Cut(k, "/")
	return ok && (prefix == "kubernetes.io" || prefix == "k8s.io" ||
		strings.HasSuffix(prefix, ".kubernetes.io") || strings.HasSuffix(prefix, ".k8s.io"))
}

func (a *anonymizer) labels(in map[string]string) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		switch {
		case k == LabelServiceName:
			out[k] = a.name("svc", v)
		case k == v1.LabelHostname:
			out[k] = a.name("node", v)
		case labelValuesKept[k]:
			out[k] = v
		case isWellKnownKey(k):
			out[k] = a.name("val", v)
		default:
			out[a.name("key", k)] = a.name("val", v)
		}
	}
	return out
}

func (a *anonymizer) meta(in metav1.ObjectMeta, kind string) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name:              a.name(kind, in.Name),
		Namespace:         a.name("ns", in.Namespace),
		UID:               a.uid(in.UID),
		ResourceVersion:   in.ResourceVersion,
		Generation:        in.Generation,
		CreationTimestamp: in.CreationTimestamp,
		DeletionTimestamp: in.DeletionTimestamp,
		Labels:            a.labels(in.Labels),
	}
	for k, v := range in.Annotations {
		if annotationsKept[k] {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	for _, ref := range in.OwnerReferences {
		kind := "obj"
		if ref.Kind == "Service" {
			kind = "svc"
		}
		ref.Name = a.name(kind, ref.Name)
		ref.UID = a.uid(ref.UID)
		out.OwnerReferences = append(out.OwnerReferences, ref)
	}
	return out
}

func (a *anonymizer) service(in *v1.Service) *v1.Service {
	out := &v1.Service{ObjectMeta: a.meta(in.ObjectMeta, "svc")}
	sp := in.Spec.DeepCopy()
	sp.Selector = a.labels(sp.Selector)
	sp.ClusterIP = a.addrString(sp.ClusterIP)
	sp.ClusterIPs = a.addrStrings(sp.ClusterIPs)
	sp.ExternalIPs = a.addrStrings(sp.ExternalIPs)
	if sp.LoadBalancerIP != "" {
		sp.LoadBalancerIP = a.addrString(sp.LoadBalancerIP)
	}
	for i, r := range sp.LoadBalancerSourceRanges {
		sp.LoadBalancerSourceRanges[i] = a.cidr(r)
	}
	for i := range sp.Ports {
		p := &sp.Ports[i]
		p.Name = a.name("port", p.Name)
		if p.TargetPort.Type == intstr.String {
			p.TargetPort = intstr.FromString(a.name("port", p.TargetPort.StrVal))
		}
	}
	sp.ExternalName = a.name("host", sp.ExternalName)
	sp.LoadBalancerClass = a.namep("class", sp.LoadBalancerClass)
	out.Spec = *sp
	for _, ing := range in.Status.LoadBalancer.Ingress {
		ing := *ing.DeepCopy()
		if ing.IP != "" {
			ing.IP = a.addrString(ing.IP)
		}
		if ing.Hostname != "" {
			ing.Hostname = a.name("lb", ing.Hostname) + ".example.invalid"
		}
		out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress, ing)
	}
	return out
}

func (a *anonymizer) slice(in *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{ObjectMeta: a.meta(in.ObjectMeta, "eps"), AddressType: in.AddressType}
	for _, p := range in.Ports {
		p := *p.DeepCopy()
		p.Name = a.namep("port", p.Name)
		out.Ports = append(out.Ports, p)
	}
	for _, ep := range in.Endpoints {
		o := discoveryv1.Endpoint{
			Addresses:  a.addrStrings(ep.Addresses),
			Conditions: *ep.Conditions.DeepCopy(),
			Hostname:   a.namep("host", ep.Hostname),
			NodeName:   a.namep("node", ep.NodeName),
			Zone:       a.namep("zone", ep.Zone),
		}
		if ep.TargetRef != nil {
			o.TargetRef = &v1.ObjectReference{
				Kind:      ep.TargetRef.Kind,
				Namespace: a.name("ns", ep.TargetRef.Namespace),
				Name:      a.name("pod", ep.TargetRef.Name),
				UID:       a.uid(ep.TargetRef.UID),
			}
		}
		if ep.Hints != nil {
			o.Hints = &discoveryv1.EndpointHints{}
			for _, z := range ep.Hints.ForZones {
				o.Hints.ForZones = append(o.Hints.ForZones, discoveryv1.ForZone{Name: a.name("zone", z.Name)})
			}
			var nodes []string
			for _, n := range k8sapi.NodeHints(ep.Hints) {
				nodes = append(nodes, a.name("node", n))
			}
			k8sapi.SetNodeHints(o.Hints, nodes)
		}
		out.Endpoints = append(out.Endpoints, o)
	}
	return out
}

func (a *anonymizer) node(in *v1.Node) *v1.Node {
	out := &v1.Node{ObjectMeta: a.meta(in.ObjectMeta, "node")}
	if in.Spec.PodCIDR != "" {
		out.Spec.PodCIDR = a.cidr(in.Spec.PodCIDR)
	}
	for _, c := range in.Spec.PodCIDRs {
		out.Spec.PodCIDRs = append(out.Spec.PodCIDRs, a.cidr(c))
	}
	for _, ad := range in.Status.Addresses {
		switch ad.Type {
		case v1.NodeInternalIP, v1.NodeExternalIP:
			out.Status.Addresses = append(out.Status.Addresses, v1.NodeAddress{Type: ad.Type, Address: a.addrString(ad.Address)})
		case v1.NodeHostName:
			out.Status.Addresses = append(out.Status.Addresses, v1.NodeAddress{Type: ad.Type, Address: a.name("node", ad.Address)})
		}
	}
	return out
}
