package proxier

import (
	"errors"
	"fmt"
	"time"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
)

// syncRun is one sync in progress.
type syncRun struct {
	p           *Proxier
	rec         record.Sync
	full        bool
	fullPicture bool
	errs        []error
	saved       map[string][]string // full syncs: our chains' rules as the kernel holds them
	jumpsOK     bool
	vsDeletes   []dataplane.ServiceKey
	computed    time.Duration  // the current phase's own work, priced on a modeled clock
	units       dataplane.Work // the current phase's own work, in units
}

func (s *syncRun) fail(err error) {
	s.errs = append(s.errs, err)
}

// phase runs f as a named phase, recording how long it took, the part of
// that which was the kernel's and the proxier's own, its wall time and the
// operations it issued.
//
// On a modeled clock the phase's duration is the clock's advance: the
// kernel operations it issued and the work it reported (work) moved the
// clock; the proxier's part is that work, the kernel's part the rest. On an
// in-memory kernel without a clock the duration is the wall time plus the
// kernel's modeled cost not spent as wall time, and the kernel's part is its
// modeled cost. On a real kernel the duration is the wall time.
func (s *syncRun) phase(name string, f func()) {
	p := s.p
	model := p.dp.Model
	clocked := model != nil && model.Clocked()
	before := p.counter.Ops()
	var kernel0, unspent0 time.Duration
	if model != nil {
		kernel0, unspent0 = model.Kernel()
	}
	c0 := p.clock.Now()
	t0 := time.Now()
	s.computed, s.units = 0, dataplane.Work{}
	f()
	wall := time.Since(t0)
	ph := record.Phase{Name: name, Wall: wall.Seconds(), Ops: p.counter.Ops().Sub(before), Work: s.units}
	switch {
	case clocked:
		d := p.clock.Since(c0)
		ph.Seconds = d.Seconds()
		ph.ProxierSeconds = s.computed.Seconds()
		ph.KernelSeconds = (d - s.computed).Seconds()
	case model != nil:
		kernel1, unspent1 := model.Kernel()
		d := wall + unspent1 - unspent0
		k := min(kernel1-kernel0, d)
		ph.Seconds = d.Seconds()
		ph.KernelSeconds = k.Seconds()
		ph.ProxierSeconds = (d - k).Seconds()
	default:
		ph.Seconds = ph.Wall
	}
	s.rec.Phases = append(s.rec.Phases, ph)
	s.rec.Seconds += ph.Seconds
	s.rec.KernelSeconds += ph.KernelSeconds
	s.rec.ProxierSeconds += ph.ProxierSeconds
	s.rec.Wall += ph.Wall
	s.rec.Ops.Add(&ph.Ops)
}

// work reports the proxier's own work in the current phase: on a modeled
// clock it is priced and the clock moves by its price, so that a sync of
// 10,000 services takes the time the proxier's logic would, not zero.
func (s *syncRun) work(w dataplane.Work) {
	s.units.Add(w)
	if m := s.p.dp.Model; m != nil {
		s.computed += m.Compute(w)
	}
}

// sync is syncProxyRules. It returns the record and when it wants to run
// again regardless of changes (a retry after an error, or the next check of
// draining real servers).
func (p *Proxier) sync(trigger string) (record.Sync, time.Time) {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	p.seq++
	s := &syncRun{p: p, fullPicture: p.fullPicture()}
	s.full = trigger == TriggerInitial || trigger == TriggerPeriodic || p.needFull
	s.rec = record.Sync{Proxier: p.opts.Index, Family: p.family, Seq: p.seq, Trigger: trigger, Full: s.full, Start: p.clock.Now()}

	s.phase(PhaseApplyChanges, func() {
		s.work(dataplane.Work{Syncs: 1})
		s.applyChanges()
	})
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
	modeled := p.dp.Model != nil && p.dp.Model.Clocked()
	if modeled {
		finish = p.clock.Now() // exact: the clock moved by every phase
	}
	var again time.Time
	if err := joinErrors(s.errs); err == nil && modeled && p.wasKilled() {
		// On the modeled clock a sync the run stopped is cut at that
		// instant, whatever it did after in no modeled time.
		s.rec.Error, s.rec.Stopped = dataplane.CutShort(finish.Sub(s.rec.Start)), true
	} else if err != nil {
		s.rec.Error = err.Error()
		s.rec.Stopped = dataplane.Stopped(err)
		// The model may be wrong about what the failed operations left
		// behind: re-read the kernel on the next sync, soon.
		p.needFull = true
		again = p.clock.Now().Add(max(p.cfg.MinSyncPeriod, time.Millisecond))
	} else {
		if s.full && s.fullPicture {
			p.needFull = false
		}
		for _, pp := range p.programmed {
			s.rec.Programmed = append(s.rec.Programmed, record.Programmed{Object: pp.object, Seconds: finish.Sub(pp.trigger).Seconds()})
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

func (p *Proxier) observe(rec *record.Sync, finish time.Time) {
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

// joinErrors joins a sync's errors, with those of operations a stop cut
// short as the first and a count: a sync stopped at a deadline fails every
// operation it had left (3,211 at 2,000 services, 362 KB in the results
// file, each saying the same).
func joinErrors(errs []error) error {
	var out []error
	var stopped error
	n := 0
	for _, err := range errs {
		switch {
		case !dataplane.Stopped(err):
			out = append(out, err)
		case stopped == nil:
			stopped = err
		default:
			n++
		}
	}
	if stopped != nil {
		if n > 0 {
			stopped = fmt.Errorf("%w (and %d more operations the stop cut short)", stopped, n)
		}
		out = append(out, stopped)
	}
	return errors.Join(out...)
}

// wasKilled reports whether the run has stopped the proxier.
func (p *Proxier) wasKilled() bool {
	select {
	case <-p.killed:
		return true
	default:
		return false
	}
}
