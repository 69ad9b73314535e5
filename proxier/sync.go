package proxier

import (
	"errors"
	"time"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/results"
)

// syncRun is one sync in progress.
type syncRun struct {
	p           *Proxier
	rec         results.Sync
	full        bool
	fullPicture bool
	errs        []error
	saved       map[string][]string // full syncs: our chains' rules as the kernel holds them
	jumpsOK     bool
	vsDeletes   []dataplane.ServiceKey
}

func (s *syncRun) fail(err error) {
	s.errs = append(s.errs, err)
}

// phase runs f as a named phase, recording its wall time, its modeled
// kernel time and the operations it issued.
func (s *syncRun) phase(name string, f func()) {
	p := s.p
	before := p.counter.Ops()
	var modeled time.Duration
	if p.dp.ModeledDelay != nil {
		modeled = p.dp.ModeledDelay()
	}
	t0 := time.Now()
	f()
	wall := time.Since(t0)
	secs := wall
	if p.dp.ModeledDelay != nil {
		secs += p.dp.ModeledDelay() - modeled
	}
	ph := results.Phase{Name: name, Seconds: secs.Seconds(), Wall: wall.Seconds(), Ops: p.counter.Ops().Sub(before)}
	s.rec.Phases = append(s.rec.Phases, ph)
	s.rec.Seconds += ph.Seconds
	s.rec.Wall += ph.Wall
	s.rec.Ops.Add(&ph.Ops)
}

// sync is syncProxyRules. It returns the record and when it wants to run
// again regardless of changes (a retry after an error, or the next check of
// draining real servers).
func (p *Proxier) sync(trigger string) (results.Sync, time.Time) {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	p.seq++
	s := &syncRun{p: p, fullPicture: p.fullPicture()}
	s.full = trigger == TriggerInitial || trigger == TriggerPeriodic || p.needFull
	s.rec = results.Sync{Proxier: p.opts.Index, Family: p.family, Seq: p.seq, Trigger: trigger, Full: s.full, Start: p.clock.Now()}

	s.phase(PhaseApplyChanges, s.applyChanges)
	s.phase(PhaseEnsureChains, s.ensureChains)
	s.phase(PhaseEnsureLink, s.ensureLink)
	s.phase(PhaseEnsureIPSets, s.ensureIPSets)
	s.phase(PhaseIPVSServices, s.ipvsServices)
	s.phase(PhaseIPSetEntries, s.ipsetEntries)
	s.phase(PhaseIPTablesRestore, s.iptablesRestore)
	s.phase(PhaseCleanupStale, s.cleanupStale)
	s.phase(PhaseConntrack, s.conntrack)
	s.phase(PhaseGracefulTermination, s.gracefulTermination)

	s.rec.Services, s.rec.Endpoints = p.numPorts, p.numEndpoints
	finish := s.rec.Start.Add(time.Duration(s.rec.Seconds * float64(time.Second)))
	var again time.Time
	if err := errors.Join(s.errs...); err != nil {
		s.rec.Error = err.Error()
		// The model may be wrong about what the failed operations left
		// behind: re-read the kernel on the next sync, soon.
		p.needFull = true
		again = p.clock.Now().Add(max(p.cfg.MinSyncPeriod, time.Millisecond))
	} else {
		if s.full && s.fullPicture {
			p.needFull = false
		}
		for _, pp := range p.programmed {
			s.rec.Programmed = append(s.rec.Programmed, results.Programmed{Object: pp.object, Seconds: finish.Sub(pp.trigger).Seconds()})
		}
	}
	p.programmed = nil
	p.conntrackWork = nil
	p.resetTouched()
	if len(p.draining) > 0 {
		var next time.Time
		for _, due := range p.draining {
			if next.IsZero() || due.Before(next) {
				next = due
			}
		}
		if again.IsZero() || next.Before(again) {
			again = next
		}
	}
	p.observe(&s.rec, finish)
	if p.opts.OnSync != nil {
		p.opts.OnSync(s.rec)
	}
	return s.rec, again
}

func (p *Proxier) observe(rec *results.Sync, finish time.Time) {
	m := p.opts.Metrics
	if m == nil {
		return
	}
	fam := string(p.family)
	m.SyncDuration.WithLabelValues(fam).Observe(rec.Seconds)
	for _, ph := range rec.Phases {
		m.PhaseDuration.WithLabelValues(ph.Name).Observe(ph.Seconds)
	}
	for _, pr := range rec.Programmed {
		m.NetworkProgramming.WithLabelValues(fam).Observe(pr.Seconds)
	}
	if rec.Error == "" {
		m.LastTimestamp.WithLabelValues(fam).Set(float64(finish.UnixNano()) / 1e9)
	}
	p.mu.Lock()
	ns, ne := len(p.pending.services), len(p.pending.slices)
	p.mu.Unlock()
	m.ServiceChangesPend.WithLabelValues(fam).Set(float64(ns))
	m.EndpointChangesPend.WithLabelValues(fam).Set(float64(ne))
}
