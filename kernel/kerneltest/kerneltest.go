// Package kerneltest is what the end-to-end tests that run kpsim binaries on
// a real kernel share (kernel/testbed's and upstream/e2e's): whether a kernel
// run can run here, when a run's step began, and the syncs of the scale
// scenario's kinds.
package kerneltest

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
)

// Bin is the value of env, which names the binaries under test (what they
// are), or the test skips and says why: env is unset, or this kernel cannot
// run kernel scenarios with needs (kernel.Needs{}: IPVS mode's).
func Bin(t testing.TB, env, what string, needs kernel.Needs) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		t.Skipf("set %s to %s (make test-kernel does, inside its VM)", env, what)
	}
	// Missing names root first: kernel runs create network namespaces.
	if missing := kernel.Detect().MissingFor(dataplane.BackendKernel, needs); len(missing) > 0 {
		t.Skipf("this kernel cannot run kernel scenarios: %s", strings.Join(missing, "; "))
	}
	return v
}

// StepStart is when the first step of kind began in f.
func StepStart(t testing.TB, f *record.File, kind string) time.Time {
	t.Helper()
	for _, s := range f.Steps {
		if s.Kind == kind {
			return s.Start
		}
	}
	require.Failf(t, "no step", "no %s step in the results of %s", kind, f.Proxier)
	return time.Time{}
}

// SyncKinds are the syncs the scale scenario (kernel/testbed/testdata/e2e-scale.yaml)
// asks about: the first proxier's first sync, its syncs after the
// EndpointSlice changes that wrote, its first periodic full sync, and the
// restarted proxier's first sync, with how long that waited for its
// handlers after the restart step.
type SyncKinds struct {
	First, Periodic, Restart record.Sync
	Changes                  []record.Sync
	HandlerWait              time.Duration
}

// Kinds finds f's syncs of each kind, each the first of its kind that
// finished without an error; a run without one fails the test.
func Kinds(t testing.TB, f *record.File) SyncKinds {
	t.Helper()
	var k SyncKinds
	var haveFirst, havePeriodic, haveRestart bool
	for _, s := range f.Syncs {
		switch {
		case s.Stopped || s.Error != "":
			// cut short or failed: not the figure of its kind
		case s.Proxier == 0 && s.Trigger == proxier.TriggerInitial && !haveFirst:
			k.First, haveFirst = s, true
		case s.Proxier == 0 && s.Trigger == proxier.TriggerPeriodic && !havePeriodic:
			k.Periodic, havePeriodic = s, true
		case s.Proxier == 0 && s.Trigger == proxier.TriggerChanges && s.Ops.Writes() > 0:
			k.Changes = append(k.Changes, s)
		case s.Proxier == 1 && s.Trigger == proxier.TriggerInitial && !haveRestart:
			k.Restart, haveRestart = s, true
		}
	}
	require.True(t, haveFirst && havePeriodic && haveRestart, "a first sync, a periodic full sync and a restart's first sync")
	require.NotEmpty(t, k.Changes, "a sync that applied the EndpointSlice changes")
	k.HandlerWait = k.Restart.Start.Sub(StepStart(t, f, "restart-proxier"))
	return k
}

// SlowestChange is the longest of the syncs after the changes.
func (k SyncKinds) SlowestChange() time.Duration {
	var d time.Duration
	for _, c := range k.Changes {
		d = max(d, Seconds(c.Seconds))
	}
	return d
}

// Seconds is a record's seconds as a duration.
func Seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
