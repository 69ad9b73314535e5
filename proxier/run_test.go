package proxier

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/sim"
)

// recorder collects sync records from proxier goroutines.
type recorder struct {
	mu    sync.Mutex
	syncs []record.Sync
	ch    chan record.Sync
}

func newRecorder() *recorder { return &recorder{ch: make(chan record.Sync, 1024)} }

func (r *recorder) onSync(s record.Sync) {
	r.mu.Lock()
	r.syncs = append(r.syncs, s)
	r.mu.Unlock()
	r.ch <- s
}

// waitFor returns the first sync (from now on) that satisfies ok.
func (r *recorder) waitFor(t *testing.T, what string, ok func(record.Sync) bool) record.Sync {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case s := <-r.ch:
			require.Empty(t, s.Error)
			if ok(s) {
				return s
			}
		case <-timeout:
			t.Fatalf("no sync: %s", what)
		}
	}
}

func clusterObjects(n int, withNode bool) []runtime.Object {
	var objs []runtime.Object
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		objs = append(objs,
			service("default", name, fmt.Sprintf("10.96.0.%d", i+1), withClusterIPs(fmt.Sprintf("10.96.0.%d", i+1), fmt.Sprintf("fd00:96::%x", i+1))),
			slice("default", name, name+"-v4", 8080, v1.ProtocolTCP, eps(fmt.Sprintf("10.1.0.%d", i+1))...),
			slice("default", name, name+"-v6", 8080, v1.ProtocolTCP, eps(fmt.Sprintf("fd00:1::%x", i+1))...))
	}
	if withNode {
		objs = append(objs,
			&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}},
			&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}})
	}
	return objs
}

func TestRunWithFakeClientset(t *testing.T) {
	watch.DefaultChanSize = 10000
	client := fake.NewSimpleClientset(clusterObjects(20, true)...)
	k, err := sim.New(sim.Options{})
	require.NoError(t, err)
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, client, k.Dataplane(), Config{
			NodeName: testNode, Families: []dataplane.Family{dataplane.IPv4, dataplane.IPv6}, MinSyncPeriod: 10 * time.Millisecond,
		}, Options{OnSync: rec.onSync, Metrics: NewMetrics(reg)})
	}()

	// Both families sync the whole initial list first.
	seen := map[dataplane.Family]record.Sync{}
	for len(seen) < 2 {
		s := rec.waitFor(t, "initial syncs", func(s record.Sync) bool { return s.Trigger == TriggerInitial })
		seen[s.Family] = s
	}
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		require.Equal(t, 20, seen[f].Services, f)
		require.Equal(t, 20, seen[f].Endpoints, f)
		require.Len(t, ipvsState(t, k, f), 20, f)
	}

	// A new service arrives through the API.
	_, err = client.CoreV1().Services("default").Create(ctx, service("default", "late", "10.96.1.1"), metav1.CreateOptions{})
	require.NoError(t, err)
	rec.waitFor(t, "the new service", func(s record.Sync) bool {
		return s.Family == dataplane.IPv4 && s.Ops[dataplane.OpIPVSServiceAdd] == 1
	})
	require.Contains(t, ipvsState(t, k, dataplane.IPv4), "10.96.1.1:80/TCP")

	cancel()
	require.NoError(t, <-done)

	families, err := reg.Gather()
	require.NoError(t, err)
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range families {
		byName[mf.GetName()] = mf
	}
	for _, name := range []string{
		"kubeproxy_sync_proxy_rules_duration_seconds", "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
		"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "kubeproxy_sync_proxy_rules_service_changes_total",
		"kubeproxy_sync_proxy_rules_endpoint_changes_total", "kubeproxy_sync_proxy_rules_service_changes_pending",
		"kubeproxy_sync_proxy_rules_endpoint_changes_pending", "kpsim_sync_phase_duration_seconds",
	} {
		require.Contains(t, byName, name)
	}
	sync := byName["kubeproxy_sync_proxy_rules_duration_seconds"]
	require.Len(t, sync.Metric, 2, "one series per ip_family")
	require.Len(t, sync.Metric[0].GetHistogram().GetBucket(), 15, "1 ms doubling to 16.384 s")
	require.InDelta(t, 16.384, sync.Metric[0].GetHistogram().GetBucket()[14].GetUpperBound(), 1e-9)
	phases := byName["kpsim_sync_phase_duration_seconds"]
	require.Len(t, phases.Metric, len(Phases))
}

func TestRunInitialSyncModes(t *testing.T) {
	const n = 40
	tests := []struct {
		name string
		mode InitialSyncMode
		// check the first sync after a restart onto the state of n services
		check func(t *testing.T, first record.Sync)
	}{
		{"handlers: the first sync has the full picture and writes nothing", InitialSyncHandlers, func(t *testing.T, first record.Sync) {
			require.Equal(t, n, first.Services)
			require.Zero(t, writes(first.Ops), "%v", first.Ops)
		}},
		{"legacy: the first sync runs while handlers lag and deletes what they have not delivered", InitialSyncLegacy, func(t *testing.T, first record.Sync) {
			require.Less(t, first.Services, n)
			require.Equal(t, int64(n-first.Services), first.Ops[dataplane.OpIPVSServiceDelete], "%v", first.Ops)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			watch.DefaultChanSize = 10000
			k, err := sim.New(sim.Options{})
			require.NoError(t, err)
			// The node as the previous kube-proxy left it.
			prev, err := New(Config{NodeName: testNode}, dataplane.IPv4, k.Dataplane(), Options{})
			require.NoError(t, err)
			prev.OnServicesSynced()
			prev.OnEndpointSlicesSynced()
			for _, o := range clusterObjects(n, false) {
				switch o := o.(type) {
				case *v1.Service:
					prev.OnServiceAdd(o)
				case *discoveryv1.EndpointSlice:
					prev.OnEndpointSliceAdd(o)
				}
			}
			require.Empty(t, prev.Sync().Error)

			client := fake.NewSimpleClientset(clusterObjects(n, true)...)
			rec := newRecorder()
			churn := dataplane.NewChurn()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, client, k.Dataplane(), Config{NodeName: testNode, InitialSync: tc.mode, MinSyncPeriod: time.Millisecond},
					// Slow handlers (25 ms an event, 3 events a service): the informers'
					// stores fill long before the handlers have seen everything.
					Options{Index: 1, OnSync: rec.onSync, Handlers: slowHandlers(25 * time.Millisecond), Churn: churn})
			}()
			first := rec.waitFor(t, "first sync", func(record.Sync) bool { return true })
			require.Equal(t, TriggerInitial, first.Trigger)
			tc.check(t, first)
			// Either way the node converges once the handlers catch up.
			rec.waitFor(t, "convergence", func(s record.Sync) bool { return s.Services == n && s.Endpoints == n })
			cancel()
			require.NoError(t, <-done)
			require.Len(t, ipvsState(t, k, dataplane.IPv4), n)
			if tc.mode == InitialSyncLegacy {
				require.Positive(t, churn.Readded()[dataplane.OpIPVSServiceAdd], "deleted, then added back")
			} else {
				require.Zero(t, writes(churn.Readded()))
			}
		})
	}
}

func TestNetworkProgrammingLatency(t *testing.T) {
	e := newEnv(t, Config{})
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	p, err := New(e.cfg, dataplane.IPv4, e.dp, Options{Clock: e.clock, Metrics: m})
	require.NoError(t, err)
	e.clock.Step(time.Minute) // trigger times before the proxier started do not count
	e.synced(p)
	p.OnServiceAdd(service("default", "web", "10.96.0.10"))
	s := slice("default", "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)
	s.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: e.clock.Now().Add(-3 * time.Second).Format(time.RFC3339Nano)}
	p.OnEndpointSliceAdd(s)
	later := s.DeepCopy()
	later.Annotations[v1.EndpointsLastChangeTriggerTime] = e.clock.Now().Add(-time.Second).Format(time.RFC3339Nano)
	p.OnEndpointSliceUpdate(s, later) // merged: the earliest trigger time counts
	rec := p.Sync()
	require.Len(t, rec.Programmed, 1)
	require.Equal(t, "default/web-1", rec.Programmed[0].Object)
	require.InDelta(t, 3+rec.Seconds, rec.Programmed[0].Seconds, 1e-6, "the earliest trigger, 3 s before the sync, plus the sync itself")

	families, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() == "kubeproxy_network_programming_duration_seconds" {
			h := mf.Metric[0].GetHistogram()
			require.Equal(t, uint64(1), h.GetSampleCount())
			require.Len(t, h.GetBucket(), 80)
			require.Equal(t, "ip_family", mf.Metric[0].Label[0].GetName())
			require.Equal(t, "IPv4", mf.Metric[0].Label[0].GetValue())
			return
		}
	}
	t.Fatal("no network programming histogram")
}

// slowHandlers makes every handler take d per event before it processes it.
func slowHandlers(d time.Duration) func(string, cache.ResourceEventHandler) cache.ResourceEventHandler {
	return func(_ string, h cache.ResourceEventHandler) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    func(obj any, initial bool) { time.Sleep(d); h.OnAdd(obj, initial) },
			UpdateFunc: func(o, n any) { time.Sleep(d); h.OnUpdate(o, n) },
			DeleteFunc: func(obj any) { time.Sleep(d); h.OnDelete(obj) },
		}
	}
}
