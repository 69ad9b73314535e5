// Command schemagen writes record/results.schema.json, the JSON Schema of
// the results file, generated from the Go types of package record by
// reflection (what encoding/json writes for each of them) and described
// by their doc comments. go generate ./record runs it; its test holds the
// checked-in schema to what it generates, and a real run's file to the
// schema.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
)

// SchemaFile is the schema's file name in package record's folder.
const SchemaFile = "results.schema.json"

// ID is the schema's $id: where it is, in kpsim's repository.
const ID = "https://github.com/kpsim/kpsim/blob/main/record/" + SchemaFile

func main() {
	// go generate runs it in record's folder.
	b, err := Generate(".")
	if err == nil {
		err = os.WriteFile(SchemaFile, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

// Generate returns the schema of record.File, described by the doc
// comments of package record (in folder dir) and of package dataplane
// (its sibling).
func Generate(dir string) ([]byte, error) {
	g := &generator{docs: docs{}, defs: &object{}}
	for _, p := range []struct{ path, dir string }{
		{reflect.TypeFor[record.File]().PkgPath(), dir},
		{reflect.TypeFor[dataplane.Ops]().PkgPath(), filepath.Join(dir, "..", "dataplane")},
	} {
		if err := g.docs.parse(p.path, p.dir); err != nil {
			return nil, err
		}
	}
	file := reflect.TypeFor[record.File]()
	root := &object{}
	root.set("$schema", "https://json-schema.org/draft/2020-12/schema")
	root.set("$id", ID)
	root.set("title", fmt.Sprintf("kpsim results file, schema version %d", record.SchemaVersion))
	root.set("description", "One run of kpsim (kpsim run --out): "+g.docs.of(file)+
		" Generated from the Go types of package record (go generate ./record); docs/results-format.md describes it.")
	ref, err := g.schema(file)
	if err != nil {
		return nil, err
	}
	root.set("$ref", ref.get("$ref"))
	root.set("$defs", g.defs)
	b, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// object is a JSON object that keeps its keys in the order they were set,
// so that properties read in the order the Go fields are declared.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) set(k string, v any) {
	if o.vals == nil {
		o.vals = map[string]any{}
	}
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func (o *object) get(k string) any { return o.vals[k] }

func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

type generator struct {
	docs docs
	defs *object // named struct types by name, in the order first met
}

var (
	timeType    = reflect.TypeFor[time.Time]()
	rawType     = reflect.TypeFor[json.RawMessage]()
	opsType     = reflect.TypeFor[dataplane.Ops]()
	marshaler   = reflect.TypeFor[json.Marshaler]()
	unmarshaler = reflect.TypeFor[json.Unmarshaler]()
)

// enums are the values of the named string types the file holds.
var enums = map[reflect.Type][]string{
	reflect.TypeFor[dataplane.Family]():   {string(dataplane.IPv4), string(dataplane.IPv6)},
	reflect.TypeFor[dataplane.Protocol](): {string(dataplane.TCP), string(dataplane.UDP), string(dataplane.SCTP)},
}

// fieldEnums are the values of the string fields that hold one of
// record's constants.
var fieldEnums = map[string][]string{
	"File.Basis":  {record.Measured, record.Modeled, record.ModeledKernel},
	"File.Clock":  {record.ClockModeled, record.ClockWall},
	"Target.From": {record.FromPod, record.FromNode},
}

// schema is t's schema as encoding/json writes a value of it.
func (g *generator) schema(t reflect.Type) (*object, error) {
	s := &object{}
	switch {
	case t == timeType:
		s.set("type", "string")
		s.set("format", "date-time")
		return s, nil
	case t == rawType:
		// Any JSON value; described by the field.
		return s, nil
	case t == opsType:
		return g.ref(t, func() (*object, error) {
			d := &object{}
			d.set("description", g.docs.of(t))
			d.set("type", "object")
			props := &object{}
			for i := range len(dataplane.Ops{}) {
				c := &object{}
				c.set("type", "integer")
				props.set(dataplane.Op(i).String(), c)
			}
			d.set("properties", props)
			d.set("additionalProperties", false)
			return d, nil
		})
	case t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler) ||
		t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler) ||
		reflect.PointerTo(t).Implements(reflect.TypeFor[interface{ MarshalText() ([]byte, error) }]()):
		return nil, fmt.Errorf("%s encodes itself: teach schemagen its JSON", t)
	}
	switch t.Kind() {
	case reflect.Bool:
		s.set("type", "boolean")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		s.set("type", "integer")
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		s.set("type", "integer")
		s.set("minimum", 0)
	case reflect.Float32, reflect.Float64:
		s.set("type", "number")
	case reflect.String:
		s.set("type", "string")
		if vs, ok := enums[t]; ok {
			s.set("enum", vs)
		}
	case reflect.Slice:
		items, err := g.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		s.set("type", "array")
		s.set("items", items)
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%s: only string keys", t)
		}
		vals, err := g.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		s.set("type", "object")
		s.set("additionalProperties", vals)
	case reflect.Pointer:
		return g.schema(t.Elem())
	case reflect.Struct:
		return g.ref(t, func() (*object, error) { return g.structSchema(t) })
	default:
		return nil, fmt.Errorf("%s: kind %s has no schema", t, t.Kind())
	}
	return s, nil
}

// ref is a reference to t's definition, made by def the first time.
func (g *generator) ref(t reflect.Type, def func() (*object, error)) (*object, error) {
	if t.Name() == "" {
		return nil, fmt.Errorf("an unnamed %s", t)
	}
	name := t.Name()
	if t.PkgPath() != reflect.TypeFor[record.File]().PkgPath() {
		name = filepath.Base(t.PkgPath()) + "." + name
	}
	if g.defs.get(name) == nil {
		g.defs.set(name, true) // taken: a type that holds itself refers to it
		d, err := def()
		if err != nil {
			return nil, err
		}
		g.defs.set(name, d)
	}
	s := &object{}
	s.set("$ref", "#/$defs/"+name)
	return s, nil
}

func (g *generator) structSchema(t reflect.Type) (*object, error) {
	d := &object{}
	if doc := g.docs.of(t); doc != "" {
		d.set("description", doc)
	}
	d.set("type", "object")
	props := &object{}
	var required []string
	if err := g.fields(t, props, &required); err != nil {
		return nil, err
	}
	d.set("properties", props)
	if len(required) > 0 {
		d.set("required", required)
	}
	d.set("additionalProperties", false)
	return d, nil
}

// fields adds t's fields to props as encoding/json writes them: an
// embedded struct without a name of its own contributes its fields.
func (g *generator) fields(t reflect.Type, props *object, required *[]string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			if err := g.fields(f.Type, props, required); err != nil {
				return err
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		omitted := slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")
		s, err := g.schema(f.Type)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", t.Name(), f.Name, err)
		}
		// A nil slice, map, pointer or raw message is written as null
		// unless the field is omitted when empty.
		if k := f.Type.Kind(); !omitted && (k == reflect.Slice || k == reflect.Map || k == reflect.Pointer) && f.Type != rawType {
			s = nullable(s)
		}
		if vs, ok := fieldEnums[t.Name()+"."+f.Name]; ok {
			s.set("enum", vs)
		}
		p := &object{}
		if doc := g.docs.field(t, f.Name); doc != "" {
			p.set("description", doc)
		}
		for _, k := range s.keys {
			p.set(k, s.vals[k])
		}
		props.set(name, p)
		if !omitted {
			*required = append(*required, name)
		}
	}
	return nil
}

// nullable is s or null.
func nullable(s *object) *object {
	if typ, ok := s.get("type").(string); ok {
		s.set("type", []string{typ, "null"})
		return s
	}
	n := &object{}
	null := &object{}
	null.set("type", "null")
	n.set("anyOf", []any{s, null})
	return n
}

// docs are doc comments by "package path.Type" and "package path.Type.Field".
type docs map[string]string

func (d docs) of(t reflect.Type) string { return d[t.PkgPath()+"."+t.Name()] }

func (d docs) field(t reflect.Type, field string) string {
	return d[t.PkgPath()+"."+t.Name()+"."+field]
}

// parse reads the doc comments of the package in dir, whose path is path.
func (d docs) parse(path, dir string) error {
	fset := token.NewFileSet()
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return err
	}
	for _, name := range matches {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				key := path + "." + ts.Name.Name
				d[key] = text(doc)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fl := range st.Fields.List {
					t := strings.TrimSpace(text(fl.Doc) + " " + text(fl.Comment))
					for _, n := range fl.Names {
						d[key+"."+n.Name] = t
					}
				}
			}
		}
	}
	return nil
}

// text is a comment as one line.
func text(c *ast.CommentGroup) string {
	if c == nil {
		return ""
	}
	return strings.Join(strings.Fields(c.Text()), " ")
}
