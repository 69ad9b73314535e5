package scenarios

import (
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
)

// holdBack makes a restarted (or first-started) proxier's handlers lag
// behind its informers as in the incident: the informers' stores hold the
// whole initial list, but the handlers have passed on only a share of it
// when the first sync runs. A proxier that syncs once its stores are full
// (kpsim's initialSync: legacy, kube-proxy before 1.31) then takes what it
// has not heard of for stale. The rest of the list, and whatever arrived
// behind it, reaches the handlers in order once the first sync has run.
//
// Each kind has its own informer: a held Service holds back later
// Services, not EndpointSlices. Which objects are known first is fixed by
// the replay's seeded list order (installListOrder), so the same seed holds
// back the same objects. An event is held in one of two ways:
//
//   - queued (kpsim's proxier): the handler returns at once and the event
//     waits in a queue, so that an informer's later events never wait out
//     of sight of the replay (the modeled clock must know of every event).
//     A proxier that reads its informers' stores cannot tell.
//   - blocked (a kube-proxy release, on the wall clock): the handler does
//     not return until the event is released. A release that waits for its
//     handler registrations (ResourceEventHandlerRegistration.HasSynced,
//     kube-proxy 1.31 and the backports) must see them lag, and a queued
//     event would count as handled. Such a release never syncs while its
//     handlers lag, so blocked events are also released holdBackLimit
//     after the first one was held: by then a release that syncs on its
//     stores has synced, and one that waits for its handlers just syncs later.
type holdBack struct {
	limit map[string]int // per kind: initial events passed before holding
	total map[string]int // per kind: initial events
	block bool
	stop  <-chan struct{} // blocked events give up when the generation stops
	drv   driver          // blocking: told of blocked events (see hold)

	mu       sync.Mutex
	passed   map[string]int
	queue    map[string][]func() // queued events per kind, in arrival order
	open     bool                // released: everything passes
	synced   bool
	released chan struct{} // closed on release: blocked events go on
	timer    *time.Timer   // blocking: releases holdBackLimit after the first held event
	blocked  int           // blocking: initial events stuck until the release (see hold)
}

// holdBackLimit is how long blocked events wait at most (see holdBack).
var holdBackLimit = 5 * time.Second

// newHoldBack passes share of each kind's count (rounded to the nearest
// object) and holds the rest, blocking (until release or stop) or queuing.
// Nodes are never held: the proxier's own Node is one object, and
// kube-proxy reads it before it syncs.
//
// When a kind's first event blocks, the kind's initial events not yet
// passed are held as far as drv knows (owe, negative): that one and those
// its informer has queued behind it. They are owed again when the release
// lets them go on: on the modeled clock the replay then waits for them to
// be heard before anything else happens. Blocked events are released by the generation's first
// sync or, when it does not come, holdBackLimit after the first one
// (drv.releaseStalled).
func newHoldBack(share float64, counts map[string]int, block bool, stop <-chan struct{}, drv driver) *holdBack {
	h := &holdBack{limit: map[string]int{}, total: counts, block: block, stop: stop, drv: drv, passed: map[string]int{}, queue: map[string][]func(){}, released: make(chan struct{})}
	for kind, n := range counts {
		if kind != "Node" {
			h.limit[kind] = int(math.Round(share * float64(n)))
		}
	}
	return h
}

// hold reports true when deliver must not be called now: an initial event
// of a kind past its share, or any event behind a held one. Queuing, it
// queues deliver; blocking, it waits until the events are released (then
// false: deliver now) or the generation stops (true: it never hears it).
func (h *holdBack) hold(kind string, initial bool, deliver func()) bool {
	h.mu.Lock()
	if h.open {
		h.mu.Unlock()
		return false
	}
	if len(h.queue[kind]) == 0 {
		limit, limited := h.limit[kind]
		if !initial || !limited || h.passed[kind] < limit {
			h.passed[kind]++
			h.mu.Unlock()
			return false
		}
	}
	if !h.block {
		h.queue[kind] = append(h.queue[kind], deliver)
		h.mu.Unlock()
		return true
	}
	if h.timer == nil {
		h.timer = time.AfterFunc(holdBackLimit, func() { h.drv.releaseStalled(h.release) })
	}
	stuck := h.total[kind] - h.passed[kind]
	h.blocked += stuck
	h.mu.Unlock()
	h.drv.owe(-stuck)
	select {
	case <-h.released:
		return false
	case <-h.stop:
		return true
	}
}

// firstSyncDone reports, once, that the first sync has run.
func (h *holdBack) firstSyncDone() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := !h.synced
	h.synced = true
	return first
}

// release delivers the queued events, kind by kind in a fixed order and
// each kind in arrival order, lets blocked ones go on, and lets everything
// pass from now on.
func (h *holdBack) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open {
		return
	}
	for _, kind := range slices.Sorted(maps.Keys(h.queue)) {
		for _, deliver := range h.queue[kind] {
			deliver()
		}
	}
	h.queue, h.open = nil, true
	h.drv.owe(h.blocked)
	close(h.released)
	if h.timer != nil {
		h.timer.Stop()
	}
}

// handlers returns the Options.Handlers of a proxier generation: each
// handler holds back events as hold says, lags by lag per event in wall time
// (slowInitialList, wall clock only), and tells the driver about every event
// it processed or held, so that on the modeled clock no sync begins before
// the handlers have heard what the replay wrote.
func (x *run) handlers(hold *holdBack, lag time.Duration) func(string, cache.ResourceEventHandler) cache.ResourceEventHandler {
	return func(kind string, h cache.ResourceEventHandler) cache.ResourceEventHandler {
		event := func(initial bool, deliver func()) {
			if hold != nil && hold.hold(kind, initial, deliver) {
				x.drv.handled(false)
				return
			}
			if lag > 0 {
				time.Sleep(lag)
			}
			deliver()
			x.drv.handled(true)
		}
		return cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    func(obj any, initial bool) { event(initial, func() { h.OnAdd(obj, initial) }) },
			UpdateFunc: func(old, obj any) { event(false, func() { h.OnUpdate(old, obj) }) },
			DeleteFunc: func(obj any) { event(false, func() { h.OnDelete(obj) }) },
		}
	}
}
