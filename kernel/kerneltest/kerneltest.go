// Package kerneltest is what the end-to-end tests that run kpsim binaries on
// a real kernel share (kernel/testbed's and upstream/e2e's): whether a kernel
// run can run here, and when a run's step began.
package kerneltest

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel"
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
