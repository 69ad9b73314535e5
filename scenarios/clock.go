package scenarios

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// modelClock is modeled time for a lockstep run: it stands still until the
// replay moves it, and then fires the timers that came due, in order. The
// proxier's runners and graceful termination run on it, so minSyncPeriod,
// syncPeriod and retries happen at modeled instants, not at wall-clock ones.
type modelClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*modelTimer]struct{} // armed
	seq    uint64                   // timers armed so far
}

var _ clock.WithTicker = (*modelClock)(nil)

func newModelClock(start time.Time) *modelClock {
	return &modelClock{now: start, timers: map[*modelTimer]struct{}{}}
}

func (c *modelClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *modelClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *modelClock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

func (c *modelClock) NewTimer(d time.Duration) clock.Timer { return c.arm(d, 0) }

// Sleep waits until the replay has moved the clock past d.
func (c *modelClock) Sleep(d time.Duration) { <-c.After(d) }

func (c *modelClock) Tick(d time.Duration) <-chan time.Time { return c.NewTicker(d).C() }

func (c *modelClock) NewTicker(d time.Duration) clock.Ticker { return modelTicker{c.arm(d, d)} }

func (c *modelClock) arm(d, period time.Duration) *modelTimer {
	t := &modelTimer{c: c, ch: make(chan time.Time, 1), period: period}
	c.mu.Lock()
	c.seq++
	t.due, t.seq = c.now.Add(d), c.seq
	c.timers[t] = struct{}{}
	c.mu.Unlock()
	return t
}

// next returns when the earliest armed timer is due.
func (c *modelClock) next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for t := range c.timers {
		if first.IsZero() || t.due.Before(first) {
			first = t.due
		}
	}
	return first, !first.IsZero()
}

// moveTo moves the clock forward to t without firing anything; the replay
// fires what came due with fireDue.
func (c *modelClock) moveTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

// fireDue fires the earliest timer due by now, if any, and reports whether
// it did. One at a time, so that a runner sees one cause per wake-up (two
// timers ready at once would let Go's select choose between them); equal
// due times fire in the order the timers were armed. A fired timer holds
// one value, as a real one does; a ticker re-arms one period later.
func (c *modelClock) fireDue() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first *modelTimer
	for t := range c.timers {
		if !t.due.After(c.now) && (first == nil || t.due.Before(first.due) || t.due.Equal(first.due) && t.seq < first.seq) {
			first = t
		}
	}
	if first == nil {
		return false
	}
	select {
	case first.ch <- first.due:
	default:
	}
	if first.period > 0 {
		first.due = first.due.Add(first.period)
	} else {
		delete(c.timers, first)
	}
	return true
}

// modelTimer is a timer or (with a period) a ticker of a modelClock.
type modelTimer struct {
	c      *modelClock
	ch     chan time.Time
	due    time.Time
	seq    uint64 // arming order, re-taken by Reset
	period time.Duration
}

func (t *modelTimer) C() <-chan time.Time { return t.ch }

// Stop disarms the timer and reports whether it was armed.
func (t *modelTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, armed := t.c.timers[t]
	delete(t.c.timers, t)
	return armed
}

// Reset re-arms the timer d from now and reports whether it was armed.
func (t *modelTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, armed := t.c.timers[t]
	t.c.seq++
	t.due, t.seq = t.c.now.Add(d), t.c.seq
	t.c.timers[t] = struct{}{}
	return armed
}

// modelTicker is a modelTimer with a period, seen as a clock.Ticker.
type modelTicker struct{ t *modelTimer }

func (k modelTicker) C() <-chan time.Time { return k.t.C() }
func (k modelTicker) Stop()               { k.t.Stop() }
