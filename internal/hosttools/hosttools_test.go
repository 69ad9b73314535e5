package hosttools

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// childEnv makes TestRequire, in this test binary re-executed by itself,
// call Require for real: Require's skip and failure end the test that calls
// it, so they are seen from outside, in the child's verdict and output.
const childEnv = "KPSIM_HOSTTOOLS_TEST_CHILD"

func TestRequire(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		Require(t, "kpsim-present", "kpsim-absent", "kpsim-absent", "kpsim-gone")
		t.Log("REACHED")
		return
	}
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "kpsim-present"), []byte("#!/bin/sh\n"), 0o755))
	// Not executable: LookPath does not take it, and neither would exec.
	require.NoError(t, os.WriteFile(filepath.Join(bin, "kpsim-gone"), []byte("#!/bin/sh\n"), 0o644))

	for _, tc := range []struct {
		name, env string
		fail      bool
		want      []string
	}{
		{"unset skips", "", false, []string{"--- SKIP: TestRequire", "needs kpsim-absent, kpsim-gone: not on PATH"}},
		{"0 skips", "0", false, []string{"--- SKIP: TestRequire", "needs kpsim-absent, kpsim-gone: not on PATH"}},
		{"1 fails", "1", true, []string{"--- FAIL: TestRequire", "needs kpsim-absent, kpsim-gone: not on PATH (KPSIM_REQUIRE_HOST_TOOLS=1: a missing host tool fails the test)"}},
		{"true fails", "true", true, []string{"--- FAIL: TestRequire", "KPSIM_REQUIRE_HOST_TOOLS=true"}},
		{"a word that is not a boolean fails", "yes", true, []string{"--- FAIL: TestRequire", `KPSIM_REQUIRE_HOST_TOOLS="yes": want 1 or 0`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestRequire$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"=1", "PATH="+bin, RequireEnv+"="+tc.env)
			out, err := cmd.CombinedOutput()
			if tc.fail {
				require.Error(t, err, "%s", out)
			} else {
				require.NoError(t, err, "%s", out)
			}
			for _, w := range tc.want {
				require.Contains(t, string(out), w)
			}
			require.NotContains(t, string(out), "REACHED", "the test went on past a missing tool")
		})
	}

	t.Run("every tool there", func(t *testing.T) {
		t.Setenv("PATH", bin)
		t.Setenv(RequireEnv, "1")
		Require(t, "kpsim-present")
		require.False(t, t.Skipped())
	})
}
