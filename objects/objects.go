// Package objects is kube-proxy's view of the Kubernetes objects it reads,
// on the ground floor beneath every proxier, both backends and the
// scenarios: which Services and EndpointSlices it acts on and how it reads
// their ClusterIPs, ports, endpoints and topology hints (rules.go; node hints through internal/k8sapi),
// the informer events and handlers it sees (changes.go), a node's addresses
// (node.go), and the cluster as a Set of objects. kpsim's proxier, a
// kube-proxy release's adapters, the kernel backend and the replay all read
// these rules from here, so that what one programs and what another expects
// cannot disagree.
//
// It also reads a real cluster's Services and EndpointSlices (a
// `kubectl get services,endpointslices -A -o json` export) and turns them into
// what a node's kube-proxy would see: the API server's defaults applied, the
// objects kube-proxy's informers filter out set aside with the reason, and bad
// objects rejected with the file, the object and the field.
//
// A Set can then be scaled (repeated with fresh addresses), pinned to a node,
// anonymized and written back out, so that an export can drive a load test or be
// shared as a reproduction.
package objects

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Set is a cluster as one node's kube-proxy sees it.
type Set struct {
	Services       []*v1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	Nodes          []*v1.Node // optional; gives node addresses when present
	Ignored        []Ignored  // objects kube-proxy would ignore, with why
	// Deletions are objects marked with AnnotationDelete: a changes file
	// (see Apply) deletes them. A cluster export holds none.
	Deletions []Deletion
	// Notes are things a transformation (Scale, Anonymize) changed or dropped
	// that a user should know about; loading never adds notes.
	Notes []string
}

// Ignored is an object kube-proxy would not act on.
type Ignored struct {
	Kind   string // Service, EndpointSlice, Pod, ...
	Object string // namespace/name
	Reason string
}

// IgnoredCounts counts ignored objects by reason, for a one-line summary.
func (s *Set) IgnoredCounts() map[string]int {
	out := map[string]int{}
	for _, ig := range s.Ignored {
		out[ig.Kind+": "+ig.Reason]++
	}
	return out
}

// Load reads a file or a directory of files (*.json, *.yaml, *.yml, read in
// name order, not recursively). A file holds JSON or YAML: a v1 List (or a
// typed list such as ServiceList), a single object, or several YAML documents.
func Load(path string) (*Set, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load objects: %w", err)
	}
	files := []string{path}
	if st.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("load objects: %w", err)
		}
		files = files[:0]
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".json", ".yaml", ".yml":
				if !e.IsDir() {
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("load objects: %s: no .json, .yaml or .yml files", path)
		}
	}
	l := newLoader()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("load objects: %w", err)
		}
		if err := l.decode(f, data); err != nil {
			return nil, err
		}
	}
	return l.finish(), nil
}

// Read decodes one stream (as Load does for one file); name is used in errors.
func Read(name string, r io.Reader) (*Set, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("load objects: %s: %w", name, err)
	}
	l := newLoader()
	if err := l.decode(name, data); err != nil {
		return nil, err
	}
	return l.finish(), nil
}

type loader struct {
	set  Set
	seen map[string]string // kind/namespace/name -> file that defined it
}

func newLoader() *loader { return &loader{seen: map[string]string{}} }

// item is any object or list, decoded in one pass: the fields of every kind
// Load reads, with Service and Node specs and statuses kept raw until the
// kind is known. (Decoding a large export is most of the time Load takes; one
// pass instead of a dispatch pass plus a typed pass halves it.)
type item struct {
	APIVersion  string                     `json:"apiVersion"`
	Kind        string                     `json:"kind"`
	Items       []json.RawMessage          `json:"items"`
	Metadata    metav1.ObjectMeta          `json:"metadata"`
	Spec        json.RawMessage            `json:"spec"`
	Status      json.RawMessage            `json:"status"`
	AddressType discoveryv1.AddressType    `json:"addressType"`
	Endpoints   []discoveryv1.Endpoint     `json:"endpoints"`
	Ports       []discoveryv1.EndpointPort `json:"ports"`
}

func (l *loader) decode(file string, data []byte) error {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		// One JSON document, as kubectl writes: decode it in place rather
		// than copy it through the stream decoder first.
		err := l.object(file, t, "")
		var se *json.SyntaxError
		if !errors.As(err, &se) || !strings.Contains(se.Error(), "after top-level value") {
			return err
		}
		// Several JSON documents in a row: the stream decoder splits them.
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 64*1024)
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: document %d: %w", file, doc, err)
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
			continue // an empty YAML document
		}
		if err := l.object(file, raw, ""); err != nil {
			return err
		}
	}
}

// object handles one decoded document or list item. itemKind is the kind
// implied by a typed list (ServiceList items may omit kind).
func (l *loader) object(file string, raw json.RawMessage, itemKind string) error {
	d := decodeItem(raw, itemKind)
	if d.items == nil {
		return l.add(file, d)
	}
	// A list: decode its items in parallel (decoding is most of the time
	// Load takes on a large export), then add them in order.
	items := make([]decoded, len(d.items))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(d.items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(items); i = int(next.Add(1) - 1) {
				items[i] = decodeItem(d.items[i], d.itemKind)
			}
		}()
	}
	wg.Wait()
	for i, it := range items {
		if ne, ok := it.err.(*notObjectError); ok {
			ne.item = i // it says which item, in place of "(item i of the list)"
		}
		var err error
		if it.items != nil {
			err = l.object(file, d.items[i], d.itemKind)
		} else {
			err = l.add(file, it)
		}
		if err != nil {
			if _, ok := errors.AsType[*notObjectError](err); ok {
				return err
			}
			return fmt.Errorf("%w (item %d of the list)", err, i)
		}
	}
	return nil
}

// notAnExport says what an export file holds, for a file that holds
// something else altogether.
const notAnExport = "not a kubectl export: want a List of Service and EndpointSlice objects (kubectl get services,endpointslices -A -o yaml)"

// notObjectError is a document, or an item of a list, that is no object at
// all: a string, a number, a list, a mapping without kind or name. Such a
// file is not an export with a bad object but something else, and json's
// "cannot unmarshal string into Go value of type objects.item" said neither.
type notObjectError struct {
	is   string // what it is instead: "is a string", "is a mapping with no kind"
	item int    // its index in the list, or -1: the document itself
}

func (e *notObjectError) Error() string {
	if e.item < 0 {
		return notAnExport + "; it " + e.is
	}
	return fmt.Sprintf("%s; item %d %s", notAnExport, e.item, e.is)
}

// jsonKinds name json.UnmarshalTypeError's values as a user would.
var jsonKinds = map[string]string{"string": "a string", "number": "a number", "array": "a list", "bool": "true or false"}

// decoded is one object as decodeItem made it, before the loader adds it.
type decoded struct {
	items    []json.RawMessage // a list's items (non-nil for a list)
	itemKind string            // the kind a typed list implies for its items
	kind     string
	id       string // namespace/name
	deletion bool
	ns, name string // for deletions
	svc      *v1.Service
	eps      *discoveryv1.EndpointSlice
	node     *v1.Node
	ignored  string // why kube-proxy would not act on it
	err      error  // "resource namespace/name: field: ..."
}

// decodeItem decodes, defaults, filters and validates one object. It
// touches no loader state, so list items decode in parallel.
func decodeItem(raw json.RawMessage, itemKind string) decoded {
	var h item
	if err := json.Unmarshal(raw, &h); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field == "" && jsonKinds[te.Value] != "" {
			return decoded{err: &notObjectError{is: "is " + jsonKinds[te.Value], item: -1}}
		}
		// Name the object if its kind and name can be read at all.
		var id struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if json.Unmarshal(raw, &id) == nil && id.Metadata.Name != "" {
			kind := cmp.Or(id.Kind, itemKind)
			return decoded{err: fmt.Errorf("%ss %s: %w", strings.ToLower(kind), joinName(id.Metadata.Namespace, id.Metadata.Name), err)}
		}
		return decoded{err: err}
	}
	d := decoded{kind: cmp.Or(h.Kind, itemKind)}
	if strings.HasSuffix(d.kind, "List") {
		d.items, d.itemKind = h.Items, strings.TrimSuffix(d.kind, "List")
		if d.items == nil {
			d.items = []json.RawMessage{}
		}
		return d
	}
	d.id = joinName(h.Metadata.Namespace, h.Metadata.Name)
	if h.Metadata.Annotations[AnnotationDelete] == "true" {
		d.deletion, d.ns, d.name = true, h.Metadata.Namespace, h.Metadata.Name
		return d
	}
	// unmarshal decodes a kept-raw part; absent is the zero value.
	unmarshal := func(raw json.RawMessage, field string, into any) error {
		if len(raw) == 0 {
			return nil
		}
		if err := json.Unmarshal(raw, into); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		return nil
	}
	switch {
	case d.kind == "Service" && groupOf(h.APIVersion) == "":
		svc := &v1.Service{ObjectMeta: h.Metadata}
		if err := cmp.Or(unmarshal(h.Spec, "spec", &svc.Spec), unmarshal(h.Status, "status", &svc.Status)); err != nil {
			d.err = fmt.Errorf("services %s: %w", d.id, err)
			return d
		}
		defaultService(svc)
		d.svc, d.id = svc, joinName(svc.Namespace, svc.Name)
		if d.ignored = ServiceIgnored(svc); d.ignored == "" {
			if err := validateService(svc); err != nil {
				d.err = fmt.Errorf("services %s: %w", d.id, err)
			}
		}
	case d.kind == "EndpointSlice" && groupOf(h.APIVersion) == discoveryv1.GroupName:
		if h.APIVersion != "" && h.APIVersion != discoveryv1.SchemeGroupVersion.String() {
			d.ignored = "apiVersion " + h.APIVersion + " is not read by kube-proxy (it watches discovery.k8s.io/v1)"
			return d
		}
		eps := &discoveryv1.EndpointSlice{ObjectMeta: h.Metadata, AddressType: h.AddressType, Endpoints: h.Endpoints, Ports: h.Ports}
		defaultSlice(eps)
		d.eps, d.id = eps, joinName(eps.Namespace, eps.Name)
		if d.ignored, _ = SliceIgnored(eps); d.ignored == "" {
			if err := validateSlice(eps); err != nil {
				d.err = fmt.Errorf("endpointslices %s: %w", d.id, err)
			}
		}
	case d.kind == "Node" && groupOf(h.APIVersion) == "":
		node := &v1.Node{ObjectMeta: h.Metadata}
		if err := cmp.Or(unmarshal(h.Spec, "spec", &node.Spec), unmarshal(h.Status, "status", &node.Status)); err != nil {
			d.err = fmt.Errorf("nodes %s: %w", d.id, err)
			return d
		}
		d.node = node
		if err := validateNode(node); err != nil {
			d.err = fmt.Errorf("nodes %s: %w", d.id, err)
		}
	case d.kind == "" && d.id == "":
		d.err = &notObjectError{is: "is a mapping with no kind", item: -1}
	case d.kind == "":
		d.err = fmt.Errorf("object %q has no kind", d.id)
	default:
		d.ignored = "kind " + d.kind + " (" + h.APIVersion + ") is not read by kube-proxy"
	}
	return d
}

// add records a decoded object: duplicates are checked here, in file order,
// so the error names the first definition.
func (l *loader) add(file string, d decoded) error {
	switch {
	case d.deletion:
		return l.deletion(file, d.kind, d.ns, d.name)
	case d.svc != nil:
		if err := l.dup(file, "services", d.svc.Namespace, d.svc.Name); err != nil {
			return err
		}
	case d.eps != nil:
		if err := l.dup(file, "endpointslices", d.eps.Namespace, d.eps.Name); err != nil {
			return err
		}
	case d.node != nil:
		if err := l.dup(file, "nodes", "", d.node.Name); err != nil {
			return err
		}
	}
	if d.err != nil {
		return fmt.Errorf("%s: %w", file, d.err)
	}
	switch {
	case d.ignored != "":
		l.set.Ignored = append(l.set.Ignored, Ignored{Kind: d.kind, Object: d.id, Reason: d.ignored})
	case d.svc != nil:
		l.set.Services = append(l.set.Services, d.svc)
	case d.eps != nil:
		l.set.EndpointSlices = append(l.set.EndpointSlices, d.eps)
	case d.node != nil:
		l.set.Nodes = append(l.set.Nodes, d.node)
	}
	return nil
}

// groupOf returns the API group of an apiVersion ("" for the core group, and
// for an item whose list did not say).
func groupOf(apiVersion string) string {
	if i := strings.IndexByte(apiVersion, '/'); i >= 0 {
		return apiVersion[:i]
	}
	if apiVersion == "v1" || apiVersion == "" {
		return ""
	}
	return apiVersion
}

func (l *loader) deletion(file, kind, ns, name string) error {
	resource := strings.ToLower(kind) + "s"
	switch kind {
	case "Service", "EndpointSlice":
		if ns == "" {
			ns = v1.NamespaceDefault
		}
	case "Node":
		ns = ""
	default:
		return fmt.Errorf("%s: %s %s: %s: only Services, EndpointSlices and Nodes can be deleted", file, resource, joinName(ns, name), AnnotationDelete)
	}
	if err := l.dup(file, resource, ns, name); err != nil {
		return err
	}
	l.set.Deletions = append(l.set.Deletions, Deletion{Kind: kind, Namespace: ns, Name: name})
	return nil
}

func (l *loader) dup(file, resource, ns, name string) error {
	if name == "" {
		return fmt.Errorf("%s: %s in namespace %q: metadata.name: required", file, resource, ns)
	}
	key := resource + "/" + ns + "/" + name
	if prev, ok := l.seen[key]; ok {
		return fmt.Errorf("%s: %s %s: defined twice (first in %s)", file, resource, joinName(ns, name), prev)
	}
	l.seen[key] = file
	return nil
}

// finish sorts the set so that every consumer sees the same order whatever
// the files' order was.
func (l *loader) finish() *Set {
	l.set.sort()
	return &l.set
}

func (s *Set) sort() {
	sort.Slice(s.Services, func(i, j int) bool {
		return joinName(s.Services[i].Namespace, s.Services[i].Name) < joinName(s.Services[j].Namespace, s.Services[j].Name)
	})
	sort.Slice(s.EndpointSlices, func(i, j int) bool {
		a, b := s.EndpointSlices[i], s.EndpointSlices[j]
		return joinName(a.Namespace, a.Name) < joinName(b.Namespace, b.Name)
	})
	sort.Slice(s.Nodes, func(i, j int) bool { return s.Nodes[i].Name < s.Nodes[j].Name })
	sort.Slice(s.Deletions, func(i, j int) bool {
		a, b := s.Deletions[i], s.Deletions[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return joinName(a.Namespace, a.Name) < joinName(b.Namespace, b.Name)
	})
	sort.SliceStable(s.Ignored, func(i, j int) bool {
		a, b := s.Ignored[i], s.Ignored[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Object < b.Object
	})
}

func joinName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}
