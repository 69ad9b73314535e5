package scenarios

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryStepKind: each Step field's type labels and checks itself and,
// but for repeat, runs itself; so a new step kind is one field and one type.
func TestEveryStepKind(t *testing.T) {
	st := reflect.TypeOf(Step{})
	for i := 0; i < st.NumField(); i++ {
		f := st.Field(i)
		v := reflect.New(f.Type.Elem()).Interface()
		_, isKind := v.(stepKind)
		require.True(t, isKind, "Step.%s: its type must be a stepKind", f.Name)
		_, acts := v.(action)
		require.Equal(t, f.Name != "Repeat", acts, "Step.%s: every kind but repeat runs", f.Name)

		// A step with just this field set names itself by its YAML key.
		var s Step
		reflect.ValueOf(&s).Elem().Field(i).Set(reflect.New(f.Type.Elem()))
		require.Equal(t, f.Tag.Get("yaml"), s.name())
		require.NotEmpty(t, s.String())
	}
}
