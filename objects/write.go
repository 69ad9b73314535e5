package objects

import (
	"encoding/json"
	"fmt"
	"io"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// list is a v1 List as kubectl prints it.
type list struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Items      []any           `json:"items"`
	Metadata   metav1.ListMeta `json:"metadata"`
}

// Write writes the set as a v1 List in kubectl's JSON shape: Nodes, then
// Services, then EndpointSlices. Ignored objects are not part of a Set (only
// their names are), so they are not written.
func Write(w io.Writer, s *Set) error {
	l := list{APIVersion: "v1", Kind: "List", Items: make([]any, 0, len(s.Nodes)+len(s.Services)+len(s.EndpointSlices))}
	for _, n := range s.Nodes {
		c := *n
		c.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}
		l.Items = append(l.Items, &c)
	}
	for _, svc := range s.Services {
		c := *svc
		c.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
		l.Items = append(l.Items, &c)
	}
	for _, eps := range s.EndpointSlices {
		c := *eps
		c.TypeMeta = metav1.TypeMeta{APIVersion: discoveryv1.SchemeGroupVersion.String(), Kind: "EndpointSlice"}
		l.Items = append(l.Items, &c)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "    ")
	if err := enc.Encode(l); err != nil {
		return fmt.Errorf("write objects: %w", err)
	}
	return nil
}
