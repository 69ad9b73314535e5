package kernel

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/scenarios/objects"
)

// DefaultProbeTimeout is how long one probe attempt waits for a connection
// and an answer before it counts as a timeout.
const DefaultProbeTimeout = time.Second

// BackendOptions configure a kernel scenario backend.
type BackendOptions struct {
	Kernel   Options
	Topology TopologyConfig
	// ProbeTimeout bounds every attempt; zero means DefaultProbeTimeout.
	ProbeTimeout time.Duration
}

// Backend runs a scenario on this kernel: the proxier programs the node
// namespace (the process's own, which RunIsolated made), probes are real
// connections from the client namespace, and the probe services' endpoints
// are echo servers in the pods namespace. Every other endpoint stays a
// synthetic address nothing routes to, so a run can have thousands of
// services and still open only a handful of servers.
type Backend struct {
	k       *Kernel
	topo    *Topology
	servers *Servers
	prober  *Prober

	mu     sync.Mutex
	probed map[string][]probedPort // by namespace/name of the Service
	slices map[string][]serverKey  // servers each EndpointSlice (namespace/name) runs
}

type probedPort struct {
	name  string
	proto dataplane.Protocol
}

// NewBackend opens the kernel dataplane and builds the topology. It refuses
// to run outside an isolated process, and on a kernel that lacks what a
// kernel scenario needs it fails at once, naming every missing capability.
func NewBackend(opts BackendOptions) (b *Backend, err error) {
	if !Isolated() {
		return nil, ErrNotIsolated
	}
	if missing := Detect().Missing("kernel"); len(missing) > 0 {
		return nil, fmt.Errorf("this kernel cannot run kernel scenarios; missing: %s (run `kpsim doctor`)", strings.Join(missing, "; "))
	}
	if opts.ProbeTimeout == 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	b = &Backend{probed: map[string][]probedPort{}, slices: map[string][]serverKey{}}
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
	if b.k, err = New(opts.Kernel); err != nil {
		return b, err
	}
	b.servers = NewServers(b.topo.Pods)
	b.prober = NewProber(b.topo.Client, opts.ProbeTimeout)
	return b, nil
}

// Dataplane is the node namespace's kernel.
func (b *Backend) Dataplane() dataplane.Dataplane { return b.k.Dataplane() }

// Basis: every duration and probe outcome of a kernel run is measured.
func (b *Backend) Basis() string { return results.Measured }

// Prepare starts servers for the probe targets' endpoints in the initial cluster.
func (b *Backend) Prepare(ctx context.Context, c *objects.Set, targets []results.Target) error {
	b.mu.Lock()
	for _, t := range targets {
		svc, port, err := splitTargetService(t.Service)
		if err != nil {
			b.mu.Unlock()
			return err
		}
		pp := probedPort{port, t.Protocol}
		if !containsPort(b.probed[svc], pp) {
			b.probed[svc] = append(b.probed[svc], pp)
		}
	}
	b.mu.Unlock()
	for _, s := range c.EndpointSlices {
		if err := b.EndpointSliceChanged(ctx, s, false); err != nil {
			return err
		}
	}
	return nil
}

func containsPort(ps []probedPort, p probedPort) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// splitTargetService splits a results.Target's "namespace/name:port-name".
func splitTargetService(s string) (svc, port string, err error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 || !strings.Contains(s[:i], "/") {
		return "", "", fmt.Errorf("probe target service %q: want namespace/name:port-name", s)
	}
	return s[:i], s[i+1:], nil
}

// EndpointSliceChanged starts servers for a probe service's endpoints that
// are new or serving again and stops those that are gone or no longer
// serving. Slices of other services are ignored.
func (b *Backend) EndpointSliceChanged(_ context.Context, s *discoveryv1.EndpointSlice, deleted bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	svc := s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
	ports := b.probed[svc]
	if len(ports) == 0 {
		return nil
	}
	key := s.Namespace + "/" + s.Name
	var want []serverKey
	if !deleted {
		want = servingEndpoints(s, ports)
	}
	have := b.slices[key]
	var errs []error
	for _, k := range have {
		if !containsKey(want, k) {
			b.servers.Stop(k.ep, k.proto)
			errs = append(errs, b.topo.RemovePodAddress(k.ep.Addr()))
		}
	}
	var running []serverKey
	for _, k := range have {
		if containsKey(want, k) {
			running = append(running, k)
		}
	}
	for _, k := range want {
		if containsKey(have, k) {
			continue
		}
		if err := b.topo.AddPodAddress(k.ep.Addr()); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := b.servers.Start(k.ep, k.proto); err != nil {
			errs = append(errs, err, b.topo.RemovePodAddress(k.ep.Addr()))
			continue
		}
		running = append(running, k)
	}
	if len(running) == 0 {
		delete(b.slices, key)
	} else {
		b.slices[key] = running
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("endpoints of %s (slice %s): %w", svc, key, err)
	}
	return nil
}

// servingEndpoints lists the endpoint address:ports of the probed ports that
// accept connections: serving (a terminating pod still serves until it
// exits), which the API defaults to ready, which it defaults to true.
func servingEndpoints(s *discoveryv1.EndpointSlice, ports []probedPort) []serverKey {
	var out []serverKey
	for _, ep := range s.Endpoints {
		c := ep.Conditions
		serving := c.Ready == nil || *c.Ready
		if c.Serving != nil {
			serving = *c.Serving
		}
		if !serving {
			continue
		}
		for _, p := range s.Ports {
			if p.Port == nil {
				continue
			}
			name, proto := "", dataplane.TCP
			if p.Name != nil {
				name = *p.Name
			}
			if p.Protocol != nil {
				proto = dataplane.Protocol(*p.Protocol)
			}
			if !containsPort(ports, probedPort{name, proto}) {
				continue
			}
			for _, a := range ep.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil || *p.Port <= 0 || *p.Port > 65535 {
					continue // the loader rejects these; nothing to serve
				}
				k := serverKey{netip.AddrPortFrom(addr.Unmap(), uint16(*p.Port)), proto}
				if !containsKey(out, k) {
					out = append(out, k)
				}
			}
		}
	}
	return out
}

func containsKey(ks []serverKey, k serverKey) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// Probe makes one real attempt against target from the client namespace.
// For TCP targets a long-lived connection is exercised in the same round; if
// the new connection succeeded but the long-lived one was reset or stalled,
// the attempt fails with that outcome: a drop of an established connection
// (graceful termination gone wrong, a virtual server or address deleted
// under it) is disruption as much as a refused connection is. ready is not
// consulted: whether a server answered is what the kernel says.
func (b *Backend) Probe(ctx context.Context, target results.Target, _ func(netip.AddrPort) bool) (string, time.Duration, error) {
	addr, err := netip.ParseAddrPort(target.Address)
	if err != nil {
		return "", 0, fmt.Errorf("probe target %s: address %q: %w", target.Service, target.Address, err)
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
