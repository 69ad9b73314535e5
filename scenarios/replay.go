package scenarios

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/scenarios/backend"
)

// clearActionsEvery bounds the fake clientset's action log, which otherwise
// keeps every request of the run (the proxier's: the replay writes to the
// API store directly).
const clearActionsEvery = 2000

// liveService is what the replay keeps of a live service it wrote. The
// objects themselves are held by the API (apiStore) and read back
// from it when a step needs them (currentService, currentSlices): a record
// of its own would hold the whole cluster once more for the whole run.
type liveService struct {
	namespace, name string
	// slices names the service's EndpointSlices (in its namespace).
	slices []string
	// known is what a synced proxier of each of the replay's families
	// (fams) counts of the service, as last written (see expect).
	known []expectation
}

// The resources the API keeps Services, EndpointSlices and Nodes under.
var (
	services       = v1.SchemeGroupVersion.WithResource("services")
	endpointSlices = discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
	nodes          = v1.SchemeGroupVersion.WithResource("nodes")
)

// expectation is what a fully synced proxier of one family knows: its
// sync records count service ports and their endpoints.
type expectation struct{ ports, endpoints int }

// replay is the API side of a run: a fake clientset the proxier's informers
// watch, and the replay's own record of every object it wrote. All writes
// come from the timeline goroutine; probes read the serving sets concurrently.
type replay struct {
	client *fake.Clientset
	api    *apiStore
	hub    *watchHub
	gen    *generator
	fams   []dataplane.Family
	// now is the run's clock: wall time, or modeled time in lockstep.
	now func() time.Time

	mu       sync.RWMutex
	services map[string]*liveService // namespace/name
	order    []string                // live services in creation order
	// serving holds, for each service a probe asks about (servingFor), the
	// endpoints the API says serve. No one asks about the others: a set per
	// service of the cluster would be held for nothing.
	serving   map[string]map[netip.AddrPort]bool
	probed    map[string]bool
	lastWrite time.Time
	writes    int
	objects   int            // live API objects: nodes, services, slices
	kinds     map[string]int // live API objects by kind
	// expected caches expect's answer per family, valid while writes is expectedAt.
	expected   map[dataplane.Family]expectation
	expectedAt int
}

func newReplay(s *Scenario, now func() time.Time) *replay {
	// NewSimpleClientset, not NewClientset: the latter applies objects
	// through managed fields and is some forty times slower per write.
	cs := fake.NewSimpleClientset() //nolint:staticcheck // see above
	r := &replay{
		client:   cs,
		hub:      newWatchHub(),
		gen:      s.gen,
		now:      now,
		services: map[string]*liveService{},
		serving:  map[string]map[netip.AddrPort]bool{},
		probed:   map[string]bool{},
		kinds:    map[string]int{},
	}
	for _, f := range s.Proxier.Families {
		r.fams = append(r.fams, dataplane.Family(f))
	}
	r.api = newAPIStore(s.Seed, r.hub)
	r.api.install(cs)
	return r
}

func key(ns, name string) string { return ns + "/" + name }

// Kinds of API object, as proxier.Options.Handlers names them.
const (
	kindService = "Service"
	kindSlice   = "EndpointSlice"
	kindNode    = "Node"
)

// wrote accounts one API write, which changed the number of live objects of
// kind by delta.
func (r *replay) wrote(kind string, delta int) {
	r.mu.Lock()
	r.lastWrite = r.now()
	r.writes++
	r.objects += delta
	r.kinds[kind] += delta
	trim := r.writes%clearActionsEvery == 0
	r.mu.Unlock()
	if trim {
		r.client.ClearActions()
	}
}

// writeCount returns how many API writes the replay has made, and how many objects live.
func (r *replay) writeCount() (writes, objects int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.writes, r.objects
}

// kindCounts returns how many objects of each kind live.
func (r *replay) kindCounts() map[string]int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return maps.Clone(r.kinds)
}

// stamp records when a slice changed, as the EndpointSlice controller does,
// so the proxier can report network programming latency per change.
func (r *replay) stamp(eps *discoveryv1.EndpointSlice) {
	if eps.Annotations == nil {
		eps.Annotations = map[string]string{}
	}
	eps.Annotations[v1.EndpointsLastChangeTriggerTime] = r.now().Format(time.RFC3339Nano)
}

// createNodes creates the nodes of the set (the proxier reads its own node's addresses and labels).
func (r *replay) createNodes(set *objects.Set) error {
	for _, n := range set.Nodes {
		if err := r.api.write(nodes, n, watch.Added); err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		r.wrote(kindNode, 1)
	}
	return nil
}

// createService creates a service and then its slices. It stamps the slices
// in place, not copies: they are the scenario's generated cluster, which a
// scenario runs once, or new ones, and the API store keeps a copy of
// its own.
func (r *replay) createService(svc *v1.Service, eps []*discoveryv1.EndpointSlice) error {
	if err := r.api.write(services, svc, watch.Added); err != nil {
		return fmt.Errorf("create service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	r.wrote(kindService, 1)
	ls := &liveService{namespace: svc.Namespace, name: svc.Name}
	for _, s := range eps {
		r.stamp(s)
		if err := r.api.write(endpointSlices, s, watch.Added); err != nil {
			return fmt.Errorf("create endpointslice %s/%s: %w", s.Namespace, s.Name, err)
		}
		r.wrote(kindSlice, 1)
		ls.slices = append(ls.slices, s.Name)
	}
	k := key(svc.Namespace, svc.Name)
	r.mu.Lock()
	r.services[k] = ls
	r.order = append(r.order, k)
	r.mu.Unlock()
	r.observe(k, svc, eps)
	return nil
}

// createOrphan creates a slice that belong to no service of the set (an
// export may hold them); they are written but not modelled. Like
// createService, it stamps the set's own object.
func (r *replay) createOrphan(s *discoveryv1.EndpointSlice) error {
	r.stamp(s)
	if err := r.api.write(endpointSlices, s, watch.Added); err != nil {
		return fmt.Errorf("create endpointslice %s/%s: %w", s.Namespace, s.Name, err)
	}
	r.wrote(kindSlice, 1)
	return nil
}

// updateSlice writes a changed slice of a live service svc: current holds
// the service's slices as the API has them (currentSlices), slice i changed.
func (r *replay) updateSlice(svcKey string, svc *v1.Service, current []*discoveryv1.EndpointSlice, i int) error {
	s := current[i]
	r.stamp(s)
	if err := r.api.write(endpointSlices, s, watch.Modified); err != nil {
		return fmt.Errorf("update endpointslice %s/%s: %w", s.Namespace, s.Name, err)
	}
	r.wrote(kindSlice, 0)
	r.observe(svcKey, svc, current)
	return nil
}

// currentService reads a live service back from the API: a copy.
func (r *replay) currentService(ls *liveService) (*v1.Service, error) {
	return apiGet[*v1.Service](r, services, ls.namespace, ls.name)
}

// currentSlices reads a live service's slices back from the API, in the
// order they were created: copies, the caller's to change.
func (r *replay) currentSlices(ls *liveService) ([]*discoveryv1.EndpointSlice, error) {
	out := make([]*discoveryv1.EndpointSlice, 0, len(ls.slices))
	for _, name := range ls.slices {
		s, err := apiGet[*discoveryv1.EndpointSlice](r, endpointSlices, ls.namespace, name)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// apiGet reads a copy of an object from the API store directly: the
// replay's own read, neither an API request of the proxier's nor an action
// to record.
func apiGet[T runtime.Object](r *replay, gvr schema.GroupVersionResource, ns, name string) (T, error) {
	var zero T
	o, err := r.api.get(gvr, ns, name)
	if err != nil {
		return zero, fmt.Errorf("read %s %s/%s: %w", gvr.Resource, ns, name, err)
	}
	t, ok := o.(T)
	if !ok {
		return zero, fmt.Errorf("read %s %s/%s: the API holds a %T", gvr.Resource, ns, name, o)
	}
	return t, nil
}

// deleteService deletes a service, then its slices (the garbage collector's order).
func (r *replay) deleteService(k string) error {
	r.mu.Lock()
	ls := r.services[k]
	delete(r.services, k)
	r.order = slices.DeleteFunc(r.order, func(x string) bool { return x == k })
	delete(r.serving, k)
	r.mu.Unlock()
	if ls == nil {
		return fmt.Errorf("delete service %s: not live", k)
	}
	if err := r.api.remove(services, ls.namespace, ls.name); err != nil {
		return fmt.Errorf("delete service %s: %w", k, err)
	}
	r.wrote(kindService, -1)
	for _, name := range ls.slices {
		if err := r.api.remove(endpointSlices, ls.namespace, name); err != nil {
			return fmt.Errorf("delete endpointslice %s/%s: %w", ls.namespace, name, err)
		}
		r.wrote(kindSlice, -1)
	}
	return nil
}

// clusterSlices sorts the set's slices by service; orphans belong to none.
func clusterSlices(set *objects.Set) (bySvc map[string][]*discoveryv1.EndpointSlice, orphans []*discoveryv1.EndpointSlice) {
	bySvc = map[string][]*discoveryv1.EndpointSlice{}
	known := map[string]bool{}
	for _, svc := range set.Services {
		known[key(svc.Namespace, svc.Name)] = true
	}
	for _, s := range set.EndpointSlices {
		k := key(s.Namespace, s.Labels[discoveryv1.LabelServiceName])
		if known[k] {
			bySvc[k] = append(bySvc[k], s)
		} else {
			orphans = append(orphans, s)
		}
	}
	return bySvc, orphans
}

// observe records what the API now holds of live service k, svc with the
// slices eps: which of its endpoints the API says serve, and what a synced
// proxier counts of it.
func (r *replay) observe(k string, svc *v1.Service, eps []*discoveryv1.EndpointSlice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ls := r.services[k]
	if ls == nil {
		return
	}
	ls.known = ls.known[:0]
	for _, f := range r.fams {
		ports, endpoints := objects.Known(svc, eps, v1.IPFamily(f))
		ls.known = append(ls.known, expectation{ports, endpoints})
	}
	if r.probed[k] {
		r.serving[k] = servingOf(eps)
	}
}

// servingOf returns the endpoints (address and port) whose pods answer by
// what slices eps say (objects.Serving), a terminating pod that still
// serves included.
func servingOf(eps []*discoveryv1.EndpointSlice) map[netip.AddrPort]bool {
	serving := map[netip.AddrPort]bool{}
	for _, s := range eps {
		for i := range s.Endpoints {
			a, ok := objects.EndpointAddress(&s.Endpoints[i])
			if !ok || !objects.Serving(s.Endpoints[i].Conditions) {
				continue
			}
			for _, p := range s.Ports {
				if p.Port != nil {
					serving[netip.AddrPortFrom(a, uint16(*p.Port))] = true
				}
			}
		}
	}
	return serving
}

// servingFor answers, for one service, whether an endpoint serves by what
// the API says right now, and which do: the truth a probe's endpoint must
// agree with to answer.
func (r *replay) servingFor(svcKey string) backend.Serving {
	r.mu.Lock()
	r.probed[svcKey] = true
	ls := r.services[svcKey]
	r.mu.Unlock()
	if ls != nil {
		// Live already: what the API holds now. A live service's slices are
		// in the API store; were one not, none of it would serve.
		eps, _ := r.currentSlices(ls)
		r.mu.Lock()
		r.serving[svcKey] = servingOf(eps)
		r.mu.Unlock()
	}
	return servingSet{r, svcKey}
}

type servingSet struct {
	r   *replay
	svc string
}

func (x servingSet) Serves(ap netip.AddrPort) bool {
	x.r.mu.RLock()
	defer x.r.mu.RUnlock()
	return x.r.serving[x.svc][ap]
}

func (x servingSet) Endpoints() []netip.AddrPort {
	x.r.mu.RLock()
	defer x.r.mu.RUnlock()
	return slices.Collect(maps.Keys(x.r.serving[x.svc]))
}

// expect computes what a synced proxier of family f (one of the replay's
// families) reports: the ports of the services kube-proxy acts on with a
// cluster IP of the family, and their endpoints (every address of the
// family, ready or not, deduplicated per port as the proxier merges
// slices), by objects' rules, as observe counted them per service.
func (r *replay) expect(f dataplane.Family) expectation {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.expectedAt != r.writes || r.expected == nil {
		r.expected, r.expectedAt = map[dataplane.Family]expectation{}, r.writes
	}
	if e, ok := r.expected[f]; ok {
		return e
	}
	var e expectation
	if i := slices.Index(r.fams, f); i >= 0 {
		for _, ls := range r.services {
			e.ports += ls.known[i].ports
			e.endpoints += ls.known[i].endpoints
		}
	}
	r.expected[f] = e
	return e
}

// settled reports when the API last changed and whether every watch event
// has reached the informers.
func (r *replay) settled() (lastWrite time.Time, delivered bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.lastWrite, r.hub.undelivered() == 0
}

// liveKeys returns the live services in creation order.
func (r *replay) liveKeys() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.order)
}

func (r *replay) service(k string) *liveService {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.services[k]
}

// pick chooses services by a selector: names as given, or a count (or a
// share of the live services) drawn from the generator's random source,
// leaving out the keys in exclude.
func (r *replay) pick(sel Selector, share float64, exclude []string) ([]string, error) {
	live := r.liveKeys()
	if len(sel.Names) > 0 {
		for _, n := range sel.Names {
			if !slices.Contains(live, n) {
				return nil, fmt.Errorf("service %s is not live", n)
			}
		}
		return slices.Clone(sel.Names), nil
	}
	live = slices.DeleteFunc(live, func(k string) bool { return slices.Contains(exclude, k) })
	n := sel.Count
	if share > 0 {
		n = max(1, int(share*float64(len(live))+0.5))
	}
	n = min(n, len(live))
	idx := r.gen.rng.Perm(len(live))[:n]
	sort.Ints(idx)
	out := make([]string, n)
	for i, j := range idx {
		out[i] = live[j]
	}
	return out, nil
}

// roll is one step of a rolling restart of a service's pods, in each of its
// slices: the endpoint left terminating by the previous visit goes away, the
// oldest ready endpoint starts terminating (not ready, still serving), and a
// new ready endpoint appears.
func (r *replay) roll(ctx context.Context, k string) error {
	ls := r.service(k)
	if ls == nil {
		return fmt.Errorf("churn %s: service is not live", k)
	}
	svc, err := r.currentService(ls)
	if err != nil {
		return fmt.Errorf("churn %s: %w", k, err)
	}
	current, err := r.currentSlices(ls)
	if err != nil {
		return fmt.Errorf("churn %s: %w", k, err)
	}
	for i, s := range current {
		f := dataplane.Family(s.AddressType)
		if r.gen.podIPs[f] == nil {
			continue // a slice of a family the cluster has no pod CIDR for
		}
		kept := s.Endpoints[:0]
		for _, ep := range s.Endpoints {
			if ep.Conditions.Terminating == nil || !*ep.Conditions.Terminating {
				kept = append(kept, ep)
			}
		}
		s.Endpoints = kept
		for j := range s.Endpoints {
			c := &s.Endpoints[j].Conditions
			if c.Ready == nil || *c.Ready {
				c.Ready, c.Serving, c.Terminating = ptr(false), ptr(true), ptr(true)
				break
			}
		}
		ep, err := r.gen.endpoint(f)
		if err != nil {
			return fmt.Errorf("churn %s: %w", k, err)
		}
		s.Endpoints = append(s.Endpoints, ep)
		if err := r.updateSlice(k, svc, current, i); err != nil {
			return err
		}
	}
	return nil
}

// pacer spaces actions at a rate per second; rate 0 does not wait.
type pacer struct {
	interval time.Duration
	next     time.Time
}

func newPacer(rate float64) *pacer {
	p := &pacer{}
	if rate > 0 {
		p.interval = time.Duration(float64(time.Second) / rate)
	}
	return p
}

func (p *pacer) wait(ctx context.Context) error {
	if p.interval == 0 {
		return ctx.Err()
	}
	now := time.Now()
	if p.next.IsZero() {
		p.next = now
	}
	if d := p.next.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.next = p.next.Add(p.interval)
	return nil
}
