package objects

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGarbageIsNotAnExport: a file that is not a kubectl export at all says
// what one is and how to make it, naming the file and the item, instead of
// "cannot unmarshal string into Go value of type objects.item".
func TestGarbageIsNotAnExport(t *testing.T) {
	const want = "in.yaml: not a kubectl export: want a List of Service and EndpointSlice objects (kubectl get services,endpointslices -A -o yaml)"
	for _, tc := range []struct{ name, in, want string }{
		{"a YAML string", "just some text\n", want + "; it is a string"},
		{"a JSON string", `"hello"`, want + "; it is a string"},
		{"a number", "42\n", want + "; it is a number"},
		{"a list", "- a\n- b\n", want + "; it is a list"},
		{"a mapping of nothing known", "foo: bar\n", want + "; it is a mapping with no kind"},
		{"items that are strings", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: a}\n  spec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}\n- oops\n",
			want + "; item 1 is a string"},
		{"an item that is a list", `{"kind":"List","items":[[1]]}`, want + "; item 0 is a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read("in.yaml", strings.NewReader(tc.in))
			require.EqualError(t, err, tc.want)
		})
	}
}
