package scenarios

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
)

// sched is the modeled clock of a run on the in-memory kernel at time scale
// 0, and the discrete-event scheduler that moves it.
//
// Its processes are the timeline (the run's goroutine) and each family's
// sync runner. Modeled time passes only when a process spends it: a sync
// spends the cost of every kernel operation it issues and of its own work
// (Spend, called by the kernel and the proxier's Compute), the timeline
// waits for an instant (until). At most one process runs at a time, so
// that every run of a seed interleaves them identically:
//
//   - the timeline runs its step (API writes, a restart, a probe round)
//     while every runner is blocked: idle, or waiting to begin a sync or
//     for an operation's modeled cost to pass;
//   - when the timeline waits for an instant, it first lets the handlers
//     hear everything it wrote and every runner come to rest (quiesce);
//     then it takes the earliest due event (a waiting process, a timer, a
//     probe round) in a fixed order, moves the clock there and lets it
//     happen: a released process runs, and may move the clock itself as far
//     as the next event without handing back (the common case, and cheap);
//   - a sync that spends past the next event blocks until the events before
//     it have happened, against the kernel state of that instant: a probe
//     round sees half an ipset batch, an API batch arrives mid-sync and is
//     applied by a later sync, the other family's sync interleaves with it.
//
// The runners report idleness per turn (dataplane.Stepper): before it takes
// an event, the timeline gives each family's runner a turn in family order,
// and waits until the runner is idle in that turn or waits for an instant.
// Between turns a runner sleeps, whatever its timers or requests say: only
// one process at a time ever arms a timer or queues for an instant, so their
// order, which breaks ties between events of one instant, repeats too.
type sched struct {
	mu  sync.Mutex
	now time.Time
	// timers are the armed timers, in no order: a slice, not a set, since
	// every operation a sync spends looks through them (horizon), and a
	// run arms a few.
	timers []*modelTimer
	seq    uint64 // arming order of timers and waiters: ties at one instant
	wait   []*waiter
	// released is set while a process the timeline released runs: it alone
	// may move the clock by itself, up to horizon; current is its family.
	released bool
	current  dataplane.Family
	target   time.Time // the instant the timeline is waiting for
	roundAt  time.Time // the next probe round; zero while probes are off
	draining bool      // a generation is being stopped: nothing waits

	fams       []dataplane.Family
	writes     func() int // API writes the replay has made
	running    bool       // a proxier generation is running
	turns      uint64     // turns given so far, to every family
	turn       map[dataplane.Family]uint64
	next       map[dataplane.Family]chan struct{} // closed when the family's next turn starts
	idle       map[dataplane.Family]uint64
	heard      int // events the generation's handlers have processed
	synced     int // Synced calls of the generation
	owedSynced int // and how many it makes
	owed       int // events they owe: what they listed plus writes since, less what is held back
	began      map[dataplane.Family]int
	opens      []func() // held-back events to deliver, as the timeline's next event
	changed    chan struct{}
}

// waiter is a process blocked until a modeled instant.
type waiter struct {
	due  time.Time
	fam  dataplane.Family // the runner whose sync the process is
	rank int              // at one instant: syncs beginning, by family, before operations
	seq  uint64
	ch   chan struct{}
}

// rankSpend orders a spending process after every beginning sync of its instant.
const rankSpend = 1 << 30

var _ interface {
	clock.WithTicker
	dataplane.Stepper
} = (*sched)(nil)

func newSched(start time.Time, fams []dataplane.Family, writes func() int) *sched {
	s := &sched{
		now: start, fams: fams, writes: writes,
		turn: map[dataplane.Family]uint64{}, next: map[dataplane.Family]chan struct{}{},
		idle: map[dataplane.Family]uint64{}, began: map[dataplane.Family]int{},
		changed: make(chan struct{}),
	}
	for _, f := range fams {
		s.next[f] = make(chan struct{})
	}
	return s
}

// broadcast wakes whoever waits for a change; s.mu is held.
func (s *sched) broadcast() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// enqueue adds a waiter for due; s.mu is held.
func (s *sched) enqueue(due time.Time, f dataplane.Family, rank int) *waiter {
	s.seq++
	w := &waiter{due: due, fam: f, rank: rank, seq: s.seq, ch: make(chan struct{})}
	s.wait = append(s.wait, w)
	slices.SortFunc(s.wait, func(a, b *waiter) int {
		if c := a.due.Compare(b.due); c != 0 {
			return c
		}
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return int(a.seq - b.seq)
	})
	s.broadcast()
	return w
}

// horizon is the earliest instant at which something other than the running
// process is due; s.mu is held.
func (s *sched) horizon() time.Time {
	h := s.target
	if !s.roundAt.IsZero() && s.roundAt.Before(h) {
		h = s.roundAt
	}
	if len(s.wait) > 0 && s.wait[0].due.Before(h) {
		h = s.wait[0].due
	}
	for _, t := range s.timers {
		if t.due.Before(h) {
			h = t.due
		}
	}
	return h
}

// Spend blocks its caller, a sync, until d of modeled time has passed for
// it. Only a process the timeline released spends time: anything else that
// touches the kernel (the timeline reading it back, a test) does so at the
// current instant, as a probe does.
func (s *sched) Spend(d time.Duration) {
	s.mu.Lock()
	if !s.running || s.draining || !s.released {
		s.mu.Unlock()
		return
	}
	due := s.now.Add(d)
	if s.released && due.Before(s.horizon()) {
		s.now = due
		s.mu.Unlock()
		return
	}
	w := s.enqueue(due, s.current, rankSpend)
	s.mu.Unlock()
	<-w.ch
}

// Begin lets a family's sync start at the current instant, once the
// timeline lets it: syncs of one instant begin in family order.
func (s *sched) Begin(f dataplane.Family) {
	s.mu.Lock()
	if !s.running || s.draining {
		s.mu.Unlock()
		return
	}
	w := s.enqueue(s.now, f, slices.Index(s.fams, f))
	s.mu.Unlock()
	<-w.ch
	n := s.writes()
	s.mu.Lock()
	s.began[f] = n
	s.mu.Unlock()
}

func (s *sched) Turn(f dataplane.Family) (uint64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turn[f], s.next[f]
}

func (s *sched) Idle(f dataplane.Family, turn uint64) {
	s.mu.Lock()
	s.idle[f] = turn
	s.broadcast()
	s.mu.Unlock()
}

// Synced counts a release's synced call as an event its generation heard.
func (s *sched) Synced() {
	s.mu.Lock()
	s.synced++
	s.mu.Unlock()
	s.handled(true)
}

// handled counts one event the handlers processed, or held back for later:
// a held event is no longer owed (it reaches the handlers when the timeline
// releases it, as its own action).
func (s *sched) handled(delivered bool) {
	s.mu.Lock()
	if delivered {
		s.heard++
	} else {
		s.owed--
	}
	s.broadcast()
	s.mu.Unlock()
}

// waitFor waits until cond (called with s.mu held) holds or no generation runs.
func (s *sched) waitFor(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ok := !s.running || cond()
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// quiesce waits until the handlers have heard everything owed and then
// gives each family's runner a turn, in family order, waiting until it is
// idle in its turn or waits for an instant, with nothing heard meanwhile.
func (s *sched) quiesce(ctx context.Context) error {
	for {
		if err := s.waitFor(ctx, func() bool { return s.heard >= s.owed }); err != nil {
			return err
		}
		s.mu.Lock()
		heard := s.heard
		s.mu.Unlock()
		for _, f := range s.fams {
			s.mu.Lock()
			s.turns++
			turn := s.turns
			s.turn[f] = turn
			close(s.next[f])
			s.next[f] = make(chan struct{})
			s.mu.Unlock()
			err := s.waitFor(ctx, func() bool {
				return s.heard != heard || s.idle[f] == turn || slices.ContainsFunc(s.wait, func(w *waiter) bool { return w.fam == f })
			})
			if err != nil {
				return err
			}
		}
		s.mu.Lock()
		again := s.running && s.heard != heard
		if !again {
			s.released = false
		}
		s.mu.Unlock()
		if !again {
			return nil
		}
	}
}

// event is what happens next on the modeled clock.
type event int

const (
	eventNone event = iota
	eventWaiter
	eventTimer
	eventRound
)

// nextEvent is the earliest due event and its instant: at one instant,
// waiting processes first, then timers in arming order, then a probe round.
// s.mu is held.
func (s *sched) nextEvent() (event, time.Time, *modelTimer) {
	ev, at := eventNone, time.Time{}
	if len(s.wait) > 0 {
		ev, at = eventWaiter, s.wait[0].due
	}
	var first *modelTimer
	for _, t := range s.timers {
		if first == nil || t.due.Before(first.due) || t.due.Equal(first.due) && t.seq < first.seq {
			first = t
		}
	}
	if first != nil && (ev == eventNone || first.due.Before(at)) {
		ev, at = eventTimer, first.due
	}
	if !s.roundAt.IsZero() && (ev == eventNone || s.roundAt.Before(at)) {
		ev, at = eventRound, s.roundAt
	}
	return ev, at, first
}

// until moves modeled time to t, letting everything due until then happen
// in order; round makes a probe round.
func (s *sched) until(ctx context.Context, t time.Time, round func()) error {
	_, err := s.advance(ctx, t, round, nil)
	return err
}

// untilDone moves modeled time as a timeline that checks done at each
// instant a process or timer is due would: until(now), then, while done
// does not hold and the next such instant (nextDue) is not after deadline,
// until(next). It reports whether done held.
//
// It differs from those calls in one thing only: the running sync may move
// the clock by itself up to the next event due, instead of handing back to
// the timeline at every kernel operation (until(next) made next its
// horizon, and the sync's next operation was always past it). The
// instants it passes that way are ones where nothing else is due, so
// nothing else runs there; and done must be a predicate that only a sync's
// end can turn true (waitSynced's), after which the sync's runner is idle
// or waiting and the timeline checks done at that same instant.
func (s *sched) untilDone(ctx context.Context, deadline time.Time, round func(), done func() bool) (bool, error) {
	return s.advance(ctx, deadline, round, done)
}

// advance is until (done nil) and untilDone (done set): t is the horizon
// of a running sync, and the instant until returns at.
func (s *sched) advance(ctx context.Context, t time.Time, round func(), done func() bool) (bool, error) {
	s.mu.Lock()
	s.target = t
	limit := t // the instant the events are taken until: t, or one nextDue
	if done != nil {
		limit = s.now
	}
	s.mu.Unlock()
	for {
		if err := s.quiesce(ctx); err != nil {
			return false, err
		}
		s.mu.Lock()
		if len(s.opens) > 0 {
			open := s.opens[0]
			s.opens = s.opens[1:]
			s.mu.Unlock()
			open()
			continue
		}
		ev, at, timer := s.nextEvent()
		if ev == eventNone || at.After(limit) {
			if limit.After(s.now) {
				s.now = limit
			}
			s.mu.Unlock()
			if done == nil {
				return false, nil
			}
			if done() {
				return true, nil
			}
			next, pending := s.nextDue()
			if !pending || next.After(t) {
				// Nothing happens before the deadline (a sync's
				// operation ends past it): the wait lasts until it.
				s.mu.Lock()
				if t.After(s.now) {
					s.now = t
				}
				s.mu.Unlock()
				return false, nil
			}
			limit = next
			continue
		}
		if at.After(s.now) {
			s.now = at
		}
		switch ev {
		case eventWaiter:
			w := s.wait[0]
			s.wait = s.wait[1:]
			s.released, s.current = true, w.fam
			close(w.ch)
		case eventTimer:
			timer.fire()
		}
		s.mu.Unlock()
		if ev == eventRound {
			round()
		}
	}
}

// nextDue is when the earliest timer or waiting process is due.
func (s *sched) nextDue() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	saved := s.roundAt
	s.roundAt = time.Time{}
	ev, at, _ := s.nextEvent()
	s.roundAt = saved
	return at, ev != eventNone
}

// ---------------------------------------------------------------------------
// The clock the proxier's runners, graceful termination and the replay read.

func (s *sched) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *sched) Since(t time.Time) time.Duration        { return s.Now().Sub(t) }
func (s *sched) After(d time.Duration) <-chan time.Time { return s.NewTimer(d).C() }
func (s *sched) NewTimer(d time.Duration) clock.Timer   { return s.arm(d, 0) }
func (s *sched) Tick(d time.Duration) <-chan time.Time  { return s.NewTicker(d).C() }
func (s *sched) NewTicker(d time.Duration) clock.Ticker { return modelTicker{s.arm(d, d)} }

// Sleep waits until the timeline has moved the clock past d.
func (s *sched) Sleep(d time.Duration) { <-s.After(d) }

func (s *sched) arm(d, period time.Duration) *modelTimer {
	t := &modelTimer{s: s, ch: make(chan time.Time, 1), period: period}
	s.mu.Lock()
	s.seq++
	t.due, t.seq = s.now.Add(d), s.seq
	s.timers = append(s.timers, t)
	s.mu.Unlock()
	return t
}

// modelTimer is a timer or (with a period) a ticker on the modeled clock.
type modelTimer struct {
	s      *sched
	ch     chan time.Time
	due    time.Time
	seq    uint64 // arming order, re-taken by Reset
	period time.Duration
}

// fire delivers the timer's value (a fired timer holds one, as a real one
// does) and re-arms a ticker one period later; s.mu is held.
func (t *modelTimer) fire() {
	select {
	case t.ch <- t.due:
	default:
	}
	if t.period > 0 {
		t.due = t.due.Add(t.period)
	} else {
		t.disarm()
	}
}

// disarm removes the timer from the armed ones and reports whether it was
// armed; s.mu is held.
func (t *modelTimer) disarm() bool {
	i := slices.Index(t.s.timers, t)
	if i < 0 {
		return false
	}
	t.s.timers = slices.Delete(t.s.timers, i, i+1)
	return true
}

func (t *modelTimer) C() <-chan time.Time { return t.ch }

// Stop disarms the timer and reports whether it was armed.
func (t *modelTimer) Stop() bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	return t.disarm()
}

// Reset re-arms the timer d from now and reports whether it was armed.
func (t *modelTimer) Reset(d time.Duration) bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	armed := slices.Contains(t.s.timers, t)
	t.s.seq++
	t.due, t.seq = t.s.now.Add(d), t.s.seq
	if !armed {
		t.s.timers = append(t.s.timers, t)
	}
	return armed
}

// modelTicker is a modelTimer with a period, seen as a clock.Ticker.
type modelTicker struct{ t *modelTimer }

func (k modelTicker) C() <-chan time.Time { return k.t.C() }
func (k modelTicker) Stop()               { k.t.Stop() }

// ---------------------------------------------------------------------------

// modeledDriver runs a scenario on the modeled clock.
type modeledDriver struct {
	s      *sched
	prober *prober // while probes are on
}

func newModeledDriver(start time.Time, fams []dataplane.Family, writes func() int) *modeledDriver {
	return &modeledDriver{s: newSched(start, fams, writes)}
}

func (m *modeledDriver) clockName() string { return record.ClockModeled }
func (m *modeledDriver) now() time.Time    { return m.s.Now() }

func (m *modeledDriver) proxierOptions(o *proxier.Options) {
	o.Clock, o.Stepper = m.s, m.s
}

// batch writes while every runner is at rest, then lets the handlers hear
// it all before modeled time may move: no sync sees half a batch.
func (m *modeledDriver) batch(ctx context.Context, write func() error) error {
	before := m.s.writes()
	err := write()
	m.s.mu.Lock()
	m.s.owed += m.s.writes() - before
	m.s.mu.Unlock()
	if err != nil {
		return err
	}
	return m.until(ctx, m.now())
}

func (m *modeledDriver) until(ctx context.Context, t time.Time) error {
	return m.s.until(ctx, t, m.round(ctx))
}

// untilDone is sched.untilDone with the run's probe rounds.
func (m *modeledDriver) untilDone(ctx context.Context, deadline time.Time, done func() bool) (bool, error) {
	return m.s.untilDone(ctx, deadline, m.round(ctx), done)
}

// round makes a probe round and schedules the next.
func (m *modeledDriver) round(ctx context.Context) func() {
	return func() {
		p := m.prober
		m.s.mu.Lock()
		m.s.roundAt = m.s.roundAt.Add(p.interval)
		m.s.mu.Unlock()
		p.round(ctx)
	}
}

func (m *modeledDriver) handled(delivered bool) { m.s.handled(delivered) }

func (m *modeledDriver) owe(n int) {
	m.s.mu.Lock()
	m.s.owed += n
	m.s.broadcast()
	m.s.mu.Unlock()
}

// releaseStalled releases blocked events while the release has not made
// its synced calls (it waits for its handlers, and the timeline, which
// owes those calls, waits with it) or has not begun a sync (an API write
// during the hold is stuck behind a blocked event, and the timeline waits
// for it). Should the release's first sync be about to begin when
// holdBackLimit passes, the two race: a release slower than that to see
// its informers synced is not one this replays exactly.
func (m *modeledDriver) releaseStalled(release func()) {
	m.s.mu.Lock()
	stalled := m.s.synced < m.s.owedSynced || len(m.s.began) == 0
	m.s.mu.Unlock()
	if stalled {
		release()
	}
}

func (m *modeledDriver) starting(objects, synced int) {
	s := m.s
	s.mu.Lock()
	s.running, s.heard, s.owed, s.synced, s.owedSynced = true, 0, objects+synced, 0, synced
	clear(s.idle)
	clear(s.began)
	s.mu.Unlock()
}

// started lets the new generation list the API and begin its first syncs.
func (m *modeledDriver) started(ctx context.Context) error { return m.until(ctx, m.now()) }

func (m *modeledDriver) syncBegan(f dataplane.Family) (int, bool) {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	n, ok := m.s.began[f]
	return n, ok
}

// release queues held-back events for the timeline: they reach the
// handlers as its next event, heard in full before any sync begins.
func (m *modeledDriver) release(deliver func()) {
	s := m.s
	s.mu.Lock()
	s.opens = append(s.opens, deliver)
	s.broadcast()
	s.mu.Unlock()
}

// stopping lets every waiting process go without spending time: a stopped
// proxier is killed mid-sync, and its remaining operations fail at once.
func (m *modeledDriver) stopping() {
	s := m.s
	s.mu.Lock()
	s.draining = true
	for _, w := range s.wait {
		close(w.ch)
	}
	s.wait = nil
	s.opens = nil
	s.mu.Unlock()
}

func (m *modeledDriver) stopped() {
	s := m.s
	s.mu.Lock()
	s.draining, s.running = false, false
	s.broadcast()
	s.mu.Unlock()
}

func (m *modeledDriver) next() (time.Time, bool) { return m.s.nextDue() }

// probesOn makes the first round now and one every interval after.
func (m *modeledDriver) probesOn(_ context.Context, p *prober) {
	m.prober = p
	m.s.mu.Lock()
	if m.s.roundAt.IsZero() {
		m.s.roundAt = m.s.now
	}
	m.s.mu.Unlock()
}

func (m *modeledDriver) probesOff() {
	m.s.mu.Lock()
	m.s.roundAt = time.Time{}
	m.s.mu.Unlock()
}
