package scenarios

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// watchHub owns every watch the proxier's informers open on the API
// (apiStore) and injects API faults around it: delayed delivery and dropped
// watches (forcing a relist). Faults are applied by goroutines outside the
// store's lock: a watch that slept in it would stall every API call.
type watchHub struct {
	delay   atomic.Int64 // time.Duration applied to events received from now on
	pending atomic.Int64 // events received from the store, not yet delivered or discarded
	mu      sync.Mutex
	watches map[*delayedWatch]struct{}
}

func newWatchHub() *watchHub { return &watchHub{watches: map[*delayedWatch]struct{}{}} }

// open starts a watch of a resource (in a namespace, or all) that first
// delivers backlog.
func (h *watchHub) open(gvr schema.GroupVersionResource, ns string, backlog []watch.Event) *delayedWatch {
	w := &delayedWatch{
		hub:    h,
		gvr:    gvr,
		ns:     ns,
		out:    make(chan watch.Event),
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
		drops:  make(chan struct{}),
	}
	for _, ev := range backlog {
		w.push(ev)
	}
	h.mu.Lock()
	h.watches[w] = struct{}{}
	h.mu.Unlock()
	go w.deliver()
	return w
}

// publish hands an event to every open watch of its resource and namespace.
func (h *watchHub) publish(gvr schema.GroupVersionResource, ns string, ev watch.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watches {
		if w.gvr == gvr && (w.ns == "" || w.ns == ns) {
			w.push(ev)
		}
	}
}

func (h *watchHub) setDelay(d time.Duration) { h.delay.Store(int64(d)) }

// undelivered reports how many events are still on their way to informers.
func (h *watchHub) undelivered() int64 { return h.pending.Load() }

// dropAll ends every open watch with an Expired error, as an API server does
// when a watch falls too far behind; each informer then relists.
func (h *watchHub) dropAll() {
	h.mu.Lock()
	ws := make([]*delayedWatch, 0, len(h.watches))
	for w := range h.watches {
		ws = append(ws, w)
	}
	h.mu.Unlock()
	for _, w := range ws {
		w.drop()
	}
}

type queuedEvent struct {
	ev  watch.Event
	due time.Time
}

// delayedWatch delivers the store's events to an informer through an
// unbounded queue, holding each event until its due time.
type delayedWatch struct {
	hub    *watchHub
	gvr    schema.GroupVersionResource
	ns     string
	out    chan watch.Event
	notify chan struct{} // an event was queued
	done   chan struct{} // Stop was called
	drops  chan struct{} // drop was called

	mu       sync.Mutex
	queue    []queuedEvent
	finished bool // no more events are accepted or owed
	stopOnce sync.Once
	dropOnce sync.Once
}

func (w *delayedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *delayedWatch) Stop() { w.stopOnce.Do(func() { close(w.done) }) }

func (w *delayedWatch) drop() { w.dropOnce.Do(func() { close(w.drops) }) }

// push queues an event, due after the hub's delay.
func (w *delayedWatch) push(ev watch.Event) {
	w.mu.Lock()
	if !w.finished {
		w.queue = append(w.queue, queuedEvent{ev, time.Now().Add(time.Duration(w.hub.delay.Load()))})
		w.hub.pending.Add(1)
	}
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// finish discards whatever is queued and unregisters the watch.
func (w *delayedWatch) finish() {
	w.mu.Lock()
	w.finished = true
	w.hub.pending.Add(-int64(len(w.queue)))
	w.queue = nil
	w.mu.Unlock()
	w.hub.mu.Lock()
	delete(w.hub.watches, w)
	w.hub.mu.Unlock()
	close(w.out)
}

var expired = &metav1.Status{
	Status:  metav1.StatusFailure,
	Code:    http.StatusGone,
	Reason:  metav1.StatusReasonExpired,
	Message: "kpsim apiFault: watch dropped (resource version too old)",
}

func (w *delayedWatch) deliver() {
	defer w.finish()
	var timer *time.Timer
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.mu.Unlock()
			select {
			case <-w.notify:
				continue
			case <-w.done:
				return
			case <-w.drops:
				w.sendExpired()
				return
			}
		}
		it := w.queue[0]
		w.mu.Unlock()
		if d := time.Until(it.due); d > 0 {
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			select {
			case <-timer.C:
			case <-w.done:
				return
			case <-w.drops:
				w.sendExpired()
				return
			}
		}
		select {
		case w.out <- it.ev:
			w.mu.Lock()
			w.queue = w.queue[1:]
			w.mu.Unlock()
			w.hub.pending.Add(-1)
		case <-w.done:
			return
		case <-w.drops:
			w.sendExpired()
			return
		}
	}
}

func (w *delayedWatch) sendExpired() {
	select {
	case w.out <- watch.Event{Type: watch.Error, Object: expired.DeepCopy()}:
	case <-w.done:
	}
}
