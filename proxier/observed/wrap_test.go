package observed

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
)

// TestInformers: the release's handlers hear what kube-proxy's informer
// selectors let through (the fake clientset applies none to watches), behind
// the harness's wrapper, and what they heard is what the next sync knows.
func TestInformers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	client := fake.NewClientset()
	var mu sync.Mutex
	var passed []string // what the harness's wrapper saw
	heard := map[string][]string{}
	opts := proxier.Options{Handlers: func(kind string, h cache.ResourceEventHandler) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { mu.Lock(); passed = append(passed, kind); mu.Unlock(); h.OnAdd(obj, false) },
			UpdateFunc: func(old, obj any) { h.OnUpdate(old, obj) },
			DeleteFunc: func(obj any) { h.OnDelete(obj) },
		}
	}}
	g := New(ctx, proxier.Config{NodeName: "node-1", Families: []dataplane.Family{dataplane.IPv4}}, opts, nil, newRelease(true).reg, true)
	factory := informers.NewSharedInformerFactory(client, 0)
	record := func(kind string) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				mu.Lock()
				heard[kind] = append(heard[kind], obj.(metav1.Object).GetName())
				mu.Unlock()
			},
			DeleteFunc: func(obj any) {
				mu.Lock()
				heard[kind] = append(heard[kind], "-"+final(obj).(metav1.Object).GetName())
				mu.Unlock()
			},
		}
	}
	_, err := g.Services(factory.Core().V1().Services()).Informer().AddEventHandlerWithResyncPeriod(record("Service"), time.Minute)
	require.NoError(t, err)
	_, err = g.EndpointSlices(factory.Discovery().V1().EndpointSlices()).Informer().AddEventHandler(record("EndpointSlice"))
	require.NoError(t, err)
	require.ErrorContains(t, g.Registered(), "registered no Node handler")
	_, err = g.Nodes(factory.Core().V1().Nodes()).Informer().AddEventHandler(record("Node"))
	require.NoError(t, err)
	require.NoError(t, g.Registered())
	factory.Start(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }()

	other := service("other", 1)
	other.Labels = map[string]string{"service.kubernetes.io/service-proxy-name": "cilium"}
	headless := service("headless", 1)
	headless.Spec.ClusterIP, headless.Spec.ClusterIPs = v1.ClusterIPNone, []string{v1.ClusterIPNone}
	headlessSlice := slice("headless", "headless-1", "1", time.Now())
	headlessSlice.Labels["service.kubernetes.io/headless"] = ""
	for _, s := range []*v1.Service{service("web", 1), other, headless} {
		_, err := client.CoreV1().Services("ns").Create(ctx, s, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, s := range []*discoveryv1.EndpointSlice{slice("web", "web-1", "1", time.Now(), "10.244.0.1"), headlessSlice} {
		_, err := client.DiscoveryV1().EndpointSlices("ns").Create(ctx, s, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, n := range []string{"node-1", "node-2"} {
		_, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// The web service gains the other proxy's label: it leaves the selection.
	web := service("web", 1)
	web.Labels = other.Labels
	_, err = client.CoreV1().Services("ns").Update(ctx, web, metav1.UpdateOptions{})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(heard["Service"]) == 2 && len(heard["EndpointSlice"]) == 1 && len(heard["Node"]) == 1
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string][]string{"Service": {"web", "-web"}, "EndpointSlice": {"web-1"}, "Node": {"node-1"}}, heard)
	require.Len(t, passed, 7, "the harness's wrapper sees every event, before the selectors")
	ports, endpoints := g.known(dataplane.IPv4, nil)
	require.Zero(t, ports, "web left the selection")
	require.Zero(t, endpoints)
}
