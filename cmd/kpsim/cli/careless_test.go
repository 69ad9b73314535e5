package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLongSetValueErrorIsShort: a --set of thousands of service names with
// one missing says which, in a few lines: each error repeated the whole
// value, megabytes of it.
func TestLongSetValueErrorIsShort(t *testing.T) {
	names := make([]string, 4000)
	for i := range names {
		names[i] = fmt.Sprintf("ns-%03d/svc-%05d", i%3, i)
	}
	names[2345] = "ns-001/missing-svc"
	set := "probes.services=[" + strings.Join(names, ", ") + "]"
	for _, args := range [][]string{
		{"run", "-s", "smoke", "--set", "cluster.services=4000", "--set", set, "-o", t.TempDir() + "/r.json"},
		{"validate", "smoke", "--set", "cluster.services=4000", "--set", set},
	} {
		t.Run(args[0], func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 2, run(args, &stdout, &stderr))
			out := stdout.String() + stderr.String()
			require.Less(t, len(out), 10_000, "%.500s", out)
			require.Contains(t, out, "probes.services[2345]: no service ns-001/missing-svc in the cluster")
		})
	}
}
