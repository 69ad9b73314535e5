package scenarios

import (
	"context"
	"sync"

	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/proxier/dataplane"
)

// lockstep makes a run on the in-memory kernel at time scale 0 repeatable:
// the same seed gives the same syncs, applying the same changes, and so the
// same kernel operations. Free-running, which API writes share a sync depends
// on how fast the replay writes against how fast the runner fires, and
// periodic syncs come at wall-clock instants; at time scale 0 modeled time
// does not pass in wall time anyway, so nothing real is lost by stepping.
//
// The run alternates between the replay and the proxier:
//   - a batch (one churn visit, one paced service, or a whole unpaced step)
//     is written holding the sync gate, and the gate is kept until the
//     proxier's handlers have heard every event of it: no sync sees half;
//   - then the run settles: it waits until every family's runner has found
//     nothing to do, so the syncs the batch asked for are done;
//   - modeled time (the proxier's clock) moves only when the replay moves
//     it, from one event to the next: a due timer (minSyncPeriod's limit,
//     syncPeriod, a retry), a probe round, the next batch. Each timer fires
//     on its own, followed by a settle.
//
// It implements proxier.Lockstep for one proxier generation at a time.
type lockstep struct {
	clock  *modelClock
	fams   []dataplane.Family
	writes func() int   // API writes the replay has made so far
	gate   sync.RWMutex // syncs hold it shared, batches exclusively

	mu      sync.Mutex
	running bool // a proxier generation is running
	turn    uint64
	next    chan struct{} // closed when the turn after turn starts
	idle    map[dataplane.Family]uint64
	heard   int // events the generation's handlers have processed
	owed    int // events they owe: objects listed at start plus writes since
	changed chan struct{}
}

var _ proxier.Lockstep = (*lockstep)(nil)

func newLockstep(c *modelClock, fams []dataplane.Family, writes func() int) *lockstep {
	return &lockstep{clock: c, fams: fams, writes: writes, next: make(chan struct{}), changed: make(chan struct{})}
}

func (l *lockstep) SyncGate() sync.Locker { return l.gate.RLocker() }

func (l *lockstep) Handled() {
	l.mu.Lock()
	l.heard++
	l.broadcast()
	l.mu.Unlock()
}

func (l *lockstep) Turn() (uint64, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.turn, l.next
}

func (l *lockstep) Idle(f dataplane.Family, turn uint64) {
	l.mu.Lock()
	l.idle[f] = turn
	l.broadcast()
	l.mu.Unlock()
}

// broadcast wakes whoever waits for a change; l.mu is held.
func (l *lockstep) broadcast() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// start prepares for a proxier generation whose informers will list
// objects objects; it is called before the generation starts, which may
// report to it at once.
func (l *lockstep) start(objects int) {
	l.mu.Lock()
	l.running, l.heard, l.owed = true, 0, objects
	l.idle = map[dataplane.Family]uint64{}
	l.mu.Unlock()
}

// stop ends the generation (its proxier has returned).
func (l *lockstep) stop() {
	l.mu.Lock()
	l.running = false
	l.mu.Unlock()
}

// batch runs write as one batch of API writes: no sync runs while it
// writes nor before the handlers have heard all of it; then the run settles.
func (l *lockstep) batch(ctx context.Context, write func() error) error {
	l.gate.Lock()
	before := l.writes()
	err := write()
	n := l.writes() - before
	l.mu.Lock()
	l.owed += n
	l.mu.Unlock()
	if err == nil {
		err = l.waitFor(ctx, l.allHeard)
	}
	l.gate.Unlock()
	if err != nil {
		return err
	}
	return l.settle(ctx)
}

// settle waits until the handlers have heard everything, then starts a turn
// and waits until every family's runner has been idle in it.
func (l *lockstep) settle(ctx context.Context) error {
	if err := l.waitFor(ctx, l.allHeard); err != nil {
		return err
	}
	l.mu.Lock()
	l.turn++
	turn := l.turn
	close(l.next)
	l.next = make(chan struct{})
	l.mu.Unlock()
	return l.waitFor(ctx, func() bool {
		for _, f := range l.fams {
			if l.idle[f] != turn {
				return false
			}
		}
		return true
	})
}

// allHeard reports whether the handlers have processed every event owed; l.mu is held.
func (l *lockstep) allHeard() bool { return l.heard >= l.owed }

// waitFor waits until cond (called with l.mu held) holds, or no generation runs.
func (l *lockstep) waitFor(ctx context.Context, cond func() bool) error {
	for {
		l.mu.Lock()
		ok := !l.running || cond()
		ch := l.changed
		l.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
