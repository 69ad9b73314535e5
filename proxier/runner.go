package proxier

import (
	"context"
	"math"
	"time"

	"k8s.io/utils/clock"

	"github.com/kpsim/kpsim/dataplane"
)

// tokenBucket allows burst runs at once and refills one token per interval:
// kube-proxy's BoundedFrequencyRunner limits syncs to one per minSyncPeriod
// with a burst of 2 this way.
type tokenBucket struct {
	burst    float64
	interval time.Duration
	tokens   float64
	last     time.Time
}

func newTokenBucket(burst int, interval time.Duration, now time.Time) *tokenBucket {
	return &tokenBucket{burst: float64(burst), interval: interval, tokens: float64(burst), last: now}
}

func (b *tokenBucket) refill(now time.Time) {
	if b.interval <= 0 {
		b.tokens = b.burst
		return
	}
	if now.After(b.last) {
		b.tokens += float64(now.Sub(b.last)) / float64(b.interval)
		if b.tokens > b.burst {
			b.tokens = b.burst
		}
	}
	b.last = now
}

// take spends a token if one is available.
func (b *tokenBucket) take(now time.Time) bool {
	b.refill(now)
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// wait is how long until a token is available, rounded up: waiting that
// long always yields one. (Rounded down, a sub-nanosecond remainder made a
// zero wait that yields nothing, and on a clock that moves only when told,
// a runner that re-armed it for ever.)
func (b *tokenBucket) wait(now time.Time) time.Duration {
	b.refill(now)
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration(math.Ceil((1 - b.tokens) * float64(b.interval)))
}

// runner runs a sync function with kube-proxy's bounded-frequency semantics:
// requested runs are coalesced, no more often than minInterval (burst 2),
// and a run happens at least every maxInterval. The function returns when
// it wants to be run again regardless of requests (zero: no such wish), which
// is how failed syncs and graceful termination get retried.
type runner struct {
	fn          func(trigger string) (again time.Time)
	clock       clock.WithTicker
	minInterval time.Duration
	maxInterval time.Duration
	requests    chan struct{}
	// idle, when set (tests), receives a value each time the loop is about
	// to wait, so a fake clock is stepped only while the loop waits on it.
	idle chan struct{}
	// stepper, when set, starts each run and hears when the loop has
	// nothing to do (Options.Stepper); family names the loop to it.
	stepper dataplane.Stepper
	family  dataplane.Family
}

func newRunner(fn func(string) time.Time, clk clock.WithTicker, minInterval, maxInterval time.Duration) *runner {
	return &runner{fn: fn, clock: clk, minInterval: minInterval, maxInterval: maxInterval, requests: make(chan struct{}, 1)}
}

// Request asks for a run soon; requests before the run starts are merged.
func (r *runner) Request() {
	select {
	case r.requests <- struct{}{}:
	default:
	}
}

// triggerRank orders triggers when several are pending: the strongest one names the run.
func triggerRank(t string) int {
	switch t {
	case TriggerInitial:
		return 4
	case TriggerPeriodic:
		return 3
	case TriggerChanges:
		return 2
	case TriggerRetry:
		return 1
	}
	return 0
}

// Loop runs the initial sync at once, then serves requests and timers until ctx is done.
func (r *runner) Loop(ctx context.Context) {
	bucket := newTokenBucket(2, r.minInterval, r.clock.Now())
	periodic := r.clock.NewTimer(r.maxInterval)
	defer periodic.Stop()
	var retry, limit clock.Timer
	stop := func(t clock.Timer) {
		if t != nil {
			t.Stop()
		}
	}
	defer func() { stop(retry); stop(limit) }()
	chanOf := func(t clock.Timer) <-chan time.Time {
		if t == nil {
			return nil
		}
		return t.C()
	}
	pending := TriggerInitial
	for {
		if ctx.Err() != nil {
			return // killed: a stopped proxier begins no sync
		}
		if pending != "" && limit == nil {
			now := r.clock.Now()
			if bucket.take(now) {
				trigger := pending
				pending = ""
				again := r.run(trigger)
				if !periodic.Stop() {
					select { // drain a fire that raced with the run
					case <-periodic.C():
					default:
					}
				}
				periodic.Reset(r.maxInterval)
				stop(retry)
				retry = nil
				if !again.IsZero() {
					retry = r.clock.NewTimer(max(again.Sub(r.clock.Now()), 0))
				}
			} else {
				limit = r.clock.NewTimer(bucket.wait(now))
			}
		}
		if r.idle != nil {
			r.idle <- struct{}{}
		}
		var w wake
		if r.stepper != nil {
			// Read the turn before looking: whatever the replay did before
			// this turn started is visible to the look, so Idle is true.
			// Between turns only the replay wakes the runner: a request or a
			// timer is found by the next look, never raced for.
			turn, next := r.stepper.Turn(r.family)
			if w = r.wait(ctx, periodic.C(), chanOf(retry), chanOf(limit), false); w == wakeNothing {
				r.stepper.Idle(r.family, turn)
				select {
				case <-next:
					continue
				case <-ctx.Done():
					return
				}
			}
		} else {
			w = r.wait(ctx, periodic.C(), chanOf(retry), chanOf(limit), true)
		}
		want := ""
		switch w {
		case wakeDone:
			return
		case wakeRequest:
			want = TriggerChanges
		case wakePeriodic:
			want = TriggerPeriodic
			periodic.Reset(r.maxInterval)
		case wakeRetry:
			retry = nil
			want = TriggerRetry
		case wakeLimit:
			limit = nil
		}
		if triggerRank(want) > triggerRank(pending) {
			pending = want
		}
	}
}

// run is one run of fn, started when the stepper says, if there is one.
func (r *runner) run(trigger string) time.Time {
	if r.stepper != nil {
		r.stepper.Begin(r.family)
	}
	return r.fn(trigger)
}

// wake is what ended a wait of the loop.
type wake int

const (
	wakeNothing wake = iota // nothing was ready (a look)
	wakeDone
	wakeRequest
	wakePeriodic
	wakeRetry
	wakeLimit
)

// wait takes the next ready input: it blocks until there is one when block
// is set, and otherwise only looks.
func (r *runner) wait(ctx context.Context, periodic, retry, limit <-chan time.Time, block bool) wake {
	if !block {
		select {
		case <-ctx.Done():
			return wakeDone
		case <-r.requests:
			return wakeRequest
		case <-periodic:
			return wakePeriodic
		case <-retry:
			return wakeRetry
		case <-limit:
			return wakeLimit
		default:
			return wakeNothing
		}
	}
	select {
	case <-ctx.Done():
		return wakeDone
	case <-r.requests:
		return wakeRequest
	case <-periodic:
		return wakePeriodic
	case <-retry:
		return wakeRetry
	case <-limit:
		return wakeLimit
	}
}
