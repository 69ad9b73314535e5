package releaseclock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"
)

// TestReleaseClock: the release's reads follow the run's clock while a
// generation uses it, and the wall clock again once every one is done;
// what it measures from an instant it read stays wall time.
func TestReleaseClock(t *testing.T) {
	modeled := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	done := Use(modeled)
	again := Use(modeled) // a restart's second generation
	start := Now()
	require.Equal(t, modeled.Now(), start)
	modeled.Step(time.Hour)
	require.Equal(t, time.Hour, Since(start), "an hour of the run's clock")
	require.Less(t, Measured(start), time.Minute, "the wall time since the release read start")
	require.Equal(t, 30*time.Minute, Measured(modeled.Now().Add(-30*time.Minute)), "an instant the release did not read: the run's clock")
	done()
	done() // once per generation
	require.Equal(t, modeled.Now(), Now(), "one generation still uses it")
	again()
	require.WithinDuration(t, time.Now(), Now(), time.Minute, "every generation done: the wall clock")
	m := Measured(start)
	require.True(t, m >= 0 && m < time.Minute, "a sync the run's end cut short still measures wall time from its start: %s", m)

	next := Use(testingclock.NewFakeClock(start)) // a new run, whose clock hands out the same instant
	defer next()
	require.Equal(t, start, Now())
	require.Less(t, Measured(start), time.Second, "timed from the new run's reading, not the last run's")
}

// TestStop: a loop started before any generation began never stops; one
// started in a generation's lifetime stops when that generation ends, and
// a later generation's loops do not.
func TestStop(t *testing.T) {
	never := Stop()
	ctx1, end1 := context.WithCancel(context.Background())
	Begin(ctx1.Done())
	first := Stop()
	ctx2, end2 := context.WithCancel(context.Background())
	defer end2()
	end1()
	Begin(ctx2.Done()) // a restart
	second := Stop()
	select {
	case <-first:
	default:
		t.Fatal("the first generation's loops did not stop when it ended")
	}
	for _, ch := range []<-chan struct{}{never, second} {
		select {
		case <-ch:
			t.Fatal("a loop stopped with a generation not its own")
		default:
		}
	}
}
