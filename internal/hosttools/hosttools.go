// Package hosttools is how a test that runs a host tool (ipset, an iptables
// variant's save and restore, ip, shellcheck, vagrant) asks for it. Where a
// tool is not on PATH the test is skipped and names it, so that `make test`
// passes on a machine with only Go, gcc, git and make, as the IPVS parts of
// the kernel suite do on a kernel without IPVS. With KPSIM_REQUIRE_HOST_TOOLS=1
// the same test fails instead: CI installs every tool, and there a skip would
// hide a test it means to run.
//
// Only tools: a test that needs root, or a kernel feature (IPVS, dummy
// links), still skips under the variable. Neither can be installed, and CI
// runs as root on a kernel without IPVS (make test-kernel covers that).
package hosttools

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// RequireEnv is the environment variable that turns a missing tool from a
// skip into a failure.
const RequireEnv = "KPSIM_REQUIRE_HOST_TOOLS"

// Require skips t, naming every tool of tools not on PATH, or fails it when
// RequireEnv is set.
func Require(t testing.TB, tools ...string) {
	t.Helper()
	var missing []string
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil && !slices.Contains(missing, tool) {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := "needs " + strings.Join(missing, ", ") + ": not on PATH"
	if required(t) {
		t.Fatalf("%s (%s=%s: a missing host tool fails the test)", msg, RequireEnv, os.Getenv(RequireEnv))
	}
	t.Skip(msg)
}

// required reads RequireEnv: unset or empty is false, any other value must
// parse as a boolean, so that a misspelt "yes" does not quietly mean no.
func required(t testing.TB) bool {
	t.Helper()
	v := os.Getenv(RequireEnv)
	if v == "" {
		return false
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		t.Fatalf("%s=%q: want 1 or 0", RequireEnv, v)
	}
	return on
}
