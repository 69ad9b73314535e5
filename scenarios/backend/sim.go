package backend

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel/testbed"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/sim"
)

// Sim runs a scenario on the in-memory kernel. Probes ask the kernel's model
// (sim.Kernel.Probe) whether a connection would succeed.
type Sim struct {
	k         *sim.Kernel
	profile   *sim.Profile
	timeScale float64
	clients   map[dataplane.Family]netip.Addr // a pod on this node, per family
	port      atomic.Uint32                   // next ephemeral client port for TCP and SCTP
}

var _ interface {
	Backend
	Profiled
} = (*Sim)(nil)

// NewSim builds the in-memory kernel s describes: its cost profile, time
// scale, ipset strategy and node addresses.
func NewSim(s Spec) (*Sim, error) {
	prof, err := sim.LoadProfile(s.Profile)
	if err != nil {
		return nil, fmt.Errorf("sim backend: %w", err)
	}
	var addrs []dataplane.InterfaceAddr
	for _, p := range s.NodeAddresses {
		addrs = append(addrs, dataplane.InterfaceAddr{Link: "eth0", Prefix: p})
	}
	k, err := sim.New(sim.Options{
		Profile:       prof,
		TimeScale:     s.TimeScale,
		IPSetStrategy: s.IPSet,
		NodeAddresses: addrs,
	})
	if err != nil {
		return nil, fmt.Errorf("sim backend: %w", err)
	}
	b := &Sim{k: k, profile: prof, timeScale: s.TimeScale, clients: map[dataplane.Family]netip.Addr{}}
	for _, a := range s.Clients {
		b.clients[dataplane.FamilyOf(a)] = a
	}
	b.port.Store(32768)
	return b, nil
}

// Kernel returns the in-memory kernel, for tests that inspect its state.
func (b *Sim) Kernel() *sim.Kernel { return b.k }

func (b *Sim) Dataplane() dataplane.Dataplane { return b.k.Dataplane() }

// Prepare does nothing: the model needs no backend pods.
func (b *Sim) Prepare(context.Context, *objects.Set, []record.Target) error { return nil }

// Probe asks the model. A UDP client keeps one source port per target, like
// a resolver's socket, so conntrack entries it left behind are followed by
// its next datagram; TCP and SCTP use a fresh ephemeral port per attempt.
// The latency is the model's wall time, or none on the modeled clock, where
// a probe takes no time and a run repeats exactly.
func (b *Sim) Probe(_ context.Context, t record.Target, s Serving) (string, time.Duration, error) {
	dst, err := netip.ParseAddrPort(t.Address)
	if err != nil {
		return "", 0, fmt.Errorf("probe target %q: %w", t.Address, err)
	}
	start := time.Now()
	took := func() time.Duration {
		if b.k.Clocked() {
			return 0
		}
		return time.Since(start)
	}
	var outcome string
	if t.From == record.FromNode {
		_, outcome = b.k.ProbeFromNode(dst, t.Protocol, s.Serves)
		return outcome, took(), nil
	}
	client := b.clients[dataplane.FamilyOf(dst.Addr())]
	if !client.IsValid() {
		return "", 0, fmt.Errorf("probe %s: no pod CIDR of its family for the client", t.Address)
	}
	port := uint16(testbed.UDPClientPort)
	if t.Protocol != dataplane.UDP {
		port = uint16(32768 + b.port.Add(1)%28000)
	}
	_, outcome = b.k.Probe(netip.AddrPortFrom(client, port), dst, t.Protocol, s.Serves)
	return outcome, took(), nil
}

func (b *Sim) Basis() string { return record.Modeled }

// UseClock puts the kernel on the modeled clock at time scale 0; at any other
// scale its costs are slept, and time is the wall clock's.
func (b *Sim) UseClock(c dataplane.Clock) bool { return b.k.SetClock(c) == nil }

func (b *Sim) Close() error { return nil }

func (b *Sim) CostProfile() *record.ProfileRef {
	return &record.ProfileRef{Name: b.profile.Name, Source: b.profile.Source, TimeScale: b.timeScale, Releases: slices.Sorted(maps.Keys(b.profile.Releases))}
}
