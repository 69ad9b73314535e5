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
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/sim"
)

// testLockstep is a Lockstep whose gate says when a sync waits for it, and
// which reports each Idle and the running count of handled events.
type testLockstep struct {
	gate    sync.RWMutex
	waiting chan struct{} // a sync is about to take the gate
	idle    chan uint64   // turns in which the runner found nothing to do
	handled chan int      // events handled so far, after each one

	mu    sync.Mutex
	turn  uint64
	next  chan struct{}
	heard int
}

func newTestLockstep() *testLockstep {
	return &testLockstep{
		waiting: make(chan struct{}, 64), idle: make(chan uint64, 64), handled: make(chan int, 1024),
		next: make(chan struct{}),
	}
}

type signalingLocker struct{ l *testLockstep }

func (g signalingLocker) Lock()   { g.l.waiting <- struct{}{}; g.l.gate.RLock() }
func (g signalingLocker) Unlock() { g.l.gate.RUnlock() }

func (l *testLockstep) SyncGate() sync.Locker { return signalingLocker{l} }

func (l *testLockstep) Handled() {
	l.mu.Lock()
	l.heard++
	n := l.heard
	l.mu.Unlock()
	l.handled <- n
}

func (l *testLockstep) Turn() (uint64, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.turn, l.next
}

func (l *testLockstep) Idle(_ dataplane.Family, turn uint64) {
	select {
	case l.idle <- turn:
	default: // a test that does not look at idleness
	}
}

// nextTurn starts a turn, as a replay does after it changed something.
func (l *testLockstep) nextTurn() {
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

// TestRunnerLockstep: a run waits for the gate, the runner says when it has
// nothing to do and in which turn, and a new turn wakes it to look again.
func TestRunnerLockstep(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	runs := make(chan run, 16)
	r := newRunner(func(trigger string) time.Time {
		runs <- run{trigger, clk.Now()}
		return time.Time{}
	}, clk, time.Second, 30*time.Second)
	ls := newTestLockstep()
	r.lockstep, r.family = ls, dataplane.IPv4
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })

	ls.gate.Lock() // the replay is writing a batch
	go func() { r.Loop(ctx); close(done) }()
	receive(t, ls.waiting, "the initial sync waits for the gate")
	require.Empty(t, runs, "no sync while the replay holds the gate")
	ls.gate.Unlock()
	require.Equal(t, run{TriggerInitial, t0}, receive(t, runs, "the initial sync"))
	require.Equal(t, uint64(0), receive(t, ls.idle, "idle after the initial sync"))

	// Requests made under the gate are one run when it opens.
	ls.gate.Lock()
	r.Request()
	receive(t, ls.waiting, "the requested sync waits for the gate")
	r.Request()
	ls.gate.Unlock()
	ls.nextTurn()
	require.Equal(t, run{TriggerChanges, t0}, receive(t, runs, "the requested sync"))
	require.Equal(t, uint64(1), receive(t, ls.idle, "idle in the new turn"))
	require.Empty(t, runs, "the second request was merged into the first")

	// A turn in which nothing concerns the runner: it looks and is idle again.
	ls.nextTurn()
	require.Equal(t, uint64(2), receive(t, ls.idle, "a new turn wakes the runner"))

	// A due timer is the runner's business: the periodic sync, then idle.
	clk.Step(30 * time.Second)
	ls.nextTurn()
	require.Equal(t, run{TriggerPeriodic, t0.Add(30 * time.Second)}, receive(t, runs, "the periodic sync"))
	require.Equal(t, uint64(3), receive(t, ls.idle, "idle after the periodic sync"))
}

// TestRunLockstepCountsEvents: every informer event reaches Handled once,
// the initial list's included, and a batch written under the gate is
// applied by one sync.
func TestRunLockstepCountsEvents(t *testing.T) {
	watch.DefaultChanSize = 10000
	objs := clusterObjects(5, true) // 5 services, 10 slices, 2 nodes
	client := fake.NewSimpleClientset(objs...)
	k, err := sim.New(sim.Options{})
	require.NoError(t, err)
	ls := newTestLockstep()
	syncs := make(chan results.Sync, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, client, k.Dataplane(), Config{NodeName: testNode, MinSyncPeriod: 10 * time.Millisecond},
			Options{Lockstep: ls, OnSync: func(s results.Sync) { syncs <- s }})
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	for receive(t, ls.handled, "the initial list") < len(objs) {
	}
	require.Equal(t, 5, receive(t, syncs, "the initial sync").Services)

	ls.gate.Lock()
	_, err = client.CoreV1().Services("default").Create(ctx, service("default", "late", "10.96.1.1"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = client.DiscoveryV1().EndpointSlices("default").Create(ctx, slice("default", "late", "late-v4", 8080, v1.ProtocolTCP, eps("10.1.1.1")...), metav1.CreateOptions{})
	require.NoError(t, err)
	for receive(t, ls.handled, "the batch") < len(objs)+2 {
	}
	ls.gate.Unlock()
	var s results.Sync
	for s.Services != 6 {
		s = receive(t, syncs, "the sync that applies the batch")
		require.Contains(t, []int{5, 6}, s.Services)
	}
	require.Equal(t, 6, s.Endpoints, "the service and its slice, in one sync")
	require.Equal(t, int64(1), s.Ops[dataplane.OpIPVSServiceAdd])
	require.Equal(t, int64(1), s.Ops[dataplane.OpIPVSDestinationAdd])
}
