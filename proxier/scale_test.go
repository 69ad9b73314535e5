package proxier

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/dataplane"
)

const scaleServices = 10000

// churnEndpoints replaces the third endpoint of n services' slices; round
// alternates between two addresses so repeated calls keep changing something.
func churnEndpoints(p *Proxier, n, round int) {
	for i := range n {
		name := fmt.Sprintf("svc-%d", i*(scaleServices/n))
		j := i * (scaleServices / n)
		third := fmt.Sprintf("10.3.%d.%d", j/250, j%250+1)
		if round%2 == 1 {
			third = fmt.Sprintf("10.4.%d.%d", j/250, j%250+1)
		}
		p.OnEndpointSliceUpdate(nil, slice("default", name, name+"-1", 8080, v1.ProtocolTCP,
			eps(fmt.Sprintf("10.1.%d.%d", j/250, j%250+1), fmt.Sprintf("10.2.%d.%d", j/250, j%250+1), third)...))
	}
}

func TestScaleOperationCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 services")
	}
	e := newEnv(t, Config{})
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	populate(p, scaleServices)
	full := e.sync(p)
	require.Equal(t, scaleServices, full.Services)
	require.Equal(t, 3*scaleServices, full.Endpoints)
	require.Equal(t, int64(scaleServices), full.Ops[dataplane.OpIPVSServiceAdd])
	require.Equal(t, int64(3*scaleServices), full.Ops[dataplane.OpIPVSDestinationAdd])

	churnEndpoints(p, 10, 1)
	changed := e.sync(p)
	require.False(t, changed.Full)
	require.LessOrEqual(t, writes(changed.Ops), int64(50), "%v", changed.Ops)
	require.Equal(t, int64(10), changed.Ops[dataplane.OpIPVSDestinationAdd])
	require.Equal(t, int64(10), changed.Ops[dataplane.OpIPVSDestinationDelete])

	none := e.sync(p)
	require.Zero(t, writes(none.Ops), "%v", none.Ops)

	// A restart onto the same kernel, told the same cluster.
	p2 := e.synced(e.proxier(dataplane.IPv4, 1))
	populate(p2, scaleServices)
	churnEndpoints(p2, 10, 1)
	restart := e.sync(p2)
	require.True(t, restart.Full)
	require.Zero(t, writes(restart.Ops), "%v", restart.Ops)
}

// benchProxier returns a proxier that has programmed 10,000 services.
func benchProxier(b *testing.B) *Proxier {
	e := newEnv(b, Config{})
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	populate(p, scaleServices)
	if rec := p.Sync(); rec.Error != "" {
		b.Fatal(rec.Error)
	}
	return p
}

// BenchmarkFullSync10kServices is the first sync of a proxier told about
// 10,000 services with 3 endpoints each, onto an empty in-memory kernel
// (time scale 0). Besides ns/op it reports the process CPU time the syncs
// took (cpu-ns/op), which stays meaningful on a machine shared with other work.
func BenchmarkFullSync10kServices(b *testing.B) {
	b.ReportAllocs()
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		e := newEnv(b, Config{})
		p := e.synced(e.proxier(dataplane.IPv4, 0))
		populate(p, scaleServices)
		runtime.GC()
		c0 := cpuTime(b)
		b.StartTimer()
		if rec := p.Sync(); rec.Error != "" {
			b.Fatal(rec.Error)
		}
		cpu += cpuTime(b) - c0
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkSync10Changes10kServices(b *testing.B) {
	p := benchProxier(b)
	b.ReportAllocs()
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		churnEndpoints(p, 10, round)
		b.StartTimer()
		if rec := p.Sync(); rec.Error != "" || rec.Ops[dataplane.OpIPVSDestinationAdd] != 10 {
			b.Fatalf("%s %v", rec.Error, rec.Ops)
		}
	}
}

func BenchmarkNoChangeSync10kServices(b *testing.B) {
	p := benchProxier(b)
	b.ReportAllocs()
	for b.Loop() {
		if rec := p.Sync(); rec.Error != "" || writes(rec.Ops) != 0 {
			b.Fatalf("%s %v", rec.Error, rec.Ops)
		}
	}
}
