package kernel

import (
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
	_, err := newNamedNetns(NetnsPrefix + "no/such-dir")
	require.Error(t, err)
	_, err = unix.FcntlInt(0, unix.F_GETFD, 0)
	require.NoError(t, err, "descriptor 0 was closed")
}
