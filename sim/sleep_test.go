package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLateSleepIsMadeUp: at a time scale above 0 the time a sleep overran
// is taken off the next sleeps, so that the wall time slept follows the
// modeled cost and the proxier's phases do not count the timer's lateness
// as their own time.
func TestLateSleepIsMadeUp(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name      string
		late      time.Duration
		charges   []time.Duration
		wantSleep time.Duration
		wantOwed  time.Duration
	}{
		{"on time", 0, []time.Duration{4 * ms}, 4 * ms, 0},
		{"late, less to sleep", 3 * ms, []time.Duration{4 * ms}, ms, 0},
		{"late, below a chunk", 3500 * time.Microsecond, []time.Duration{4 * ms}, 0, 500 * time.Microsecond},
		{"late beyond the charge", 10 * ms, []time.Duration{4 * ms}, 0, -6 * ms},
		{"made up over later charges", 10 * ms, []time.Duration{4 * ms, 4 * ms, 4 * ms}, 2 * ms, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := &Kernel{scale: 1}
			k.late.Store(int64(tc.late))
			for _, c := range tc.charges {
				k.charge(c)
			}
			require.Equal(t, tc.wantSleep, k.sleep)
			require.Equal(t, tc.wantOwed, k.owed)
			require.Zero(t, k.late.Load(), "the lateness is taken into account once")
			require.Equal(t, time.Duration(len(tc.charges))*4*ms, k.modeled, "the modeled cost is the cost charged, however late sleeps were")
			require.Zero(t, k.delay)
		})
	}
}
