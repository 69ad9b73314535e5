package scenarios

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// watchChanSize is what watch.DefaultChanSize is raised to. The fake's
// tracker sends every event into each watcher's channel while holding its
// lock and panics when the channel is full (100 events by default); a watch
// opened from a resource version older than the newest object is handed
// every newer object at once, before anything can read. Our pump drains the
// tracker's channel continuously afterwards, so only that first burst must
// fit: one event per object of the largest resource the run can hold
// (watchEvents), at least watchChanSize.
const watchChanSize = 1 << 17

// chanSize guards raising watch.DefaultChanSize: client-go reads it as it
// opens each watch, so it is only ever raised, before a run's first watch,
// and only past watchChanSize by a cluster that needs it.
var chanSize sync.Mutex

// raiseWatchChanSize makes every watch opened from now on hold n events.
func raiseWatchChanSize(n int) {
	chanSize.Lock()
	defer chanSize.Unlock()
	if n > math.MaxInt32 {
		n = math.MaxInt32
	}
	if int(watch.DefaultChanSize) < n {
		watch.DefaultChanSize = int32(n)
	}
}

// watchEvents bounds the events of one kind a watch of s's run may be
// handed at once: every object of the cluster, and what addServices steps
// add (a service, its slices in either family).
func (s *Scenario) watchEvents() int {
	n := 1024
	if set := s.set; set != nil {
		n += len(set.Services) + len(set.EndpointSlices) + len(set.Nodes)
	}
	perService := 1 + 2*(1+s.Cluster.EndpointsPerService.Max()/100)
	return n + int(s.demand().added)*perService
}

// watchHub owns every watch the proxier's informers open on the fake
// clientset and injects API faults around the tracker's watch: delayed
// delivery and dropped watches (forcing a relist). Faults are applied by
// goroutines outside the fake's lock; a reactor that slept would stall every
// API call, since reactors run under the fake's global lock.
type watchHub struct {
	delay   atomic.Int64 // time.Duration applied to events received from now on
	pending atomic.Int64 // events received from the tracker, not yet delivered or discarded
	mu      sync.Mutex
	open    map[*delayedWatch]struct{}
}

func newWatchHub() *watchHub { return &watchHub{open: map[*delayedWatch]struct{}{}} }

// install puts the hub in front of the clientset's own watch reactor.
func (h *watchHub) install(cs *fake.Clientset) {
	cs.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		inner, err := trackerWatch(cs, action)
		if err != nil {
			return true, nil, err
		}
		return true, h.wrap(inner), nil
	})
}

func (h *watchHub) setDelay(d time.Duration) { h.delay.Store(int64(d)) }

// undelivered reports how many events are still on their way to informers.
func (h *watchHub) undelivered() int64 { return h.pending.Load() }

// dropAll ends every open watch with an Expired error, as an API server does
// when a watch falls too far behind; each informer then relists.
func (h *watchHub) dropAll() {
	h.mu.Lock()
	ws := make([]*delayedWatch, 0, len(h.open))
	for w := range h.open {
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

// delayedWatch relays a tracker watch through an unbounded queue, holding
// each event until its due time.
type delayedWatch struct {
	hub    *watchHub
	inner  watch.Interface
	out    chan watch.Event
	notify chan struct{} // an event was queued or the inner watch ended
	done   chan struct{} // Stop was called
	drops  chan struct{} // drop was called

	mu          sync.Mutex
	queue       []queuedEvent
	innerClosed bool
	finished    bool // no more events are accepted or owed
	stopOnce    sync.Once
	dropOnce    sync.Once
}

func (h *watchHub) wrap(inner watch.Interface) *delayedWatch {
	w := &delayedWatch{
		hub:    h,
		inner:  inner,
		out:    make(chan watch.Event),
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
		drops:  make(chan struct{}),
	}
	h.mu.Lock()
	h.open[w] = struct{}{}
	h.mu.Unlock()
	go w.pump()
	go w.deliver()
	return w
}

func (w *delayedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *delayedWatch) Stop() {
	w.stopOnce.Do(func() {
		close(w.done)
		w.inner.Stop()
	})
}

func (w *delayedWatch) drop() { w.dropOnce.Do(func() { close(w.drops) }) }

func (w *delayedWatch) signal() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// pump moves events from the tracker's bounded channel into the queue.
func (w *delayedWatch) pump() {
	for ev := range w.inner.ResultChan() {
		w.mu.Lock()
		if !w.finished {
			w.queue = append(w.queue, queuedEvent{ev, time.Now().Add(time.Duration(w.hub.delay.Load()))})
			w.hub.pending.Add(1)
		}
		w.mu.Unlock()
		w.signal()
	}
	w.mu.Lock()
	w.innerClosed = true
	w.mu.Unlock()
	w.signal()
}

// finish discards whatever is queued and unregisters the watch.
func (w *delayedWatch) finish() {
	w.mu.Lock()
	w.finished = true
	w.hub.pending.Add(-int64(len(w.queue)))
	w.queue = nil
	w.mu.Unlock()
	w.hub.mu.Lock()
	delete(w.hub.open, w)
	w.hub.mu.Unlock()
	w.inner.Stop()
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
			closed := w.innerClosed
			w.mu.Unlock()
			if closed {
				return
			}
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

// installListOrder makes the fake clientset list objects in an order fixed
// by the seed (a hash of seed and namespace/name), not by its map: which
// objects an informer's handlers hear first, and so which ones a proxier
// whose handlers lag knows at its first sync, repeats for a seed.
func installListOrder(cs *fake.Clientset, seed int64) {
	list := k8stesting.ObjectReaction(cs.Tracker())
	cs.PrependReactor("list", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		handled, obj, err := list(action)
		if !handled || err != nil {
			return handled, obj, err
		}
		items, err := meta.ExtractList(obj)
		if err != nil {
			return true, nil, fmt.Errorf("list %s: %w", action.GetResource().Resource, err)
		}
		// Each item's rank is hashed once, not at every comparison: a sort
		// compares some log2(n) times per item, and at 50,000 objects hashing
		// in the comparison was a sixth of a whole run's CPU time.
		type ranked struct {
			rank uint64
			obj  runtime.Object
		}
		rs := make([]ranked, len(items))
		for i, o := range items {
			rs[i] = ranked{listRank(seed, o), o}
		}
		slices.SortStableFunc(rs, func(a, b ranked) int { return cmp.Compare(a.rank, b.rank) })
		for i := range rs {
			items[i] = rs[i].obj
		}
		if err := meta.SetList(obj, items); err != nil {
			return true, nil, fmt.Errorf("list %s: %w", action.GetResource().Resource, err)
		}
		return true, obj, nil
	})
}

// listRank places an object in a list for a seed: a hash of seed and
// namespace/name.
func listRank(seed int64, o runtime.Object) uint64 {
	m, err := meta.Accessor(o)
	if err != nil {
		return 0
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%s", seed, m.GetNamespace(), m.GetName())
	return h.Sum64()
}
