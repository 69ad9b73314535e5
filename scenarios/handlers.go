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
// (initialSync: legacy) then takes what it has not heard of for stale. The
// rest of the list, and whatever arrived behind it, reaches the handlers in
// order once the first sync has run.
//
// Held events are queued, not blocked on: an informer's later events must
// not wait out of sight of the replay. Each kind has its own informer and
// queue: a held Service holds back later Services, not EndpointSlices.
// Which objects are known first is fixed by the replay's seeded list order
// (installListOrder), so the same seed holds back the same objects.
type holdBack struct {
	limit map[string]int // per kind: initial events passed before holding

	mu     sync.Mutex
	passed map[string]int
	queue  map[string][]func() // held events per kind, in arrival order
	open   bool                // the first sync has run: everything passes
	synced bool
}

// newHoldBack passes share of each kind's count (rounded to the nearest
// object) and holds the rest. Nodes are never held: the proxier's own Node
// is one object, and kube-proxy reads it before it syncs.
func newHoldBack(share float64, counts map[string]int) *holdBack {
	h := &holdBack{limit: map[string]int{}, passed: map[string]int{}, queue: map[string][]func(){}}
	for kind, n := range counts {
		if kind != "Node" {
			h.limit[kind] = int(math.Round(share * float64(n)))
		}
	}
	return h
}

// hold queues deliver and reports true when the event must wait: an
// initial event of a kind past its share, or any event behind a held one.
func (h *holdBack) hold(kind string, initial bool, deliver func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open {
		return false
	}
	if len(h.queue[kind]) == 0 {
		limit, limited := h.limit[kind]
		if !initial || !limited || h.passed[kind] < limit {
			h.passed[kind]++
			return false
		}
	}
	h.queue[kind] = append(h.queue[kind], deliver)
	return true
}

// firstSyncDone reports, once, that the first sync has run.
func (h *holdBack) firstSyncDone() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := !h.synced
	h.synced = true
	return first
}

// release delivers the held events, kind by kind in a fixed order and each
// kind in arrival order, and lets everything pass.
func (h *holdBack) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, kind := range slices.Sorted(maps.Keys(h.queue)) {
		for _, deliver := range h.queue[kind] {
			deliver()
		}
	}
	h.queue, h.open = nil, true
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
