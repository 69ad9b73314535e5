package private

import (
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// runner stands in for a release's sync runner and its dependencies.
type runner struct {
	fn      func()
	fnErr   func() error
	handle  interface{ Name() string }
	counter int
}

type named string

func (n named) Name() string { return string(n) }

type holder struct{ r *runner }

func TestHook(t *testing.T) {
	var log []string
	h := &holder{r: &runner{}}
	h.r.fn = func() { log = append(log, "sync") }
	h.r.fnErr = func() error { log = append(log, "sync"); return errors.New("retry") }
	hook := func(run func() error) error {
		log = append(log, "before")
		err := run()
		log = append(log, "after")
		return err
	}
	require.NoError(t, Hook(h, "r.fn", hook))
	require.NoError(t, Hook(h, "r.fnErr", hook))
	h.r.fn()
	require.Equal(t, []string{"before", "sync", "after"}, log)
	require.EqualError(t, h.r.fnErr(), "retry", "the release's error reaches its runner")

	for _, tc := range []struct{ path, err string }{
		{"r.nope", "has no field nope (not a release this harness knows)"},
		{"r.counter", "r.counter is a int, not a func() or func() error"},
		{"r.fn.x", "r.fn.x: func() is not a struct"},
	} {
		require.ErrorContains(t, Hook(h, tc.path, hook), tc.err)
	}
}

func TestWrap(t *testing.T) {
	h := &holder{r: &runner{handle: named("netlink")}}
	require.NoError(t, Wrap(h, "r.handle", func(n interface{ Name() string }) interface{ Name() string } {
		return named("counted " + n.Name())
	}))
	require.Equal(t, "counted netlink", h.r.handle.Name())
	require.ErrorContains(t, Wrap(h, "r.counter", func(s string) string { return s }), "r.counter is a int, not a string")
}

func TestSetAndField(t *testing.T) {
	h := &holder{r: &runner{}}
	require.NoError(t, Set(h, "r.handle", named("conntrack")))
	v, err := Field(h, "r.handle")
	require.NoError(t, err)
	require.Equal(t, "conntrack", v.Interface().(named).Name())
	require.ErrorContains(t, Set(h, "r.counter", "x"), "r.counter is a int, not assignable from string")
	require.ErrorContains(t, Set(&holder{}, "r.counter", 1), "nil on the way")
	_, err = Field(nil, "r")
	require.ErrorContains(t, err, "nil on the way")
}

func TestTypeAt(t *testing.T) {
	at, err := TypeAt(reflect.TypeFor[holder](), "r.fnErr")
	require.NoError(t, err)
	require.Equal(t, reflect.TypeFor[func() error](), at)
	_, err = TypeAt(reflect.TypeFor[holder](), "r.nope")
	require.ErrorContains(t, err, "has no field nope")
	_, err = TypeAt(reflect.TypeFor[holder](), "r.counter.x")
	require.ErrorContains(t, err, "int is not a struct")
}
