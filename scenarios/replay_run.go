package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/prom"
	"github.com/kpsim/kpsim/scenarios/backend"
)

// RunOptions connect a run to its caller.
type RunOptions struct {
	Backend backend.Backend
	// Registry receives the proxier's metrics (what --metrics-addr serves);
	// it must be fresh for each run. nil means a registry of the run's own.
	Registry *prometheus.Registry
	// OnStep is called as each step starts. Optional.
	OnStep func(StepStart)
	// OnSync is called with every sync record, from the proxier's goroutine. Optional.
	OnSync func(record.Sync)
	// BeforeStop is called once the timeline has ended (run through, failed
	// or interrupted), before the proxier stops and the run's state becomes
	// garbage: the moment to look at what a whole run holds (--memprofile). Optional.
	BeforeStop func()
}

// StepStart is a step that is starting, for progress.
type StepStart struct {
	// Done is the steps done so far, Total the timeline's with repeats expanded.
	Done, Total int
	Label       string
	// Elapsed is the time since the run started on its clock, Clock
	// (record.ClockModeled or record.ClockWall).
	Elapsed time.Duration
	Clock   string
}

// errProxierStopped marks a proxier that returned while the run still needed it.
var errProxierStopped = errors.New("proxier stopped on its own")

// run is one execution of a scenario.
type run struct {
	s       *Scenario
	o       RunOptions
	r       *replay
	dp      dataplane.Dataplane
	cfg     proxier.Config
	impl    proxier.Implementation
	churn   *dataplane.Churn
	metrics *proxier.Metrics
	fams    []dataplane.Family
	// drv moves the run through time: the wall clock, or the modeled clock
	// of a discrete-event run (see driver).
	drv driver

	ctx  context.Context
	fail context.CancelCauseFunc

	mu       sync.Mutex
	syncs    []record.Sync
	seen     []int         // per sync: the replay's API writes it had seen (modeled: when it began)
	syncNote chan struct{} // closed (and replaced) on every sync
	failed   int           // consecutive failed syncs of the running generation

	generation int // index of the running (or last) proxier; -1 before the first
	// ranIPVS: a generation ran in IPVS mode; switched: a later one in
	// nftables mode (the run lists what IPVS mode left, File.Leftovers).
	ranIPVS, switched bool
	prox              *proxierRun
	probes            *prober

	start      time.Time // on the run's clock
	steps      []record.Step
	stepsTotal int
}

type proxierRun struct {
	cancel context.CancelFunc
	kill   func() // fails every later kernel operation of the generation
	done   chan struct{}
	// hold keeps part of the initial list from the handlers until the
	// generation's first sync has run (knownAtFirstSync); nil when none is held.
	hold *holdBack
}

// Run executes the scenario on o.Backend and returns its results file,
// summarized. The file is returned even when the run fails or ctx is
// cancelled (Interrupted), holding what was measured until then; the error
// says why it ended early. A Scenario runs once: Parse it again to rerun.
func Run(ctx context.Context, s *Scenario, o RunOptions) (*record.File, error) {
	return s.run(ctx, o, nil)
}

// run is Run; inspect, when set, sees the run after its timeline and before
// the proxier stops (tests compare the kernel with the API there).
func (s *Scenario) run(ctx context.Context, o RunOptions, inspect func(*run)) (*record.File, error) {
	if s.ran {
		return nil, errors.New("run scenario: already run; parse it again for another run")
	}
	s.ran = true
	if o.Backend == nil {
		return nil, errors.New("run scenario: no backend")
	}
	impl, err := s.Implementation()
	if err != nil {
		return nil, fmt.Errorf("run scenario: %w", err)
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	scJSON, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("run scenario: encode scenario: %w", err)
	}
	x := &run{
		s:          s,
		o:          o,
		dp:         o.Backend.Dataplane(),
		cfg:        s.proxierConfig(),
		impl:       impl,
		churn:      dataplane.NewChurn(),
		metrics:    proxier.NewMetrics(reg),
		syncNote:   make(chan struct{}),
		generation: -1,
		stepsTotal: countSteps(s.Timeline),
	}
	x.r = newReplay(s, x.now)
	x.fams = x.r.fams
	x.drv = &wallDriver{}
	if s.timelineModeled() {
		// The backend the run is given decides the rest: the sim at time
		// scale 0 takes the clock (tests run a kernel scenario on it too).
		m := newModeledDriver(time.Now(), x.fams, func() int { w, _ := x.r.writeCount(); return w })
		if o.Backend.UseClock(m.s) {
			x.drv = m
		}
	}
	x.start = x.now()
	basis := o.Backend.Basis()
	if basis == record.Modeled && x.drv.clockName() == record.ClockWall {
		// Off the modeled clock the proxier's own time is measured, not priced.
		basis = record.ModeledKernel
	}
	f := &record.File{
		SchemaVersion: record.SchemaVersion,
		Backend:       s.Backend,
		Basis:         basis,
		Clock:         x.drv.clockName(),
		Proxier:       impl.Proxier,
		Scenario:      scJSON,
		Start:         x.start,
	}
	if pb, ok := o.Backend.(backend.Profiled); ok {
		f.CostProfile = pb.CostProfile()
	}
	x.ctx, x.fail = context.WithCancelCause(ctx)
	defer x.fail(nil)

	err = x.execute()
	if cause := context.Cause(x.ctx); err == nil && cause != nil {
		err = cause // the proxier failed after the last step
	}
	if inspect != nil && err == nil {
		inspect(x)
	}
	if o.BeforeStop != nil {
		o.BeforeStop()
	}

	x.drv.probesOff()
	x.stopProxier()
	f.End = x.now()
	x.finish(f, reg)
	if err != nil {
		if ctx.Err() != nil {
			f.Interrupted = true
			err = fmt.Errorf("interrupted: %w", context.Cause(ctx))
		} else if cause := context.Cause(x.ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause // the proxier or a probe failed and cancelled the step
		}
		f.Error = err.Error()
	}
	results.Summarize(f)
	return f, err
}

// now is the run's clock: modeled time on the modeled driver.
func (x *run) now() time.Time { return x.drv.now() }

func (x *run) execute() error {
	targets := x.s.targets
	x.probes = newProber(x.s.Probes.Interval.D(), targets, x.r, x.o.Backend, x.fail)
	if err := x.o.Backend.Prepare(x.ctx, x.s.set, targets); err != nil {
		return fmt.Errorf("prepare backend: %w", err)
	}
	if !slices.ContainsFunc(x.s.Timeline, func(st Step) bool { return st.StartProxier != nil }) {
		if err := x.startProxier(&StartProxier{}); err != nil {
			return err
		}
	}
	return x.runSteps(x.s.Timeline, "timeline")
}

func countSteps(steps []Step) int {
	n := 0
	for _, st := range steps {
		if st.Repeat != nil {
			n += st.Repeat.Times * countSteps(st.Repeat.Steps)
			continue
		}
		n++
	}
	return n
}

func hasStep(steps []Step, match func(*Step) bool) bool {
	for i := range steps {
		if match(&steps[i]) || steps[i].Repeat != nil && hasStep(steps[i].Repeat.Steps, match) {
			return true
		}
	}
	return false
}

// batch makes write's API writes as one batch (see driver).
func (x *run) batch(write func() error) error { return x.drv.batch(x.ctx, write) }

// pace runs action(i) for i = 0 .. n-1 (n < 0: until d has passed) at rate
// per second, 0 meaning all at once as one batch. Action i is due at i/rate
// from now and is a batch of its own.
func (x *run) pace(rate float64, d time.Duration, n int, action func(i int) error) error {
	if rate == 0 {
		return x.batch(func() error {
			for i := 0; i < n; i++ {
				if err := action(i); err != nil {
					return err
				}
			}
			return nil
		})
	}
	start := x.now()
	for i := 0; n < 0 || i < n; i++ {
		at := start.Add(time.Duration(float64(i) * float64(time.Second) / rate))
		if d > 0 && !at.Before(start.Add(d)) {
			break
		}
		if err := x.drv.until(x.ctx, at); err != nil {
			return err
		}
		if err := x.batch(func() error { return action(i) }); err != nil {
			return err
		}
	}
	if d > 0 {
		return x.drv.until(x.ctx, start.Add(d))
	}
	return nil
}

// createCluster writes the cluster: nodes, each service with its slices (at
// rate services per second, 0: at once), and slices of no service.
//
// The set lets go of its services and slices as they go to the API: from
// then on the API (apiStore) holds them and the replay reads them
// back from there. Kept, they would be the whole cluster held once more for
// the whole run, for nothing: a Scenario runs once, and Prepare and the
// probes' targets have seen them.
func (x *run) createCluster(rate float64) error {
	set := x.s.set
	bySvc, orphans := clusterSlices(set)
	svcs := set.Services
	set.Services, set.EndpointSlices = nil, nil
	nodes := func() error { return x.r.createNodes(set) }
	service := func(i int) error {
		svc := svcs[i]
		return x.r.createService(svc, bySvc[key(svc.Namespace, svc.Name)])
	}
	rest := func() error {
		for _, s := range orphans {
			if err := x.r.createOrphan(s); err != nil {
				return err
			}
		}
		return nil
	}
	if rate == 0 {
		// One batch: the proxier hears of the whole cluster at once.
		return x.batch(func() error {
			if err := nodes(); err != nil {
				return err
			}
			for i := range svcs {
				if err := service(i); err != nil {
					return err
				}
			}
			return rest()
		})
	}
	if err := x.batch(nodes); err != nil {
		return err
	}
	if err := x.pace(rate, 0, len(svcs), service); err != nil {
		return err
	}
	return x.batch(rest)
}

// startProxier starts the next proxier generation on the run's kernel, with
// fresh informers on the same clientset and the run's Churn and Metrics.
// With knownAtFirstSync, its handlers hear only that share of the initial
// list until its first sync has run.
func (x *run) startProxier(st *StartProxier) error {
	x.generation++
	if st.Mode != "" {
		x.cfg.Mode = st.Mode // this generation's and the next ones'
	}
	x.switched = x.switched || x.ranIPVS && x.cfg.Mode != proxier.ModeIPVS
	x.ranIPVS = x.ranIPVS || x.cfg.Mode == proxier.ModeIPVS
	ctx, cancel := context.WithCancel(x.ctx)
	dp, kill := dataplane.Stoppable(x.dp)
	pr := &proxierRun{cancel: cancel, kill: kill, done: make(chan struct{})}
	_, objects := x.r.writeCount()
	if share := st.KnownAtFirstSync; share != nil {
		switch {
		case upstream(x.impl.Name):
			pr.hold = newHoldBack(*share, x.r.kindCounts(), true, ctx.Done(), x.drv)
		case x.cfg.InitialSync == proxier.InitialSyncLegacy:
			pr.hold = newHoldBack(*share, x.r.kindCounts(), false, nil, x.drv)
		}
	}
	x.drv.starting(objects, x.impl.SyncedCalls)
	opts := proxier.Options{
		Index:    x.generation,
		OnSync:   x.onSync,
		Churn:    x.churn,
		Metrics:  x.metrics,
		Handlers: x.handlers(pr.hold, st.SlowInitialList.D()),
	}
	x.drv.proxierOptions(&opts)
	x.mu.Lock()
	x.failed = 0
	x.prox = pr
	x.mu.Unlock()
	idx := x.generation
	// Informers stream their initial list, as on a node, unless its
	// handlers are held back: then they list, in the seed's order, so that
	// a seed holds back the same objects (a stream's initial events reach
	// the handlers in the order of the reflector's map).
	var client kubernetes.Interface = streamingClient{x.r.client}
	if pr.hold != nil {
		client = x.r.client
	}
	go func() {
		defer close(pr.done)
		err := x.impl.Run(ctx, client, dp, x.cfg, opts)
		if ctx.Err() != nil {
			return // stopped by the run
		}
		if err == nil {
			err = errProxierStopped
		}
		x.fail(fmt.Errorf("proxier %d: %w", idx, err))
	}()
	return x.drv.started(x.ctx)
}

// stopProxier kills the running generation, as a restart kills kube-proxy:
// a sync in progress issues nothing more.
func (x *run) stopProxier() {
	x.mu.Lock()
	pr := x.prox
	x.prox = nil
	x.mu.Unlock()
	if pr == nil {
		return
	}
	pr.kill()
	// Cancelled before the modeled clock releases the syncs waiting on
	// it, so that a sync the stop cut short knows it was (on the modeled
	// clock its remaining operations then take no time).
	pr.cancel()
	x.drv.stopping()
	<-pr.done
	x.drv.stopped()
}

func (x *run) onSync(s record.Sync) {
	writes, _ := x.r.writeCount()
	if w, ok := x.drv.syncBegan(s.Family); ok {
		writes = w
	}
	x.mu.Lock()
	x.syncs = append(x.syncs, s)
	x.seen = append(x.seen, writes)
	close(x.syncNote)
	x.syncNote = make(chan struct{})
	pr := x.prox
	if pr == nil || s.Proxier != x.generation {
		x.mu.Unlock()
		return // a killed generation's last, cut-short sync
	}
	if s.Failed() {
		x.failed++
	} else {
		x.failed = 0
	}
	failed := x.failed
	x.mu.Unlock()
	if x.o.OnSync != nil {
		x.o.OnSync(s)
	}
	if pr.hold != nil && pr.hold.firstSyncDone() {
		x.drv.release(pr.hold.release)
	}
	if limit := x.s.StopAfterFailedSyncs; limit > 0 && failed >= limit {
		x.fail(fmt.Errorf("%d %s in a row failed (stopAfterFailedSyncs: %d); the last: %s", failed, results.Plural(failed, "sync", "syncs"), limit, s.Error))
	}
}

// latestSync returns the newest sync of the running generation for f, and
// the replay's write count when it ended.
func (x *run) latestSync(f dataplane.Family) (record.Sync, int, bool, chan struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := len(x.syncs) - 1; i >= 0; i-- {
		s := x.syncs[i]
		if s.Proxier != x.generation {
			break
		}
		if s.Family == f {
			return s, x.seen[i], true, x.syncNote
		}
	}
	return record.Sync{}, 0, false, x.syncNote
}

// synced reports whether every family's proxier has applied the API's
// current state: every watch event has been delivered, and each family's
// newest sync started after the last API write and counted the service
// ports and endpoints the API holds for it. The counts matter when handlers
// lag (a slow initial list): a sync can start after the last write while
// its handlers have not yet passed every event on. On the modeled clock a
// sync knows exactly which writes it began after, so a sync is recent when
// it began after the last write.
func (x *run) synced() (bool, string) {
	lastWrite, delivered := x.r.settled()
	_, modeled := x.drv.(*modeledDriver)
	if !delivered && !modeled { // the modeled driver's handlers have heard every event: a stronger test
		return false, "watch events are still on their way to the informers"
	}
	writes, _ := x.r.writeCount()
	for _, f := range x.fams {
		s, seen, ok, _ := x.latestSync(f)
		switch {
		case !ok:
			return false, fmt.Sprintf("the %s proxier has not synced yet", f)
		case !modeled && s.Start.Before(lastWrite), modeled && seen != writes:
			return false, fmt.Sprintf("the %s proxier has not synced since the last API change", f)
		case s.Error != "":
			return false, fmt.Sprintf("the %s proxier's last sync failed: %s", f, s.Error)
		}
		if want := x.r.expect(f); s.Services != want.ports || s.Endpoints != want.endpoints {
			return false, fmt.Sprintf("the %s proxier knows %d of %d service %s and %d of %d %s",
				f, s.Services, want.ports, results.Plural(want.ports, "port", "ports"), s.Endpoints, want.endpoints, results.Plural(want.endpoints, "endpoint", "endpoints"))
		}
	}
	return true, ""
}

func (x *run) waitSynced(timeout time.Duration) error {
	if x.prox == nil {
		return errors.New("no proxier is running")
	}
	if m, modeled := x.drv.(*modeledDriver); modeled {
		return x.waitSyncedModeled(m, timeout)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		ok, why := x.synced()
		if ok {
			return nil
		}
		_, _, _, note := x.latestSync(x.fams[0])
		select {
		case <-note:
		case <-poll.C:
		case <-deadline.C:
			return fmt.Errorf("not synced after %s: %s", timeout, why)
		case <-x.ctx.Done():
			return x.ctx.Err()
		}
	}
}

// waitSyncedModeled is waitSynced on the modeled clock: while the proxier is
// not synced, modeled time moves to its next event (an operation of a sync
// in progress, a rate-limited or periodic sync, a retry), up to timeout of
// modeled time. Only a sync's end makes the proxier synced, so the
// scheduler checks at each event without stopping a sync at each of its
// operations (sched.untilDone).
func (x *run) waitSyncedModeled(m *modeledDriver, timeout time.Duration) error {
	var why string
	ok, err := m.untilDone(x.ctx, x.now().Add(timeout), func() bool {
		var ok bool
		ok, why = x.synced()
		return ok
	})
	if err != nil || ok {
		return err
	}
	return fmt.Errorf("not synced after %s of modeled time: %s", timeout, why)
}

// churnEndpoints visits the chosen services round-robin at the step's rate
// for its duration, rolling one endpoint per visit.
func (x *run) churnEndpoints(c *Churn) error {
	keys, err := x.r.pick(c.Services, c.Share, nil)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return errors.New("no live service to churn")
	}
	return x.pace(c.Rate, c.Duration.D(), -1, func(i int) error { return x.r.roll(x.ctx, keys[i%len(keys)]) })
}

// finish fills the totals and metrics.
func (x *run) finish(f *record.File, reg *prometheus.Registry) {
	x.mu.Lock()
	f.Syncs = slices.Clone(x.syncs)
	x.mu.Unlock()
	slices.SortStableFunc(f.Syncs, func(a, b record.Sync) int { return a.Start.Compare(b.Start) })
	f.Steps = x.steps
	for i := range f.Syncs {
		f.Totals.Ops.Add(&f.Syncs[i].Ops)
	}
	f.Totals.Readded = x.churn.Readded()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err == nil {
		f.Totals.CPUSeconds = tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
		f.Totals.PeakRSS = ru.Maxrss * 1024 // kilobytes on Linux
	}
	if x.probes != nil {
		f.Probes = x.probes.results()
	}
	if x.switched {
		left, err := proxier.IPVSModeLeftovers(x.dp, x.cfg.Mode)
		switch {
		case err != nil:
			left = []string{"not listed: " + err.Error()}
		case len(left) == 0:
			left = []string{record.NothingLeft}
		}
		f.Leftovers = left
	}
	var g prometheus.Gatherer = reg
	if x.impl.Metrics != nil {
		g = prometheus.Gatherers{reg, x.impl.Metrics}
	}
	if m, err := prom.Histograms(g); err == nil {
		f.Metrics = m
		if upstream(x.impl.Name) && x.drv.clockName() == record.ClockModeled {
			// A release observes each change's latency as wall time since
			// a trigger time the replay stamped on the modeled clock: a
			// figure of neither clock. Its syncs' records hold the
			// modeled latency (observed.Family.Sync).
			f.Metrics = slices.DeleteFunc(f.Metrics, func(h record.Metric) bool { return h.Name == record.MetricNetworkProgramming })
		}
	} else if f.Error == "" {
		f.Error = err.Error()
	}
}

func tvSeconds(t unix.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// StepCount is the number of steps the timeline runs, repeats expanded.
func (s *Scenario) StepCount() int { return countSteps(s.Timeline) }
