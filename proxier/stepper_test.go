package proxier

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/sim"
)

// testStepper is a Stepper whose Begin waits for the test's go-ahead, and
// which reports each Idle.
type testStepper struct {
	begins chan dataplane.Family // a sync asks to start
	goes   chan struct{}         // the test lets one start
	idle   chan uint64           // turns in which the runner found nothing to do

	mu   sync.Mutex
	turn uint64
	next chan struct{}
}

func newTestStepper() *testStepper {
	return &testStepper{
		begins: make(chan dataplane.Family, 64), goes: make(chan struct{}, 64), idle: make(chan uint64, 64),
		next: make(chan struct{}),
	}
}

func (l *testStepper) Begin(f dataplane.Family) {
	l.begins <- f
	<-l.goes
}

func (l *testStepper) Turn(dataplane.Family) (uint64, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.turn, l.next
}

func (l *testStepper) Idle(_ dataplane.Family, turn uint64) {
	select {
	case l.idle <- turn:
	default: // a test that does not look at idleness
	}
}

func (l *testStepper) Synced() {}

// nextTurn starts a turn, as a replay does after it changed something.
func (l *testStepper) nextTurn() {
	l.mu.Lock()
	l.turn++
	close(l.next)
	l.next = make(chan struct{})
	l.mu.Unlock()
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("never: %s", what)
	}
	panic("unreachable")
}

// TestRunnerStepper: a run starts only when the stepper lets it, the runner
// says when it has nothing to do and in which turn, and a new turn wakes it
// to look again.
func TestRunnerStepper(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	runs := make(chan run, 16)
	r := newRunner(func(trigger string) time.Time {
		runs <- run{trigger, clk.Now()}
		return time.Time{}
	}, clk, time.Second, 30*time.Second)
	st := newTestStepper()
	r.stepper, r.family = st, dataplane.IPv4
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })

	go func() { r.Loop(ctx); close(done) }()
	require.Equal(t, dataplane.IPv4, receive(t, st.begins, "the initial sync asks to begin"))
	require.Empty(t, runs, "no sync before the stepper lets it")
	st.goes <- struct{}{}
	require.Equal(t, run{TriggerInitial, t0}, receive(t, runs, "the initial sync"))
	require.Equal(t, uint64(0), receive(t, st.idle, "idle after the initial sync"))

	// Between turns the runner sleeps, requests or not: only a turn wakes it.
	r.Request()
	r.Request()
	select {
	case <-st.begins:
		t.Fatal("a request woke the runner between turns")
	case <-time.After(50 * time.Millisecond):
	}
	// Its next turn finds the requests, merged into one run.
	st.nextTurn()
	receive(t, st.begins, "the requested sync asks to begin")
	st.goes <- struct{}{}
	require.Equal(t, run{TriggerChanges, t0}, receive(t, runs, "the requested sync"))
	require.Equal(t, uint64(1), receive(t, st.idle, "idle after the requested sync"))
	require.Empty(t, runs, "the two requests were one run")

	// A new turn wakes the runner to look again; nothing concerns it.
	st.nextTurn()
	require.Equal(t, uint64(2), receive(t, st.idle, "idle in the new turn"))

	// A due timer is the runner's business: the periodic sync, then idle.
	clk.Step(30 * time.Second)
	st.nextTurn()
	receive(t, st.begins, "the periodic sync asks to begin")
	st.goes <- struct{}{}
	require.Equal(t, run{TriggerPeriodic, t0.Add(30 * time.Second)}, receive(t, runs, "the periodic sync"))
	require.Equal(t, uint64(3), receive(t, st.idle, "idle after the periodic sync"))
}

// countingHandler counts the events its handler has processed, by kind.
type countingHandler struct {
	cache.ResourceEventHandler
	n chan<- string
	k string
}

func (c countingHandler) OnAdd(obj any, initial bool) {
	c.ResourceEventHandler.OnAdd(obj, initial)
	c.n <- c.k
}

func (c countingHandler) OnUpdate(o, n any) { c.ResourceEventHandler.OnUpdate(o, n); c.n <- c.k }
func (c countingHandler) OnDelete(o any)    { c.ResourceEventHandler.OnDelete(o); c.n <- c.k }

// TestRunWrapsHandlers: every informer event passes through Options.Handlers
// once, named by its kind, the initial list's included.
func TestRunWrapsHandlers(t *testing.T) {
	watch.DefaultChanSize = 10000
	objs := clusterObjects(5, true) // 5 services, 10 slices, 2 nodes
	client := fake.NewSimpleClientset(objs...)
	k, err := sim.New(sim.Options{})
	require.NoError(t, err)
	handled := make(chan string, 1024)
	syncs := make(chan record.Sync, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, client, k.Dataplane(), Config{NodeName: testNode, MinSyncPeriod: 10 * time.Millisecond}, Options{
			OnSync: func(s record.Sync) { syncs <- s },
			Handlers: func(kind string, h cache.ResourceEventHandler) cache.ResourceEventHandler {
				return countingHandler{h, handled, kind}
			},
		})
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	kinds := map[string]int{}
	for range len(objs) {
		kinds[receive(t, handled, "the initial list")]++
	}
	require.Equal(t, map[string]int{"Service": 5, "EndpointSlice": 10, "Node": 2}, kinds)
	require.Equal(t, 5, receive(t, syncs, "the initial sync").Services)

	_, err = client.CoreV1().Services("default").Create(ctx, service("default", "late", "10.96.1.1"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, "Service", receive(t, handled, "the new service"))
	var s record.Sync
	for s.Services != 6 {
		s = receive(t, syncs, "the sync that applies the new service")
	}
	_, err = client.DiscoveryV1().EndpointSlices("default").Create(ctx, slice("default", "late", "late-v4", 8080, v1.ProtocolTCP, eps("10.1.1.1")...), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, "EndpointSlice", receive(t, handled, "the new slice"))
}
