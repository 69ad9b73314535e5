package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/prom"
)

// RunOptions connect a run to its caller.
type RunOptions struct {
	Backend Backend
	// Registry receives the proxier's metrics (what --metrics-addr serves);
	// it must be fresh for each run. nil means a registry of the run's own.
	Registry *prometheus.Registry
	// OnStep is called as each step starts: steps done so far, the total
	// with repeats expanded, and the step's label. Optional.
	OnStep func(done, total int, label string)
	// OnSync is called with every sync record, from the proxier's goroutine. Optional.
	OnSync func(results.Sync)
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
	churn   *dataplane.Churn
	metrics *proxier.Metrics
	fams    []dataplane.Family
	// ls steps the run (see lockstep); nil when it runs free, in wall time.
	ls  *lockstep
	now func() time.Time // the run's clock: modeled time in lockstep

	ctx  context.Context
	fail context.CancelCauseFunc

	mu       sync.Mutex
	syncs    []results.Sync
	seen     []int         // per sync: the replay's API writes when it ended (lockstep: all it applied)
	syncNote chan struct{} // closed (and replaced) on every sync

	generation int // index of the running (or last) proxier; -1 before the first
	prox       *proxierRun
	probes     *prober

	steps      []results.Step
	stepsTotal int
}

type proxierRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Run executes the scenario on o.Backend and returns its results file,
// summarized. The file is returned even when the run fails or ctx is
// cancelled (Interrupted), holding what was measured until then; the error
// says why it ended early. A Scenario runs once: Parse it again to rerun.
func Run(ctx context.Context, s *Scenario, o RunOptions) (*results.File, error) {
	return s.run(ctx, o, nil)
}

// run is Run; inspect, when set, sees the run after its timeline and before
// the proxier stops (tests compare the kernel with the API there).
func (s *Scenario) run(ctx context.Context, o RunOptions, inspect func(*run)) (*results.File, error) {
	if s.ran {
		return nil, errors.New("run scenario: already run; parse it again for another run")
	}
	s.ran = true
	if o.Backend == nil {
		return nil, errors.New("run scenario: no backend")
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
		now:        time.Now,
		dp:         o.Backend.Dataplane(),
		cfg:        s.proxierConfig(),
		churn:      dataplane.NewChurn(),
		metrics:    proxier.NewMetrics(reg),
		syncNote:   make(chan struct{}),
		generation: -1,
		stepsTotal: countSteps(s.Timeline),
	}
	var clk *modelClock
	if steppable(s, o.Backend) {
		clk = newModelClock(time.Now())
		x.now = clk.Now
	}
	x.r = newReplay(s, x.now)
	x.fams = x.r.fams
	if clk != nil {
		x.ls = newLockstep(clk, x.fams, func() int { w, _ := x.r.writeCount(); return w })
	}
	f := &results.File{
		SchemaVersion: results.SchemaVersion,
		Backend:       s.Backend,
		Basis:         o.Backend.Basis(),
		Clock:         results.ClockWall,
		Proxier:       results.ProxierKpsim,
		Scenario:      scJSON,
		Start:         x.now(),
	}
	if x.ls != nil {
		f.Clock = results.ClockModeled
	}
	if pb, ok := o.Backend.(ProfiledBackend); ok {
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

	x.probesOff()
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

func (x *run) execute() error {
	targets, err := x.probeTargets()
	if err != nil {
		return err
	}
	x.probes = newProber(x.s.Probes.Interval.D(), targets, x.r, x.o.Backend, x.fail, x.ls != nil)
	if err := x.o.Backend.Prepare(x.ctx, x.s.set, targets); err != nil {
		return fmt.Errorf("prepare backend: %w", err)
	}
	if !slices.ContainsFunc(x.s.Timeline, func(st Step) bool { return st.StartProxier != nil }) {
		if err := x.startProxier(0); err != nil {
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

func (x *run) runSteps(steps []Step, path string) error {
	for i := range steps {
		st := &steps[i]
		sp := fmt.Sprintf("%s[%d]", path, i)
		if r := st.Repeat; r != nil {
			for k := 0; k < r.Times; k++ {
				if err := x.runSteps(r.Steps, sp+".repeat.steps"); err != nil {
					return err
				}
			}
			continue
		}
		if err := x.ctx.Err(); err != nil {
			return err
		}
		if x.o.OnStep != nil {
			x.o.OnStep(len(x.steps), x.stepsTotal, st.String())
		}
		rec := results.Step{Index: len(x.steps), Kind: st.resultKind(), Label: st.String(), Start: x.now()}
		err := x.step(st)
		rec.End = x.now()
		x.steps = append(x.steps, rec)
		if err != nil {
			return fmt.Errorf("%s (%s): %w", sp, st.kind(), err)
		}
	}
	return nil
}

func (x *run) step(st *Step) error {
	ctx := x.ctx
	switch {
	case st.CreateCluster != nil:
		return x.createCluster(st.CreateCluster.Rate)
	case st.StartProxier != nil:
		return x.startProxier(st.StartProxier.SlowInitialList.D())
	case st.RestartProxier != nil:
		x.stopProxier()
		return x.startProxier(st.RestartProxier.SlowInitialList.D())
	case st.WaitSynced != nil:
		return x.waitSynced(st.WaitSynced.Timeout.D())
	case st.ChurnEndpoints != nil:
		return x.churnEndpoints(st.ChurnEndpoints)
	case st.AddServices != nil:
		return x.pace(st.AddServices.Rate, 0, st.AddServices.Count, func(int) error {
			svc, eps, err := x.s.gen.service()
			if err != nil {
				return err
			}
			return x.r.createService(ctx, svc, eps)
		})
	case st.DeleteServices != nil:
		keys, err := x.r.pick(Selector{Count: st.DeleteServices.Count}, 0, x.probes.services())
		if err != nil {
			return err
		}
		return x.pace(st.DeleteServices.Rate, 0, len(keys), func(i int) error { return x.r.deleteService(ctx, keys[i]) })
	case st.APIFault != nil:
		x.r.hub.setDelay(st.APIFault.WatchDelay.D())
		if st.APIFault.DropWatch {
			x.r.hub.dropAll()
		}
	case st.Probes != nil:
		if *st.Probes {
			x.probes.on(ctx)
			if x.ls != nil {
				return x.advance(x.now()) // the first round, now
			}
		} else {
			x.probesOff()
		}
	case st.Sleep != nil:
		if x.ls != nil {
			return x.advance(x.now().Add(st.Sleep.D()))
		}
		t := time.NewTimer(st.Sleep.D())
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return ctx.Err()
}

// steppable reports whether a run can go in lockstep: on the in-memory
// kernel at time scale 0, where modeled time does not pass in wall time.
// API faults delay and relist in wall time, outside the replay's control,
// so a timeline with an apiFault step runs free.
func steppable(s *Scenario, b Backend) bool {
	sb, ok := b.(*SimBackend)
	if !ok || sb.timeScale != 0 {
		return false
	}
	return !hasStep(s.Timeline, func(st *Step) bool { return st.APIFault != nil })
}

func hasStep(steps []Step, match func(*Step) bool) bool {
	for i := range steps {
		if match(&steps[i]) || steps[i].Repeat != nil && hasStep(steps[i].Repeat.Steps, match) {
			return true
		}
	}
	return false
}

// batch makes write's API writes as one batch (see lockstep); free-running it just writes.
func (x *run) batch(write func() error) error {
	if x.ls == nil {
		return write()
	}
	return x.ls.batch(x.ctx, write)
}

// pace runs action(i) for i = 0 .. n-1 (n < 0: until d has passed) at rate
// per second, 0 meaning all at once. Free-running it spaces them in wall
// time. In lockstep action i is due at i/rate of modeled time from now and is
// a batch of its own, or, at rate 0, the actions are one batch.
func (x *run) pace(rate float64, d time.Duration, n int, action func(i int) error) error {
	if x.ls == nil {
		ctx := x.ctx
		if d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(x.ctx, d)
			defer cancel()
		}
		p := newPacer(rate)
		for i := 0; n < 0 || i < n; i++ {
			if err := p.wait(ctx); err != nil {
				if d > 0 && x.ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
					return nil // the step's duration is over
				}
				return err
			}
			if err := action(i); err != nil {
				return err
			}
		}
		return nil
	}
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
		if err := x.advance(at); err != nil {
			return err
		}
		if err := x.batch(func() error { return action(i) }); err != nil {
			return err
		}
	}
	if d > 0 {
		return x.advance(start.Add(d))
	}
	return nil
}

// advance moves modeled time forward to `to`, one event at a time: each
// timer that comes due fires on its own and the proxier settles after it;
// probe rounds are made when due, after the timers due with them.
func (x *run) advance(to time.Time) error {
	c := x.ls.clock
	for {
		if err := x.ctx.Err(); err != nil {
			return err
		}
		if c.fireDue() {
			if err := x.ls.settle(x.ctx); err != nil {
				return err
			}
			continue
		}
		now := c.Now()
		if x.probes.stepRound(x.ctx, now) {
			continue
		}
		if !now.Before(to) {
			return nil
		}
		next := to
		if t, ok := c.next(); ok && t.Before(next) {
			next = t
		}
		if t, ok := x.probes.nextRound(); ok && t.Before(next) {
			next = t
		}
		c.moveTo(next)
	}
}

// createCluster writes the cluster: nodes, each service with its slices (at
// rate services per second, 0: at once), and slices of no service.
func (x *run) createCluster(rate float64) error {
	set := x.s.set
	bySvc, orphans := clusterSlices(set)
	nodes := func() error { return x.r.createNodes(x.ctx, set) }
	service := func(i int) error {
		svc := set.Services[i]
		return x.r.createService(x.ctx, svc, bySvc[key(svc.Namespace, svc.Name)])
	}
	rest := func() error {
		for _, s := range orphans {
			if err := x.r.createOrphan(x.ctx, s); err != nil {
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
			for i := range set.Services {
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
	if err := x.pace(rate, 0, len(set.Services), service); err != nil {
		return err
	}
	return x.batch(rest)
}

// startProxier starts the next proxier generation on the run's kernel, with
// fresh informers on the same clientset and the run's Churn and Metrics. In
// lockstep it returns once the generation's first syncs are done.
func (x *run) startProxier(handlerDelay time.Duration) error {
	x.generation++
	ctx, cancel := context.WithCancel(x.ctx)
	pr := &proxierRun{cancel: cancel, done: make(chan struct{})}
	opts := proxier.Options{
		Index:        x.generation,
		OnSync:       x.onSync,
		Churn:        x.churn,
		Metrics:      x.metrics,
		HandlerDelay: handlerDelay,
	}
	if x.ls != nil {
		opts.Clock, opts.Lockstep = x.ls.clock, x.ls
		_, objects := x.r.writeCount()
		x.ls.start(objects)
	}
	idx := x.generation
	go func() {
		defer close(pr.done)
		err := proxier.Run(ctx, x.r.client, x.dp, x.cfg, opts)
		if ctx.Err() != nil {
			return // stopped by the run
		}
		if err == nil {
			err = errProxierStopped
		}
		x.fail(fmt.Errorf("proxier %d: %w", idx, err))
	}()
	x.prox = pr
	if x.ls == nil {
		return nil
	}
	return x.ls.settle(x.ctx) // the generation's first syncs are done
}

func (x *run) stopProxier() {
	if x.prox == nil {
		return
	}
	x.prox.cancel()
	<-x.prox.done
	x.prox = nil
	if x.ls != nil {
		x.ls.stop()
	}
}

func (x *run) onSync(s results.Sync) {
	writes, _ := x.r.writeCount()
	x.mu.Lock()
	x.syncs = append(x.syncs, s)
	x.seen = append(x.seen, writes)
	close(x.syncNote)
	x.syncNote = make(chan struct{})
	x.mu.Unlock()
	if x.o.OnSync != nil {
		x.o.OnSync(s)
	}
}

// latestSync returns the newest sync of the running generation for f, and
// the replay's write count when it ended.
func (x *run) latestSync(f dataplane.Family) (results.Sync, int, bool, chan struct{}) {
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
	return results.Sync{}, 0, false, x.syncNote
}

// synced reports whether every family's proxier has applied the API's
// current state: every watch event has been delivered, and each family's
// newest sync started after the last API write and counted the service
// ports and endpoints the API holds for it. The counts matter when handlers
// lag (a slow initial list): a sync can start after the last write while
// its handlers have not yet passed every event on. In lockstep no write
// happens during a sync and modeled time may not move between a write and
// the sync that applies it, so a sync is recent when no write followed it.
func (x *run) synced() (bool, string) {
	lastWrite, delivered := x.r.settled()
	if !delivered && x.ls == nil { // in lockstep the handlers have heard every event: a stronger test
		return false, "watch events are still on their way to the informers"
	}
	writes, _ := x.r.writeCount()
	for _, f := range x.fams {
		s, seen, ok, _ := x.latestSync(f)
		switch {
		case !ok:
			return false, fmt.Sprintf("the %s proxier has not synced yet", f)
		case x.ls == nil && s.Start.Before(lastWrite), x.ls != nil && seen != writes:
			return false, fmt.Sprintf("the %s proxier has not synced since the last API change", f)
		case s.Error != "":
			return false, fmt.Sprintf("the %s proxier's last sync failed: %s", f, s.Error)
		}
		if want := x.r.expect(f); s.Services != want.ports || s.Endpoints != want.endpoints {
			return false, fmt.Sprintf("the %s proxier knows %d of %d service ports and %d of %d endpoints",
				f, s.Services, want.ports, s.Endpoints, want.endpoints)
		}
	}
	return true, ""
}

func (x *run) waitSynced(timeout time.Duration) error {
	if x.prox == nil {
		return errors.New("no proxier is running")
	}
	if x.ls != nil {
		return x.waitSyncedModeled(timeout)
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

// waitSyncedModeled is waitSynced in lockstep: while the proxier is not
// synced, modeled time moves to its next timer (a rate-limited or periodic
// sync, a retry), up to timeout of modeled time.
func (x *run) waitSyncedModeled(timeout time.Duration) error {
	deadline := x.now().Add(timeout)
	if err := x.ls.settle(x.ctx); err != nil {
		return err
	}
	for {
		ok, why := x.synced()
		if ok {
			return nil
		}
		next, pending := x.ls.clock.next()
		if !pending || next.After(deadline) {
			return fmt.Errorf("not synced after %s of modeled time: %s", timeout, why)
		}
		if err := x.advance(next); err != nil {
			return err
		}
	}
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

// probeTargets chooses the probed addresses from the cluster as created.
func (x *run) probeTargets() ([]results.Target, error) {
	p := x.s.Probes
	if p.Services.Empty() {
		return nil, nil
	}
	byKey := map[string]int{}
	var keys []string
	for i, svc := range x.s.set.Services {
		k := key(svc.Namespace, svc.Name)
		byKey[k] = i
		keys = append(keys, k)
	}
	chosen := p.Services.Names
	if len(chosen) == 0 {
		// An own random source: choosing probes must not change the cluster's objects.
		rng := newRand(x.s.Seed, 0x70726f6265)
		idx := rng.Perm(len(keys))[:min(p.Services.Count, len(keys))]
		slices.Sort(idx)
		for _, i := range idx {
			chosen = append(chosen, keys[i])
		}
	}
	var nodeAddrs []netip.Addr
	for _, a := range x.s.Cluster.Node.Addresses {
		if pf, err := netip.ParsePrefix(a); err == nil {
			nodeAddrs = append(nodeAddrs, pf.Addr())
		}
	}
	var out []results.Target
	for _, k := range chosen {
		i, ok := byKey[k]
		if !ok {
			return nil, fmt.Errorf("probes.services: no service %s", k)
		}
		out = append(out, targetsOf(x.s.set.Services[i], p.Kinds, x.fams, nodeAddrs)...)
	}
	if len(out) > maxProbeTargets {
		return nil, fmt.Errorf("probes: %d targets, at most %d; probe fewer services or kinds", len(out), maxProbeTargets)
	}
	return out, nil
}

// finish fills the totals and metrics.
func (x *run) finish(f *results.File, reg *prometheus.Registry) {
	x.mu.Lock()
	f.Syncs = slices.Clone(x.syncs)
	x.mu.Unlock()
	slices.SortStableFunc(f.Syncs, func(a, b results.Sync) int { return a.Start.Compare(b.Start) })
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
	if m, err := prom.Histograms(reg); err == nil {
		f.Metrics = m
	} else if f.Error == "" {
		f.Error = err.Error()
	}
}

func tvSeconds(t unix.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

func (x *run) probesOff() {
	if x.probes != nil {
		x.probes.off()
	}
}

// StepCount is the number of steps the timeline runs, repeats expanded.
func (s *Scenario) StepCount() int { return countSteps(s.Timeline) }
