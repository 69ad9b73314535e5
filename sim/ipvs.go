package sim

import (
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/kpsim/kpsim/dataplane"
)

type ipvsService struct {
	vs dataplane.VirtualServer
	// order is the kernel's destination list, newest first (the kernel adds
	// a destination at the list's head): what listing returns and what
	// round-robin walks.
	order []*ipvsDest
	// index finds destinations of large services; most services have a
	// handful, which a scan of order finds faster than a map is built.
	index map[netip.AddrPort]*ipvsDest
	// next is where round-robin looks first: the position after the
	// destination it took last, or 0 before it took any (the kernel keeps
	// a pointer to the last one taken, starting at the list's head).
	next int
	// templates are a persistent service's persistence templates, by client
	// address (kube-proxy's netmask is the whole address).
	templates map[netip.Addr]template
}

// template is IPVS's persistence template: a client's connections to a
// persistent service go to the real server its first one went to, until
// the service's timeout has passed since the last of them.
type template struct {
	dest  netip.AddrPort
	until time.Time
}

// persisted is the real server client's template sends it to at now, or
// nil: without a template, once it expired, or when its real server is gone
// or has weight 0 (kube-proxy sets net.ipv4.vs.expire_quiescent_template,
// so a template of a drained real server expires at once).
func (s *ipvsService) persisted(client netip.Addr, now time.Time) *ipvsDest {
	t, ok := s.templates[client]
	if !ok || !now.Before(t.until) {
		return nil
	}
	if d := s.find(t.dest); d != nil && d.weight > 0 {
		s.persist(client, d, now)
		return d
	}
	return nil
}

// persist makes or renews client's template for real server d at now.
func (s *ipvsService) persist(client netip.Addr, d *ipvsDest, now time.Time) {
	if s.templates == nil {
		s.templates = map[netip.Addr]template{}
	}
	s.templates[client] = template{d.ap, now.Add(time.Duration(s.vs.Timeout) * time.Second)}
}

// indexFrom is the destination count from which a service keeps an index.
const indexFrom = 16

func (s *ipvsService) find(ap netip.AddrPort) *ipvsDest {
	if s.index != nil {
		return s.index[ap]
	}
	for _, d := range s.order {
		if d.ap == ap {
			return d
		}
	}
	return nil
}

func (s *ipvsService) add(d *ipvsDest) {
	s.order = slices.Insert(s.order, 0, d)
	// Round-robin's last pick moved down one; at 0 it looks at the list's
	// head next, which is now d, as after the list's last entry.
	if s.next > 0 {
		s.next++
	}
	switch {
	case s.index != nil:
		s.index[d.ap] = d
	case len(s.order) >= indexFrom:
		s.index = make(map[netip.AddrPort]*ipvsDest, 2*len(s.order))
		for _, x := range s.order {
			s.index[x.ap] = x
		}
	}
}

func (s *ipvsService) remove(d *ipvsDest) {
	i := slices.Index(s.order, d)
	s.order = slices.Delete(s.order, i, i+1)
	// Had round-robin taken d last, the kernel moves its pointer back one
	// entry, so it looks next at what followed d: position i, as for any
	// other pick before or at i.
	if s.next > i {
		s.next--
	}
	if s.next >= len(s.order) {
		s.next = 0
	}
	if s.index != nil {
		delete(s.index, d.ap)
	}
}

type ipvsDest struct {
	ap                     netip.AddrPort
	weight                 int
	activeConns, inactConn int
}

// schedulers are the IPVS schedulers Debian's kernel ships as modules. The
// kernel answers an unknown scheduler name with ENOENT (it fails to find the
// ip_vs_NAME module); the sim does the same so errors.Is(err, fs.ErrNotExist)
// reads the same on both dataplanes.
var schedulers = map[string]bool{
	"rr": true, "wrr": true, "lc": true, "wlc": true, "lblc": true, "lblcr": true,
	"dh": true, "sh": true, "sed": true, "nq": true, "mh": true, "fo": true, "ovf": true,
}

func validProtocol(p dataplane.Protocol) bool {
	return p == dataplane.TCP || p == dataplane.UDP || p == dataplane.SCTP
}

// checkService validates what the kernel checks on a service add or update.
func checkService(what string, s dataplane.VirtualServer) error {
	if !s.Address.IsValid() || !validProtocol(s.Protocol) {
		return errorf(syscall.EINVAL, "ipvs %s %s: invalid address or protocol", what, s.ServiceKey)
	}
	if !schedulers[s.Scheduler] {
		return errorf(syscall.ENOENT, "ipvs %s %s: unknown scheduler %q", what, s.ServiceKey, s.Scheduler)
	}
	if s.Address.Is6() && !s.Address.Is4In6() && s.Netmask > 128 {
		return errorf(syscall.EINVAL, "ipvs %s %s: IPv6 netmask %d above 128", what, s.ServiceKey, s.Netmask)
	}
	return nil
}

// ipvsFault checks faults for an operation on a service (or on nothing, for
// a full listing). The key is formatted only when a fault targets op.
func (k *Kernel) ipvsFault(op dataplane.Op, what string, key *dataplane.ServiceKey) error {
	if !k.faulty(op) {
		return nil
	}
	obj := ""
	if key != nil {
		obj = key.String()
	}
	if err := k.fault(op, obj); err != nil {
		return errorf(err, "ipvs %s %s", what, obj)
	}
	return nil
}

// Services lists every virtual server with its real servers, ordered by
// address, port and protocol; it is priced per call and per virtual server
// and real server read. FlagHashed is set on each, as the kernel reports it.
func (k *Kernel) Services() ([]dataplane.VirtualServer, error) {
	k.lock()
	defer k.unlock()
	items := len(k.services)
	for _, s := range k.services {
		items += len(s.order)
	}
	k.read(dataplane.OpIPVSList, items)
	if err := k.ipvsFault(dataplane.OpIPVSList, "list services", nil); err != nil {
		return nil, err
	}
	out := make([]dataplane.VirtualServer, 0, len(k.services))
	for _, s := range k.services {
		vs := s.vs
		vs.Flags |= dataplane.FlagHashed
		vs.Destinations = s.realServers()
		out = append(out, vs)
	}
	slices.SortFunc(out, func(a, b dataplane.VirtualServer) int { return compareKeys(a.ServiceKey, b.ServiceKey) })
	return out, nil
}

// Service reads one virtual server, priced as a listing of one item.
func (k *Kernel) Service(key dataplane.ServiceKey) (dataplane.VirtualServer, error) {
	k.lock()
	defer k.unlock()
	k.read(dataplane.OpIPVSList, 1)
	if err := k.ipvsFault(dataplane.OpIPVSList, "get service", &key); err != nil {
		return dataplane.VirtualServer{}, err
	}
	s, ok := k.services[key]
	if !ok {
		return dataplane.VirtualServer{}, errorf(syscall.ENOENT, "ipvs get service %s", key)
	}
	vs := s.vs
	vs.Flags |= dataplane.FlagHashed
	return vs, nil
}

func compareKeys(a, b dataplane.ServiceKey) int {
	if c := a.Address.Compare(b.Address); c != 0 {
		return c
	}
	if a.Port != b.Port {
		return int(a.Port) - int(b.Port)
	}
	switch {
	case a.Protocol < b.Protocol:
		return -1
	case a.Protocol > b.Protocol:
		return 1
	}
	return 0
}

func (k *Kernel) AddService(s dataplane.VirtualServer) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpIPVSServiceAdd, 1)
	if err := k.ipvsFault(dataplane.OpIPVSServiceAdd, "add service", &s.ServiceKey); err != nil {
		return err
	}
	if err := checkService("add service", s); err != nil {
		return err
	}
	if _, ok := k.services[s.ServiceKey]; ok {
		return errorf(syscall.EEXIST, "ipvs add service %s", s.ServiceKey)
	}
	s.Flags &^= dataplane.FlagHashed
	s.Destinations = nil
	k.services[s.ServiceKey] = &ipvsService{vs: s}
	return nil
}

func (k *Kernel) UpdateService(s dataplane.VirtualServer) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpIPVSServiceUpdate, 1)
	if err := k.ipvsFault(dataplane.OpIPVSServiceUpdate, "update service", &s.ServiceKey); err != nil {
		return err
	}
	if err := checkService("update service", s); err != nil {
		return err
	}
	svc, ok := k.services[s.ServiceKey]
	if !ok {
		return errorf(syscall.ENOENT, "ipvs update service %s", s.ServiceKey)
	}
	s.Flags &^= dataplane.FlagHashed
	s.Destinations = nil
	svc.vs = s
	return nil
}

func (k *Kernel) DeleteService(key dataplane.ServiceKey) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpIPVSServiceDelete, 1)
	if err := k.ipvsFault(dataplane.OpIPVSServiceDelete, "delete service", &key); err != nil {
		return err
	}
	if _, ok := k.services[key]; !ok {
		return errorf(syscall.ENOENT, "ipvs delete service %s", key)
	}
	delete(k.services, key)
	return nil
}

// Destinations lists a service's real servers in the kernel's list order
// (newest first), with their connection counters.
func (k *Kernel) Destinations(key dataplane.ServiceKey) ([]dataplane.RealServer, error) {
	k.lock()
	defer k.unlock()
	svc := k.services[key]
	n := 0
	if svc != nil {
		n = len(svc.order)
	}
	k.read(dataplane.OpIPVSDestinationList, n)
	if err := k.ipvsFault(dataplane.OpIPVSDestinationList, "list destinations", &key); err != nil {
		return nil, err
	}
	if svc == nil {
		return nil, errorf(syscall.ENOENT, "ipvs list destinations %s", key)
	}
	return svc.realServers(), nil
}

func (s *ipvsService) realServers() []dataplane.RealServer {
	out := make([]dataplane.RealServer, len(s.order))
	for i, d := range s.order {
		out[i] = d.realServer()
	}
	return out
}

func (d *ipvsDest) realServer() dataplane.RealServer {
	return dataplane.RealServer{
		Address: d.ap.Addr(), Port: d.ap.Port(), Weight: d.weight,
		ActiveConns: d.activeConns, InactiveConns: d.inactConn,
	}
}

// destination finds the service and checks a destination the way the kernel
// does: the service must exist, the address must be of its family, the
// weight not negative (ERANGE, as ip_vs_ctl answers).
func (k *Kernel) destination(op dataplane.Op, what string, key dataplane.ServiceKey, r dataplane.RealServer) (*ipvsService, error) {
	if k.faulty(op) {
		if err := k.fault(op, key.String()+" "+r.AddrPort().String()); err != nil {
			return nil, errorf(err, "ipvs %s %s %s", what, key, r.AddrPort())
		}
	}
	svc, ok := k.services[key]
	if !ok {
		return nil, errorf(syscall.ENOENT, "ipvs %s %s %s: no such service", what, key, r.AddrPort())
	}
	if !r.Address.IsValid() || dataplane.FamilyOf(r.Address) != dataplane.FamilyOf(key.Address) {
		return nil, errorf(syscall.EINVAL, "ipvs %s %s %s: destination family differs from the service's", what, key, r.AddrPort())
	}
	if r.Weight < 0 {
		return nil, errorf(syscall.ERANGE, "ipvs %s %s %s: negative weight %d", what, key, r.AddrPort(), r.Weight)
	}
	return svc, nil
}

func (k *Kernel) AddDestination(key dataplane.ServiceKey, r dataplane.RealServer) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpIPVSDestinationAdd, 1)
	svc, err := k.destination(dataplane.OpIPVSDestinationAdd, "add destination", key, r)
	if err != nil {
		return err
	}
	ap := r.AddrPort()
	if svc.find(ap) != nil {
		return errorf(syscall.EEXIST, "ipvs add destination %s %s", key, ap)
	}
	svc.add(&ipvsDest{ap: ap, weight: r.Weight})
	return nil
}

func (k *Kernel) UpdateDestination(key dataplane.ServiceKey, r dataplane.RealServer) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpIPVSDestinationUpdate, 1)
	svc, err := k.destination(dataplane.OpIPVSDestinationUpdate, "update destination", key, r)
	if err != nil {
		return err
	}
	d := svc.find(r.AddrPort())
	if d == nil {
		return errorf(syscall.ENOENT, "ipvs update destination %s %s", key, r.AddrPort())
	}
	d.weight = r.Weight
	return nil
}

// DeleteDestination removes a real server; its connection counters go with it.
func (k *Kernel) DeleteDestination(key dataplane.ServiceKey, r dataplane.RealServer) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpIPVSDestinationDelete, 1)
	svc, err := k.destination(dataplane.OpIPVSDestinationDelete, "delete destination", key, r)
	if err != nil {
		return err
	}
	d := svc.find(r.AddrPort())
	if d == nil {
		return errorf(syscall.ENOENT, "ipvs delete destination %s %s", key, r.AddrPort())
	}
	svc.remove(d)
	return nil
}

// SetConnections sets a destination's connection counters, which the kernel
// keeps and the proxier reads to decide when a draining (weight 0) endpoint
// can go: tests model connections that outlive an endpoint's readiness.
func (k *Kernel) SetConnections(svc dataplane.ServiceKey, dst netip.AddrPort, active, inactive int) error {
	k.lock()
	defer k.unlock()
	s, ok := k.services[svc]
	if !ok {
		return errorf(syscall.ENOENT, "sim: set connections %s %s: no such service", svc, dst)
	}
	d := s.find(dst)
	if d == nil {
		return errorf(syscall.ENOENT, "sim: set connections %s %s: no such destination", svc, dst)
	}
	if active < 0 || inactive < 0 {
		return errorf(syscall.EINVAL, "sim: set connections %s %s: negative count", svc, dst)
	}
	d.activeConns, d.inactConn = active, inactive
	return nil
}
