package scenarios

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/results"
)

func newRand(seed int64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), stream))
}

// targetsOf lists the probe targets of a service's first port: one per
// address of each requested kind and proxier family.
func targetsOf(svc *v1.Service, kinds []string, fams []dataplane.Family, nodeAddrs []netip.Addr) []results.Target {
	if len(svc.Spec.Ports) == 0 {
		return nil
	}
	port := svc.Spec.Ports[0]
	proto := dataplane.Protocol(port.Protocol)
	if proto == "" {
		proto = dataplane.TCP
	}
	name := fmt.Sprintf("%s/%s:%s", svc.Namespace, svc.Name, port.Name)
	var out []results.Target
	add := func(kind, addr string, p int32) {
		a, err := netip.ParseAddr(addr)
		if err != nil || p <= 0 || !slices.Contains(fams, dataplane.FamilyOf(a)) {
			return
		}
		out = append(out, results.Target{
			Service:  name,
			Kind:     kind,
			Address:  netip.AddrPortFrom(a.Unmap(), uint16(p)).String(),
			Protocol: proto,
		})
	}
	for _, kind := range kinds {
		switch kind {
		case "clusterip":
			for _, ip := range svc.Spec.ClusterIPs {
				add(kind, ip, port.Port)
			}
		case "nodeport":
			if svc.Spec.Type == v1.ServiceTypeNodePort || svc.Spec.Type == v1.ServiceTypeLoadBalancer {
				for _, a := range nodeAddrs {
					add(kind, a.String(), port.NodePort)
				}
			}
		case "external":
			for _, ip := range svc.Spec.ExternalIPs {
				add(kind, ip, port.Port)
			}
		case "loadbalancer":
			if svc.Spec.Type == v1.ServiceTypeLoadBalancer {
				for _, in := range svc.Status.LoadBalancer.Ingress {
					add(kind, in.IP, port.Port)
				}
			}
		}
	}
	return out
}

// serviceOf returns the namespace/name part of a target's service.
func serviceOf(t results.Target) string {
	k, _, _ := strings.Cut(t.Service, ":")
	return k
}

// prober makes rounds of attempts, one per target, while probes are on. The
// rate is bounded by the validated interval and target count, the duration
// by the run. Free-running, a goroutine makes a round every interval; in
// lockstep the run makes each round when modeled time reaches it (stepRound),
// between syncs, so that what probes leave in the kernel (UDP conntrack
// flows, the scheduler's position) is the same on every run.
type prober struct {
	interval time.Duration
	targets  []results.Target
	ready    []func(netip.AddrPort) bool
	backend  Backend
	fail     context.CancelCauseFunc
	now      func() time.Time
	stepped  bool      // lockstep: rounds are made by stepRound
	next     time.Time // stepped: when the next round is due; zero while off

	mu       sync.Mutex
	used     bool
	attempts []int
	failures []results.Failure
	cancel   context.CancelFunc
	done     chan struct{}
}

func newProber(interval time.Duration, targets []results.Target, r *replay, b Backend, fail context.CancelCauseFunc, stepped bool) *prober {
	p := &prober{interval: interval, targets: targets, backend: b, fail: fail, now: r.now, stepped: stepped, attempts: make([]int, len(targets))}
	for _, t := range targets {
		p.ready = append(p.ready, r.readyFunc(serviceOf(t)))
	}
	return p
}

// services lists the probed services, which deleteServices leaves alone.
func (p *prober) services() []string {
	var out []string
	for _, t := range p.targets {
		out = append(out, serviceOf(t))
	}
	return out
}

func (p *prober) on(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil || !p.next.IsZero() || len(p.targets) == 0 {
		return
	}
	p.used = true
	if p.stepped {
		p.next = p.now()
		return
	}
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	go p.loop(ctx, p.done)
}

func (p *prober) off() {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.cancel, p.done, p.next = nil, nil, time.Time{}
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (p *prober) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for p.round(ctx) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// nextRound returns when a stepped prober's next round is due.
func (p *prober) nextRound() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next, !p.next.IsZero()
}

// stepRound makes a stepped prober's round if one is due at now, and
// reports whether it did.
func (p *prober) stepRound(ctx context.Context, now time.Time) bool {
	p.mu.Lock()
	due := !p.next.IsZero() && !p.next.After(now)
	if due {
		p.next = p.next.Add(p.interval)
	}
	p.mu.Unlock()
	if due {
		p.round(ctx)
	}
	return due
}

// round makes one attempt per target, in order; false when probing must
// stop (the run is over, or the backend failed and failed the run).
func (p *prober) round(ctx context.Context) bool {
	for i, t := range p.targets {
		if ctx.Err() != nil {
			return false
		}
		at := p.now()
		outcome, latency, err := p.backend.Probe(ctx, t, p.ready[i])
		if err != nil {
			if ctx.Err() == nil {
				p.fail(fmt.Errorf("probe %s %s: %w", t.Kind, t.Address, err))
			}
			return false
		}
		p.mu.Lock()
		p.attempts[i]++
		if outcome != ProbeOK {
			p.failures = append(p.failures, results.Failure{Target: i, Time: at, Outcome: outcome, Seconds: latency.Seconds()})
		}
		p.mu.Unlock()
	}
	return true
}

// results returns the probes' record, or nil when probing never ran.
func (p *prober) results() *results.Probes {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.used {
		return nil
	}
	out := &results.Probes{
		Basis:    p.backend.Basis(),
		Interval: p.interval.Seconds(),
		Failures: append([]results.Failure{}, p.failures...),
	}
	for i, t := range p.targets {
		t.Attempts = p.attempts[i]
		out.Attempts += t.Attempts
		out.Targets = append(out.Targets, t)
	}
	return out
}
