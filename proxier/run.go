package proxier

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/objects"
)

// Run starts shared informers on client (Services, EndpointSlices, this
// Node), creates one proxier per cfg.Families entry sharing dp (one IPVS
// table, as kube-proxy shares one handle), each with its own
// bounded-frequency runner, and blocks until ctx is done.
//
// The first sync waits, per cfg.InitialSync, either until every handler
// registration has seen the initial list (HasSynced on the registration,
// kube-proxy since PR #126532) or only until the informers' stores are full
// (the legacy race: handlers may still be behind).
func Run(ctx context.Context, client kubernetes.Interface, dp dataplane.Dataplane, cfg Config, opts Options) error {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("proxier config: %w", err)
	}
	var proxiers []*Proxier
	for _, f := range cfg.Families {
		p, err := New(cfg, f, dp, opts)
		if err != nil {
			return fmt.Errorf("new %s proxier: %w", f, err)
		}
		p.killed = ctx.Done()
		proxiers = append(proxiers, p)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	factory := informers.NewSharedInformerFactory(client, 0)
	svcInformer := factory.Core().V1().Services().Informer()
	sliceInformer := factory.Discovery().V1().EndpointSlices().Informer()
	// Like kube-proxy, watch only this node; the fake clientset ignores the
	// field selector, so the handlers check the name as well.
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.NodeName).String()
	}))
	nodeInformer := nodeFactory.Core().V1().Nodes().Informer()

	wrap := func(kind string, h cache.ResourceEventHandler) cache.ResourceEventHandler {
		if opts.Handlers == nil {
			return h
		}
		return opts.Handlers(kind, h)
	}
	deliver := func(op objects.Op, old, obj any) {
		e, ok := objects.EventFor(op, tombstone(old), tombstone(obj))
		if !ok || e.Kind == "Node" && e.ObjectID != cfg.NodeName {
			return // the fake clientset ignores the node informer's field selector
		}
		for _, p := range proxiers {
			e.Deliver(p)
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { deliver(objects.Add, nil, obj) },
		UpdateFunc: func(old, obj any) { deliver(objects.Update, old, obj) },
		DeleteFunc: func(obj any) { deliver(objects.Delete, obj, nil) },
	}
	svcReg, err := svcInformer.AddEventHandler(wrap("Service", handler))
	if err != nil {
		return fmt.Errorf("add service handler: %w", err)
	}
	sliceReg, err := sliceInformer.AddEventHandler(wrap("EndpointSlice", handler))
	if err != nil {
		return fmt.Errorf("add endpointslice handler: %w", err)
	}
	nodeReg, err := nodeInformer.AddEventHandler(wrap("Node", handler))
	if err != nil {
		return fmt.Errorf("add node handler: %w", err)
	}

	factory.Start(ctx.Done())
	defer factory.Shutdown()
	nodeFactory.Start(ctx.Done())
	defer nodeFactory.Shutdown()

	// kube-proxy reads its Node (node IP, zone) before it builds a proxier.
	var synced []cache.InformerSynced
	if cfg.InitialSync == InitialSyncLegacy {
		synced = []cache.InformerSynced{svcInformer.HasSynced, sliceInformer.HasSynced, nodeInformer.HasSynced}
	} else {
		synced = []cache.InformerSynced{svcReg.HasSynced, sliceReg.HasSynced, nodeReg.HasSynced}
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	var wg sync.WaitGroup
	for _, p := range proxiers {
		p.OnServicesSynced()
		p.OnEndpointSlicesSynced()
		p.runner.stepper, p.runner.family = opts.Stepper, p.family
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.runner.Loop(ctx)
		}()
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

// tombstone unwraps an object from a delete event, which may arrive as
// DeletedFinalStateUnknown after a relist.
func tombstone(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}
