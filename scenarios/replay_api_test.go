package scenarios

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func newTestAPI(seed int64) (*fake.Clientset, *apiStore) {
	cs := fake.NewSimpleClientset() //nolint:staticcheck // as the replay's
	api := newAPIStore(seed, newWatchHub())
	api.install(cs)
	return cs, api
}

func testService(name string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": name}},
		Spec:       v1.ServiceSpec{ClusterIP: "10.96.0.1", Ports: []v1.ServicePort{{Port: 80, Protocol: v1.ProtocolTCP}}},
	}
}

func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev := <-w.ResultChan():
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event in 5 s")
		return watch.Event{}
	}
}

// TestAPIWatchResumesFromTheList: a watch from a list's resource version
// sees exactly what was written after the list (an add, an update, a
// delete, in order), and nothing from before it.
func TestAPIWatchResumesFromTheList(t *testing.T) {
	ctx := context.Background()
	cs, _ := newTestAPI(1)
	svcs := cs.CoreV1().Services("default")
	_, err := svcs.Create(ctx, testService("a"), metav1.CreateOptions{})
	require.NoError(t, err)
	list, err := svcs.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	require.Equal(t, "1", list.ResourceVersion)

	_, err = svcs.Create(ctx, testService("b"), metav1.CreateOptions{})
	require.NoError(t, err)
	changed := testService("a")
	changed.Spec.ClusterIP = "10.96.0.9"
	_, err = svcs.Update(ctx, changed, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, svcs.Delete(ctx, "b", metav1.DeleteOptions{}))

	w, err := svcs.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()
	for i, want := range []struct {
		op       watch.EventType
		name, rv string
	}{{watch.Added, "b", "2"}, {watch.Modified, "a", "3"}, {watch.Deleted, "b", "4"}} {
		ev := next(t, w)
		s := ev.Object.(*v1.Service)
		require.Equal(t, want.op, ev.Type, "event %d", i)
		require.Equal(t, want.name, s.Name, "event %d", i)
		require.Equal(t, want.rv, s.ResourceVersion, "event %d", i)
	}
	_, err = svcs.Create(ctx, testService("c"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, "c", next(t, w).Object.(*v1.Service).Name, "then what comes")

	_, err = svcs.Create(ctx, testService("c"), metav1.CreateOptions{})
	require.True(t, apierrors.IsAlreadyExists(err), "%v", err)
	_, err = svcs.Update(ctx, testService("z"), metav1.UpdateOptions{})
	require.True(t, apierrors.IsNotFound(err), "%v", err)
	require.True(t, apierrors.IsNotFound(svcs.Delete(ctx, "z", metav1.DeleteOptions{})))
}

// TestAPIWatchBehindTheLogExpires: once more than the log keeps was
// written, a watch from an older version is Expired, and an informer that
// meets it lists again and ends up with every object.
func TestAPIWatchBehindTheLogExpires(t *testing.T) {
	ctx := context.Background()
	cs, _ := newTestAPI(1)
	svcs := cs.CoreV1().Services("default")
	n := 2*apiLogKeep + 10
	for i := range n {
		_, err := svcs.Create(ctx, testService(fmt.Sprintf("s%d", i)), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err := svcs.Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
	require.True(t, apierrors.IsResourceExpired(err), "%v", err)
	w, err := svcs.Watch(ctx, metav1.ListOptions{ResourceVersion: fmt.Sprint(n - 1)})
	require.NoError(t, err, "a recent version is kept")
	require.Equal(t, fmt.Sprintf("s%d", n-1), next(t, w).Object.(*v1.Service).Name)
	w.Stop()

	inf, stop := syncedServices(t, cs)
	defer stop()
	require.Len(t, inf.GetStore().List(), n)
}

// TestAPIListSharesWhatGetCopies: what a list hands an informer shares its
// contents with the store (the cluster is held once, not once more per
// informer), and the seed fixes its order; a get is a copy its reader may
// change.
func TestAPIListSharesWhatGetCopies(t *testing.T) {
	ctx := context.Background()
	order := func(seed int64) []string {
		cs, _ := newTestAPI(seed)
		for i := range 20 {
			_, err := cs.CoreV1().Services("default").Create(ctx, testService(fmt.Sprintf("s%d", i)), metav1.CreateOptions{})
			require.NoError(t, err)
		}
		l, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		var names []string
		for _, s := range l.Items {
			names = append(names, s.Name)
		}
		return names
	}
	require.Equal(t, order(1), order(1))
	require.NotEqual(t, order(1), order(2))

	cs, api := newTestAPI(1)
	_, err := cs.CoreV1().Services("default").Create(ctx, testService("a"), metav1.CreateOptions{})
	require.NoError(t, err)
	l1, err := cs.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	l2, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Same(t, &l1.Items[0].Spec.Ports[0], &l2.Items[0].Spec.Ports[0], "two lists, one object's contents")

	o, err := api.get(services, "default", "a")
	require.NoError(t, err)
	got := o.(*v1.Service)
	require.NotSame(t, &got.Spec.Ports[0], &l1.Items[0].Spec.Ports[0])
	got.Spec.Ports[0].Port = 81
	require.EqualValues(t, 80, l1.Items[0].Spec.Ports[0].Port, "a get's copy changes nothing stored")

	empty, err := cs.CoreV1().Services("other").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, empty.Items, "a namespace's list holds its own")
}

// TestAPIListsInPages: with a limit, a list comes in pages, each with the
// token of the next, all as of the first page (a write between pages shows
// in none of them, and in the watch from the list's version); together they
// are the whole list in the seed's order. An informer reads its initial list
// so (its reflector asks 500 at a time). A token whose list is forgotten is
// Expired.
func TestAPIListsInPages(t *testing.T) {
	ctx := context.Background()
	cs, _ := newTestAPI(1)
	svcs := cs.CoreV1().Services("default")
	n := 1201
	for i := range n {
		_, err := svcs.Create(ctx, testService(fmt.Sprintf("s%d", i)), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	whole, err := svcs.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, whole.Items, n)
	require.Empty(t, whole.Continue)

	var paged []string
	opts := metav1.ListOptions{Limit: 500}
	var rv string
	for pages := 1; ; pages++ {
		l, err := svcs.List(ctx, opts)
		require.NoError(t, err)
		if rv == "" {
			rv = l.ResourceVersion
			_, err = svcs.Create(ctx, testService("late"), metav1.CreateOptions{})
			require.NoError(t, err)
		}
		require.Equal(t, rv, l.ResourceVersion, "every page as of the first")
		for _, s := range l.Items {
			paged = append(paged, s.Name)
		}
		if l.Continue == "" {
			require.Equal(t, 3, pages)
			break
		}
		opts.Continue = l.Continue
	}
	var want []string
	for _, s := range whole.Items {
		want = append(want, s.Name)
	}
	require.Equal(t, want, paged)
	w, err := svcs.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	require.NoError(t, err)
	require.Equal(t, "late", next(t, w).Object.(*v1.Service).Name)
	w.Stop()

	_, err = svcs.List(ctx, metav1.ListOptions{Limit: 500, Continue: "99/500"})
	require.True(t, apierrors.IsResourceExpired(err), "%v", err)

	cs.ClearActions()
	inf, stop := syncedServices(t, cs)
	defer stop()
	require.Len(t, inf.GetStore().List(), n+1)
	require.Equal(t, 3, listCalls(cs), "the informer's list, in pages of 500")
}

// TestAPIStreamsTheInitialList: an informer on streamingClient gets its
// initial list through its watch (every object added, then the bookmark
// that ends them), lists nothing, and holds the store's own objects, not
// copies. On the fake alone it lists.
func TestAPIStreamsTheInitialList(t *testing.T) {
	ctx := context.Background()
	cs, api := newTestAPI(3)
	for i := range 700 {
		_, err := cs.CoreV1().Services("default").Create(ctx, testService(fmt.Sprintf("s%d", i)), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	w, err := cs.CoreV1().Services("").Watch(ctx, metav1.ListOptions{SendInitialEvents: ptr(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	require.NoError(t, err)
	l, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for i := range l.Items {
		ev := next(t, w)
		require.Equal(t, watch.Added, ev.Type)
		require.Equal(t, l.Items[i].Name, ev.Object.(*v1.Service).Name, "the list's order")
	}
	end := next(t, w)
	require.Equal(t, watch.Bookmark, end.Type)
	require.Equal(t, "true", end.Object.(*v1.Service).Annotations[metav1.InitialEventsAnnotationKey])
	require.Equal(t, "700", end.Object.(*v1.Service).ResourceVersion)
	w.Stop()

	for _, streams := range []bool{true, false} {
		cs.ClearActions()
		var client kubernetes.Interface = cs
		if streams {
			client = streamingClient{cs}
		}
		inf, stop := syncedServices(t, client)
		cached, ok, err := inf.GetStore().GetByKey("default/s1")
		require.NoError(t, err)
		require.True(t, ok)
		api.mu.Lock()
		stored := api.objs[services]["default/s1"]
		api.mu.Unlock()
		lists := listCalls(cs)
		if streams {
			require.Same(t, stored, cached, "the store's own object")
			require.Zero(t, lists)
		} else {
			require.NotSame(t, stored, cached)
			require.Equal(t, 2, lists, "two pages of 500")
		}
		stop()
	}
}

// syncedServices starts a Service informer on client and waits for its
// first sync; stop ends it.
func syncedServices(t *testing.T, client kubernetes.Interface) (inf cache.SharedIndexInformer, stop func()) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(client, 0)
	inf = factory.Core().V1().Services().Informer()
	done := make(chan struct{})
	factory.Start(done)
	require.True(t, cache.WaitForCacheSync(done, inf.HasSynced))
	return inf, func() {
		close(done)
		factory.Shutdown()
	}
}

// listCalls counts the list requests the fake clientset recorded.
func listCalls(cs *fake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "list" {
			n++
		}
	}
	return n
}
