package scenarios

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kpsim/kpsim/internal/k8sapi"
)

// apiStore is the API server behind the fake clientset for the kinds a
// proxier watches: Services, EndpointSlices and Nodes (anything else falls
// through to the fake's own tracker). It exists for memory and for order:
//
//   - The fake's tracker deep-copies every object it stores, lists and
//     sends to each watch, so the informers' caches held the cluster a
//     second time (at 100,000 services, some 230 MB of a run's 920). Here
//     an object is copied once, as it is written; what a list or a watch
//     hands out shares its contents with the store, as objects a real
//     informer receives are its own to read and never to change. A get
//     (the replay's own read before it changes an object) is a copy.
//   - A list comes in an order fixed by the seed (listRank), not by a map:
//     which objects an informer's handlers hear first, and so which ones a
//     proxier whose handlers lag knows at its first sync, repeats for a seed.
//   - A watch resumes from the resource version of the list before it, as
//     from an API server: the events after it, kept in a log of the newest
//     apiLogKeep, or a 410 Expired (the informer lists again) when it is
//     older than the log. Events go straight into each watch's unbounded
//     queue (watchHub), never into a bounded channel the fake would panic on.
type apiStore struct {
	seed int64
	hub  *watchHub

	mu    sync.Mutex
	rv    int64                                                     // the newest resource version
	objs  map[schema.GroupVersionResource]map[string]runtime.Object // namespace/name -> object
	log   []apiEvent                                                // the newest events, oldest first
	floor int64                                                     // the log holds every event after this version
	pages map[string]*listPages                                     // paged lists under way, by continue token prefix
	lists int                                                       // paged lists begun, naming the next
}

// listPages is a paged list: its objects as of its first page, in order.
type listPages struct {
	seq   int // which paged list began it: the oldest are forgotten first
	rv    int64
	items []runtime.Object
}

// apiPagedLists is how many paged lists may be under way at once; an
// informer stopped in the middle of one never asks for the rest, and its
// pages are forgotten when newer lists need the room (a later continue
// token of it is Expired, as an API server's after compaction).
const apiPagedLists = 16

// apiLogKeep is how many events the store keeps at least for watches that
// start behind: an informer watches from its list's version a moment after
// listing, and a replay writes at most a few hundred events in that moment.
const apiLogKeep = 1 << 12

type apiEvent struct {
	rv  int64
	gvr schema.GroupVersionResource
	ns  string
	ev  watch.Event
}

// The resources the store keeps, with their kinds (list kinds add "List").
var apiKinds = map[schema.GroupVersionResource]schema.GroupVersionKind{
	services:       services.GroupVersion().WithKind("Service"),
	endpointSlices: endpointSlices.GroupVersion().WithKind("EndpointSlice"),
	nodes:          nodes.GroupVersion().WithKind("Node"),
}

// streamingClient is the fake clientset as a proxier's informers see it
// when they may stream their initial list through the watch, as kube-proxy's
// do on a node from 1.35 on (client-go's WatchListClient, on by default): the
// reflector asks the client whether it can, and the fake alone says no.
// Informers that stream hold the store's own objects, where a list's items
// are copied (100 MB at 100,000 services). Releases before 1.35 list.
type streamingClient struct{ *fake.Clientset }

// IsWatchListSemanticsUnSupported answers the reflector: the store streams.
func (streamingClient) IsWatchListSemanticsUnSupported() bool { return false }

func newAPIStore(seed int64, hub *watchHub) *apiStore {
	s := &apiStore{seed: seed, hub: hub, objs: map[schema.GroupVersionResource]map[string]runtime.Object{}, pages: map[string]*listPages{}}
	for gvr := range apiKinds {
		s.objs[gvr] = map[string]runtime.Object{}
	}
	return s
}

// install puts the store in front of the clientset's tracker.
func (s *apiStore) install(cs *fake.Clientset) {
	cs.PrependReactor("*", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if _, ok := apiKinds[action.GetResource()]; !ok {
			return false, nil, nil
		}
		return s.react(action)
	})
	cs.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		if _, ok := apiKinds[action.GetResource()]; !ok {
			return false, nil, nil
		}
		w, err := s.watch(action.GetResource(), action.GetNamespace(), k8sapi.ListOptions(action))
		if err != nil {
			return true, nil, err
		}
		return true, w, nil
	})
}

func (s *apiStore) react(action k8stesting.Action) (bool, runtime.Object, error) {
	gvr, ns := action.GetResource(), action.GetNamespace()
	// By verb, not by action type: a create action is also an UpdateAction.
	switch action.GetVerb() {
	case "create":
		o := action.(k8stesting.CreateAction).GetObject()
		return true, o, s.write(gvr, withNamespace(o, ns), watch.Added)
	case "update":
		o := action.(k8stesting.UpdateAction).GetObject()
		return true, o, s.write(gvr, withNamespace(o, ns), watch.Modified)
	case "delete":
		return true, nil, s.remove(gvr, ns, action.(k8stesting.DeleteAction).GetName())
	case "get":
		o, err := s.get(gvr, ns, action.(k8stesting.GetAction).GetName())
		return true, o, err
	case "list":
		o, err := s.list(gvr, ns, k8sapi.ListOptions(action))
		return true, o, err
	}
	return true, nil, apierrors.NewMethodNotSupported(gvr.GroupResource(), action.GetVerb())
}

// get returns a copy of an object, for its reader to change and write back.
func (s *apiStore) get(gvr schema.GroupVersionResource, ns, name string) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[gvr][key(ns, name)]
	if !ok {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	return o.DeepCopyObject(), nil
}

// write stores a copy of obj, created (watch.Added) or replacing the
// object of its name (watch.Modified), at the next resource version. The
// replay writes so, not through the fake clientset, whose action log would
// copy each object once more (at 100,000 services, 520 MB of garbage).
func (s *apiStore) write(gvr schema.GroupVersionResource, obj runtime.Object, op watch.EventType) error {
	o := obj.DeepCopyObject()
	m, err := meta.Accessor(o)
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	k := key(m.GetNamespace(), m.GetName())
	s.mu.Lock()
	defer s.mu.Unlock()
	_, exists := s.objs[gvr][k]
	switch {
	case op == watch.Added && exists:
		return apierrors.NewAlreadyExists(gvr.GroupResource(), m.GetName())
	case op == watch.Modified && !exists:
		return apierrors.NewNotFound(gvr.GroupResource(), m.GetName())
	}
	s.rv++
	m.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	s.objs[gvr][k] = o
	s.publish(gvr, m.GetNamespace(), watch.Event{Type: op, Object: o})
	return nil
}

// remove deletes an object; its watchers see it last as it was, at the
// deletion's resource version.
func (s *apiStore) remove(gvr schema.GroupVersionResource, ns, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(ns, name)
	o, ok := s.objs[gvr][k]
	if !ok {
		return apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	delete(s.objs[gvr], k)
	s.rv++
	gone := o.DeepCopyObject() // the stored one is shared: its version is not ours to change
	if m, err := meta.Accessor(gone); err == nil {
		m.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	}
	s.publish(gvr, ns, watch.Event{Type: watch.Deleted, Object: gone})
	return nil
}

// publish logs an event and hands it to every open watch of its resource
// and namespace. The caller holds s.mu, so every watch sees events in
// version order.
func (s *apiStore) publish(gvr schema.GroupVersionResource, ns string, ev watch.Event) {
	s.log = append(s.log, apiEvent{s.rv, gvr, ns, ev})
	if len(s.log) >= 2*apiLogKeep {
		drop := len(s.log) - apiLogKeep
		s.floor = s.log[drop-1].rv
		s.log = slices.Delete(s.log, 0, drop)
	}
	s.hub.publish(gvr, ns, ev)
}

// list returns the objects of a resource (in a namespace, or all), in the
// seed's order, at the current resource version, or a page of them: with a
// limit, as an informer's reflector asks (500 at a time), a page and a
// continue token for the next, all pages of one list as of its first, as
// an API server serves them. Paging keeps what a list copies small: a whole
// list of 100,000 Services was two transient arrays of 56 MB each. The
// items share their contents with the store.
func (s *apiStore) list(gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (runtime.Object, error) {
	var pl *listPages
	var name string
	offset := 0
	if opts.Continue != "" {
		var err error
		if pl, name, offset, err = s.page(gvr, opts.Continue); err != nil {
			return nil, err
		}
	} else {
		pl = s.snapshot(gvr, ns)
	}
	end := len(pl.items)
	next := ""
	if opts.Limit > 0 && int64(end-offset) > opts.Limit {
		end = offset + int(opts.Limit)
		s.mu.Lock()
		if name == "" {
			s.lists++
			pl.seq = s.lists
			name = strconv.Itoa(pl.seq)
			s.pages[name] = pl
			for len(s.pages) > apiPagedLists {
				oldest := ""
				for k, p := range s.pages {
					if oldest == "" || p.seq < s.pages[oldest].seq {
						oldest = k
					}
				}
				delete(s.pages, oldest)
			}
		}
		s.mu.Unlock()
		next = name + "/" + strconv.Itoa(end)
	} else if name != "" {
		s.mu.Lock()
		delete(s.pages, name) // its last page
		s.mu.Unlock()
	}
	gvk := apiKinds[gvr]
	gvk.Kind += "List"
	out, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
	}
	if err := meta.SetList(out, pl.items[offset:end]); err != nil {
		return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
	}
	l, err := meta.ListAccessor(out)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
	}
	l.SetResourceVersion(strconv.FormatInt(pl.rv, 10))
	l.SetContinue(next)
	return out, nil
}

// snapshot returns the objects of a resource (in a namespace, or all) now,
// in the seed's order.
func (s *apiStore) snapshot(gvr schema.GroupVersionResource, ns string) *listPages {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked(gvr, ns)
}

func (s *apiStore) snapshotLocked(gvr schema.GroupVersionResource, ns string) *listPages {
	type ranked struct {
		rank uint64
		obj  runtime.Object
	}
	// Each item's rank is hashed once, not at every comparison: a sort
	// compares some log2(n) times per item, and at 50,000 objects hashing in
	// the comparison was a sixth of a whole run's CPU time.
	rs := make([]ranked, 0, len(s.objs[gvr]))
	for k, o := range s.objs[gvr] {
		if ns == "" || inNamespace(k, ns) {
			rs = append(rs, ranked{listRank(s.seed, k), o})
		}
	}
	slices.SortStableFunc(rs, func(a, b ranked) int { return cmp.Compare(a.rank, b.rank) })
	pl := &listPages{rv: s.rv, items: make([]runtime.Object, len(rs))}
	for i, r := range rs {
		pl.items[i] = r.obj
	}
	return pl
}

// page finds the paged list a continue token names, and where its next
// page starts.
func (s *apiStore) page(gvr schema.GroupVersionResource, token string) (*listPages, string, int, error) {
	name, at, ok := strings.Cut(token, "/")
	offset, err := strconv.Atoi(at)
	if !ok || err != nil {
		return nil, "", 0, apierrors.NewBadRequest(fmt.Sprintf("list %s: continue token %q", gvr.Resource, token))
	}
	s.mu.Lock()
	pl := s.pages[name]
	s.mu.Unlock()
	if pl == nil || offset > len(pl.items) {
		return nil, "", 0, apierrors.NewResourceExpired(fmt.Sprintf("list %s: continue token %q: the list is no longer kept", gvr.Resource, token))
	}
	return pl, name, offset, nil
}

// withNamespace gives obj the namespace of the request that writes it, if
// it names none.
func withNamespace(obj runtime.Object, ns string) runtime.Object {
	if m, err := meta.Accessor(obj); err == nil && m.GetNamespace() == "" && ns != "" {
		obj = obj.DeepCopyObject()
		m, _ = meta.Accessor(obj)
		m.SetNamespace(ns)
	}
	return obj
}

func inNamespace(k, ns string) bool {
	return len(k) > len(ns) && k[:len(ns)] == ns && k[len(ns)] == '/'
}

// listRank places an object in a list for a seed: a hash of seed and
// namespace/name.
func listRank(seed int64, k string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, k)
	return h.Sum64()
}

// watch opens a watch of a resource (in a namespace, or all) as opts ask:
//
//   - streaming the initial list (SendInitialEvents, as client-go's
//     reflector does from 1.35 on when the client supports it: see
//     streamingClient): every current object added, in the seed's order,
//     then a bookmark marking the end of the initial events;
//   - from a resource version: the logged events after it (one older than
//     the log is Expired);
//   - from none, or "0": every current object added (in the seed's order),
//     as an API server does.
//
// Then every new event.
func (s *apiStore) watch(gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (*delayedWatch, error) {
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		return s.stream(gvr, ns, opts.AllowWatchBookmarks)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var backlog []watch.Event
	switch from := opts.ResourceVersion; from {
	case "", "0":
		for _, o := range s.snapshotLocked(gvr, ns).items {
			backlog = append(backlog, watch.Event{Type: watch.Added, Object: o})
		}
	default:
		rv, err := strconv.ParseInt(from, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("watch %s: resource version %q: %v", gvr.Resource, from, err))
		}
		if rv < s.floor {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("watch %s: resource version %d is older than the oldest kept (%d)", gvr.Resource, rv, s.floor))
		}
		i, _ := slices.BinarySearchFunc(s.log, rv+1, func(e apiEvent, rv int64) int { return cmp.Compare(e.rv, rv) })
		for _, e := range s.log[i:] {
			if e.gvr == gvr && (ns == "" || e.ns == ns) {
				backlog = append(backlog, e.ev)
			}
		}
	}
	return s.hub.open(gvr, ns, backlog), nil
}

// stream opens a watch that first adds every current object, in the seed's
// order, and ends that with a bookmark at their resource version (its
// annotation tells the reflector the initial events are over). The
// informer then holds the store's own objects: no list, no copies.
func (s *apiStore) stream(gvr schema.GroupVersionResource, ns string, bookmarks bool) (*delayedWatch, error) {
	end, err := scheme.Scheme.New(apiKinds[gvr])
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", gvr.Resource, err)
	}
	if !bookmarks {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("watch %s: sendInitialEvents needs allowWatchBookmarks", gvr.Resource))
	}
	s.mu.Lock()
	defer s.mu.Unlock() // held until the watch is open: no event between the snapshot and it
	pl := s.snapshotLocked(gvr, ns)
	backlog := make([]watch.Event, 0, len(pl.items)+1)
	for _, o := range pl.items {
		backlog = append(backlog, watch.Event{Type: watch.Added, Object: o})
	}
	m, err := meta.Accessor(end)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", gvr.Resource, err)
	}
	m.SetResourceVersion(strconv.FormatInt(pl.rv, 10))
	m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	backlog = append(backlog, watch.Event{Type: watch.Bookmark, Object: end})
	return s.hub.open(gvr, ns, backlog), nil
}
