package scenarios

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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

// TestModelClock: time moves only when told, and due timers fire one at a
// time, earliest first, equal due times in the order they were armed.
func TestModelClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var zero time.Time
	c := newModelClock(t0)
	late := c.NewTimer(2 * time.Second)
	a := c.NewTimer(time.Second)
	b := c.NewTimer(time.Second)
	tick := c.NewTicker(time.Second)

	next, ok := c.next()
	require.True(t, ok)
	require.Equal(t, t0.Add(time.Second), next)
	require.False(t, c.fireDue(), "nothing is due before the clock moves")

	c.moveTo(t0.Add(2 * time.Second))
	require.Equal(t, t0.Add(2*time.Second), c.Now())
	for _, want := range [][]time.Time{
		{zero, t0.Add(time.Second), zero, zero},
		{zero, zero, t0.Add(time.Second), zero},
		{zero, zero, zero, t0.Add(time.Second)},
		{t0.Add(2 * time.Second), zero, zero, zero},
		{zero, zero, zero, t0.Add(2 * time.Second)}, // the ticker re-armed a period later
	} {
		require.True(t, c.fireDue())
		require.Equal(t, want, fired(late.C(), a.C(), b.C(), tick.C()))
	}
	require.False(t, c.fireDue())

	require.False(t, a.Stop(), "a fired timer is no longer armed")
	require.False(t, a.Reset(time.Second))
	require.True(t, a.Stop())
	tick.Stop()
	_, ok = c.next()
	require.False(t, ok, "nothing armed")

	c.moveTo(t0)
	require.Equal(t, t0.Add(2*time.Second), c.Now(), "the clock never goes back")
}
