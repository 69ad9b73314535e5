package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// traces is `go tool pprof -sample_index=inuse_space -traces` output, cut short.
const traces = `File: kpsim
Type: inuse_space
-----------+-------------------------------------------------------
     bytes:  8kB
    1.50MB   github.com/kpsim/kpsim/proxier.parseSlice
             github.com/kpsim/kpsim/proxier.(*Proxier).OnEndpointSliceAdd
             k8s.io/client-go/tools/cache.(*processorListener).run.func1
-----------+-------------------------------------------------------
     bytes:  512B
     512kB   k8s.io/api/discovery/v1.(*EndpointSlice).DeepCopyObject
             github.com/kpsim/kpsim/scenarios.(*apiStore).write
             github.com/kpsim/kpsim/scenarios.(*apiStore).react
             k8s.io/client-go/testing.(*Fake).Invokes
-----------+-------------------------------------------------------
     bytes:  1kB
    2MB   reflect.unsafe_New
             reflect.New
             k8s.io/apimachinery/pkg/api/meta.extractList
             k8s.io/client-go/tools/cache.(*Reflector).list
-----------+-------------------------------------------------------
     bytes:  1kB
    1kB   k8s.io/api/events/v1.(*Event).DeepCopyObject
             k8s.io/client-go/testing.(*tracker).add
-----------+-------------------------------------------------------
     bytes:  4kB
    3MB   k8s.io/kubernetes/pkg/proxy.(*EndpointsChangeTracker).EndpointSliceUpdate
             k8s.io/kubernetes/pkg/proxy/config.(*EndpointSliceConfig).handleAddEndpointSlice
             k8s.io/client-go/tools/cache.(*processorListener).run.func1
-----------+-------------------------------------------------------
     bytes:  64B
         0   runtime.malg
             runtime.newproc1
-----------+-------------------------------------------------------
     bytes:  64B
     64B   runtime.malg
             runtime.newproc1
-----------+-------------------------------------------------------
`

func TestBucket(t *testing.T) {
	by, err := bucket(strings.NewReader(traces))
	require.NoError(t, err)
	require.Equal(t, map[string]float64{
		"proxier (parsed objects, desired state, kernel view)": 1.5e6, // a proxier handler under an informer: the proxier's
		"API store (the cluster's objects, held once)":         512e3, // under the fake's Invokes: the store's, not the action log's
		"informer caches": 2e6, // each listed item's top level, copied by the reflector
		"fake clientset: object tracker (kinds the API store does not keep)": 1e3,
		"kube-proxy release (its proxier's state)":                           3e6, // a release's handler under an informer: the release's
		other: 64,
	}, by)
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]float64{"0": 0, "64B": 64, "12.50MB": 12.5e6, "1GB": 1e9} {
		got, err := parseBytes(in)
		require.NoError(t, err)
		require.InDelta(t, want, got, 1e-6, in)
	}
	_, err := parseBytes("x")
	require.Error(t, err)
}
