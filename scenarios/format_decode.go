package scenarios

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/kpsim/kpsim/results"
)

// Error is one problem with a scenario, located by file and line (or by the
// --set override that introduced the value) and by field path.
type Error struct {
	File string
	Line int    // 0 when the field has no position (a missing field of an absent block)
	Set  string // the --set key=value the value came from, if any
	Path string // e.g. timeline[3].churnEndpoints.rate
	Msg  string
	// With are the overrides of other fields (--set key=value) the
	// problem may follow from: its line alone would blame the file (for
	// probe names of a cluster that --set cluster.services=0 empties).
	With []string
}

func (e *Error) Error() string { return e.where() + ": " + e.what() }

// where is the file and line, or the override (its value cut short).
func (e *Error) where() string {
	switch {
	case e.Set != "":
		return "--set " + cut(e.Set)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	return e.File
}

// what is the field path, the problem and the overrides it follows from.
func (e *Error) what() string {
	s := e.Msg
	if e.Path != "" {
		s = e.Path + ": " + s
	}
	if len(e.With) > 0 {
		s += " (with --set " + strings.Join(e.With, ", --set ") + ")"
	}
	return s
}

// Errors are every problem found in one scenario, in file order.
type Errors []*Error

// Error lists the problems one a line. Problems of one override follow
// its name, given once: a list of thousands of names with a few bad ones
// would otherwise repeat it with each.
func (es Errors) Error() string {
	var b strings.Builder
	for i := 0; i < len(es); {
		j := i + 1
		for es[i].Set != "" && j < len(es) && es[j].Set == es[i].Set {
			j++
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		if j == i+1 {
			b.WriteString(es[i].Error())
		} else {
			b.WriteString(es[i].where() + ":")
			for _, e := range es[i:j] {
				b.WriteString("\n  " + e.what())
			}
		}
		i = j
	}
	return b.String()
}

// maxQuoted is how much of a value a message quotes.
const maxQuoted = 200

// cutShort splits s into what a message quotes of it, at most maxQuoted
// bytes, and a note of what is left out ("… (N more characters)").
func cutShort(s string) (head, more string) {
	if len(s) <= maxQuoted {
		return s, ""
	}
	i := maxQuoted
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i], fmt.Sprintf("… (%d more characters)", utf8.RuneCountInString(s[i:]))
}

// cut is s cut short for a message.
func cut(s string) string {
	head, more := cutShort(s)
	return head + more
}

// quote is s quoted for a message, cut short.
func quote(s string) string {
	head, more := cutShort(s)
	return strconv.Quote(head) + more
}

// nServices is "n services", for messages and labels.
func nServices(n int) string {
	return fmt.Sprintf("%d %s", n, results.Plural(n, "service", "services"))
}

// orNil returns es as an error, or nil when there are none.
func (es Errors) orNil() error {
	if len(es) == 0 {
		return nil
	}
	sort.SliceStable(es, func(i, j int) bool {
		if (es[i].Set == "") != (es[j].Set == "") {
			return es[i].Set == ""
		}
		return es[i].Line < es[j].Line
	})
	return es
}

// position is where a value came from.
type position struct {
	line int
	set  string
}

// decoder maps a yaml.Node tree onto the scenario types by reflection. It
// exists, rather than yaml.v3's own decoding, so that every error can name
// the field path as well as the line, and so that later validation can find
// the line of any field it rejects.
type decoder struct {
	file   string
	pos    map[string]position   // field path -> position of its value
	origin map[*yaml.Node]string // nodes created by --set -> "key=value"
	sets   []string              // the overrides applied, in order
	// spelled maps a field path to the deprecated path the scenario wrote
	// it as (see moveDeprecated), so errors name what the user wrote.
	spelled  map[string]string
	warnings []string
}

// nodeDecoder is implemented by types with their own YAML form.
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, path string) error
}

func newDecoder(file string) *decoder {
	return &decoder{file: file, pos: map[string]position{}, origin: map[*yaml.Node]string{}, spelled: map[string]string{}}
}

// errAt returns an error located at n. The error is returned rather than
// collected; decodeStruct and the slice loop collect.
func (d *decoder) errAt(n *yaml.Node, path, format string, a ...any) error {
	return &Error{File: d.file, Line: n.Line, Set: d.origin[n], Path: d.spelling(path), Msg: fmt.Sprintf(format, a...)}
}

// spelling is path as the scenario wrote it.
func (d *decoder) spelling(path string) string {
	if p, ok := d.spelled[path]; ok {
		return p
	}
	return path
}

// errPath returns an error located at the closest recorded position of path
// or of one of its parents.
func (d *decoder) errPath(path, format string, a ...any) *Error {
	e := &Error{File: d.file, Path: d.spelling(path), Msg: fmt.Sprintf(format, a...)}
	for p := path; ; p = parentPath(p) {
		if pos, ok := d.pos[p]; ok {
			e.Line, e.Set = pos.line, pos.set
			return e
		}
		if p == "" {
			return e
		}
	}
}

// errFrom is errPath for a problem that follows from the values of other
// fields too (deps: field paths, each with what is under it): the
// overrides that gave any of them are named with it, as the line it is
// located at may have been fine without them.
func (d *decoder) errFrom(deps []string, path, format string, a ...any) *Error {
	e := d.errPath(path, format, a...)
	from := map[string]bool{}
	for p, pos := range d.pos {
		if pos.set == "" || pos.set == e.Set {
			continue
		}
		for _, dep := range deps {
			if p == dep || strings.HasPrefix(p, dep+".") || strings.HasPrefix(p, dep+"[") {
				from[pos.set] = true
			}
		}
	}
	for _, kv := range d.sets {
		if from[kv] {
			e.With = append(e.With, cut(kv))
			delete(from, kv) // given twice, named once
		}
	}
	return e
}

// present reports whether the scenario gave a value for path.
func (d *decoder) present(path string) bool {
	_, ok := d.pos[path]
	return ok
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Describe names a node's type for error messages ("the string \"x\"", "a list").
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.Tag {
	case "!!null":
		return "nothing"
	case "!!str":
		return "the string " + quote(n.Value)
	case "!!int", "!!float":
		return "the number " + n.Value
	case "!!bool":
		return n.Value
	}
	return n.Tag + " " + quote(n.Value)
}

// decode decodes n into out, a pointer.
func (d *decoder) decode(n *yaml.Node, out any, path string) error {
	return d.value(n, reflect.ValueOf(out).Elem(), path)
}

func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.AliasNode {
		return d.errAt(n, path, "YAML aliases are not supported; write the value out")
	}
	d.pos[path] = position{n.Line, d.origin[n]}
	if nd, ok := v.Addr().Interface().(nodeDecoder); ok {
		return nd.decodeNode(d, n, path)
	}
	if v.Type() == durationType {
		// time.Duration (proxier.Config's) reads as Duration does.
		var dur Duration
		err := dur.decodeNode(d, n, path)
		v.SetInt(int64(dur))
		return err
	}
	isNull := n.Kind == yaml.ScalarNode && n.Tag == "!!null"
	switch v.Kind() {
	case reflect.Pointer:
		nv := reflect.New(v.Type().Elem())
		if isNull && nv.Elem().Kind() == reflect.Struct {
			v.Set(nv) // "waitSynced:" with no arguments
			return nil
		}
		err := d.value(n, nv.Elem(), path)
		v.Set(nv)
		return err
	case reflect.Struct:
		return d.decodeStruct(n, v.Addr().Interface(), path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return d.errAt(n, path, "must be a list, got %s", Describe(n))
		}
		var errs Errors
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			if err := d.value(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				errs = appendErr(errs, err)
			}
		}
		v.Set(s)
		return errs.orNil()
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			return d.errAt(n, path, "must be a string, got %s", Describe(n))
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			return d.errAt(n, path, "must be a whole number, got %s", Describe(n))
		}
		var i int64
		if err := n.Decode(&i); err != nil {
			return d.errAt(n, path, "must be a whole number that fits in 64 bits: %s", n.Value)
		}
		v.SetInt(i)
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			return d.errAt(n, path, "must be a number, got %s", Describe(n))
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil {
			if err := n.Decode(&f); err != nil {
				return d.errAt(n, path, "must be a number: %s", n.Value)
			}
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return d.errAt(n, path, "must be a finite number, got %s", n.Value)
		}
		v.SetFloat(f)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return d.errAt(n, path, "must be true or false, got %s", Describe(n))
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			return d.errAt(n, path, "must be true or false: %s", n.Value)
		}
		v.SetBool(b)
	default:
		// A programming error in the scenario types, not bad input.
		return d.errAt(n, path, "internal error: cannot decode into %s", v.Type())
	}
	return nil
}

var durationType = reflect.TypeOf(time.Duration(0))

func appendErr(errs Errors, err error) Errors {
	switch e := err.(type) {
	case Errors:
		return append(errs, e...)
	case *Error:
		return append(errs, e)
	}
	return append(errs, &Error{Msg: err.Error()})
}

// fields maps a struct type's YAML keys to field indexes.
func fields(t reflect.Type) (map[string]int, []string) {
	m := map[string]int{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		m[tag] = i
		names = append(names, tag)
	}
	return m, names
}

// decodeStruct decodes a mapping into the struct out points to. An absent
// (null) block leaves the zero value; an unknown or repeated key is an error.
func (d *decoder) decodeStruct(n *yaml.Node, out any, path string) error {
	v := reflect.ValueOf(out).Elem()
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return d.errAt(n, path, "must be a mapping, got %s", Describe(n))
	}
	byName, names := fields(v.Type())
	seen := map[string]bool{}
	var errs Errors
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			errs = appendErr(errs, d.errAt(k, path, "keys must be field names, got %s", Describe(k)))
			continue
		}
		fp := joinPath(path, k.Value)
		idx, ok := byName[k.Value]
		if !ok {
			errs = appendErr(errs, d.errAt(k, fp, "unknown field (known: %s)", strings.Join(names, ", ")))
			continue
		}
		if seen[k.Value] {
			errs = appendErr(errs, d.errAt(k, fp, "given twice"))
			continue
		}
		seen[k.Value] = true
		if err := d.value(val, v.Field(idx), fp); err != nil {
			errs = appendErr(errs, err)
		}
	}
	return errs.orNil()
}

// deprecatedKeys are keys a scenario may still write under their old name:
// old path -> new path, both "section.key".
var deprecatedKeys = map[string]string{
	// The ipset strategy is the dataplane's, not a kube-proxy setting.
	"proxier.ipset": "dataplane.ipset",
}

// moveDeprecated moves every deprecated key of the document to its new
// place before decoding, with a warning naming where it was written; errors
// about the value still name the old spelling. Given both ways, an override
// (--set) wins over the file; twice in one place is an error.
func (d *decoder) moveDeprecated(root *yaml.Node) error {
	if root.Kind != yaml.MappingNode {
		return nil
	}
	for old, cur := range deprecatedKeys {
		oldSec, oldKey, _ := strings.Cut(old, ".")
		newSec, newKey, _ := strings.Cut(cur, ".")
		from := mappingValue(root, oldSec)
		if from == nil || from.Kind != yaml.MappingNode {
			continue
		}
		k, val := removeKey(from, oldKey)
		if k == nil {
			continue
		}
		where := fmt.Sprintf("%s:%d", d.file, k.Line)
		if kv := d.origin[val]; kv != "" {
			where = "--set " + kv
		}
		d.warnings = append(d.warnings, fmt.Sprintf("%s: %s is deprecated, write %s (it will keep working)", where, old, cur))
		to := mappingValue(root, newSec)
		if to == nil || (to.Kind == yaml.ScalarNode && to.Tag == "!!null") {
			if to == nil {
				to = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
				root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: newSec}, to)
			}
			to.Kind, to.Tag = yaml.MappingNode, "!!map"
		}
		if to.Kind != yaml.MappingNode {
			continue // decoding reports the section's type
		}
		if ek, ev := removeKey(to, newKey); ek != nil {
			fromSet, existingFromSet := d.origin[val] != "", d.origin[ev] != ""
			switch {
			case existingFromSet && !fromSet:
				to.Content = append(to.Content, ek, ev) // the override stands
				continue
			case fromSet == existingFromSet:
				return d.errAt(k, old, "given twice: as %s and as %s", old, cur)
			}
		}
		to.Content = append(to.Content, k, val)
		k.Value = newKey
		d.spelled[cur] = old
	}
	return nil
}

// mappingValue is the value of key in mapping m, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// removeKey removes key from mapping m and returns its key and value nodes.
func removeKey(m *yaml.Node, key string) (k, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			k, v = m.Content[i], m.Content[i+1]
			m.Content = append(m.Content[:i:i], m.Content[i+2:]...)
			return k, v
		}
	}
	return nil, nil
}
