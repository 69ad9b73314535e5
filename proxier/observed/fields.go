package observed

import (
	"fmt"
	"reflect"
	"strings"
	"unsafe"
)

// A release's proxier is built by its exported constructor, which wires
// some dependencies itself and keeps them, and its sync function, in
// unexported fields. The two below reach those fields by name, as
// upstream's own tests set them from inside the package; a release whose
// fields differ fails here, saying which, rather than running unobserved.

// field returns the settable field at path (dotted names, through
// pointers) of obj, a pointer to a struct.
func field(obj any, path string) (reflect.Value, error) {
	v := reflect.ValueOf(obj)
	for _, name := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, fmt.Errorf("%T: %s: nil on the way", obj, path)
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, fmt.Errorf("%T: %s: %s is not a struct", obj, path, v.Type())
		}
		f := v.FieldByName(name)
		if !f.IsValid() {
			return reflect.Value{}, fmt.Errorf("%T: %s: %s has no field %s (not a release this harness knows)", obj, path, v.Type(), name)
		}
		v = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	}
	return v, nil
}

var errorType = reflect.TypeFor[error]()

// HookFunc replaces the function at path (a func() or func() error, such
// as a sync runner's function) so that each call runs hook, which runs the
// original when it calls run. Call it before anything can call the function.
func HookFunc(obj any, path string, hook func(run func() error) error) error {
	v, err := field(obj, path)
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

// WrapField replaces the value of type T at path with wrap of it (a
// counting wrapper around a dependency the constructor made itself).
func WrapField[T any](obj any, path string, wrap func(T) T) error {
	v, err := field(obj, path)
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

// Field returns the value at path (dotted names, through pointers) of obj,
// a pointer to a struct, readable whether exported or not.
func Field(obj any, path string) (reflect.Value, error) { return field(obj, path) }

// SetField sets the field at path to v, which must be assignable to it
// (the field's type may be an interface the release does not export).
func SetField(obj any, path string, v any) error {
	f, err := field(obj, path)
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
