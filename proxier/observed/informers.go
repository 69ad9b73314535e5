package observed

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kpsim/kpsim/objects"
)

// Services wraps the Service informer a release's ServiceConfig registers
// its handler with (see informer).
func (g *Generation) Services(i coreinformers.ServiceInformer) coreinformers.ServiceInformer {
	return serviceInformer{i, g.informer("Service", i.Informer())}
}

// EndpointSlices wraps the EndpointSlice informer of its EndpointSliceConfig.
func (g *Generation) EndpointSlices(i discoveryinformers.EndpointSliceInformer) discoveryinformers.EndpointSliceInformer {
	return sliceInformer{i, g.informer("EndpointSlice", i.Informer())}
}

// Nodes wraps the Node informer of its node configs.
func (g *Generation) Nodes(i coreinformers.NodeInformer) coreinformers.NodeInformer {
	return nodeInformer{i, g.informer("Node", i.Informer())}
}

type serviceInformer struct {
	coreinformers.ServiceInformer
	inf cache.SharedIndexInformer
}

func (s serviceInformer) Informer() cache.SharedIndexInformer { return s.inf }

type sliceInformer struct {
	discoveryinformers.EndpointSliceInformer
	inf cache.SharedIndexInformer
}

func (s sliceInformer) Informer() cache.SharedIndexInformer { return s.inf }

type nodeInformer struct {
	coreinformers.NodeInformer
	inf cache.SharedIndexInformer
}

func (s nodeInformer) Informer() cache.SharedIndexInformer { return s.inf }

// informer wraps every handler registered with inf: the harness's wrapper
// (proxier.Options.Handlers, which counts events and holds some back) in
// front, then kube-proxy's informer selectors (the fake clientset applies
// none to watches: a Service with the service-proxy-name label or without a
// cluster IP, a headless service's EndpointSlice and another node are not
// kube-proxy's; one that leaves or enters the selection is a delete or an
// add), then the record of what reached the release's handler.
func (g *Generation) informer(kind string, inf cache.SharedIndexInformer) cache.SharedIndexInformer {
	return &handlerInformer{SharedIndexInformer: inf, g: g, kind: kind}
}

type handlerInformer struct {
	cache.SharedIndexInformer
	g    *Generation
	kind string
}

func (i *handlerInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandler(i.g.wrap(i.kind, h))
}

func (i *handlerInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(i.g.wrap(i.kind, h), resync)
}

// Registered checks that the release registered a handler for every kind
// through the wrappers: a release that registers its handlers another way
// would run unobserved, and the harness would wait for syncs it never sees.
func (g *Generation) Registered() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, kind := range []string{"Service", "EndpointSlice", "Node"} {
		if !g.wrapped[kind] {
			return fmt.Errorf("kube-proxy registered no %s handler through kpsim's informer wrapper: this release registers its handlers in a way kpsim does not know", kind)
		}
	}
	return nil
}

func (g *Generation) wrap(kind string, h cache.ResourceEventHandler) cache.ResourceEventHandler {
	g.mu.Lock()
	g.wrapped[kind] = true
	g.mu.Unlock()
	var out cache.ResourceEventHandler = cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if g.selected(obj) {
				g.delivered(nil, obj, false)
				h.OnAdd(obj, initial)
			}
		},
		UpdateFunc: func(old, obj any) {
			was, is := g.selected(old), g.selected(obj)
			switch {
			case was && is:
				g.delivered(old, obj, false)
				h.OnUpdate(old, obj)
			case is:
				g.delivered(nil, obj, false)
				h.OnAdd(obj, false)
			case was:
				g.delivered(nil, old, true)
				h.OnDelete(old)
			}
		},
		DeleteFunc: func(obj any) {
			if g.selected(final(obj)) {
				g.delivered(nil, final(obj), true)
				h.OnDelete(obj)
			}
		},
	}
	if g.opts.Handlers != nil {
		out = g.opts.Handlers(kind, out)
	}
	return out
}

// final is a deleted object's last state, out of an informer's tombstone.
func final(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// selected applies kube-proxy's informer selectors.
func (g *Generation) selected(obj any) bool {
	switch o := obj.(type) {
	case *v1.Service:
		_, other := o.Labels[objects.LabelServiceProxyName]
		return !other && o.Spec.ClusterIP != v1.ClusterIPNone
	case *discoveryv1.EndpointSlice:
		_, headless := o.Labels[objects.LabelHeadless]
		return !headless
	case *v1.Node:
		return o.Name == g.node
	}
	return false
}

// delivered records what the release's handler is about to hear.
func (g *Generation) delivered(old, obj any, deleted bool) {
	switch o := obj.(type) {
	case *v1.Service:
		g.serviceChanged(o, deleted)
	case *discoveryv1.EndpointSlice:
		prev, _ := old.(*discoveryv1.EndpointSlice)
		g.sliceChanged(prev, o, deleted)
	case *v1.Node:
		g.nodeChanged()
	}
}
