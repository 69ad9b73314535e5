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

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/scenarios/backend"
)

func newRand(seed int64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), stream))
}

// targetsOf lists the probe targets of a service's first port from one
// client (from): one per address of each requested kind and proxier family.
func targetsOf(svc *v1.Service, kinds []string, from string, fams []dataplane.Family, nodeAddrs []netip.Addr) []record.Target {
	if len(svc.Spec.Ports) == 0 {
		return nil
	}
	port := svc.Spec.Ports[0]
	proto := dataplane.Protocol(port.Protocol)
	if proto == "" {
		proto = dataplane.TCP
	}
	name := fmt.Sprintf("%s/%s:%s", svc.Namespace, svc.Name, port.Name)
	var out []record.Target
	add := func(kind, addr string, p int32) {
		a, err := netip.ParseAddr(addr)
		if err != nil || p <= 0 || !slices.Contains(fams, dataplane.FamilyOf(a)) {
			return
		}
		t := record.Target{
			Service:  name,
			Kind:     kind,
			Address:  netip.AddrPortFrom(a.Unmap(), uint16(p)).String(),
			Protocol: proto,
		}
		if from != record.FromPod {
			t.From = from // a pod's is left out, as files without it read
		}
		out = append(out, t)
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

// probeTargets chooses the probed addresses from the cluster as built,
// whose services probes.services names all exist (build checks them
// first): validation counts them, and the run probes them.
func (s *Scenario) probeTargets() []record.Target {
	p := s.Probes
	if p.Services.Empty() {
		return nil
	}
	byKey := map[string]int{}
	var keys []string
	for i, svc := range s.set.Services {
		k := key(svc.Namespace, svc.Name)
		byKey[k] = i
		keys = append(keys, k)
	}
	chosen := slices.Clone(p.Services.Names)
	if p.Services.Count > 0 {
		// An own random source: choosing probes must not change the cluster's
		// objects. A count comes on top of the names, from the other services.
		named := map[string]bool{}
		for _, k := range chosen {
			named[k] = true
		}
		rest := slices.DeleteFunc(keys, func(k string) bool { return named[k] })
		rng := newRand(s.Seed, 0x70726f6265)
		idx := rng.Perm(len(rest))[:min(p.Services.Count, len(rest))]
		slices.Sort(idx)
		for _, i := range idx {
			chosen = append(chosen, rest[i])
		}
	}
	var nodeAddrs []netip.Addr
	for _, a := range s.Cluster.Node.Addresses {
		if pf, err := netip.ParsePrefix(a); err == nil {
			nodeAddrs = append(nodeAddrs, pf.Addr())
		}
	}
	var out []record.Target
	for _, k := range chosen {
		for _, from := range p.From {
			out = append(out, targetsOf(s.set.Services[byKey[k]], p.Kinds, from, s.Proxier.Families, nodeAddrs)...)
		}
	}
	return out
}

// serviceOf returns the namespace/name part of a target's service.
func serviceOf(t record.Target) string {
	k, _, _ := strings.Cut(t.Service, ":")
	return k
}

// prober probes each target once per interval. The driver decides when:
// on the wall clock each target from a goroutine of its own (run), one
// attempt at a time, so that a target whose attempts time out does not hold
// back the others' (in one loop over the targets, a switch that timed out
// every target's attempts was seen through one attempt per timeout); on the
// modeled clock in rounds of one attempt per target, in order, at each due
// instant (round: a round then sees the kernel as it is at that instant,
// mid-sync included). The rate is bounded by the validated interval and
// target count, the duration by the run.
type prober struct {
	interval time.Duration
	targets  []record.Target
	serving  []backend.Serving
	backend  backend.Backend
	fail     context.CancelCauseFunc
	now      func() time.Time

	mu        sync.Mutex
	used      bool
	attempts  []int
	first     []time.Time // each target's first attempt
	firstOK   []time.Time // and first success
	failing   []bool      // whether the target's last attempt failed
	recovered [][]time.Time
	total     int // attempts over all targets
	failures  []record.Failure
}

func newProber(interval time.Duration, targets []record.Target, r *replay, b backend.Backend, fail context.CancelCauseFunc) *prober {
	n := len(targets)
	p := &prober{interval: interval, targets: targets, backend: b, fail: fail, now: r.now,
		attempts: make([]int, n), first: make([]time.Time, n), firstOK: make([]time.Time, n),
		failing: make([]bool, n), recovered: make([][]time.Time, n)}
	for _, t := range targets {
		p.serving = append(p.serving, r.servingFor(serviceOf(t)))
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

// round makes one attempt per target, in order; false when probing must
// stop (the run is over, or the backend failed and failed the run).
func (p *prober) round(ctx context.Context) bool {
	p.use()
	for i := range p.targets {
		if !p.attempt(ctx, i) {
			return false
		}
	}
	return true
}

// run probes every target every interval, each from a goroutine of its
// own, until probing must stop. An attempt that takes longer than the
// interval delays that target's next one, as Disrupt assumes.
func (p *prober) run(ctx context.Context) {
	p.use()
	var wg sync.WaitGroup
	for i := range p.targets {
		wg.Go(func() {
			tick := time.NewTicker(p.interval)
			defer tick.Stop()
			for p.attempt(ctx, i) {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
}

func (p *prober) use() {
	p.mu.Lock()
	p.used = true
	p.mu.Unlock()
}

// attempt makes target i's attempt and records it; false when probing must
// stop.
func (p *prober) attempt(ctx context.Context, i int) bool {
	if ctx.Err() != nil {
		return false
	}
	t := p.targets[i]
	at := p.now()
	outcome, latency, err := p.backend.Probe(ctx, t, p.serving[i])
	if err != nil {
		if ctx.Err() == nil {
			p.fail(fmt.Errorf("probe %s %s: %w", t.Kind, t.Address, err))
		}
		return false
	}
	p.record(i, at, outcome, latency)
	return true
}

// record adds target i's attempt made at at.
func (p *prober) record(i int, at time.Time, outcome string, latency time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts[i]++
	p.total++
	if p.first[i].IsZero() {
		p.first[i] = at
	}
	if outcome != backend.ProbeOK {
		p.failures = append(p.failures, record.Failure{Target: i, Time: at, Outcome: outcome, Seconds: latency.Seconds()})
		p.failing[i] = true
		return
	}
	if p.firstOK[i].IsZero() {
		p.firstOK[i] = at
	}
	if p.failing[i] {
		p.recovered[i] = append(p.recovered[i], at)
		p.failing[i] = false
	}
}

// attemptsSoFar counts the attempts made so far, over all targets.
func (p *prober) attemptsSoFar() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// results returns the probes' record, or nil when probing never ran.
func (p *prober) results() *record.Probes {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.used {
		return nil
	}
	out := &record.Probes{
		Basis:    p.backend.Basis(),
		Interval: p.interval.Seconds(),
		Failures: append([]record.Failure{}, p.failures...),
	}
	for i, t := range p.targets {
		t.Attempts = p.attempts[i]
		t.First, t.FirstOK = p.first[i], p.firstOK[i]
		t.Recovered = slices.Clone(p.recovered[i])
		out.Attempts += t.Attempts
		out.Targets = append(out.Targets, t)
	}
	return out
}
