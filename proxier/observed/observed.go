// Package observed measures a proxier kpsim runs but did not write, a
// kube-proxy release, as fully as kpsim's own proxier measures itself,
// from the outside: every kernel operation its utilities issue is counted
// by kind (Family.Record), each run of its sync function is delimited
// (Family.Sync) and turned into a record.Sync from its own metrics
// registry (sync duration, network programming latency, success), and its
// informers are wrapped (Generation.Services, ...) so that the harness's
// handler wrapper (proxier.Options.Handlers) sits in front of its handlers
// and the objects they have passed on are known. A sync so recorded has no
// phases.
//
// Nothing here depends on k8s.io/kubernetes: the nested modules under
// upstream/ that build kube-proxy's proxier share it, so that each release
// keeps only the calls whose signatures differ between releases.
package observed

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
)

// Generation is one proxier generation of a release (one kube-proxy
// process, in kpsim's terms): its families' proxiers, the objects its
// handlers have passed on, and its metrics registry.
type Generation struct {
	ctx      context.Context
	opts     proxier.Options
	model    dataplane.Model // the in-memory kernel's, on the sim; nil on a real kernel
	impl     string          // what the profile prices its work under: proxier.Config.Priced
	node     string
	metrics  prometheus.Gatherer
	labelled bool // the sync metrics carry an ip_family label (kube-proxy 1.33 and later)
	start    time.Time

	// running is held (read) by every sync in progress; Wait takes it.
	running sync.RWMutex
	// unlabelled serializes the families' syncs when the metrics have no
	// family label: one family's sync would read the other's observation.
	unlabelled sync.Mutex

	mu       sync.Mutex      // guards what the handlers write
	wrapped  map[string]bool // kinds whose handlers were registered through the wrappers
	services map[string]*v1.Service
	slices   map[string]*discoveryv1.EndpointSlice // by namespace/name
	families map[dataplane.Family]*Family
}

// New observes one generation running until ctx is done, for the proxier
// configuration cfg, reporting to opts (OnSync, Index, Handlers, Churn;
// Clock and Stepper on the modeled clock: see Modeled). model is the
// in-memory kernel's model of time, or nil on a real kernel. metrics is
// the release's registry; labelled says whether its sync metrics carry
// the ip_family label.
func New(ctx context.Context, cfg proxier.Config, opts proxier.Options, model dataplane.Model, metrics prometheus.Gatherer, labelled bool) *Generation {
	g := &Generation{
		ctx: ctx, opts: opts, model: model, impl: cfg.Priced(), node: cfg.NodeName, metrics: metrics, labelled: labelled, start: time.Now(),
		wrapped: map[string]bool{}, services: map[string]*v1.Service{}, slices: map[string]*discoveryv1.EndpointSlice{},
		families: map[dataplane.Family]*Family{},
	}
	g.start = g.now() // on the clock the replay stamps trigger times by
	for _, f := range cfg.Families {
		g.families[f] = newFamily(g, f)
	}
	return g
}

// Family is the observer of one family's proxier.
func (g *Generation) Family(f dataplane.Family) *Family { return g.families[f] }

// Wait returns once no sync is in progress; after ctx is done none starts.
// The generation's last, cut-short sync is then recorded.
func (g *Generation) Wait() {
	g.running.Lock()
	g.running.Unlock() // taking it was the wait
}

// stopped is the error of an operation issued once the generation was
// killed: as dataplane.Stoppable says it, so a restart reads the same.
func (g *Generation) stopped(op string) error {
	if g.ctx.Err() == nil {
		return nil
	}
	return dataplane.StoppedError(op)
}

// known counts the service ports and endpoints of family f the handlers
// have passed on (objects.Known): of every service when only is nil, else
// of the services in only.
func (g *Generation) known(f dataplane.Family, only map[string]bool) (ports, endpoints int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	bySvc := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range g.slices {
		k := s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
		bySvc[k] = append(bySvc[k], s)
	}
	for k, svc := range g.services {
		if only != nil && !only[k] {
			continue
		}
		p, e := objects.Known(svc, bySvc[k], v1.IPFamily(f))
		ports += p
		endpoints += e
	}
	return ports, endpoints
}

// trigger is one EndpointSlice change that carried a trigger time.
type trigger struct {
	object  string // namespace/name of the slice
	service string // namespace/name of its service
	at      time.Time
}

// Family observes one family's proxier of a generation.
type Family struct {
	g      *Generation
	family dataplane.Family

	// kernel: every operation is mirrored onto a counted dataplane that
	// does nothing, so it is counted, churn included, exactly as kpsim's
	// own operations are.
	kmu     sync.Mutex
	counter *dataplane.Counter
	mirror  dataplane.Dataplane
	opErr   error                   // the first failed operation since the last sync began
	unfit   map[string]record.Unfit // entries a full ipset refused since then

	// what the handlers passed on since the last sync began (g.mu)
	changed  bool
	triggers []trigger
	touched  map[string]bool // services (namespace/name) whose Service or slices changed

	// syncMu serializes the family's syncs as the release's own lock does:
	// its runner and its first sync (OnServiceSynced, ...) call the sync
	// function from different goroutines, and a record's reads of the
	// metrics must bracket one run.
	syncMu     sync.Mutex
	seq        int
	lastOps    dataplane.Ops
	lastFailed bool

	// deferred are the release's synced calls (OnServiceSynced, ...) its
	// runner makes at its next turn, on the modeled clock (g.mu).
	deferred []func()
}

func newFamily(g *Generation, f dataplane.Family) *Family {
	fam := &Family{g: g, family: f}
	fam.mirror, fam.counter = dataplane.Count(discard(), g.opts.Churn)
	return fam
}

// Record counts one kernel operation the release is about to issue, by
// calling record with a counted dataplane that does nothing (so that
// record says which operation it is: dp.IPVS.AddService(vs), ...), or
// refuses it with an error matching syscall.ECANCELED once the generation
// was killed: a killed kube-proxy issues nothing more. op names it in that
// error. record may be nil where what to count depends on the outcome
// (Count it then).
func (f *Family) Record(op string, record func(dp dataplane.Dataplane)) error {
	if err := f.g.stopped(op); err != nil {
		f.failed(err)
		return err
	}
	if record != nil {
		f.Count(record)
	}
	return nil
}

// Count counts what record issues on the counted dataplane that does nothing.
func (f *Family) Count(record func(dp dataplane.Dataplane)) {
	f.kmu.Lock()
	defer f.kmu.Unlock()
	record(f.mirror)
}

// Result notes the outcome of an operation the release issued: a failed
// one is the error of its sync, should the sync fail.
func (f *Family) Result(op string, err error) error {
	if err != nil {
		f.failed(fmt.Errorf("%s: %w", op, err))
	}
	return err
}

// Unfit notes an entry the release could not add to ipset set because the
// set was full: the release logs it and goes on (record.Sync.Unfit).
func (f *Family) Unfit(set, entry string) {
	f.kmu.Lock()
	defer f.kmu.Unlock()
	if f.unfit == nil {
		f.unfit = map[string]record.Unfit{}
	}
	u := f.unfit[set]
	if u.Entries++; u.First == "" || entry < u.First {
		u.First = entry
	}
	f.unfit[set] = u
}

func (f *Family) failed(err error) {
	f.kmu.Lock()
	defer f.kmu.Unlock()
	if f.opErr == nil {
		f.opErr = err
	}
}

// Sync runs one sync of the release (run: its sync function) and records
// it: nothing is run once the generation was killed, and a run the
// release's metrics did not count as a sync (it was not yet initialized)
// is not recorded. The duration is the release's own, from its
// sync-duration histogram; success is its last-sync gauge moving; its
// network programming latencies come from its histogram, per change.
func (f *Family) Sync(run func() error) error {
	g := f.g
	g.running.RLock()
	defer g.running.RUnlock()
	if g.ctx.Err() != nil {
		return nil
	}
	if g.Modeled() {
		g.opts.Stepper.Begin(f.family)
	}
	if !g.labelled {
		g.unlabelled.Lock()
		defer g.unlabelled.Unlock()
	}
	f.syncMu.Lock()
	defer f.syncMu.Unlock()
	before, err := f.readMetrics()
	if err != nil {
		return err // the release's registry cannot be read: nothing to record a sync with
	}
	g.mu.Lock()
	changed, triggers, touched := f.changed, f.triggers, f.touched
	f.changed, f.triggers, f.touched = false, nil, nil
	g.mu.Unlock()
	ports, endpoints := g.known(f.family, nil)
	f.kmu.Lock()
	f.opErr, f.unfit = nil, nil
	f.kmu.Unlock()

	start := g.now()
	runErr := run()

	after, err := f.readMetrics()
	if err != nil {
		return err
	}
	if after.syncs == before.syncs {
		// Not a sync: what it would have applied is still pending.
		g.mu.Lock()
		f.changed = f.changed || changed
		f.triggers = append(triggers, f.triggers...)
		for k := range touched {
			f.touch(k)
		}
		g.mu.Unlock()
		return runErr
	}
	f.seq++
	// A release that syncs partially (nftables mode) says which syncs were
	// in its partial-sync histogram.
	full := after.partial == before.partial
	rec := record.Sync{
		Proxier: g.opts.Index, Family: f.family, Seq: f.seq, Trigger: f.trigger(changed), Full: full, Start: start,
		Seconds: after.seconds - before.seconds, Services: ports, Endpoints: endpoints,
	}
	rec.Wall = rec.Seconds
	// On the modeled clock a sync the run stopped (a restart, a
	// deadline) is cut at that instant: what it did after took no modeled
	// time, so it did not finish, whatever its gauge says.
	cut := g.Modeled() && g.ctx.Err() != nil
	if cut {
		rec.Seconds = g.now().Sub(start).Seconds()
		rec.Stopped = true
		rec.Error = dataplane.CutShort(g.now().Sub(start))
	} else if g.Modeled() {
		// The release's own work (dataplane.Work of what it knew: in a
		// partial sync it derives the services that changed and passes
		// over the others, sorting their endpoints first), priced by the
		// profile's prices for the release
		// or else for a proxier, after its kernel operations moved the
		// clock; its histogram keeps its measured wall time.
		work := dataplane.Work{Syncs: 1, Derived: ports, Endpoints: endpoints}
		if !full {
			if touched == nil {
				touched = map[string]bool{} // nothing changed: nothing derived
			}
			work.Derived, work.Endpoints = g.known(f.family, touched)
			work.Ports = max(0, ports-work.Derived)
			work.Passed = max(0, endpoints-work.Endpoints)
		}
		own := g.model.ComputeAs(g.impl, work)
		rec.Seconds = g.now().Sub(start).Seconds()
		rec.ProxierSeconds = own.Seconds()
		rec.KernelSeconds = rec.Seconds - rec.ProxierSeconds
	}
	f.kmu.Lock()
	ops := f.counter.Ops()
	opErr := f.opErr
	rec.Unfit = f.unfit
	f.kmu.Unlock()
	// Operations between syncs (graceful termination) count with the next.
	rec.Ops, f.lastOps = ops.Sub(f.lastOps), ops
	if cut {
		// recorded as unfinished above
	} else if after.lastSync == before.lastSync {
		switch {
		case runErr != nil:
			rec.Error = runErr.Error()
		case opErr != nil:
			rec.Error = opErr.Error()
		default:
			rec.Error = "the sync did not finish: " + record.MetricLastSync + " did not move"
		}
		rec.Stopped = dataplane.Stopped(runErr) || dataplane.Stopped(opErr)
	} else {
		if g.Modeled() {
			rec.Programmed = modeledProgrammed(triggers, g.now())
		} else {
			rec.Programmed = programmed(triggers, after.programmed-before.programmed, after.programmedSum-before.programmedSum, time.Now())
		}
	}
	f.lastFailed = rec.Failed()
	if g.opts.OnSync != nil {
		g.opts.OnSync(rec)
	}
	return runErr
}

// trigger names a recorded sync as kpsim's runner names its own: the
// release's runner does not say why it ran, so it is inferred.
func (f *Family) trigger(changed bool) string {
	switch {
	case f.seq == 1:
		return proxier.TriggerInitial
	case f.lastFailed:
		return proxier.TriggerRetry
	case changed:
		return proxier.TriggerChanges
	}
	return proxier.TriggerPeriodic
}

// programmed turns a sync's network programming observations (n of them,
// summing to sum seconds) into one record per change. The release observes
// each change's latency at one instant at the end of its sync, so when its
// changes are the n triggers the handlers passed on, that instant follows
// from the sum and each record is the release's own value. Otherwise the
// records take the end of the sync as the instant, and the histogram check
// of the results file shows that they disagree.
func programmed(ts []trigger, n uint64, sum float64, end time.Time) []record.Programmed {
	if len(ts) == 0 {
		return nil
	}
	at := end
	if n == uint64(len(ts)) {
		var offsets float64 // seconds of each trigger after the first
		for _, t := range ts {
			offsets += t.at.Sub(ts[0].at).Seconds()
		}
		at = ts[0].at.Add(time.Duration((sum + offsets) / float64(n) * float64(time.Second)))
	}
	out := make([]record.Programmed, len(ts))
	for i, t := range ts {
		out[i] = record.Programmed{Object: t.object, Seconds: at.Sub(t.at).Seconds()}
	}
	return out
}

// sliceChanged records an EndpointSlice the handlers passed on: its trigger
// time, as kube-proxy's endpoints tracker keeps it (a change made after the
// tracker started; a deleted slice drops its service's pending triggers).
func (g *Generation) sliceChanged(old, s *discoveryv1.EndpointSlice, deleted bool) {
	f := g.families[dataplane.Family(s.AddressType)]
	key := s.Namespace + "/" + s.Name
	svc := s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
	g.mu.Lock()
	defer g.mu.Unlock()
	if deleted {
		delete(g.slices, key)
	} else {
		g.slices[key] = s
	}
	for _, fam := range g.families {
		fam.changed = true
		fam.touch(svc)
	}
	if f == nil {
		return
	}
	if deleted {
		f.triggers = slices.DeleteFunc(f.triggers, func(t trigger) bool { return t.service == svc })
		return
	}
	// kube-proxy keeps a trigger time only for a change to what it
	// programs from (its endpoint slice cache's updatePending): not for a
	// resync, nor for an update of the slice's metadata alone. Compared by
	// content: the fake API stores objects without resource versions, so
	// every update would look like a resync by version.
	if old != nil && equality.Semantic.DeepEqual(old.Endpoints, s.Endpoints) && equality.Semantic.DeepEqual(old.Ports, s.Ports) {
		return
	}
	at, err := time.Parse(time.RFC3339Nano, s.Annotations[v1.EndpointsLastChangeTriggerTime])
	if err == nil && at.After(g.start) {
		f.triggers = append(f.triggers, trigger{object: key, service: svc, at: at})
	}
}

// serviceChanged records a Service the handlers passed on.
func (g *Generation) serviceChanged(s *v1.Service, deleted bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if deleted {
		delete(g.services, s.Namespace+"/"+s.Name)
	} else {
		g.services[s.Namespace+"/"+s.Name] = s
	}
	for _, fam := range g.families {
		fam.changed = true
		fam.touch(s.Namespace + "/" + s.Name)
	}
}

// touch notes that service k changed since the last sync began (g.mu held).
func (f *Family) touch(k string) {
	if f.touched == nil {
		f.touched = map[string]bool{}
	}
	f.touched[k] = true
}

// nodeChanged records that the proxier's Node changed: a sync follows.
func (g *Generation) nodeChanged() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, fam := range g.families {
		fam.changed = true
	}
}
