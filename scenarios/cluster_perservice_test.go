package scenarios

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPerServiceMixes: endpointsPerService and portsPerService take weights
// per number, in the file or by --set, and each service draws its own; one
// number stays every service's, written as before, and draws nothing, so
// that a scenario's objects do not change.
func TestPerServiceMixes(t *testing.T) {
	mixed := strings.Replace(base, "  services: 10\n", "  services: 400\n  endpointsPerService: {1: 50, 2: 30, 20: 20}\n  portsPerService: {1: 3, 2: 1}\n", 1)
	s, err := Parse("x.yaml", []byte(mixed), nil)
	require.NoError(t, err)
	require.Equal(t, PerService{Values: []int{1, 2, 20}, Weights: []float64{0.5, 0.3, 0.2}}, s.Cluster.EndpointsPerService)
	require.InDelta(t, 5.1, s.Cluster.EndpointsPerService.Mean(), 1e-12)
	require.Equal(t, 1, s.Cluster.EndpointsPerService.Median())
	endpoints := map[int]int{}
	for _, eps := range s.set.EndpointSlices {
		endpoints[len(eps.Endpoints)]++
	}
	require.Len(t, endpoints, 3, "services of 1, 2 and 20 endpoints: %v", endpoints)
	require.InDelta(t, 200, endpoints[1], 40)
	require.InDelta(t, 80, endpoints[20], 30)
	ports := map[int]int{}
	for _, svc := range s.set.Services {
		ports[len(svc.Spec.Ports)]++
	}
	require.InDelta(t, 300, ports[1], 40, "%v", ports)
	require.Equal(t, 400, ports[1]+ports[2])
	b, err := json.Marshal(s.Cluster)
	require.NoError(t, err)
	require.Contains(t, string(b), `"endpointsPerService":{"1":0.5,"2":0.3,"20":0.2}`)

	// The same by --set, and one number as before.
	s2, err := Parse("x.yaml", []byte(strings.Replace(base, "services: 10", "services: 400", 1)), []string{
		"cluster.endpointsPerService={1: 50, 2: 30, 20: 20}", "cluster.portsPerService={1: 3, 2: 1}"})
	require.NoError(t, err)
	require.Equal(t, s.set.Services, s2.set.Services)
	one, err := Parse("x.yaml", []byte(base), []string{"cluster.endpointsPerService=3"})
	require.NoError(t, err)
	b, err = json.Marshal(one.Cluster)
	require.NoError(t, err)
	require.Contains(t, string(b), `"portsPerService":1,"endpointsPerService":3`)
	r := rand.New(rand.NewPCG(1, 2))
	before := r.Uint64()
	r = rand.New(rand.NewPCG(1, 2))
	require.Equal(t, 3, Fixed(3).Draw(r))
	require.Equal(t, before, r.Uint64(), "one number for every service draws nothing")
}

func TestPerServiceBound(t *testing.T) {
	require.Equal(t, 200.0, Fixed(2).Bound(100))
	p := PerService{Values: []int{1, 20}, Weights: []float64{0.5, 0.5}}
	// 1,050 on average over 100 services, plus drawSigmas standard deviations of the sum.
	require.Greater(t, p.Bound(100), 1050.0)
	require.LessOrEqual(t, p.Bound(100), 2000.0)
	require.Equal(t, 20.0, p.Bound(1), "at most every service's largest")
	require.Equal(t, "{1: 50%, 20: 50%} endpoints", p.Of("endpoint", "endpoints"))
	require.Equal(t, "1 endpoint", Fixed(1).Of("endpoint", "endpoints"))
}

func TestPerServiceErrors(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"{a: 1}", `cluster.endpointsPerService: keys are numbers of a service's (0 or more), each with its weight`},
		{"{1: -1}", "cluster.endpointsPerService.1: a weight must not be negative, got -1"},
		{"{1: 0}", "cluster.endpointsPerService: give at least one number a weight above 0"},
		{"{1: 1, 2000: 1}", "cluster.endpointsPerService: must be between 0 and 1000, got 2000"},
		{"[1, 2]", "cluster.endpointsPerService: must be a whole number, got a list"},
	} {
		_, err := Parse("x.yaml", []byte(base), []string{"cluster.endpointsPerService=" + tc.value})
		require.ErrorContains(t, err, tc.want, tc.value)
	}
}
