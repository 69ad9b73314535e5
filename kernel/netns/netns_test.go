package netns

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestFailedCreateKeepsStdin: a namespace that cannot be created leaves the
// process's file descriptors alone (a zero handle is descriptor 0).
func TestFailedCreateKeepsStdin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	// A name with a slash cannot be bound under /run/netns, so creation
	// fails before any namespace exists.
	_, err := newNamedNetns(Prefix + "no/such-dir")
	require.Error(t, err)
	_, err = unix.FcntlInt(0, unix.F_GETFD, 0)
	require.NoError(t, err, "descriptor 0 was closed")
}

func TestParseNetnsName(t *testing.T) {
	tests := []struct {
		name string
		pid  int
		ok   bool
	}{
		{"kpsim-1234-client", 1234, true},
		{"kpsim-1234-pods", 1234, true},
		{"kpsim-1234-", 0, false},
		{"kpsim-x-client", 0, false},
		{"kpsim-0-client", 0, false},
		{"cni-1234-client", 0, false},
		{"kpsim-1234", 0, false},
	}
	for _, tc := range tests {
		pid, ok := parseNetnsName(tc.name)
		require.Equal(t, tc.ok, ok, tc.name)
		require.Equal(t, tc.pid, pid, tc.name)
	}
}

func TestKernelWorkRefusedOutsideIsolation(t *testing.T) {
	require.False(t, Isolated())
	_, err := New("client")
	require.ErrorIs(t, err, ErrNotIsolated)
	require.ErrorIs(t, LoopbackUp(), ErrNotIsolated)
	// A marker naming this namespace (a copied environment) does not count.
	own, err := netnsInode()
	require.NoError(t, err)
	t.Setenv(isolatedEnv, fmt.Sprint(own))
	require.False(t, Isolated())
}
