// Package netnstest runs tests of kernel work in network namespaces of their
// own, and checks that the host's namespace is left as it was found.
package netnstest

import (
	"flag"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/kpsim/kpsim/internal/hosttools"
	"github.com/kpsim/kpsim/kernel/netns"
)

// Private makes the calling test run in a fresh network namespace of its
// own. In the test binary started by `go test` it re-executes the binary
// through netns.RunIsolated for this one test, streams the child's output
// (its subtests' RUN/PASS/SKIP lines included) and fails if the child fails,
// then returns false: the caller returns. In the child, which it recognises
// by being isolated and asked to run exactly this test, it brings lo up and
// returns true: the caller does the work. Not root: the test is skipped.
// A benchmark runs the same way, with the parent's -test.benchtime.
//
// Per test rather than in TestMain, so that tests that must see the host's
// namespace (the host-untouched tests) are not moved too. A subtest may call
// it (its parents must not): parallel subtests then run in namespaces of
// their own at the same time.
func Private(t testing.TB) bool {
	t.Helper()
	var parts []string
	for _, p := range strings.Split(t.Name(), "/") {
		parts = append(parts, "^"+regexp.QuoteMeta(p)+"$")
	}
	only := strings.Join(parts, "/")
	selector := "test.run"
	_, bench := t.(*testing.B)
	if bench {
		selector = "test.bench"
	}
	if netns.Isolated() && flag.Lookup(selector).Value.String() == only {
		lo, err := netlink.LinkByName("lo")
		require.NoError(t, err)
		require.NoError(t, netlink.LinkSetUp(lo))
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (to create a private network namespace)")
	}
	// go test keys a package's cached verdict by the variables and files its
	// test process read, not the child's: read here what the child's tool
	// checks depend on, so that a change of PATH or of hosttools.RequireEnv
	// runs the tests again rather than replaying a verdict reached without
	// them. (A tool installed into an unchanged PATH is not seen: go clean
	// -testcache, or -count=1.)
	_, _ = os.Getenv("PATH"), os.Getenv(hosttools.RequireEnv)
	args := []string{"-test.run=" + only, "-test.v", "-test.count=1"}
	if bench {
		args = []string{"-test.run=^$", "-test.bench=" + only, "-test.benchtime=" + flag.Lookup("test.benchtime").Value.String(), "-test.count=1"}
	}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	code, err := netns.RunIsolated(args, nil, os.Stdout, os.Stderr)
	require.NoError(t, err)
	require.Zero(t, code, "%s in a private network namespace exited %d", t.Name(), code)
	return false
}

// HostSnapshot is the state of the host's network namespace that a kernel
// run must leave as it found it.
func HostSnapshot(t *testing.T) map[string]string {
	t.Helper()
	snap := map[string]string{}
	for _, c := range snapshotCmds {
		out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
		s := string(out)
		if err != nil {
			s += "error: " + err.Error()
		}
		// iptables-save stamps its output with the time.
		var keep []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(l, "#") {
				keep = append(keep, l)
			}
		}
		snap[strings.Join(c, " ")] = strings.Join(keep, "\n")
	}
	return snap
}

// snapshotCmds are what HostSnapshot runs: a tool missing here would leave
// its part of the host unchecked (the same error before and after).
var snapshotCmds = [][]string{
	{"ip", "-d", "link"}, {"ip", "addr"}, {"ip", "route"}, {"ip", "-6", "route"},
	{"iptables-legacy-save"}, {"ip6tables-legacy-save"}, {"iptables-nft-save"}, {"ip6tables-nft-save"},
	{"ipset", "list"}, {"ls", "-a", netns.Dir},
}

// RequireHostTools skips the test unless it runs as root with every tool
// HostSnapshot reads the host with. A missing tool fails it instead under
// hosttools.RequireEnv; not being root skips it all the same (see
// hosttools).
func RequireHostTools(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	var tools []string
	for _, c := range snapshotCmds {
		tools = append(tools, c[0])
	}
	hosttools.Require(t, tools...)
}
