package proxier

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestTokenBucket(t *testing.T) {
	b := newTokenBucket(2, time.Second, t0)
	require.True(t, b.take(t0))
	require.True(t, b.take(t0), "burst of 2")
	require.False(t, b.take(t0))
	require.Equal(t, time.Second, b.wait(t0))
	require.Equal(t, 250*time.Millisecond, b.wait(t0.Add(750*time.Millisecond)))
	require.True(t, b.take(t0.Add(time.Second)))
	require.False(t, b.take(t0.Add(time.Second)))
	require.True(t, b.take(t0.Add(10*time.Second)))
	require.True(t, b.take(t0.Add(10*time.Second)), "refill caps at the burst")
	require.False(t, b.take(t0.Add(10*time.Second)))
}

// TestTokenBucketWaitYields: waiting exactly as long as wait says always
// yields a token, whatever the float remainder: on a clock that moves only
// to the instants asked for, a wait rounded down to zero asked for nothing
// and got nothing, for ever.
func TestTokenBucketWaitYields(t *testing.T) {
	for _, interval := range []time.Duration{100 * time.Millisecond, time.Second, 3 * time.Second} {
		b := newTokenBucket(2, interval, t0)
		now := t0
		for i := range 1000 {
			// Odd instants leave fractions of a token behind.
			now = now.Add(time.Duration(i%7+1) * 7919 * time.Nanosecond)
			for !b.take(now) {
				w := b.wait(now)
				require.Positive(t, w, "a bucket without a token must ask for time (interval %v, take %d)", interval, i)
				now = now.Add(w)
				require.True(t, b.take(now), "waiting %v must yield a token (interval %v, take %d)", w, interval, i)
				break
			}
		}
	}
}

// runnerHarness drives a runner on a fake clock, one step at a time.
type runnerHarness struct {
	t     *testing.T
	clock *clocktesting.FakeClock
	r     *runner
	runs  chan run
	again []time.Duration // what successive runs ask for (0: nothing)
}

type run struct {
	trigger string
	at      time.Time
}

func newRunnerHarness(t *testing.T, min, max time.Duration, again ...time.Duration) *runnerHarness {
	h := &runnerHarness{t: t, clock: clocktesting.NewFakeClock(t0), runs: make(chan run, 16), again: again}
	h.r = newRunner(func(trigger string) time.Time {
		now := h.clock.Now()
		h.runs <- run{trigger, now}
		if len(h.again) > 0 {
			d := h.again[0]
			h.again = h.again[1:]
			if d > 0 {
				return now.Add(d)
			}
		}
		return time.Time{}
	}, h.clock, min, max)
	h.r.idle = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.r.Loop(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		for {
			select {
			case <-h.r.idle:
			case <-done:
				return
			}
		}
	})
	return h
}

// idle waits until the loop waits, and returns the runs it made meanwhile.
func (h *runnerHarness) idle() []run {
	h.t.Helper()
	select {
	case <-h.r.idle:
	case <-time.After(10 * time.Second):
		h.t.Fatal("runner loop never went idle")
	}
	var out []run
	for {
		select {
		case r := <-h.runs:
			out = append(out, r)
		default:
			return out
		}
	}
}

// step advances the fake clock while the loop waits, then waits for it to settle.
func (h *runnerHarness) step(d time.Duration) []run {
	h.clock.Step(d)
	return h.idle()
}

// The harness only steps the clock onto a timer, so every step wakes the
// loop; a run's recorded time shows it did not happen earlier.
func TestRunnerBoundedFrequency(t *testing.T) {
	h := newRunnerHarness(t, time.Second, 30*time.Second)
	require.Equal(t, []run{{TriggerInitial, t0}}, h.idle(), "the initial sync runs at once")

	h.r.Request()
	require.Equal(t, []run{{TriggerChanges, t0}}, h.idle(), "burst 2: the second run is immediate too")

	h.r.Request()
	require.Empty(t, h.idle(), "no token left: the request waits")
	require.Equal(t, []run{{TriggerChanges, t0.Add(time.Second)}}, h.step(time.Second), "one minSyncPeriod later")

	// Nothing requested: the periodic run comes syncPeriod after the last run.
	require.Equal(t, []run{{TriggerPeriodic, t0.Add(31 * time.Second)}}, h.step(30*time.Second))
	h.r.Request()
	require.Equal(t, []run{{TriggerChanges, t0.Add(31 * time.Second)}}, h.idle(), "tokens refilled while idle")
}

func TestRunnerRetry(t *testing.T) {
	// The initial run asks to be run again after 5s (an error, or draining real servers).
	h := newRunnerHarness(t, time.Second, time.Minute, 5*time.Second)
	require.Equal(t, []run{{TriggerInitial, t0}}, h.idle())
	require.Equal(t, []run{{TriggerRetry, t0.Add(5 * time.Second)}}, h.step(5*time.Second))
	// That run asked for nothing: the next one is the periodic one.
	require.Equal(t, []run{{TriggerPeriodic, t0.Add(65 * time.Second)}}, h.step(time.Minute))
}
