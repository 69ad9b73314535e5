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
)

// RunOptions connect a run to its caller.
type RunOptions struct {
	Backend Backend
	// Registry receives the proxier's metrics (what --metrics-addr serves);
	// nil means a registry of the run's own.
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

	ctx  context.Context
	fail context.CancelCauseFunc

	mu       sync.Mutex
	syncs    []results.Sync
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
	f := &results.File{
		SchemaVersion: results.SchemaVersion,
		Backend:       s.Backend,
		Basis:         o.Backend.Basis(),
		Scenario:      scJSON,
		Start:         time.Now(),
	}
	if pb, ok := o.Backend.(ProfiledBackend); ok {
		f.CostProfile = pb.CostProfile()
	}
	x := &run{
		s:          s,
		o:          o,
		r:          newReplay(s),
		dp:         o.Backend.Dataplane(),
		cfg:        s.proxierConfig(),
		churn:      dataplane.NewChurn(),
		metrics:    proxier.NewMetrics(reg),
		syncNote:   make(chan struct{}),
		generation: -1,
		stepsTotal: countSteps(s.Timeline),
	}
	x.fams = x.r.fams
	x.ctx, x.fail = context.WithCancelCause(ctx)
	defer x.fail(nil)

	err = x.execute()
	if inspect != nil && err == nil {
		inspect(x)
	}

	x.probesOff()
	x.stopProxier()
	f.End = time.Now()
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
	x.probes = newProber(x.s.Probes.Interval.D(), targets, x.r, x.o.Backend, x.fail)
	if err := x.o.Backend.Prepare(x.ctx, x.s.set, targets); err != nil {
		return fmt.Errorf("prepare backend: %w", err)
	}
	if !slices.ContainsFunc(x.s.Timeline, func(st Step) bool { return st.StartProxier != nil }) {
		x.startProxier(0)
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
		rec := results.Step{Index: len(x.steps), Kind: st.resultKind(), Label: st.String(), Start: time.Now()}
		err := x.step(st)
		rec.End = time.Now()
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
		return x.r.createCluster(ctx, x.s.set, st.CreateCluster.Rate)
	case st.StartProxier != nil:
		x.startProxier(st.StartProxier.SlowInitialList.D())
	case st.RestartProxier != nil:
		x.stopProxier()
		x.startProxier(st.RestartProxier.SlowInitialList.D())
	case st.WaitSynced != nil:
		return x.waitSynced(st.WaitSynced.Timeout.D())
	case st.ChurnEndpoints != nil:
		return x.churnEndpoints(st.ChurnEndpoints)
	case st.AddServices != nil:
		pace := newPacer(st.AddServices.Rate)
		for i := 0; i < st.AddServices.Count; i++ {
			if err := pace.wait(ctx); err != nil {
				return err
			}
			svc, eps, err := x.s.gen.service()
			if err != nil {
				return err
			}
			if err := x.r.createService(ctx, svc, eps); err != nil {
				return err
			}
		}
	case st.DeleteServices != nil:
		keys, err := x.r.pick(Selector{Count: st.DeleteServices.Count}, 0, x.probes.services())
		if err != nil {
			return err
		}
		pace := newPacer(st.DeleteServices.Rate)
		for _, k := range keys {
			if err := pace.wait(ctx); err != nil {
				return err
			}
			if err := x.r.deleteService(ctx, k); err != nil {
				return err
			}
		}
	case st.APIFault != nil:
		x.r.hub.setDelay(st.APIFault.WatchDelay.D())
		if st.APIFault.DropWatch {
			x.r.hub.dropAll()
		}
	case st.Probes != nil:
		if *st.Probes {
			x.probes.on(ctx)
		} else {
			x.probesOff()
		}
	case st.Sleep != nil:
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

// proxierConfig is the scenario's proxier.Config.
func (s *Scenario) proxierConfig() proxier.Config {
	p := s.Proxier
	cfg := proxier.Config{
		NodeName:                 s.Cluster.Node.Name,
		InitialSync:              proxier.InitialSyncMode(p.InitialSync),
		MinSyncPeriod:            p.MinSyncPeriod.D(),
		SyncPeriod:               p.SyncPeriod.D(),
		Scheduler:                p.Scheduler,
		NodePortAddresses:        p.NodePortAddresses,
		MasqueradeAll:            p.MasqueradeAll,
		ClusterCIDRs:             p.ClusterCIDRs,
		ExcludeCIDRs:             p.ExcludeCIDRs,
		StrictARP:                p.StrictARP,
		GracefulTerminationRetry: p.GracefulTerminationRetry.D(),
	}
	for _, f := range p.Families {
		cfg.Families = append(cfg.Families, dataplane.Family(f))
	}
	return cfg
}

// startProxier starts the next proxier generation on the run's kernel, with
// fresh informers on the same clientset and the run's Churn and Metrics.
func (x *run) startProxier(handlerDelay time.Duration) {
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
}

func (x *run) stopProxier() {
	if x.prox == nil {
		return
	}
	x.prox.cancel()
	<-x.prox.done
	x.prox = nil
}

func (x *run) onSync(s results.Sync) {
	x.mu.Lock()
	x.syncs = append(x.syncs, s)
	close(x.syncNote)
	x.syncNote = make(chan struct{})
	x.mu.Unlock()
	if x.o.OnSync != nil {
		x.o.OnSync(s)
	}
}

// latestSync returns the newest sync of the running generation for f.
func (x *run) latestSync(f dataplane.Family) (results.Sync, bool, chan struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := len(x.syncs) - 1; i >= 0; i-- {
		s := x.syncs[i]
		if s.Proxier != x.generation {
			break
		}
		if s.Family == f {
			return s, true, x.syncNote
		}
	}
	return results.Sync{}, false, x.syncNote
}

// synced reports whether every family's proxier has applied the API's
// current state: every watch event has been delivered, and each family's
// newest sync started after the last API write and counted the service
// ports and endpoints the API holds for it. The counts matter when handlers
// lag (a slow initial list): a sync can start after the last write while
// its handlers have not yet passed every event on.
func (x *run) synced() (bool, string) {
	lastWrite, delivered := x.r.settled()
	if !delivered {
		return false, "watch events are still on their way to the informers"
	}
	for _, f := range x.fams {
		s, ok, _ := x.latestSync(f)
		switch {
		case !ok:
			return false, fmt.Sprintf("the %s proxier has not synced yet", f)
		case s.Start.Before(lastWrite):
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
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		ok, why := x.synced()
		if ok {
			return nil
		}
		_, _, note := x.latestSync(x.fams[0])
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
	ctx, cancel := context.WithTimeout(x.ctx, c.Duration.D())
	defer cancel()
	pace := newPacer(c.Rate)
	for i := 0; ; i++ {
		if err := pace.wait(ctx); err != nil {
			if x.ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				return nil // the step's duration is over
			}
			return err
		}
		if err := x.r.roll(ctx, keys[i%len(keys)]); err != nil {
			return err
		}
	}
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
	if m, err := results.Histograms(reg); err == nil {
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
