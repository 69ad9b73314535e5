// Package private is kpsim's one way into another package's unexported
// fields. Two packages keep what kpsim must reach unexported: a kube-proxy
// release's proxier (its sync runner, and the utilities its constructor
// wires to the node itself: netlink, conntrack, the health server, the
// nftables interface) and knftables' Transaction (its commands, which only
// knftables' own fake reads). Upstream's tests set such fields from inside
// their packages; kpsim sits outside and reaches them by name. A release
// or a knftables whose fields differ fails here, naming the field, rather
// than running unobserved or touching the host; TypeAt lets a test check
// each field a caller reaches against a release's types without running it
// (upstream/kube-proxy's TestFields, run in every release's module).
package private

import (
	"fmt"
	"reflect"
	"strings"
	"unsafe"
)

// Field returns the field at path (dotted names, through pointers) of obj,
// a pointer to a struct, readable and settable whether exported or not.
func Field(obj any, path string) (reflect.Value, error) {
	v := reflect.ValueOf(obj)
	for _, name := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, fmt.Errorf("%T: %s: nil on the way", obj, path)
			}
			v = v.Elem()
		}
		if !v.IsValid() {
			return reflect.Value{}, fmt.Errorf("%T: %s: nil on the way", obj, path)
		}
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, fmt.Errorf("%T: %s: %s is not a struct", obj, path, v.Type())
		}
		f := v.FieldByName(name)
		if !f.IsValid() {
			return reflect.Value{}, fmt.Errorf("%T: %s: %s has no field %s (not a release this harness knows)", obj, path, v.Type(), name)
		}
		v = Open(f)
	}
	return v, nil
}

// TypeAt is the type of the field at path in struct type t (through
// pointers), as Field would find it in a value of t.
func TypeAt(t reflect.Type, path string) (reflect.Type, error) {
	at := t
	for _, name := range strings.Split(path, ".") {
		for at.Kind() == reflect.Pointer {
			at = at.Elem()
		}
		if at.Kind() != reflect.Struct {
			return nil, fmt.Errorf("%s: %s: %s is not a struct", t, path, at)
		}
		f, ok := at.FieldByName(name)
		if !ok {
			return nil, fmt.Errorf("%s: %s: %s has no field %s", t, path, at, name)
		}
		at = f.Type
	}
	return at, nil
}

// Open makes f, a field of an addressable struct, readable and settable
// whether exported or not.
func Open(f reflect.Value) reflect.Value {
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

// Set sets the field at path to v, which must be assignable to it (the
// field's type may be an interface the release does not export).
func Set(obj any, path string, v any) error {
	f, err := Field(obj, path)
	if err != nil {
		return err
	}
	val := reflect.ValueOf(v)
	if !val.Type().AssignableTo(f.Type()) {
		return fmt.Errorf("%T: %s is a %s, not assignable from %s", obj, path, f.Type(), val.Type())
	}
	f.Set(val)
	return nil
}

// Wrap replaces the value of type T at path with wrap of it (a counting
// wrapper around a dependency the constructor made itself).
func Wrap[T any](obj any, path string, wrap func(T) T) error {
	v, err := Field(obj, path)
	if err != nil {
		return err
	}
	if want := reflect.TypeFor[T](); v.Type() != want {
		return fmt.Errorf("%T: %s is a %s, not a %s", obj, path, v.Type(), want)
	}
	w := wrap(v.Interface().(T))
	v.Set(reflect.ValueOf(&w).Elem())
	return nil
}

var errorType = reflect.TypeFor[error]()

// Hook replaces the function at path (a func() or func() error, such as a
// sync runner's function) so that each call runs hook, which runs the
// original when it calls run. Call it before anything can call the function.
func Hook(obj any, path string, hook func(run func() error) error) error {
	v, err := Field(obj, path)
	if err != nil {
		return err
	}
	t := v.Type()
	if t.Kind() != reflect.Func || t.NumIn() != 0 || t.NumOut() > 1 || t.NumOut() == 1 && t.Out(0) != errorType {
		return fmt.Errorf("%T: %s is a %s, not a func() or func() error", obj, path, t)
	}
	if v.IsNil() {
		return fmt.Errorf("%T: %s is nil", obj, path)
	}
	orig := reflect.ValueOf(v.Interface())
	run := func() error {
		out := orig.Call(nil)
		if len(out) == 1 && !out[0].IsNil() {
			return out[0].Interface().(error)
		}
		return nil
	}
	v.Set(reflect.MakeFunc(t, func([]reflect.Value) []reflect.Value {
		err := hook(run)
		if t.NumOut() == 0 {
			return nil
		}
		if err == nil {
			return []reflect.Value{reflect.Zero(errorType)}
		}
		return []reflect.Value{reflect.ValueOf(&err).Elem()}
	}))
	return nil
}

// Fields finds the named fields of struct type t once, for a caller that
// reads them from many values (Open(v.FieldByIndex(f.Index))).
func Fields(t reflect.Type, names ...string) ([]reflect.StructField, error) {
	fs := make([]reflect.StructField, len(names))
	for i, name := range names {
		f, ok := t.FieldByName(name)
		if !ok {
			return nil, fmt.Errorf("%s has no field %s", t, name)
		}
		fs[i] = f
	}
	return fs, nil
}
