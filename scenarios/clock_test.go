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
