package scenarios

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
)

var clockT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fired returns the values waiting on each channel (zero time: none).
func fired(chs ...<-chan time.Time) []time.Time {
	out := make([]time.Time, len(chs))
	for i, ch := range chs {
		select {
		case out[i] = <-ch:
		default:
		}
	}
	return out
}

// TestSchedTimers: with no proxier running, time moves only when the
// timeline waits, and due timers fire one at a time, earliest first, equal
// due times in the order they were armed.
func TestSchedTimers(t *testing.T) {
	ctx := context.Background()
	var zero time.Time
	s := newSched(clockT0, nil, func() int { return 0 })
	late := s.NewTimer(2 * time.Second)
	a := s.NewTimer(time.Second)
	b := s.NewTimer(time.Second)
	tick := s.NewTicker(time.Second)

	next, ok := s.nextDue()
	require.True(t, ok)
	require.Equal(t, clockT0.Add(time.Second), next)

	require.NoError(t, s.until(ctx, clockT0.Add(time.Second), nil))
	require.Equal(t, clockT0.Add(time.Second), s.Now())
	require.Equal(t, []time.Time{zero, clockT0.Add(time.Second), clockT0.Add(time.Second), clockT0.Add(time.Second)},
		fired(late.C(), a.C(), b.C(), tick.C()))
	require.NoError(t, s.until(ctx, clockT0.Add(2*time.Second), nil))
	require.Equal(t, []time.Time{clockT0.Add(2 * time.Second), zero, zero, clockT0.Add(2 * time.Second)},
		fired(late.C(), a.C(), b.C(), tick.C()), "the ticker re-armed a period later")

	require.False(t, a.Stop(), "a fired timer is no longer armed")
	require.False(t, a.Reset(time.Second))
	require.True(t, a.Stop())
	tick.Stop()
	_, ok = s.nextDue()
	require.False(t, ok, "nothing armed")
	require.NoError(t, s.until(ctx, clockT0, nil))
	require.Equal(t, clockT0.Add(2*time.Second), s.Now(), "the clock never goes back")
}

// fakeRunner is a family's runner as the proxier's runner behaves towards
// a Stepper: on each turn it looks for work and, when there is some, begins
// a sync that spends modeled time in steps; otherwise it says it is idle.
type fakeRunner struct {
	s     *sched
	f     dataplane.Family
	work  chan []time.Duration // syncs to run, each a list of spends
	mu    sync.Mutex
	trace []string
}

func (r *fakeRunner) loop(ctx context.Context) {
	for {
		turn, next := r.s.Turn(r.f)
		select {
		case spends := <-r.work:
			r.s.Begin(r.f)
			r.log("begin")
			for _, d := range spends {
				r.s.Spend(d)
				r.log("spent " + d.String())
			}
			continue
		default:
		}
		r.s.Idle(r.f, turn)
		select {
		case <-next:
		case <-ctx.Done():
			return
		}
	}
}

func (r *fakeRunner) log(what string) {
	r.mu.Lock()
	r.trace = append(r.trace, string(r.f)+" "+what+" at "+r.s.Now().Sub(clockT0).String())
	r.mu.Unlock()
}

// TestSchedInterleaves: a sync spends modeled time operation by operation;
// the other family's sync interleaves with it by modeled time; probe rounds
// happen at their instants in between; and the whole order repeats.
func TestSchedInterleaves(t *testing.T) {
	run := func() []string {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		fams := []dataplane.Family{dataplane.IPv4, dataplane.IPv6}
		s := newSched(clockT0, fams, func() int { return 0 })
		s.mu.Lock()
		s.running = true
		s.mu.Unlock()
		var trace []string
		var mu sync.Mutex
		record := func(r *fakeRunner) []string {
			r.mu.Lock()
			defer r.mu.Unlock()
			return append([]string{}, r.trace...)
		}
		runners := map[dataplane.Family]*fakeRunner{}
		var wg sync.WaitGroup
		for _, f := range fams {
			r := &fakeRunner{s: s, f: f, work: make(chan []time.Duration, 4)}
			runners[f] = r
			wg.Add(1)
			go func() { defer wg.Done(); r.loop(ctx) }()
		}
		// Both syncs are asked for at once, as one API batch asks both families.
		runners[dataplane.IPv4].work <- []time.Duration{1500 * time.Millisecond, time.Second}
		runners[dataplane.IPv6].work <- []time.Duration{time.Second, time.Second}
		s.roundAt = clockT0.Add(time.Second)
		round := func() {
			mu.Lock()
			trace = append(trace, "round at "+s.Now().Sub(clockT0).String())
			mu.Unlock()
			s.mu.Lock()
			s.roundAt = s.roundAt.Add(time.Second)
			s.mu.Unlock()
		}
		require.NoError(t, s.until(ctx, clockT0.Add(3*time.Second), round))
		require.Equal(t, clockT0.Add(3*time.Second), s.Now())
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return append(append(trace, record(runners[dataplane.IPv4])...), record(runners[dataplane.IPv6])...)
	}
	want := []string{
		"round at 1s", "round at 2s", "round at 3s",
		"IPv4 begin at 0s", "IPv4 spent 1.5s at 1.5s", "IPv4 spent 1s at 2.5s",
		"IPv6 begin at 0s", "IPv6 spent 1s at 1s", "IPv6 spent 1s at 2s",
	}
	for range 5 {
		require.Equal(t, want, run())
	}
}

// TestSchedUntilDone: untilDone ends where a timeline that checks done at
// every event (until(now), then until(next) while not done) ends, with the
// same sync trace, probe rounds and clock, whether done holds or the
// deadline passes first; but the sync hands back to the timeline only
// where something else is due (a probe round, a timer), not at each of its
// operations.
func TestSchedUntilDone(t *testing.T) {
	const ops = 100
	type outcome struct {
		done    bool
		now     time.Duration
		trace   []string
		rounds  []time.Duration
		waiters uint64 // waiters queued and timers armed: hand-offs
	}
	run := func(deadline time.Duration, wait func(s *sched, ctx context.Context, deadline time.Time, round func(), done func() bool) (bool, error)) outcome {
		ctx, cancel := context.WithCancel(context.Background())
		s := newSched(clockT0, []dataplane.Family{dataplane.IPv4}, func() int { return 0 })
		s.running = true
		r := &fakeRunner{s: s, f: dataplane.IPv4, work: make(chan []time.Duration, 1)}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); r.loop(ctx) }()
		spends := make([]time.Duration, ops)
		for i := range spends {
			spends[i] = time.Millisecond
		}
		r.work <- spends
		s.NewTimer(50*time.Millisecond + 500*time.Microsecond)
		s.roundAt = clockT0.Add(30 * time.Millisecond)
		var out outcome
		round := func() {
			out.rounds = append(out.rounds, s.Now().Sub(clockT0))
			s.mu.Lock()
			s.roundAt = time.Time{} // one round
			s.mu.Unlock()
		}
		done := func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return len(r.trace) == 1+ops // begun, and every operation spent
		}
		var err error
		out.done, err = wait(s, ctx, clockT0.Add(deadline), round, done)
		require.NoError(t, err)
		out.now = s.Now().Sub(clockT0)
		out.waiters = s.seq
		(&modeledDriver{s: s}).stopping() // the sync, when not done, is killed
		cancel()
		wg.Wait()
		out.trace = r.trace
		return out
	}
	byEvent := func(s *sched, ctx context.Context, deadline time.Time, round func(), done func() bool) (bool, error) {
		if err := s.until(ctx, s.Now(), round); err != nil {
			return false, err
		}
		for !done() {
			next, pending := s.nextDue()
			if !pending || next.After(deadline) {
				return false, nil
			}
			if err := s.until(ctx, next, round); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	for _, tc := range []struct {
		deadline time.Duration
		done     bool
		now      time.Duration
		waiters  uint64 // with untilDone
	}{
		// The timer, the sync's beginning, and its operations due at the
		// probe round (30ms), just after it and just after the timer.
		{deadline: time.Second, done: true, now: ops * time.Millisecond, waiters: 5},
		// The deadline is a horizon too: the operation due at it waits.
		{deadline: 40 * time.Millisecond, done: false, now: 40 * time.Millisecond, waiters: 6},
	} {
		want := run(tc.deadline, byEvent)
		got := run(tc.deadline, (*sched).untilDone)
		require.Equal(t, tc.done, got.done)
		require.Equal(t, tc.now, got.now)
		require.Equal(t, []time.Duration{30 * time.Millisecond}, got.rounds)
		require.Equal(t, want.done, got.done)
		require.Equal(t, want.now, got.now)
		require.Equal(t, want.trace, got.trace)
		require.Equal(t, want.rounds, got.rounds)
		require.Equal(t, tc.waiters, got.waiters)
		require.Greater(t, want.waiters, uint64(int(tc.now/time.Millisecond)), "by event, every operation hands back")
	}
}
