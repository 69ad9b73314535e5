package kernel

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

// inPrivateNetNS makes the calling test run in a fresh network namespace of
// its own. In the test binary started by `go test` it re-executes the binary
// through RunIsolated for this one test, streams the child's output (its
// subtests' RUN/PASS/SKIP lines included) and fails if the child fails, then
// returns false: the caller returns. In the child, which it recognises by
// being isolated and asked to run exactly this test, it brings lo up and
// returns true: the caller does the work. Not root: the test is skipped.
//
// Per test rather than in TestMain, so that tests of this package that must
// see the host's namespace (the host-untouched test) are not moved too. A
// subtest may call it (its parents must not): parallel subtests then run in
// namespaces of their own at the same time.
func inPrivateNetNS(t *testing.T) bool {
	t.Helper()
	var parts []string
	for _, p := range strings.Split(t.Name(), "/") {
		parts = append(parts, "^"+regexp.QuoteMeta(p)+"$")
	}
	only := strings.Join(parts, "/")
	if Isolated() && flag.Lookup("test.run").Value.String() == only {
		lo, err := netlink.LinkByName("lo")
		require.NoError(t, err)
		require.NoError(t, netlink.LinkSetUp(lo))
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (to create a private network namespace)")
	}
	args := []string{"-test.run=" + only, "-test.v", "-test.count=1"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	code, err := RunIsolated(args, nil, os.Stdout, os.Stderr)
	require.NoError(t, err)
	require.Zero(t, code, "%s in a private network namespace exited %d", t.Name(), code)
	return false
}
