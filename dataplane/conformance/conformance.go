// Package conformance is the one test suite every dataplane passes: the
// in-memory kernel always, the real kernel wherever it has the capability.
// It uses only the dataplane interfaces and asserts only what the Linux
// kernel itself guarantees (errnos, canonical entry forms, rule lines), never
// an implementation's formatting or ordering choices.
package conformance

import (
	"errors"
	"io/fs"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/internal/hosttools"
)

// Capabilities says what the dataplane under test can do. A part of the
// suite whose capability is missing is skipped, naming the capability and,
// when Reasons has one, why it is missing.
type Capabilities struct {
	IPVS     bool
	Dummy    bool // dummy links (kube-ipvs0) and binding addresses to them
	IPSet    []dataplane.SetType
	IPTables bool
	// IPVSMatch is iptables' ipvs match (xt_ipvs), which kube-proxy's
	// KUBE-IPVS-OUT-FILTER rules use.
	IPVSMatch bool
	Conntrack bool
	Sysctls   bool
	// Reasons maps a capability name ("ipvs", "dummy", "ipset:hash:ip",
	// "iptables", "ipvs-match", "conntrack", "sysctls") to why it is missing.
	Reasons map[string]string
	// Tools maps a capability name to the host tools the dataplane under
	// test runs for it (the real kernel's ipset and iptables-restore): a
	// part whose tool is not on PATH is skipped naming the tool, or fails
	// under hosttools.RequireEnv, whatever the kernel could do.
	Tools map[string][]string
}

// All is every capability, as the in-memory kernel has them.
func All() Capabilities {
	return Capabilities{
		IPVS: true, Dummy: true, IPTables: true, IPVSMatch: true, Conntrack: true, Sysctls: true,
		IPSet: []dataplane.SetType{
			dataplane.HashIP, dataplane.HashIPPort, dataplane.HashIPPortIP,
			dataplane.HashIPPortNet, dataplane.HashNet, dataplane.BitmapPort,
		},
	}
}

func (c Capabilities) hasSet(t dataplane.SetType) bool {
	for _, s := range c.IPSet {
		if s == t {
			return true
		}
	}
	return false
}

// need skips t unless ok and the capability's tools are on PATH, naming the
// capability or the tools.
func (c Capabilities) need(t *testing.T, name string, ok bool) {
	t.Helper()
	hosttools.Require(t, c.Tools[name]...)
	if !ok {
		t.Skipf("needs %s: %s", name, c.reason(name))
	}
}

// reason says why a capability is missing.
func (c Capabilities) reason(name string) string {
	if why := c.Reasons[name]; why != "" {
		return why
	}
	return "the dataplane under test does not have it"
}

// Run runs the suite. newDataplane returns a fresh, empty dataplane (a new
// network namespace, a new in-memory kernel) for each test.
func Run(t *testing.T, newDataplane func(t *testing.T) dataplane.Dataplane, have Capabilities) {
	t.Run("ipvs", func(t *testing.T) {
		have.need(t, "ipvs", have.IPVS)
		runIPVS(t, newDataplane)
	})
	t.Run("ipset", func(t *testing.T) { runIPSet(t, newDataplane, have) })
	t.Run("iptables", func(t *testing.T) {
		have.need(t, "iptables", have.IPTables)
		runIPTables(t, newDataplane, have)
	})
	t.Run("links", func(t *testing.T) {
		have.need(t, "dummy", have.Dummy)
		runLinks(t, newDataplane)
	})
	t.Run("sysctls", func(t *testing.T) {
		have.need(t, "sysctls", have.Sysctls)
		runSysctls(t, newDataplane)
	})
	t.Run("conntrack", func(t *testing.T) {
		have.need(t, "conntrack", have.Conntrack)
		runConntrack(t, newDataplane)
	})
}

// requireErrno asserts that err wraps errno.
func requireErrno(t *testing.T, err error, errno syscall.Errno, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	require.Truef(t, errors.Is(err, errno), "want %v (%d), got %v", errno.Error(), int(errno), err)
}

func requireNotExist(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	require.ErrorIs(t, err, fs.ErrNotExist, msgAndArgs...)
}

func requireExist(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	require.ErrorIs(t, err, fs.ErrExist, msgAndArgs...)
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// lines returns the non-comment lines of iptables-save output with runs of
// spaces collapsed, so that rule lines compare whatever the spacing.
func lines(b []byte) map[string]bool {
	out := make(map[string]bool)
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.Join(strings.Fields(l), " ")
		if l != "" && !strings.HasPrefix(l, "#") {
			out[l] = true
		}
	}
	return out
}
