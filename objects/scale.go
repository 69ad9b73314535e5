package objects

import (
	"fmt"
	"net/netip"
	"sort"

	"k8s.io/apimachinery/pkg/types"
)

// Node port range the copies' node ports come from: the API server's default
// --service-node-port-range, so that scaled node ports look like real ones.
const (
	nodePortMin = 30000
	nodePortMax = 32767
)

// Scale returns a set holding the services n times: the originals, then
// copies named name-2 ... name-n in the same namespaces. Every copy gets
// fresh addresses taken from the same /16 (IPv4) or /112 (IPv6) as the
// original address, so cluster IPs stay in the service range and pod IPs in
// the pod range, and fresh node ports; an external or load-balancer address or
// a node port that cannot be made unique is dropped and noted. Cluster IPs and
// endpoint addresses that cannot be made unique are an error.
func (s *Set) Scale(n int) (*Set, error) {
	if n < 1 {
		return nil, fmt.Errorf("scale %d: the factor must be at least 1", n)
	}
	out := s.deepCopy()
	if n == 1 {
		return out, nil
	}
	sc := newScaler(s)
	for k := 2; k <= n; k++ {
		if err := sc.copy(out, k); err != nil {
			return nil, fmt.Errorf("scale %d: copy %d: %w", n, k, err)
		}
	}
	out.Notes = append(out.Notes, sc.notes()...)
	out.sort()
	return out, nil
}

func (s *Set) deepCopy() *Set {
	out := &Set{
		Ignored: append([]Ignored(nil), s.Ignored...),
		Notes:   append([]string(nil), s.Notes...),
	}
	for _, svc := range s.Services {
		out.Services = append(out.Services, svc.DeepCopy())
	}
	for _, eps := range s.EndpointSlices {
		out.EndpointSlices = append(out.EndpointSlices, eps.DeepCopy())
	}
	for _, node := range s.Nodes {
		out.Nodes = append(out.Nodes, node.DeepCopy())
	}
	return out
}

type scaler struct {
	src       *Set
	usedAddr  map[netip.Addr]bool
	cursor    map[netip.Prefix]netip.Addr // next candidate per /16 or /112
	exhausted map[netip.Prefix]bool
	usedPort  map[int32]bool
	nextPort  int32
	names     map[string]bool // kind/namespace/name taken
	nodeAddr  map[netip.Addr]bool
	dropped   map[string]int // what was dropped -> how many
}

func newScaler(s *Set) *scaler {
	sc := &scaler{
		src:       s,
		usedAddr:  map[netip.Addr]bool{},
		cursor:    map[netip.Prefix]netip.Addr{},
		exhausted: map[netip.Prefix]bool{},
		usedPort:  map[int32]bool{},
		nextPort:  nodePortMin,
		names:     map[string]bool{},
		nodeAddr:  map[netip.Addr]bool{},
		dropped:   map[string]int{},
	}
	mark := func(ss ...string) {
		for _, x := range ss {
			if a, err := netip.ParseAddr(x); err == nil {
				sc.usedAddr[a] = true
			}
		}
	}
	for _, svc := range s.Services {
		sc.names["svc/"+svc.Namespace+"/"+svc.Name] = true
		mark(svc.Spec.ClusterIPs...)
		mark(svc.Spec.ExternalIPs...)
		mark(svc.Spec.LoadBalancerIP)
		for _, in := range svc.Status.LoadBalancer.Ingress {
			mark(in.IP)
		}
		for _, p := range svc.Spec.Ports {
			sc.usedPort[p.NodePort] = true
		}
		sc.usedPort[svc.Spec.HealthCheckNodePort] = true
	}
	for _, ig := range s.Ignored {
		sc.names[ig.Kind+"/"+ig.Object] = true
	}
	for _, eps := range s.EndpointSlices {
		sc.names["eps/"+eps.Namespace+"/"+eps.Name] = true
		for _, ep := range eps.Endpoints {
			mark(ep.Addresses...)
		}
	}
	for _, node := range s.Nodes {
		for _, a := range node.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				sc.usedAddr[ip] = true
				sc.nodeAddr[ip] = true
			}
		}
	}
	return sc
}

// rename gives copy k of an object a name nobody uses yet.
func (sc *scaler) rename(kind, ns, name string, k int) string {
	cand := fmt.Sprintf("%s-%d", name, k)
	for sc.names[kind+"/"+ns+"/"+cand] {
		cand += "x"
	}
	sc.names[kind+"/"+ns+"/"+cand] = true
	return cand
}

func blockOf(a netip.Addr) netip.Prefix {
	bits := 16
	if a.Is6() {
		bits = 112
	}
	p, _ := a.Prefix(bits)
	return p
}

// fresh returns an unused address in a's block, skipping IPv4 addresses that
// end in .0 or .255 so that no copy lands on a subnet or broadcast address.
func (sc *scaler) fresh(a netip.Addr) (netip.Addr, bool) {
	b := blockOf(a)
	if sc.exhausted[b] {
		return netip.Addr{}, false
	}
	c, ok := sc.cursor[b]
	if !ok {
		c = b.Addr()
	}
	for {
		c = c.Next()
		if !c.IsValid() || !b.Contains(c) {
			sc.exhausted[b] = true
			return netip.Addr{}, false
		}
		if c.Is4() {
			if last := c.As4()[3]; last == 0 || last == 255 {
				continue
			}
		}
		if !sc.usedAddr[c] {
			sc.usedAddr[c] = true
			sc.cursor[b] = c
			return c, true
		}
	}
}

func (sc *scaler) freshPort() (int32, bool) {
	for ; sc.nextPort <= nodePortMax; sc.nextPort++ {
		if !sc.usedPort[sc.nextPort] {
			sc.usedPort[sc.nextPort] = true
			return sc.nextPort, true
		}
	}
	return 0, false
}

// copyState maps one copy's original addresses and ports to fresh ones, so
// that values shared in the original (an external IP on two services, an
// endpoint in two slices) stay shared in the copy.
type copyState struct {
	sc    *scaler
	addrs map[string]string
	ports map[int32]int32
}

func (cs *copyState) addr(s string, what string, required bool) (string, error) {
	if v, ok := cs.addrs[s]; ok {
		return v, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", fmt.Errorf("%s %q: not an address", what, s)
	}
	if cs.sc.nodeAddr[a] {
		cs.sc.dropped[what+" equal to a node address, given a fresh non-node address in copies"]++
	}
	f, ok := cs.sc.fresh(a)
	if !ok {
		if required {
			return "", fmt.Errorf("%s %s: no free address left in %s", what, s, blockOf(a))
		}
		cs.sc.dropped[what+" dropped: no free address left in "+blockOf(a).String()]++
		cs.addrs[s] = ""
		return "", nil
	}
	cs.addrs[s] = f.String()
	return f.String(), nil
}

func (cs *copyState) port(p int32, what string) int32 {
	if p == 0 {
		return 0
	}
	if v, ok := cs.ports[p]; ok {
		return v
	}
	f, ok := cs.sc.freshPort()
	if !ok {
		cs.sc.dropped[fmt.Sprintf("%s dropped: range %d-%d exhausted", what, nodePortMin, nodePortMax)]++
	}
	cs.ports[p] = f
	return f
}

func (sc *scaler) copy(out *Set, k int) error {
	cs := &copyState{sc: sc, addrs: map[string]string{}, ports: map[int32]int32{}}
	svcNames := map[string]string{} // namespace/name -> copy's name
	svcUIDs := map[types.UID]types.UID{}
	for _, orig := range sc.src.Services {
		svc := orig.DeepCopy()
		svc.Name = sc.rename("svc", svc.Namespace, orig.Name, k)
		svc.UID = copyUID(orig.UID, k)
		svcNames[orig.Namespace+"/"+orig.Name] = svc.Name
		svcUIDs[orig.UID] = svc.UID
		sp := &svc.Spec
		for i, ip := range sp.ClusterIPs {
			f, err := cs.addr(ip, "cluster IP", true)
			if err != nil {
				return fmt.Errorf("services %s/%s: %w", orig.Namespace, orig.Name, err)
			}
			sp.ClusterIPs[i] = f
		}
		sp.ClusterIP = sp.ClusterIPs[0]
		var err error
		if sp.ExternalIPs, err = cs.addrList(sp.ExternalIPs, "external IP"); err != nil {
			return err
		}
		if sp.LoadBalancerIP != "" {
			if sp.LoadBalancerIP, err = cs.addr(sp.LoadBalancerIP, "loadBalancerIP", false); err != nil {
				return err
			}
		}
		ingress := svc.Status.LoadBalancer.Ingress[:0]
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				if in.IP, err = cs.addr(in.IP, "load-balancer ingress IP", false); err != nil {
					return err
				}
				if in.IP == "" {
					continue
				}
			}
			ingress = append(ingress, in)
		}
		svc.Status.LoadBalancer.Ingress = ingress
		for i := range sp.Ports {
			sp.Ports[i].NodePort = cs.port(sp.Ports[i].NodePort, "node port")
		}
		sp.HealthCheckNodePort = cs.port(sp.HealthCheckNodePort, "health check node port")
		out.Services = append(out.Services, svc)
	}
	for _, orig := range sc.src.EndpointSlices {
		eps := orig.DeepCopy()
		eps.Name = sc.rename("eps", eps.Namespace, orig.Name, k)
		eps.UID = copyUID(orig.UID, k)
		svcName := orig.Labels[LabelServiceName]
		newSvc, ok := svcNames[orig.Namespace+"/"+svcName]
		if !ok {
			newSvc = fmt.Sprintf("%s-%d", svcName, k) // a slice whose service is not in the set stays an orphan
		}
		eps.Labels[LabelServiceName] = newSvc
		for i, ref := range eps.OwnerReferences {
			if ref.Kind == "Service" && ref.Name == svcName {
				eps.OwnerReferences[i].Name = newSvc
				if uid, ok := svcUIDs[ref.UID]; ok {
					eps.OwnerReferences[i].UID = uid
				}
			}
		}
		for i := range eps.Endpoints {
			ep := &eps.Endpoints[i]
			for j, a := range ep.Addresses {
				f, err := cs.addr(a, "endpoint address", true)
				if err != nil {
					return fmt.Errorf("endpointslices %s/%s: %w", orig.Namespace, orig.Name, err)
				}
				ep.Addresses[j] = f
			}
			if ep.TargetRef != nil {
				ep.TargetRef.Name = fmt.Sprintf("%s-%d", ep.TargetRef.Name, k)
				ep.TargetRef.UID = copyUID(ep.TargetRef.UID, k)
			}
		}
		out.EndpointSlices = append(out.EndpointSlices, eps)
	}
	return nil
}

func (cs *copyState) addrList(in []string, what string) ([]string, error) {
	var out []string
	for _, a := range in {
		f, err := cs.addr(a, what, false)
		if err != nil {
			return nil, err
		}
		if f != "" {
			out = append(out, f)
		}
	}
	return out, nil
}

func copyUID(uid types.UID, k int) types.UID {
	if uid == "" {
		return ""
	}
	return types.UID(fmt.Sprintf("%s-%d", uid, k))
}

func (sc *scaler) notes() []string {
	var out []string
	for what, n := range sc.dropped {
		out = append(out, fmt.Sprintf("scale: %d x %s", n, what))
	}
	sort.Strings(out)
	return out
}
