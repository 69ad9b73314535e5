package scenarios

import (
	"context"
	"time"

	"k8s.io/utils/clock"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
)

// driver moves a run through time. The wall driver lets the proxier run
// free, as kube-proxy runs, and the timeline waits in wall time: the only
// choice on a real kernel, and on the sim at a time scale above 0. The
// modeled driver is a discrete-event simulation on the sim at time scale 0:
// a modeled clock moves through syncs operation by operation, and probe
// rounds, API batches and timers happen at their modeled instants, so that a
// seed repeats exactly. The backend says which one a run gets (ModeledClock).
type driver interface {
	// clockName is record.ClockModeled or record.ClockWall.
	clockName() string
	now() time.Time
	// proxierOptions fills what a proxier generation needs to run on the
	// driver's time: its clock and, for the modeled driver, its stepper.
	proxierOptions(o *proxier.Options)
	// batch makes write's API writes: on the modeled clock as one event,
	// heard by every handler before anything else happens.
	batch(ctx context.Context, write func() error) error
	// until lets time pass to t: probe rounds, timers and syncs due
	// meanwhile happen.
	until(ctx context.Context, t time.Time) error
	// starting is called before a proxier generation starts, with the
	// number of API objects its informers will list and of the synced
	// calls it makes (proxier.Implementation.SyncedCalls).
	starting(objects, synced int)
	// handled is told of every informer event a generation's handlers
	// processed, or (delivered false) held back for later (holdBack).
	handled(delivered bool)
	// started returns once a new generation is running on the driver's time.
	started(ctx context.Context) error
	// syncBegan returns the replay's write count when f's latest sync began
	// (the modeled driver knows it exactly; free-running it is not known).
	syncBegan(f dataplane.Family) (writes int, known bool)
	// release lets held-back events reach the handlers: at once on the wall
	// clock, as the timeline's next event on the modeled clock.
	release(deliver func())
	// owe adds n events to those the handlers owe: negative for events
	// stuck behind a blocked one (holdBack), positive once they go on.
	owe(n int)
	// releaseStalled releases blocked events (release) when a release's
	// generation waits for its handlers instead of syncing without them:
	// on the wall clock always (holdBackLimit has passed), on the modeled
	// clock unless the release has made its synced calls and begun its
	// first sync, whose end, a modeled event, releases them.
	releaseStalled(release func())
	// stopping is called before the running generation is stopped and
	// stopped after it has returned.
	stopping()
	stopped()
	// next is when the earliest timer or in-flight sync operation is due, if any.
	next() (time.Time, bool)
	// probesOn starts probe rounds every interval from now; probesOff stops them.
	probesOn(ctx context.Context, p *prober)
	probesOff()
}

// wallDriver is the wall clock: the proxier runs free, the timeline sleeps.
type wallDriver struct {
	fail   context.CancelCauseFunc
	cancel context.CancelFunc
	done   chan struct{}
}

func (w *wallDriver) clockName() string                             { return record.ClockWall }
func (w *wallDriver) now() time.Time                                { return time.Now() }
func (w *wallDriver) proxierOptions(o *proxier.Options)             {}
func (w *wallDriver) batch(_ context.Context, f func() error) error { return f() }
func (w *wallDriver) starting(int, int)                             {}
func (w *wallDriver) handled(bool)                                  {}
func (w *wallDriver) started(context.Context) error                 { return nil }
func (w *wallDriver) syncBegan(dataplane.Family) (int, bool)        { return 0, false }
func (w *wallDriver) release(deliver func())                        { deliver() }
func (w *wallDriver) owe(int)                                       {}
func (w *wallDriver) releaseStalled(release func())                 { release() }
func (w *wallDriver) stopping()                                     {}
func (w *wallDriver) stopped()                                      {}
func (w *wallDriver) next() (time.Time, bool)                       { return time.Time{}, false }

func (w *wallDriver) until(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// probesOn probes from goroutines (prober.run) until probesOff.
func (w *wallDriver) probesOn(ctx context.Context, p *prober) {
	if w.cancel != nil {
		return
	}
	ctx, w.cancel = context.WithCancel(ctx)
	w.done = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		p.run(ctx)
	}(w.done)
}

func (w *wallDriver) probesOff() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	<-w.done
	w.cancel, w.done = nil, nil
}

var _ clock.WithTicker = (*sched)(nil)
