// Package releaseclock is the clock a kube-proxy release reads the time
// from in a kpsim binary. kube-proxy decides some things by the time that
// passed: nftables and iptables mode resync in full once an hour, nftables
// mode deletes a chain it flushed at a sync at least a second later, and
// iptables mode's large-cluster cleanup waits a sync period. On the
// modeled clock an hour of a run passes in seconds of wall time, so read
// from the wall clock those decisions never come. kpsim's build of a
// release (make kube-proxy: upstream/kube-proxy/cmd/clockoverlay) rewrites
// the release's own reads of the time in its proxy packages, time.Now and
// time.Since, into this package's Now and Since, which read the run's
// clock: the modeled one while a release runs on it, the wall clock
// otherwise. Nothing of the release's logic changes.
//
// What a release measures stays wall time: its metrics package's
// time.Since becomes Measured, which times an instant this package handed
// out from the wall instant it was handed out at. So its sync-duration
// histogram still says how long its own code took (record.Sync.Wall), as
// kpsim's calibration reads it, while its decisions follow the model.
//
// The release's loops that never stop on a node, where they end with the
// process (its sync loop, IPVS mode's graceful termination:
// wait.NeverStop), are given Stop instead: closed when the generation that
// started them ends, so that a restart does not leave the last
// generation's loops running, and its proxier, the whole of its state,
// held to the end of the run.
//
// The clock is the process's: a kpsim process runs one scenario at a time,
// and the generations of a run (a restart) share the run's clock.
package releaseclock

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

var (
	mu    sync.Mutex
	run   clock.PassiveClock // the run's clock; nil: the wall clock
	users int                // generations that use it
	// wallAt remembers the wall time each recent instant was handed out
	// at, for Measured; a release keeps only a few such instants at once
	// (a sync's start), so the oldest are forgotten.
	wallAt = map[time.Time]time.Time{}
	order  []time.Time
	stop   <-chan struct{} = make(chan struct{}) // the generation that began last's (Begin)
)

// remembered bounds wallAt: more than the instants a release times at once.
const remembered = 256

// Use makes c the clock the release's time reads go to, until the
// returned function is called by every generation that called Use.
func Use(c clock.PassiveClock) (release func()) {
	mu.Lock()
	defer mu.Unlock()
	if users == 0 {
		// A new run: the last one's instants are not this one's. They are
		// forgotten here, not when the last one ended: a sync the end cut
		// short still measures itself after it (forgotten then, its
		// histogram took the run's modeled length off its wall time).
		clear(wallAt)
		order = order[:0]
	}
	run = c
	users++
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			if users--; users == 0 {
				run = nil
			}
		})
	}
}

// Begin makes done what the loops the release starts from now on stop at
// (Stop): the done channel of a generation, called as it begins, before
// it makes its proxiers. A loop is given Stop as it starts, in its
// generation's lifetime, so it stops with its own generation.
func Begin(done <-chan struct{}) {
	mu.Lock()
	defer mu.Unlock()
	stop = done
}

// Stop is wait.NeverStop for a release's loops: closed when the
// generation that began last (Begin) ends; never, before one has.
func Stop() <-chan struct{} {
	mu.Lock()
	defer mu.Unlock()
	return stop
}

// Now is time.Now on the run's clock.
func Now() time.Time {
	mu.Lock()
	defer mu.Unlock()
	if run == nil {
		return time.Now()
	}
	t := run.Now()
	if _, ok := wallAt[t]; !ok {
		wallAt[t] = time.Now()
		if order = append(order, t); len(order) > remembered {
			delete(wallAt, order[0])
			order = order[1:]
		}
	}
	return t
}

// Since is time.Since on the run's clock.
func Since(t time.Time) time.Duration { return Now().Sub(t) }

// Measured is time.Since for what the release measures: the wall time
// since t, where t is an instant Now handed out (the wall instant it was
// handed out at); any other instant (a change's trigger time, written by
// the run) is timed on the run's clock.
func Measured(t time.Time) time.Duration {
	mu.Lock()
	w, ok := wallAt[t]
	mu.Unlock()
	if ok {
		return time.Since(w)
	}
	return Since(t)
}
