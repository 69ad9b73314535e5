package netns_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/kernel/netns"
	"github.com/kpsim/kpsim/kernel/netns/netnstest"
)

// The clean test re-executes this test binary through RunIsolated; the
// child finds childEnv set and plays a crashed run instead of the tests.
const childEnv = "KPSIM_NETNS_TEST_CHILD"

// deadPID is a process id no process has (above Linux's pid_max).
const deadPID = 1 << 30

const childReady = "CHILD-READY"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(crashedRun())
	}
	os.Exit(m.Run())
}

// crashedRun leaves a namespace named for a run whose parent died too: it
// outlives both.
func crashedRun() int {
	if !netns.Isolated() {
		fmt.Fprintln(os.Stderr, "child:", netns.ErrNotIsolated)
		return 1
	}
	if _, err := netns.NewNamed(fmt.Sprintf("%s%d-pods", netns.Prefix, deadPID)); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	fmt.Println(childReady)
	return 0
}

// TestCleanRemovesStaleNamespaces leaves a namespace named for a dead run
// behind (as a run whose parent was killed would) and checks that Clean
// removes it, keeps nothing else, and leaves /run as it found it.
func TestCleanRemovesStaleNamespaces(t *testing.T) {
	netnstest.RequireHostTools(t)
	before := netnstest.HostSnapshot(t)
	t.Setenv(childEnv, "crash")
	var stdout, stderr bytes.Buffer
	code, err := netns.RunIsolated(nil, nil, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	require.Zero(t, code, stderr.String())
	require.Contains(t, stdout.String(), childReady)
	stale, err := netns.List(deadPID)
	require.NoError(t, err)
	require.Len(t, stale, 1)

	rep, err := netns.Clean(false)
	require.NoError(t, err)
	require.Contains(t, rep.Removed, stale[0].Name)
	require.Empty(t, rep.Killed)
	stale, err = netns.List(deadPID)
	require.NoError(t, err)
	require.Empty(t, stale)
	if !strings.Contains(before["ls -a "+netns.Dir], "No such file") {
		return
	}
	// Clean does not know who made /run/netns: this test made it, and removes it.
	netns.RemoveDirIfEmpty()
	require.Equal(t, before, netnstest.HostSnapshot(t))
}
