package testbed

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel"
	"github.com/kpsim/kpsim/kernel/netns"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/record"
)

// DefaultProbeTimeout is how long one probe attempt waits for a connection
// and an answer before it counts as a timeout.
const DefaultProbeTimeout = 500 * time.Millisecond

// BackendOptions configure a kernel scenario backend.
type BackendOptions struct {
	Kernel   kernel.Options
	Needs    kernel.Needs // what the run's proxier needs of the kernel
	Topology TopologyConfig
	// ProbeTimeout bounds every attempt; zero means DefaultProbeTimeout.
	ProbeTimeout time.Duration
}

// Serving is what the API says of a probed service's endpoints right now:
// which of their pods answer (objects.Serving).
type Serving interface {
	// Serves reports whether an endpoint (address and port) would answer.
	Serves(netip.AddrPort) bool
	// Endpoints lists every endpoint that serves, in no particular order.
	Endpoints() []netip.AddrPort
}

// Backend runs a scenario on this kernel: the proxier programs the node
// namespace (the process's own, which RunIsolated made), probes are real
// connections from the client namespace, and the probe services' endpoints
// are echo servers in the pods namespace. Every other endpoint stays a
// synthetic address nothing routes to, so a run can have thousands of
// services and still open only a handful of servers.
//
// A probe service's endpoint has a server exactly while the API says it
// serves (objects.Serving: ready, or terminating and still serving), the
// rule the in-memory kernel's probes judge by: a connection that a proxier
// sends to an endpoint that does not serve fails in both. Servers follow
// the API lazily: before each attempt, the endpoints the target's virtual
// server points at and the servers already running are checked against
// what the API says (the Serving the replay hands to Probe), so no
// attempt ever meets a server that is out of date, and the replay needs no
// hook into the backend.
type Backend struct {
	k       *kernel.Kernel
	topo    *Topology
	servers *Servers
	prober  *Prober

	mu      sync.Mutex
	running map[string]map[serverKey]bool // servers by probed service (namespace/name)
}

// NewBackend opens the kernel dataplane and builds the topology. It refuses
// to run outside an isolated process, and on a kernel that lacks what a
// kernel scenario needs it fails at once, naming every missing capability.
func NewBackend(opts BackendOptions) (b *Backend, err error) {
	if !netns.Isolated() {
		return nil, netns.ErrNotIsolated
	}
	if missing := kernel.Detect().MissingFor(dataplane.BackendKernel, opts.Needs); len(missing) > 0 {
		return nil, fmt.Errorf("this kernel cannot run kernel scenarios; missing: %s (run `kpsim doctor`)", strings.Join(missing, "; "))
	}
	if opts.ProbeTimeout == 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	b = &Backend{running: map[string]map[serverKey]bool{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.Close())
			b = nil
		}
	}()
	// The topology first: the node's eth0 and its addresses must exist
	// before the proxier lists the node's addresses for NodePorts.
	if b.topo, err = NewTopology(opts.Topology); err != nil {
		return b, err
	}
	if b.k, err = kernel.New(opts.Kernel); err != nil {
		return b, err
	}
	b.servers = NewServers(b.topo.Pods)
	b.prober = NewProber(b.topo.Client, opts.ProbeTimeout)
	return b, nil
}

// Dataplane is the node namespace's kernel.
func (b *Backend) Dataplane() dataplane.Dataplane { return b.k.Dataplane() }

// Basis: every duration and probe outcome of a kernel run is measured.
func (b *Backend) Basis() string { return record.Measured }

// UseClock says no: a real kernel takes the time it takes.
func (b *Backend) UseClock(dataplane.Clock) bool { return false }

// Prepare starts servers for the probe targets' serving endpoints in the
// initial cluster, so the first attempts find them.
func (b *Backend) Prepare(_ context.Context, c *objects.Set, targets []record.Target) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ports := map[string][]probedPort{}
	for _, t := range targets {
		if t.From == record.FromNode {
			return fmt.Errorf("probe %s %s from the node: the kernel backend probes from a pod only", t.Kind, t.Address)
		}
		svc, port, err := splitTargetService(t.Service)
		if err != nil {
			return err
		}
		ports[svc] = append(ports[svc], probedPort{port, t.Protocol})
	}
	for _, s := range c.EndpointSlices {
		svc := s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
		if len(ports[svc]) == 0 {
			continue
		}
		for _, k := range servingEndpoints(s, ports[svc]) {
			if err := b.start(svc, k); err != nil {
				return err
			}
		}
	}
	return nil
}

type probedPort struct {
	name  string
	proto dataplane.Protocol
}

// splitTargetService splits a record.Target's "namespace/name:port-name".
func splitTargetService(s string) (svc, port string, err error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 || !strings.Contains(s[:i], "/") {
		return "", "", fmt.Errorf("probe target service %q: want namespace/name:port-name", s)
	}
	return s[:i], s[i+1:], nil
}

// servingEndpoints lists the endpoint address:ports of the probed ports whose
// pods answer by what the API says (objects.Serving: a terminating pod that
// still serves answers), by the first address of each endpoint, as the
// replay's servingOf does.
func servingEndpoints(s *discoveryv1.EndpointSlice, ports []probedPort) []serverKey {
	var out []serverKey
	for i := range s.Endpoints {
		addr, ok := objects.EndpointAddress(&s.Endpoints[i])
		if !ok || !objects.Serving(s.Endpoints[i].Conditions) {
			continue // no address (the loader rejects these), or nothing serves
		}
		for _, p := range s.Ports {
			if p.Port == nil || *p.Port <= 0 || *p.Port > 65535 {
				continue
			}
			name, proto := "", dataplane.TCP
			if p.Name != nil {
				name = *p.Name
			}
			if p.Protocol != nil {
				proto = dataplane.Protocol(*p.Protocol)
			}
			if !slices.Contains(ports, probedPort{name, proto}) {
				continue
			}
			k := serverKey{netip.AddrPortFrom(addr, uint16(*p.Port)), proto}
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

// start opens a server for one of svc's endpoints (b.mu held).
func (b *Backend) start(svc string, k serverKey) error {
	if b.running[svc][k] {
		return nil
	}
	if err := b.topo.AddPodAddress(k.ep.Addr()); err != nil {
		return fmt.Errorf("endpoint %s of %s: %w", k.ep, svc, err)
	}
	if err := b.servers.Start(k.ep, k.proto); err != nil {
		return errors.Join(fmt.Errorf("endpoint %s of %s: %w", k.ep, svc, err), b.topo.RemovePodAddress(k.ep.Addr()))
	}
	if b.running[svc] == nil {
		b.running[svc] = map[serverKey]bool{}
	}
	b.running[svc][k] = true
	return nil
}

// stop closes a server of svc's (b.mu held).
func (b *Backend) stop(svc string, k serverKey) error {
	b.servers.Stop(k.ep, k.proto)
	delete(b.running[svc], k)
	if err := b.topo.RemovePodAddress(k.ep.Addr()); err != nil {
		return fmt.Errorf("endpoint %s of %s: %w", k.ep, svc, err)
	}
	return nil
}

// reconcile makes the servers of target's service agree with the API before
// an attempt: every endpoint the API says serves, every endpoint the virtual
// server points at (on a kernel with IPVS), and every server running, is
// checked against serving. (A proxier may point at an endpoint whose pod
// the API no longer says serves: it must find no server there.) A round's
// attempts run at once; their reconciles, one at a time.
func (b *Backend) reconcile(target record.Target, addr netip.AddrPort, serving Serving) error {
	svc, _, err := splitTargetService(target.Service)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var dests []dataplane.RealServer
	if b.k.HasIPVS() {
		key := dataplane.ServiceKey{Address: addr.Addr(), Port: addr.Port(), Protocol: target.Protocol}
		dests, err = b.k.Dataplane().IPVS.Destinations(key)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("probe %s: %w", target.Address, err)
		}
	}
	candidates := map[serverKey]bool{}
	for k := range b.running[svc] {
		if k.proto == target.Protocol {
			candidates[k] = true
		}
	}
	for _, d := range dests {
		candidates[serverKey{d.AddrPort(), target.Protocol}] = true
	}
	for _, ep := range serving.Endpoints() {
		candidates[serverKey{ep, target.Protocol}] = true
	}
	var errs []error
	for k := range candidates {
		switch want := serving.Serves(k.ep); {
		case want && !b.running[svc][k]:
			errs = append(errs, b.start(svc, k))
		case !want && b.running[svc][k]:
			errs = append(errs, b.stop(svc, k))
		}
	}
	return errors.Join(errs...)
}

// Probe makes one real attempt against target from the client namespace.
// For TCP targets a long-lived connection is exercised in the same round; if
// the new connection succeeded but the long-lived one was reset or stalled,
// the attempt fails with that outcome: a drop of an established connection
// (graceful termination gone wrong, a virtual server or address deleted
// under it) is disruption as much as a refused connection is.
func (b *Backend) Probe(ctx context.Context, target record.Target, serving Serving) (string, time.Duration, error) {
	addr, err := netip.ParseAddrPort(target.Address)
	if err != nil {
		return "", 0, fmt.Errorf("probe target %s: address %q: %w", target.Service, target.Address, err)
	}
	if err := b.reconcile(target, addr, serving); err != nil {
		return "", 0, err
	}
	a, err := b.prober.Probe(ctx, addr, target.Protocol)
	if err != nil {
		return "", 0, err
	}
	if ctx.Err() != nil {
		return "", 0, ctx.Err() // the run was stopped: not the service's failure
	}
	if a.Outcome == OutcomeOK && a.Long != "" {
		return a.Long, a.Latency, nil
	}
	return a.Outcome, a.Latency, nil
}

// Close stops probes and servers and deletes the client and pods
// namespaces. The node namespace's IPVS, ipsets and rules go with the
// process.
func (b *Backend) Close() error {
	if b.prober != nil {
		b.prober.Close()
	}
	if b.servers != nil {
		b.servers.Close()
	}
	var err error
	if b.topo != nil {
		err = b.topo.Close()
	}
	if b.k != nil {
		b.k.Close()
	}
	return err
}
