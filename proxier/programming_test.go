package proxier

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/dataplane"
)

// TestProgrammingLatencyCountsOnlyChanges checks which EndpointSlice events
// a sync reports as network programming latency: changes made after the
// proxier started, once each. The proxier starts at t0 on the fake clock;
// times below are offsets from it.
func TestProgrammingLatencyCountsOnlyChanges(t *testing.T) {
	type step struct {
		at      time.Duration // the clock, before the step
		event   string        // add, update, delete, or sync
		ips     []string      // the slice's endpoints
		trigger time.Duration // the slice's last-change-trigger-time
		want    []float64     // sync: the latencies reported, in seconds
	}
	a, b := []string{"10.0.0.1"}, []string{"10.0.0.2"}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "a change from before the proxier started is not its latency",
			steps: []step{
				{at: 0, event: "add", ips: a, trigger: -90 * time.Second},
				{at: time.Second, event: "sync", want: nil},
			},
		},
		{
			name: "a change after the start is",
			steps: []step{
				{at: 10 * time.Second, event: "add", ips: a, trigger: 8 * time.Second},
				{at: 10 * time.Second, event: "sync", want: []float64{2}},
			},
		},
		{
			name: "a relist of the unchanged slice is not a change",
			steps: []step{
				{at: 10 * time.Second, event: "add", ips: a, trigger: 8 * time.Second},
				{at: 10 * time.Second, event: "sync", want: []float64{2}},
				{at: 40 * time.Second, event: "update", ips: a, trigger: 8 * time.Second},
				{at: 40 * time.Second, event: "sync", want: nil},
			},
		},
		{
			name: "a new trigger time on the same endpoints is not a change",
			steps: []step{
				{at: 10 * time.Second, event: "add", ips: a, trigger: 8 * time.Second},
				{at: 10 * time.Second, event: "sync", want: []float64{2}},
				{at: 20 * time.Second, event: "update", ips: a, trigger: 19 * time.Second},
				{at: 20 * time.Second, event: "sync", want: nil},
			},
		},
		{
			name: "a changed slice after a relist is",
			steps: []step{
				{at: 10 * time.Second, event: "add", ips: a, trigger: 8 * time.Second},
				{at: 10 * time.Second, event: "sync", want: []float64{2}},
				{at: 40 * time.Second, event: "update", ips: a, trigger: 8 * time.Second},
				{at: 41 * time.Second, event: "update", ips: b, trigger: 40 * time.Second},
				{at: 43 * time.Second, event: "sync", want: []float64{3}},
			},
		},
		{
			name: "a slice deleted and created again is a change",
			steps: []step{
				{at: 10 * time.Second, event: "add", ips: a, trigger: 8 * time.Second},
				{at: 10 * time.Second, event: "sync", want: []float64{2}},
				{at: 20 * time.Second, event: "delete", ips: a, trigger: 20 * time.Second},
				{at: 21 * time.Second, event: "add", ips: a, trigger: 21 * time.Second},
				{at: 25 * time.Second, event: "sync", want: []float64{5}},
			},
		},
		{
			name: "merged events keep the earliest trigger time that counts",
			steps: []step{
				{at: 0, event: "add", ips: a, trigger: -90 * time.Second},
				{at: 10 * time.Second, event: "update", ips: b, trigger: 9 * time.Second},
				{at: 12 * time.Second, event: "update", ips: a, trigger: 11 * time.Second},
				{at: 12 * time.Second, event: "sync", want: []float64{3}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			p := e.synced(e.proxier(dataplane.IPv4, 0))
			p.OnServiceAdd(service("default", "web", "10.96.0.10"))
			for i, st := range tc.steps {
				e.clock.SetTime(t0.Add(st.at))
				s := slice("default", "web", "web-1", 8080, v1.ProtocolTCP, eps(st.ips...)...)
				s.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: t0.Add(st.trigger).Format(time.RFC3339Nano)}
				switch st.event {
				case "add":
					p.OnEndpointSliceAdd(s)
				case "update":
					p.OnEndpointSliceUpdate(nil, s)
				case "delete":
					p.OnEndpointSliceDelete(s)
				case "sync":
					// Latency runs to the sync's end: the step's wait plus
					// the sync's own duration, which is measured here.
					rec := e.sync(p)
					var got []float64
					for _, pr := range rec.Programmed {
						require.Equal(t, "default/web-1", pr.Object)
						got = append(got, pr.Seconds)
					}
					require.Len(t, got, len(st.want), "step %d", i)
					for j := range got {
						require.InDelta(t, st.want[j]+rec.Seconds, got[j], 1e-6, "step %d", i)
					}
				}
			}
		})
	}
}
