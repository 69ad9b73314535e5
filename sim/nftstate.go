package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
)

// nftState is one nf_tables table of the in-memory kernel. It holds the
// table in knftables' own types (FakeTable, which the probe model walks)
// and applies transactions as nft does: every command in order, all or
// none. It is kpsim's, not knftables' fake, for size: that fake copies the
// whole table at every transaction and finds an element by comparing it
// with every other (reflect.DeepEqual), which at 20,000 services made a
// first sync take minutes of wall time; here an element is found through
// an index by its key. Its errors are knftables' own kinds
// (knftables.IsNotFound, IsAlreadyExists), with nft's reasons.
//
// Callers hold the kernel's lock.
type nftState struct {
	table  *knftables.FakeTable // nil until a transaction adds it
	handle int                  // the last handle given to an object
	// elements indexes each set's and map's elements by key (joined as
	// nft prints it), to their position in Elements.
	elements map[string]map[string]int
	// bases caches the base chains of each hook (baseChains), for probes:
	// finding them walks every chain. A transaction drops it.
	bases map[knftables.BaseChainHook][]*knftables.FakeChain
	// factory makes transactions for the table: knftables builds a
	// transaction only through an Interface, which also fills in the
	// family and table of the objects added to it. It never runs one.
	factory *knftables.Fake
	// written are the elements traffic wrote to sets with a timeout
	// (update @SET, ClientIP affinity's), by set, each key until when it
	// lives. A set made anew (deleted, added again) starts with none.
	written map[*knftables.FakeSet]map[string]time.Time
}

func newNFTState(family knftables.Family, name string) *nftState {
	return &nftState{elements: map[string]map[string]int{}, factory: knftables.NewFake(family, name)}
}

// nftNotFound and nftExists are knftables' own errors, for IsNotFound and
// IsAlreadyExists to recognize ours (nftError wraps them): knftables makes
// them only itself, so they are taken from its fake once.
var nftNotFound, nftExists = func() (error, error) {
	f := knftables.NewFake(knftables.IPv4Family, "kpsim")
	_, notFound := f.List(context.Background(), "chain")
	tx := f.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Create(&knftables.Table{})
	return notFound, f.Run(context.Background(), tx)
}()

// nftError is a failed command, with nft's reason and knftables' kind.
type nftError struct {
	msg  string
	kind error // nftNotFound, nftExists, or nil
}

func (e *nftError) Error() string { return e.msg }
func (e *nftError) Unwrap() error { return e.kind }

func notFound(format string, args ...any) error {
	return &nftError{fmt.Sprintf(format, args...), nftNotFound}
}

func exists(format string, args ...any) error {
	return &nftError{fmt.Sprintf(format, args...), nftExists}
}

// run applies tx, entirely or not at all.
func (s *nftState) run(tx *knftables.Transaction) error {
	_, err := s.applyAll(tx)
	return err
}

// check applies tx and takes it back: what `nft --check` says.
func (s *nftState) check(tx *knftables.Transaction) error {
	takeBack, err := s.applyAll(tx)
	if err == nil {
		takeBack()
	}
	return err
}

// applyAll applies tx's commands in order and returns how to take them all
// back; when one fails, those before it are taken back at once.
func (s *nftState) applyAll(tx *knftables.Transaction) (takeBack func(), err error) {
	ops, err := dataplane.NFTCommands(tx)
	if err != nil {
		return nil, err
	}
	s.bases = nil
	var undo []func()
	takeBack = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	for _, op := range ops {
		if err := s.apply(op, &undo); err != nil {
			takeBack()
			return nil, err
		}
	}
	return takeBack, nil
}

// baseChains are the table's base chains on hook, in the order they run.
func (s *nftState) baseChains(hook knftables.BaseChainHook) []*knftables.FakeChain {
	if s.bases == nil {
		s.bases = map[knftables.BaseChainHook][]*knftables.FakeChain{}
	}
	c, ok := s.bases[hook]
	if !ok {
		c = baseChains(s.table, hook)
		s.bases[hook] = c
	}
	return c
}

// index is a set's or map's elements by key (to their position).
func (s *nftState) index(set string) map[string]int { return s.elements[set] }

// live reports whether a set's element is there at now: an element traffic
// wrote lives until its set's timeout has passed since it was last written.
func (s *nftState) live(set string, key []string, now time.Time) bool {
	until, ok := s.written[s.table.Sets[set]][string(nftJoin(make([]byte, 0, 64), key))]
	return !ok || now.Before(until)
}

// write is traffic's update of set with key at now, as the kernel does it
// for a rule's `update @SET { ip saddr }`: the element is added if it is
// not there, and lives for the set's timeout from now (an element of a set
// without one lives as any other). Traffic's writes are no kernel
// operation: nothing counts or prices them.
func (s *nftState) write(set string, key []string, now time.Time) {
	fs := s.table.Sets[set]
	if fs == nil {
		return // the kernel refuses a rule naming a missing set; nothing to write
	}
	k := strings.Join(key, " . ")
	var undo []func() // traffic's writes are never taken back
	if _, ok := s.elements[set][k]; !ok || !s.live(set, key, now) {
		_ = s.applyElement("add", &knftables.Element{Table: s.table.Name, Family: s.table.Family, Set: set, Key: key}, &undo)
	}
	if fs.Timeout == nil {
		return
	}
	if s.written == nil {
		s.written = map[*knftables.FakeSet]map[string]time.Time{}
	}
	if s.written[fs] == nil {
		s.written[fs] = map[string]time.Time{}
	}
	s.written[fs][k] = now.Add(*fs.Timeout)
}

// expire removes the elements traffic wrote whose time has passed at now,
// as the kernel's garbage collection of a set with a timeout does.
func (s *nftState) expire(now time.Time) {
	for fs, keys := range s.written {
		for k, until := range keys {
			if now.Before(until) {
				continue
			}
			delete(keys, k)
			if s.table.Sets[fs.Name] != fs {
				continue // the set was made anew: the element went with the old one
			}
			var undo []func()
			_ = s.applyElement("delete", &knftables.Element{Set: fs.Name, Key: strings.Split(k, " . ")}, &undo)
		}
		if len(keys) == 0 {
			delete(s.written, fs)
		}
	}
}

// existence checks a verb against whether its object exists, as nft does:
// add and destroy take either, create wants it missing, the rest present.
func existence(verb, kind, name string, present bool) error {
	switch {
	case verb == "add" || verb == "destroy":
		return nil
	case verb == "create" && present:
		return exists("%s %q already exists", kind, name)
	case verb != "create" && !present:
		return notFound("no such %s %q", kind, name)
	}
	return nil
}

// apply applies one command, recording how to take it back.
func (s *nftState) apply(op dataplane.NFTCommand, undo *[]func()) error {
	if _, ok := op.Obj.(*knftables.Table); ok {
		return s.applyTable(op, undo)
	}
	t := s.table
	if t == nil {
		return notFound("no such table")
	}
	switch obj := op.Obj.(type) {
	case *knftables.Chain:
		old := t.Chains[obj.Name]
		if err := existence(op.Verb, "chain", obj.Name, old != nil); err != nil {
			return err
		}
		switch create := func() *knftables.FakeChain {
			c := *obj
			c.Handle = s.next(undo)
			return &knftables.FakeChain{Chain: c}
		}; {
		case addRemove(op.Verb, obj.Name, t.Chains, create, undo):
		case op.Verb == "flush":
			rules := old.Rules
			old.Rules = nil
			*undo = append(*undo, func() { old.Rules = rules })
		default:
			return fmt.Errorf("nft %s chain: not a command", op.Verb)
		}
	case *knftables.Rule:
		return s.applyRule(op.Verb, obj, undo)
	case *knftables.Set:
		return applyContainer(s, op.Verb, "set", obj.Name, t.Sets, func() *knftables.FakeSet {
			c := *obj
			c.Handle = s.next(undo)
			return &knftables.FakeSet{Set: c}
		}, func(c *knftables.FakeSet) *elementsOf { return &elementsOf{set: c} }, undo)
	case *knftables.Map:
		return applyContainer(s, op.Verb, "map", obj.Name, t.Maps, func() *knftables.FakeMap {
			c := *obj
			c.Handle = s.next(undo)
			return &knftables.FakeMap{Map: c}
		}, func(c *knftables.FakeMap) *elementsOf { return &elementsOf{m: c} }, undo)
	case *knftables.Element:
		return s.applyElement(op.Verb, obj, undo)
	case *knftables.Counter:
		old := t.Counters[obj.Name]
		if err := existence(op.Verb, "counter", obj.Name, old != nil); err != nil && op.Verb != "delete" {
			return err
		}
		if old == nil && op.Verb == "delete" {
			return notFound("no such counter %q", obj.Name)
		}
		switch create := func() *knftables.FakeCounter {
			c := *obj
			c.Handle = s.next(undo)
			return &knftables.FakeCounter{Counter: c}
		}; {
		case addRemove(op.Verb, obj.Name, t.Counters, create, undo):
		case op.Verb == "reset": // counters count nothing here
		default:
			return fmt.Errorf("nft %s counter: not a command", op.Verb)
		}
	default:
		return fmt.Errorf("nft: %T objects are not modeled", op.Obj)
	}
	return nil
}

// next gives out the next handle.
func (s *nftState) next(undo *[]func()) *int {
	s.handle++
	*undo = append(*undo, func() { s.handle-- })
	return knftables.PtrTo(s.handle)
}

func (s *nftState) applyTable(op dataplane.NFTCommand, undo *[]func()) error {
	obj := op.Obj.(*knftables.Table)
	old, oldIndex := s.table, s.elements
	if err := existence(op.Verb, "table", "", old != nil); err != nil {
		return err
	}
	restore := func() { s.table, s.elements = old, oldIndex }
	switch op.Verb {
	case "add", "create":
		if old != nil {
			return nil
		}
	case "flush":
	case "delete", "destroy":
		if old != nil {
			s.table, s.elements = nil, map[string]map[string]int{}
			*undo = append(*undo, restore)
		}
		return nil
	default:
		return fmt.Errorf("nft %s table: not a command", op.Verb)
	}
	t := *obj
	t.Handle = s.next(undo)
	s.table = &knftables.FakeTable{Table: t, Flowtables: map[string]*knftables.FakeFlowtable{},
		Chains: map[string]*knftables.FakeChain{}, Sets: map[string]*knftables.FakeSet{}, Maps: map[string]*knftables.FakeMap{},
		Counters: map[string]*knftables.FakeCounter{}}
	s.elements = map[string]map[string]int{}
	*undo = append(*undo, restore)
	return nil
}

func (s *nftState) applyRule(verb string, obj *knftables.Rule, undo *[]func()) error {
	c := s.table.Chains[obj.Chain]
	if c == nil {
		return notFound("no such chain %q", obj.Chain)
	}
	rules := c.Rules
	at := -1 // the rule a handle or index names
	switch {
	case obj.Handle != nil:
		at = slices.IndexFunc(rules, func(r *knftables.Rule) bool { return r.Handle != nil && *r.Handle == *obj.Handle })
		if at < 0 {
			return notFound("no rule with handle %d", *obj.Handle)
		}
	case obj.Index != nil:
		if *obj.Index >= len(rules) {
			return notFound("no rule with index %d", *obj.Index)
		}
		at = *obj.Index
	}
	*undo = append(*undo, func() { c.Rules = rules })
	if verb == "delete" {
		if at < 0 {
			return fmt.Errorf("nft delete rule: no handle")
		}
		c.Rules = slices.Delete(slices.Clone(rules), at, at+1)
		return nil
	}
	if err := s.checkRuleRefs(obj.Rule); err != nil {
		return err
	}
	r := *obj
	switch verb {
	case "add": // after the rule named, else at the end
		r.Handle = s.next(undo)
		if at < 0 {
			c.Rules = append(rules, &r) // beyond the old length: taking it back restores that length
		} else {
			c.Rules = slices.Insert(slices.Clone(rules), at+1, &r)
		}
	case "insert": // before the rule named, else at the start
		r.Handle = s.next(undo)
		c.Rules = slices.Insert(slices.Clone(rules), max(at, 0), &r)
	case "replace":
		if at < 0 {
			return fmt.Errorf("nft replace rule: no handle")
		}
		c.Rules = slices.Clone(rules)
		c.Rules[at] = &r
	default:
		return fmt.Errorf("nft %s rule: not a command", verb)
	}
	return nil
}

// checkRuleRefs refuses a rule naming a chain, set or map the table does
// not have, as nft does: jump and goto name chains, @NAME a set or map.
func (s *nftState) checkRuleRefs(rule string) error {
	t := s.table
	words := strings.Fields(rule)
	for i, w := range words {
		switch {
		case strings.HasPrefix(w, "@") && !strings.Contains(w, ","):
			name := w[1:]
			if i > 0 && (words[i-1] == "map" || words[i-1] == "vmap") {
				if t.Maps[name] == nil {
					return notFound("no such map %q", name)
				}
			} else if t.Sets[name] == nil && t.Maps[name] == nil {
				return notFound("no such set %q", name)
			}
		case (w == "goto" || w == "jump") && i+1 < len(words):
			if t.Chains[words[i+1]] == nil {
				return notFound("no such chain %q", words[i+1])
			}
		}
	}
	return nil
}

// elementsOf is a set's or a map's elements, whichever it is.
type elementsOf struct {
	set *knftables.FakeSet
	m   *knftables.FakeMap
}

func (e *elementsOf) get() []*knftables.Element {
	if e.set != nil {
		return e.set.Elements
	}
	return e.m.Elements
}

func (e *elementsOf) put(els []*knftables.Element) {
	if e.set != nil {
		e.set.Elements = els
	} else {
		e.m.Elements = els
	}
}

// applyContainer applies a command to a set or a map (of the table's
// containers, by name): made by create, its elements reached by els.
func applyContainer[C any](s *nftState, verb, kind, name string, containers map[string]*C, create func() *C, els func(*C) *elementsOf, undo *[]func()) error {
	old := containers[name]
	if err := existence(verb, kind, name, old != nil); err != nil {
		return err
	}
	switch {
	case verb == "add" || verb == "create":
		addRemove(verb, name, containers, create, undo)
	case verb == "flush":
		e := els(old)
		list, index := e.get(), s.elements[name]
		e.put(nil)
		delete(s.elements, name)
		*undo = append(*undo, func() { e.put(list); s.elements[name] = index })
	case verb == "delete" || verb == "destroy":
		if index, ok := s.elements[name]; ok {
			delete(s.elements, name)
			*undo = append(*undo, func() { s.elements[name] = index })
		}
		addRemove(verb, name, containers, create, undo)
	default:
		return fmt.Errorf("nft %s %s: not a command", verb, kind)
	}
	return nil
}

// addRemove applies add, create, delete and destroy to the object of that
// name among objs (its absence or presence already checked); false for any
// other verb.
func addRemove[C any](verb, name string, objs map[string]*C, create func() *C, undo *[]func()) bool {
	old := objs[name]
	switch verb {
	case "add", "create":
		if old == nil {
			objs[name] = create()
			*undo = append(*undo, func() { delete(objs, name) })
		}
	case "delete", "destroy":
		if old != nil {
			delete(objs, name)
			*undo = append(*undo, func() { objs[name] = old })
		}
	default:
		return false
	}
	return true
}

func (s *nftState) applyElement(verb string, obj *knftables.Element, undo *[]func()) error {
	t := s.table
	name, els := obj.Set, &elementsOf{set: t.Sets[obj.Set]}
	switch {
	case obj.Set != "" && els.set == nil:
		return notFound("no such set %q", obj.Set)
	case obj.Set == "":
		name, els = obj.Map, &elementsOf{m: t.Maps[obj.Map]}
		if els.m == nil {
			return notFound("no such map %q", obj.Map)
		}
		if len(obj.Value) == 1 {
			if w := strings.Fields(obj.Value[0]); len(w) == 2 && (w[0] == "goto" || w[0] == "jump") && t.Chains[w[1]] == nil {
				return notFound("no such chain %q", w[1])
			}
		}
	}
	index := s.elements[name]
	if index == nil {
		index = map[string]int{}
		s.elements[name] = index
	}
	key := strings.Join(obj.Key, " . ")
	i, present := index[key]
	list := els.get()
	switch verb {
	case "add", "create":
		if present && verb == "create" {
			return exists("element %q already exists", key)
		}
		e := *obj
		if present {
			prev := list[i]
			list[i] = &e
			*undo = append(*undo, func() { els.get()[i] = prev })
			return nil
		}
		els.put(append(list, &e))
		index[key] = len(list)
		*undo = append(*undo, func() { els.put(els.get()[:len(els.get())-1]); delete(index, key) })
	case "delete", "destroy":
		if !present {
			if verb == "delete" {
				return notFound("no such element %q", key)
			}
			return nil
		}
		// Swap in the last element: nft keeps no order a reader relies on.
		last := len(list) - 1
		removed, moved := list[i], list[last]
		list[i] = moved
		els.put(list[:last])
		index[strings.Join(moved.Key, " . ")] = i
		delete(index, key)
		*undo = append(*undo, func() {
			l := append(els.get(), moved)
			l[i] = removed
			els.put(l)
			index[strings.Join(moved.Key, " . ")] = last
			index[key] = i
		})
	default:
		return fmt.Errorf("nft %s element: not a command", verb)
	}
	return nil
}

// list is knftables' List: the names of one kind of object.
func (s *nftState) list(objectType string) ([]string, error) {
	if s.table == nil {
		return nil, notFound("no such table")
	}
	var names []string
	switch strings.TrimSuffix(objectType, "s") {
	case "chain":
		names = slices.Collect(maps.Keys(s.table.Chains))
	case "set":
		names = slices.Collect(maps.Keys(s.table.Sets))
	case "map":
		names = slices.Collect(maps.Keys(s.table.Maps))
	case "counter":
		names = slices.Collect(maps.Keys(s.table.Counters))
	case "flowtable":
		names = slices.Collect(maps.Keys(s.table.Flowtables))
	default:
		return nil, fmt.Errorf("can't List() type %q", objectType)
	}
	slices.Sort(names)
	return names, nil
}

func (s *nftState) listRules(chain string) ([]*knftables.Rule, error) {
	if s.table == nil {
		return nil, notFound("no such table")
	}
	if chain == "" {
		var all []*knftables.Rule
		for _, c := range s.table.Chains {
			all = append(all, c.Rules...)
		}
		return all, nil
	}
	c := s.table.Chains[chain]
	if c == nil {
		return nil, notFound("no such chain %q", chain)
	}
	return slices.Clone(c.Rules), nil
}

func (s *nftState) listElements(objectType, name string) ([]*knftables.Element, error) {
	if s.table == nil {
		return nil, notFound("no such %s %q", objectType, name)
	}
	switch objectType {
	case "set":
		if c := s.table.Sets[name]; c != nil {
			return slices.Clone(c.Elements), nil
		}
	case "map":
		if c := s.table.Maps[name]; c != nil {
			return slices.Clone(c.Elements), nil
		}
	default:
		return nil, fmt.Errorf("invalid objectType %q", objectType)
	}
	return nil, notFound("no such %s %q", objectType, name)
}

// elementCount is how many elements the table's sets and maps hold.
func (s *nftState) elementCount() int {
	if s.table == nil {
		return 0
	}
	n := 0
	for _, set := range s.table.Sets {
		n += len(set.Elements)
	}
	for _, m := range s.table.Maps {
		n += len(m.Elements)
	}
	return n
}

// objects is how many objects the table holds: chains, rules, sets, maps
// and their elements.
func (s *nftState) objects() int {
	t := s.table
	if t == nil {
		return 0
	}
	n := len(t.Chains) + len(t.Sets) + len(t.Maps) + s.elementCount()
	for _, c := range t.Chains {
		n += len(c.Rules)
	}
	return n
}

// mapRules is how many of the table's rules hold a set or map of their own
// (each one anonymous set in nf_tables).
func (s *nftState) mapRules() int {
	n := 0
	if s.table != nil {
		for _, c := range s.table.Chains {
			for _, r := range c.Rules {
				if dataplane.HasMap(r.Rule) {
					n++
				}
			}
		}
	}
	return n
}

func (s *nftState) listCounters() ([]*knftables.Counter, error) {
	if s.table == nil {
		return nil, notFound("no such table")
	}
	var out []*knftables.Counter
	for _, name := range slices.Sorted(maps.Keys(s.table.Counters)) {
		c := s.table.Counters[name].Counter
		out = append(out, &c)
	}
	return out, nil
}
