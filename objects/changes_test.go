package objects

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// callLog is a Handler that writes down every call.
type callLog []string

func (c *callLog) add(f string, objs ...metav1.Object) {
	s := f
	for _, o := range objs {
		if o == nil {
			s += " -"
		} else {
			s += " " + o.GetName()
		}
	}
	*c = append(*c, s)
}

func (c *callLog) OnServiceAdd(s *v1.Service)                      { c.add("OnServiceAdd", s) }
func (c *callLog) OnServiceUpdate(o, s *v1.Service)                { c.add("OnServiceUpdate", o, s) }
func (c *callLog) OnServiceDelete(s *v1.Service)                   { c.add("OnServiceDelete", s) }
func (c *callLog) OnEndpointSliceAdd(e *discoveryv1.EndpointSlice) { c.add("OnEndpointSliceAdd", e) }
func (c *callLog) OnEndpointSliceUpdate(o, e *discoveryv1.EndpointSlice) {
	c.add("OnEndpointSliceUpdate", o, e)
}
func (c *callLog) OnEndpointSliceDelete(e *discoveryv1.EndpointSlice) {
	c.add("OnEndpointSliceDelete", e)
}
func (c *callLog) OnNodeAdd(n *v1.Node)       { c.add("OnNodeAdd", n) }
func (c *callLog) OnNodeUpdate(o, n *v1.Node) { c.add("OnNodeUpdate", o, n) }
func (c *callLog) OnNodeDelete(n *v1.Node)    { c.add("OnNodeDelete", n) }

func TestEventForAndDeliver(t *testing.T) {
	svc := func(n string) *v1.Service { return &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: n}} }
	eps := func(n string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: n}}
	}
	node := func(n string) *v1.Node { return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}} }
	for _, tc := range []struct {
		op       Op
		old, new any
		want     string // the call, or "" when EventFor refuses
	}{
		{Add, nil, svc("a"), "OnServiceAdd a"},
		{Update, svc("a"), svc("b"), "OnServiceUpdate a b"},
		{Delete, svc("a"), nil, "OnServiceDelete a"},
		{Add, nil, eps("e"), "OnEndpointSliceAdd e"},
		{Update, eps("e"), eps("f"), "OnEndpointSliceUpdate e f"},
		{Delete, eps("e"), nil, "OnEndpointSliceDelete e"},
		{Add, nil, node("n"), "OnNodeAdd n"},
		{Update, node("n"), node("m"), "OnNodeUpdate n m"},
		{Delete, node("n"), nil, "OnNodeDelete n"},
		{Update, nil, svc("a"), ""},        // an update needs the old object
		{Delete, nil, nil, ""},             // nothing to delete
		{Add, nil, &v1.Pod{}, ""},          // not a kind kube-proxy's proxier handles
		{Add, nil, (*v1.Service)(nil), ""}, // a typed nil is no object either
	} {
		t.Run(fmt.Sprintf("%s %T", tc.op, tc.new), func(t *testing.T) {
			e, ok := EventFor(tc.op, tc.old, tc.new)
			require.Equal(t, tc.want != "", ok)
			if !ok {
				return
			}
			var got callLog
			e.Deliver(&got)
			require.Equal(t, callLog{tc.want}, got)
		})
	}
}
