package observed

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
)

// release stands in for a kube-proxy release's metrics, as its sync
// function writes them: the sync duration and network programming
// histograms and the last-sync gauge, with or without the ip_family label.
type release struct {
	reg      *prometheus.Registry
	labelled bool
	sync     *prometheus.HistogramVec
	prog     *prometheus.HistogramVec
	last     *prometheus.GaugeVec
}

func newRelease(labelled bool) *release {
	var labels []string
	if labelled {
		labels = []string{record.LabelFamily}
	}
	r := &release{reg: prometheus.NewRegistry(), labelled: labelled,
		sync: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: record.MetricSyncDuration}, labels),
		prog: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: record.MetricNetworkProgramming}, labels),
		last: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: record.MetricLastSync}, labels),
	}
	r.reg.MustRegister(r.sync, r.prog, r.last)
	return r
}

func (r *release) labels(f dataplane.Family) []string {
	if r.labelled {
		return []string{string(f)}
	}
	return nil
}

// syncFunc is a release's sync: it observes its duration, and on success
// the programming latencies of changes made at trigger times, at now.
func (r *release) syncFunc(f dataplane.Family, seconds float64, ok bool, now time.Time, triggers ...time.Time) func() error {
	return func() error {
		r.sync.WithLabelValues(r.labels(f)...).Observe(seconds)
		if ok {
			for _, t := range triggers {
				r.prog.WithLabelValues(r.labels(f)...).Observe(now.Sub(t).Seconds())
			}
			r.last.WithLabelValues(r.labels(f)...).Set(float64(now.UnixNano()) / 1e9)
		}
		return nil
	}
}

func service(name string, ports int) *v1.Service {
	s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: v1.ServiceSpec{
		ClusterIP: "10.96.0.1", ClusterIPs: []string{"10.96.0.1"}, IPFamilies: []v1.IPFamily{v1.IPv4Protocol}, Type: v1.ServiceTypeClusterIP}}
	for i := range ports {
		s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: string(rune('a' + i)), Port: int32(80 + i), Protocol: v1.ProtocolTCP})
	}
	return s
}

func slice(svc, name, rv string, trigger time.Time, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv,
		Labels:      map[string]string{discoveryv1.LabelServiceName: svc},
		Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: trigger.Format(time.RFC3339Nano)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("a"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

// TestSyncRecords: each run of a release's sync function the release
// counted as a sync becomes a record.Sync: its duration and success from
// the release's metrics, its operations as mirrored, what its handlers had
// passed on, and a trigger inferred as kpsim's runner names its own.
func TestSyncRecords(t *testing.T) {
	for _, labelled := range []bool{true, false} {
		r := newRelease(labelled)
		var recs []record.Sync
		cfg := proxier.Config{NodeName: "node-1", Families: []dataplane.Family{dataplane.IPv4}}
		g := New(context.Background(), cfg, proxier.Options{Index: 2, OnSync: func(s record.Sync) { recs = append(recs, s) }}, nil, r.reg, labelled)
		f := g.Family(dataplane.IPv4)
		v4 := dataplane.IPv4
		vs := dataplane.VirtualServer{ServiceKey: dataplane.ServiceKey{Address: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: dataplane.TCP}}

		// Not initialized: the release returns before it measures anything.
		require.NoError(t, f.Sync(func() error { return nil }))
		require.Empty(t, recs)

		g.serviceChanged(service("web", 2), false)
		g.sliceChanged(nil, slice("web", "web-1", "1", time.Now().Add(-time.Hour), "10.244.0.1", "10.244.0.2"), false)
		require.NoError(t, f.Sync(func() error {
			require.NoError(t, f.Record("add", func(dp dataplane.Dataplane) { _ = dp.IPVS.AddService(vs) }))
			for range 3 {
				f.Count(func(dp dataplane.Dataplane) { _ = dp.IPTables.Command(v4, "nat", "-N", "KUBE-SERVICES") })
			}
			tx := knftables.NewFake(knftables.IPv4Family, dataplane.NFTablesTable).NewTransaction()
			tx.Add(&knftables.Chain{Name: "svc"})
			tx.Add(&knftables.Rule{Chain: "svc", Rule: "numgen random mod 2 vmap { 0 : goto a, 1 : goto b }"})
			tx.Delete(&knftables.Chain{Name: "old"})
			require.NoError(t, f.Record("nft", func(dp dataplane.Dataplane) {
				nft, err := dp.NFTables.Table(knftables.IPv4Family, dataplane.NFTablesTable)
				require.NoError(t, err)
				_ = nft.Run(context.Background(), tx)
			}))
			return r.syncFunc(v4, 0.25, true, time.Now())()
		}))
		require.Len(t, recs, 1)
		require.Equal(t, record.Sync{Proxier: 2, Family: v4, Seq: 1, Trigger: proxier.TriggerInitial, Full: true, Start: recs[0].Start,
			Seconds: 0.25, Wall: 0.25, Ops: recs[0].Ops, Services: 2, Endpoints: 2}, recs[0])
		require.Equal(t, int64(1), recs[0].Ops[dataplane.OpIPVSServiceAdd])
		require.Equal(t, int64(3), recs[0].Ops[dataplane.OpIPTablesCommand])
		require.Equal(t, [4]int64{1, 3, 1, 1}, [4]int64{recs[0].Ops[dataplane.OpNFTTransaction], recs[0].Ops[dataplane.OpNFTCommand],
			recs[0].Ops[dataplane.OpNFTDeleting], recs[0].Ops[dataplane.OpNFTMapRule]}, "counted as dataplane.Ops.NFTTransaction counts")
		require.Equal(t, int64(1+3+1+3), recs[0].Ops.Writes(), "iptables commands and nft transactions and commands are writes")
		require.Empty(t, recs[0].Programmed, "a change before the generation started is not its to program")

		// A failed operation, and the release's sync does not finish.
		require.NoError(t, f.Sync(func() error {
			_ = f.Result("ipset add", errors.New("exit status 1"))
			return r.syncFunc(v4, 0.5, false, time.Now())()
		}))
		require.Equal(t, "ipset add: exit status 1", recs[1].Error)
		require.Equal(t, proxier.TriggerPeriodic, recs[1].Trigger)
		require.Zero(t, recs[1].Ops.Writes())

		// The retry, after a change with a trigger time.
		trig := time.Now()
		g.sliceChanged(nil, slice("web", "web-1", "2", trig, "10.244.0.1"), false)
		done := trig.Add(1500 * time.Millisecond)
		require.NoError(t, f.Sync(r.syncFunc(v4, 0.125, true, done, trig)))
		require.Equal(t, proxier.TriggerRetry, recs[2].Trigger)
		require.Empty(t, recs[2].Error)
		require.Equal(t, 1, recs[2].Endpoints)
		require.Len(t, recs[2].Programmed, 1)
		require.Equal(t, "ns/web-1", recs[2].Programmed[0].Object)
		require.InDelta(t, 1.5, recs[2].Programmed[0].Seconds, 1e-6, "the release's own latency, not the end of kpsim's record")

		g.serviceChanged(service("web", 2), true)
		require.NoError(t, f.Sync(r.syncFunc(v4, 0.125, true, time.Now())))
		require.Equal(t, proxier.TriggerChanges, recs[3].Trigger)
		require.Zero(t, recs[3].Services)
	}
}

// TestProgrammed: latencies are the release's when its observations are
// the changes the handlers passed on, else measured to the end of the sync.
func TestProgrammed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ts := []trigger{{object: "a", at: t0}, {object: "b", at: t0.Add(time.Second)}}
	end := t0.Add(10 * time.Second)
	for _, tc := range []struct {
		name string
		n    uint64
		sum  float64
		want []record.Programmed
	}{
		{"the release's observations", 2, 3 + 2, []record.Programmed{{Object: "a", Seconds: 3}, {Object: "b", Seconds: 2}}},
		{"others", 1, 3, []record.Programmed{{Object: "a", Seconds: 10}, {Object: "b", Seconds: 9}}},
	} {
		got := programmed(ts, tc.n, tc.sum, end)
		require.Len(t, got, len(tc.want), tc.name)
		for i := range got {
			require.Equal(t, tc.want[i].Object, got[i].Object, tc.name)
			require.InDelta(t, tc.want[i].Seconds, got[i].Seconds, 1e-9, tc.name)
		}
	}
	require.Nil(t, programmed(nil, 0, 0, end))
}

// TestKilled: once the generation is killed, the release's operations fail
// as a stopped dataplane's do, and its sync function no longer runs.
func TestKilled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := newRelease(true)
	var recs []record.Sync
	g := New(ctx, proxier.Config{NodeName: "n", Families: []dataplane.Family{dataplane.IPv4}}, proxier.Options{OnSync: func(s record.Sync) { recs = append(recs, s) }}, nil, r.reg, true)
	f := g.Family(dataplane.IPv4)
	counted := false
	require.NoError(t, f.Record("ipset create", func(dataplane.Dataplane) { counted = true }))
	require.True(t, counted)
	// Killed mid-sync: the sync's record says so.
	require.NoError(t, f.Sync(func() error {
		cancel()
		err := f.Record("ipset create KUBE-CLUSTER-IP", func(dataplane.Dataplane) { require.Fail(t, "counted after the kill") })
		require.ErrorIs(t, err, syscall.ECANCELED)
		require.ErrorContains(t, err, "ipset create KUBE-CLUSTER-IP: the proxier was stopped")
		return r.syncFunc(dataplane.IPv4, 0.01, false, time.Now())()
	}))
	require.Len(t, recs, 1)
	require.Equal(t, "ipset create KUBE-CLUSTER-IP: the proxier was stopped: operation canceled", recs[0].Error)
	require.True(t, recs[0].Stopped, "cut short by the kill, not failed")
	require.False(t, recs[0].Failed())
	ran := false
	require.NoError(t, f.Sync(func() error { ran = true; return nil }))
	require.False(t, ran, "no sync starts once the generation is killed")
	g.Wait()
	require.Len(t, recs, 1)
}

// TestPrefixed keeps a release's own metrics out of the Go runtime's.
func TestPrefixed(t *testing.T) {
	r := newRelease(true)
	r.sync.WithLabelValues("IPv4").Observe(1)
	r.reg.MustRegister(prometheus.NewGoCollector())
	mfs, err := Prefixed(r.reg, "kubeproxy_").Gather()
	require.NoError(t, err)
	require.Len(t, mfs, 1)
	require.Equal(t, record.MetricSyncDuration, mfs[0].GetName())
}

// TestSliceTriggers: a slice update keeps its trigger time when what
// kube-proxy programs from changed, as its endpoint slice cache decides,
// even when the API (the fake one) leaves resource versions empty; a
// resync or a metadata-only update keeps none.
func TestSliceTriggers(t *testing.T) {
	r := newRelease(true)
	cfg := proxier.Config{NodeName: "node-1", Families: []dataplane.Family{dataplane.IPv4}}
	g := New(context.Background(), cfg, proxier.Options{}, nil, r.reg, true)
	triggers := func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.families[dataplane.IPv4].triggers)
	}
	t0 := time.Now().Add(time.Second)
	a := slice("web", "web-1", "", t0, "10.244.0.1")
	g.sliceChanged(nil, a, false)
	require.Equal(t, 1, triggers(), "created")
	g.sliceChanged(a, a, false)
	require.Equal(t, 1, triggers(), "a resync")
	b := slice("web", "web-1", "", t0.Add(time.Second), "10.244.0.1", "10.244.0.2")
	g.sliceChanged(a, b, false)
	require.Equal(t, 2, triggers(), "an endpoint added, with no resource version")
	c := b.DeepCopy()
	c.Labels["team"] = "x"
	g.sliceChanged(b, c, false)
	require.Equal(t, 2, triggers(), "metadata only")
}
