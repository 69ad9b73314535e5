package observed

import (
	"time"

	"k8s.io/utils/clock"

	"github.com/kpsim/kpsim/record"
)

// On the modeled clock (the in-memory kernel at time scale 0, a discrete-
// event replay: dataplane.Stepper), a release runs as kpsim's proxier does:
// each sync begins when the replay lets it (Family.Sync calls Begin), every
// kernel operation moves the clock by its modeled cost, the release's own
// work is priced by the cost profile, and its sync runner, the release's
// own code, waits on timers of the modeled clock (RunnerClock) and looks
// for work only in its turns, so that a seed repeats exactly.

// Modeled reports whether the generation runs on the modeled clock.
func (g *Generation) Modeled() bool {
	return g.opts.Stepper != nil && g.opts.Clock != nil && g.model != nil && g.model.Clocked()
}

// now is the generation's clock: the modeled one, or wall time.
func (g *Generation) now() time.Time {
	if g.opts.Clock != nil {
		return g.opts.Clock.Now()
	}
	return time.Now()
}

// modeledProgrammed is each change's network programming latency from its
// trigger time to the sync's end, both on the modeled clock (the
// release's own histogram observes wall time, which there says nothing).
func modeledProgrammed(ts []trigger, end time.Time) []record.Programmed {
	out := make([]record.Programmed, len(ts))
	for i, t := range ts {
		out[i] = record.Programmed{Object: t.object, Seconds: end.Sub(t.at).Seconds()}
	}
	return out
}

// Synced makes one of the release's synced calls for this family
// (call: its proxier's OnServiceSynced, ...), which sync at once. On a
// real clock it runs now, in the caller's goroutine (the config's), as
// kube-proxy runs it. On the modeled clock it runs in the family's runner
// at its next turn (RunnerClock), so the sync begins as a process the
// replay schedules; SyncedDone tells the replay once the config has made
// its calls to every family.
func (f *Family) Synced(call func()) {
	if !f.g.Modeled() {
		call()
		return
	}
	f.g.mu.Lock()
	f.deferred = append(f.deferred, call)
	f.g.mu.Unlock()
}

// Startup runs work a generation does before its proxiers are built and
// that touches the kernel (kube-proxy's cleanup of IPVS mode as it starts in
// nftables mode). On a real clock it runs now, in the caller's goroutine.
// On the modeled clock it runs in the family's runner at its first turn,
// ahead of the synced calls, as a process the replay schedules (Begin), so
// that its kernel operations take modeled time and probes see each step of
// it; building the proxiers, which does not touch the kernel, takes none.
func (f *Family) Startup(work func()) {
	if !f.g.Modeled() {
		work()
		return
	}
	f.g.mu.Lock()
	f.deferred = append(f.deferred, func() {
		f.g.opts.Stepper.Begin(f.family)
		work()
	})
	f.g.mu.Unlock()
}

// SyncedDone tells the replay that a config has made its synced calls (see Synced).
func (g *Generation) SyncedDone() {
	if g.Modeled() {
		g.opts.Stepper.Synced()
	}
}

func (f *Family) takeDeferred() func() {
	f.g.mu.Lock()
	defer f.g.mu.Unlock()
	if len(f.deferred) == 0 {
		return nil
	}
	call := f.deferred[0]
	f.deferred = f.deferred[1:]
	return call
}

// RunnerClock is the clock a release's sync runner runs on under the
// modeled clock: its timers are the modeled clock's, and each time the
// runner is about to wait on one (it reads the timer's channel, C, as its
// select starts) it takes part in the replay's turns as kpsim's runner does
// (dataplane.Stepper: Turn, Idle) — it returns from C only when, in a turn,
// the timer has fired or requested reports a run asked for; otherwise it
// reports itself idle and waits for its next turn. In its turns it also
// makes the family's deferred synced calls. So between turns nothing wakes
// the release's runner but the replay, and the runner's own code decides,
// from what it finds, when it syncs.
//
// It is both a k8s.io/utils/clock.Clock (the runner of kube-proxy 1.33
// and later makes its timers from one) and, through Timer, the timer of
// kube-proxy 1.30's runner, which has one timer of its own shape.
type RunnerClock struct {
	f         *Family
	base      clock.WithTicker
	requested func(t clock.Timer) bool
}

// RunnerClock returns the family's runner clock, or nil when the
// generation is not on the modeled clock. requested reports, as the
// runner is about to wait on t, whether a run was asked for that the
// runner's select takes along with t (its run channel holds a request).
func (f *Family) RunnerClock(requested func(t clock.Timer) bool) *RunnerClock {
	if !f.g.Modeled() {
		return nil
	}
	return &RunnerClock{f: f, base: f.g.opts.Clock, requested: requested}
}

func (c *RunnerClock) Now() time.Time                  { return c.base.Now() }
func (c *RunnerClock) Since(t time.Time) time.Duration { return c.base.Since(t) }

// After, Tick and Sleep are the modeled clock's own: the runners wait only
// on timers (NewTimer), which take part in the turns.
func (c *RunnerClock) After(d time.Duration) <-chan time.Time { return c.base.After(d) }
func (c *RunnerClock) Tick(d time.Duration) <-chan time.Time  { return c.base.Tick(d) }
func (c *RunnerClock) Sleep(d time.Duration)                  { c.base.Sleep(d) }

// NewTimer is a timer of the modeled clock whose C waits for a turn.
func (c *RunnerClock) NewTimer(d time.Duration) clock.Timer { return c.Timer(d) }

// Timer is NewTimer with the methods kube-proxy 1.30's runner asks of its
// timer as well (Now, Remaining, Since, Sleep).
func (c *RunnerClock) Timer(d time.Duration) *Timer {
	return &Timer{c: c, t: c.base.NewTimer(d), due: c.base.Now().Add(d)}
}

// Timer is a RunnerClock's timer. Stop and Reset drop a fire not yet
// received, as Go's timers do since Go 1.23 (what kube-proxy is built with).
type Timer struct {
	c   *RunnerClock
	t   clock.Timer
	due time.Time
}

// C is where the runner waits: it returns once, in a turn, the timer has
// fired or a run was requested. Once the generation is done it returns a
// channel that never delivers, with the timer stopped: a killed
// kube-proxy's runner runs no more, and its timers are no events of the
// modeled clock.
func (t *Timer) C() <-chan time.Time {
	c := t.c
	st := c.f.g.opts.Stepper
	for {
		if c.f.g.ctx.Err() != nil {
			t.t.Stop()
			return nil
		}
		turn, next := st.Turn(c.f.family)
		if call := c.f.takeDeferred(); call != nil {
			call()
			continue
		}
		if len(t.t.C()) > 0 || c.requested(t) {
			return t.t.C()
		}
		st.Idle(c.f.family, turn)
		select {
		case <-next:
		case <-c.f.g.ctx.Done():
		}
	}
}

func (t *Timer) drain() {
	select {
	case <-t.t.C():
	default:
	}
}

func (t *Timer) Stop() bool {
	armed := t.t.Stop()
	t.drain()
	return armed
}

func (t *Timer) Reset(d time.Duration) bool {
	armed := t.Stop()
	t.due = t.c.Now().Add(d)
	if t.c.f.g.ctx.Err() == nil {
		t.t.Reset(d)
	}
	return armed
}

func (t *Timer) Now() time.Time                  { return t.c.Now() }
func (t *Timer) Since(x time.Time) time.Duration { return t.c.Since(x) }
func (t *Timer) Remaining() time.Duration        { return t.due.Sub(t.c.Now()) }
func (t *Timer) Sleep(d time.Duration)           { t.c.Sleep(d) }
