package objects

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationDelete marks an object in a changes file as deleted: the object
// needs only kind, namespace and name, and is not validated. kubectl output
// with the annotation added is the easiest way to write one.
const AnnotationDelete = "kpsim.io/delete"

// Deletion is an object a changes file deletes.
type Deletion struct {
	Kind      string // Service, EndpointSlice or Node
	Namespace string // empty for Node
	Name      string
}

// Op is what happened to an object.
type Op string

const (
	Add    Op = "add"
	Update Op = "update"
	Delete Op = "delete"
)

// Event is one informer event a changes set implies against a base set:
// exactly the calls kube-proxy's handlers would see. Old is set for updates
// and deletes, New for adds and updates.
type Event struct {
	Op       Op
	Service  struct{ Old, New *v1.Service }
	Slice    struct{ Old, New *discoveryv1.EndpointSlice }
	Node     struct{ Old, New *v1.Node }
	Kind     string // Service, EndpointSlice or Node
	ObjectID string // namespace/name
}

// Apply returns the set after changes and the events that lead there, in
// order: services, then slices, then nodes, each sorted by name. An object in
// changes replaces the base object of that name (an update) or is new (an
// add). An object marked with AnnotationDelete is deleted; so is a base
// object whose new version kube-proxy ignores (it gained the
// service-proxy-name label, became headless or ExternalName, lost its
// service-name label): kube-proxy's informer filter turns such an update into
// a delete, and its proxier drops a service it skips. Deleting what the base
// does not hold is not an event.
func (s *Set) Apply(changes *Set) (*Set, []Event) {
	deleted := map[string]bool{}
	for _, d := range changes.Deletions {
		deleted[d.Kind+"/"+joinName(d.Namespace, d.Name)] = true
	}
	for _, ig := range changes.Ignored {
		deleted[ig.Kind+"/"+ig.Object] = true
	}
	out := &Set{Notes: append([]string(nil), s.Notes...)}
	redefined := map[string]bool{}
	for _, svc := range changes.Services {
		redefined["Service/"+joinName(svc.Namespace, svc.Name)] = true
	}
	for _, eps := range changes.EndpointSlices {
		redefined["EndpointSlice/"+joinName(eps.Namespace, eps.Name)] = true
	}
	for _, ig := range s.Ignored {
		if k := ig.Kind + "/" + ig.Object; !redefined[k] && !deleted[k] {
			out.Ignored = append(out.Ignored, ig)
		}
	}
	out.Ignored = append(out.Ignored, changes.Ignored...)
	var events, ev []Event
	out.Services, ev = merge("Service", s.Services, changes.Services, deleted, serviceEvent)
	events = append(events, ev...)
	out.EndpointSlices, ev = merge("EndpointSlice", s.EndpointSlices, changes.EndpointSlices, deleted, sliceEvent)
	events = append(events, ev...)
	out.Nodes, ev = merge("Node", s.Nodes, changes.Nodes, deleted, nodeEvent)
	events = append(events, ev...)
	out.sort()
	return out, events
}

// merge is Apply for the objects of one kind: each base object kept,
// replaced by its namesake in changes (an update) or deleted, in the base's
// order, then the objects of changes the base does not hold (adds).
func merge[T metav1.Object](kind string, base, changes []T, deleted map[string]bool, event func(op Op, old, new T) Event) ([]T, []Event) {
	var (
		out    []T
		events []Event
		none   T
	)
	id := func(o T) string { return joinName(o.GetNamespace(), o.GetName()) }
	fresh := make(map[string]T, len(changes))
	for _, o := range changes {
		fresh[id(o)] = o
	}
	for _, o := range base {
		switch n, ok := fresh[id(o)]; {
		case ok:
			events = append(events, event(Update, o, n))
			out = append(out, n)
			delete(fresh, id(o))
		case deleted[kind+"/"+id(o)]:
			events = append(events, event(Delete, o, none))
		default:
			out = append(out, o)
		}
	}
	for _, o := range changes {
		if _, ok := fresh[id(o)]; ok {
			events = append(events, event(Add, none, o))
			out = append(out, o)
		}
	}
	return out, events
}

// Handler receives informer events: kube-proxy's Service, EndpointSlice
// and Node event handlers (pkg/proxy/config), which a proxier implements.
type Handler interface {
	OnServiceAdd(svc *v1.Service)
	OnServiceUpdate(old, svc *v1.Service)
	OnServiceDelete(svc *v1.Service)
	OnEndpointSliceAdd(eps *discoveryv1.EndpointSlice)
	OnEndpointSliceUpdate(old, eps *discoveryv1.EndpointSlice)
	OnEndpointSliceDelete(eps *discoveryv1.EndpointSlice)
	OnNodeAdd(node *v1.Node)
	OnNodeUpdate(old, node *v1.Node)
	OnNodeDelete(node *v1.Node)
}

// Deliver calls the handler method for the event.
func (e Event) Deliver(h Handler) {
	switch e.Kind {
	case "Service":
		switch e.Op {
		case Add:
			h.OnServiceAdd(e.Service.New)
		case Update:
			h.OnServiceUpdate(e.Service.Old, e.Service.New)
		case Delete:
			h.OnServiceDelete(e.Service.Old)
		}
	case "EndpointSlice":
		switch e.Op {
		case Add:
			h.OnEndpointSliceAdd(e.Slice.New)
		case Update:
			h.OnEndpointSliceUpdate(e.Slice.Old, e.Slice.New)
		case Delete:
			h.OnEndpointSliceDelete(e.Slice.Old)
		}
	case "Node":
		switch e.Op {
		case Add:
			h.OnNodeAdd(e.Node.New)
		case Update:
			h.OnNodeUpdate(e.Node.Old, e.Node.New)
		case Delete:
			h.OnNodeDelete(e.Node.Old)
		}
	}
}

// EventFor is the event an informer reports: op on old and new (nil where
// the op has none), each a *v1.Service, *discoveryv1.EndpointSlice or
// *v1.Node. ok is false for any other object, or when an object the op
// needs is missing.
func EventFor(op Op, old, new any) (e Event, ok bool) {
	var hasOld, hasNew bool
	if o, isSvc := old.(*v1.Service); isSvc || isType[*v1.Service](new) {
		n, _ := new.(*v1.Service)
		e, hasOld, hasNew = serviceEvent(op, o, n), o != nil, n != nil
	} else if o, isEps := old.(*discoveryv1.EndpointSlice); isEps || isType[*discoveryv1.EndpointSlice](new) {
		n, _ := new.(*discoveryv1.EndpointSlice)
		e, hasOld, hasNew = sliceEvent(op, o, n), o != nil, n != nil
	} else if o, isNode := old.(*v1.Node); isNode || isType[*v1.Node](new) {
		n, _ := new.(*v1.Node)
		e, hasOld, hasNew = nodeEvent(op, o, n), o != nil, n != nil
	} else {
		return Event{}, false
	}
	switch op {
	case Add:
		return e, hasNew
	case Update:
		return e, hasOld && hasNew
	case Delete:
		return e, hasOld
	}
	return Event{}, false
}

func isType[T any](x any) bool {
	_, ok := x.(T)
	return ok
}

// Events is the set as an informer's initial list delivers it: an add for
// every Node, then every Service, then every EndpointSlice.
func (s *Set) Events() []Event {
	out := make([]Event, 0, len(s.Nodes)+len(s.Services)+len(s.EndpointSlices))
	for _, n := range s.Nodes {
		out = append(out, nodeEvent(Add, nil, n))
	}
	for _, svc := range s.Services {
		out = append(out, serviceEvent(Add, nil, svc))
	}
	for _, eps := range s.EndpointSlices {
		out = append(out, sliceEvent(Add, nil, eps))
	}
	return out
}

func serviceEvent(op Op, old, new *v1.Service) Event {
	e := Event{Op: op, Kind: "Service"}
	e.Service.Old, e.Service.New = old, new
	if x := pick(old, new); x != nil {
		e.ObjectID = joinName(x.Namespace, x.Name)
	}
	return e
}

func sliceEvent(op Op, old, new *discoveryv1.EndpointSlice) Event {
	e := Event{Op: op, Kind: "EndpointSlice"}
	e.Slice.Old, e.Slice.New = old, new
	if x := pick(old, new); x != nil {
		e.ObjectID = joinName(x.Namespace, x.Name)
	}
	return e
}

func nodeEvent(op Op, old, new *v1.Node) Event {
	e := Event{Op: op, Kind: "Node"}
	e.Node.Old, e.Node.New = old, new
	if x := pick(old, new); x != nil {
		e.ObjectID = x.Name
	}
	return e
}

func pick[T any](old, new *T) *T {
	if new != nil {
		return new
	}
	return old
}
