// Package hack holds scripts for machines kpsim cannot test on directly
// (a Vagrant VM); its tests check what can be checked here.
package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/internal/hosttools"
)

const provision = "vagrant-provision.sh"

// scripts are hack's shell scripts: the Vagrant provisioning and the
// comparisons make runs.
func scripts(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob("*.sh")
	require.NoError(t, err)
	require.Contains(t, paths, provision)
	return paths
}

func TestScriptsParse(t *testing.T) {
	for _, p := range scripts(t) {
		out, err := exec.Command("bash", "-n", p).CombinedOutput()
		require.NoError(t, err, "bash -n %s: %s", p, out)
	}
}

func TestScriptsShellcheck(t *testing.T) {
	hosttools.Require(t, "shellcheck")
	for _, p := range scripts(t) {
		out, err := exec.Command("shellcheck", "-s", "bash", "-S", "style", p).CombinedOutput()
		require.NoError(t, err, "shellcheck %s:\n%s", p, out)
	}
}

// TestCompareReleasesRefusesBadUsage: the release comparison names what is
// missing before it builds or runs anything.
func TestCompareReleasesRefusesBadUsage(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{nil, "set BASE_RELEASE to a kube-proxy release"},
		{[]string{"BASE_RELEASE=v1.30.3", "HEAD_RELEASE=1.37"}, "set HEAD_RELEASE to a kube-proxy release, e.g. HEAD_RELEASE=v1.37.1 (got '1.37')"},
		{[]string{"BASE_RELEASE=v1.30.3", "HEAD_RELEASE=v1.37.1", "RUNS=0"}, "RUNS=0: want a positive number"},
	} {
		cmd := exec.Command("bash", "compare-releases.sh")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, tt.env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s", out)
		require.Equal(t, 2, ee.ExitCode(), "%s", out)
		require.Contains(t, string(out), tt.want)
	}
}

// The Vagrantfile provisions with the script, and the script ends with
// the one readiness verdict, `kpsim doctor`, after loading IPVS and building
// kpsim: the VM is ready exactly when doctor says so.
func TestVagrantfileUsesProvisionScript(t *testing.T) {
	vf, err := os.ReadFile("../Vagrantfile")
	require.NoError(t, err)
	require.Regexp(t, `config\.vm\.box = "(debian/bookworm64|bento/debian-12)"`, string(vf))
	require.Contains(t, string(vf), `path: "hack/`+provision+`"`)

	script, err := os.ReadFile(provision)
	require.NoError(t, err)
	var lines []string
	for _, l := range strings.Split(string(script), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	require.Equal(t, "kpsim doctor", lines[len(lines)-1], "doctor must be the provisioning's last word")
	s := string(script)
	for _, want := range []string{"ipvsadm", "ipset", "iptables", "conntrack", "ip_vs", "ip_vs_rr", "dummy", "go build"} {
		require.Contains(t, s, want)
	}
	require.Regexp(t, regexp.MustCompile(`(?m)^set -euo pipefail$`), s)
}

// TestVagrantExcludesWhatBuildsWrite: the Vagrantfile's rsync excludes are
// exactly .git/ and the directories the Makefile and the VM runner write
// into the tree (read from those files, so renaming one fails here), and
// nothing stale.
func TestVagrantExcludesWhatBuildsWrite(t *testing.T) {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return string(b)
	}
	dirOf := func(text, pattern string) string {
		m := regexp.MustCompile(pattern).FindStringSubmatch(text)
		require.NotNil(t, m, "no match for %s", pattern)
		return strings.TrimSuffix(m[1], "/") + "/"
	}
	makefile, runner := read("../Makefile"), read("../kernel/vm/run.sh")
	want := []string{
		".git/",
		dirOf(makefile, `(?m)^KPSIM\s*:=\s*(\S+)/kpsim$`),                 // make build
		dirOf(makefile, `(?m)^OUT\s*\?=\s*(\S+)$`),                        // make scenario, make compare
		dirOf(runner, `(?m)^CACHE=\$\{KPSIM_VM_CACHE:-\$REPO/([^}]+)\}$`), // make test-kernel
	}
	m := regexp.MustCompile(`rsync__exclude:\s*\[([^\]]*)\]`).FindStringSubmatch(read("../Vagrantfile"))
	require.NotNil(t, m, "the Vagrantfile has no rsync__exclude list")
	var got []string
	for _, q := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(m[1], -1) {
		got = append(got, q[1])
	}
	require.ElementsMatch(t, want, got)
}

// vagrantValidate runs `vagrant validate` on the Vagrantfile in dir, offline
// and leaving nothing behind: its home, its machine state (.vagrant/, which
// it would otherwise write next to the Vagrantfile) and no version check.
// Provider blocks are not validated (--ignore-provider): validating them
// needs the provider itself (VirtualBox, or the vagrant-libvirt plugin) on
// the machine, and without one validate stops at "No usable default
// provider" before reading the Vagrantfile.
func vagrantValidate(t *testing.T, dir string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command("vagrant", "validate", "--ignore-provider", "--no-tty", "--no-color")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+home, "VAGRANT_HOME="+filepath.Join(home, ".vagrant.d"),
		"VAGRANT_DOTFILE_PATH="+filepath.Join(home, "machines"), "VAGRANT_CHECKPOINT_DISABLE=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestVagrantValidate: Vagrant itself accepts the Vagrantfile, the path of
// its provisioning script included. The same file in a folder without the
// script is refused, naming it: validate reads what the Vagrantfile points
// at, so passing here means something.
func TestVagrantValidate(t *testing.T) {
	// The synced folder is rsync's: validate fails without rsync on PATH.
	hosttools.Require(t, "vagrant", "rsync")
	out, err := vagrantValidate(t, "..")
	require.NoError(t, err, "vagrant validate:\n%s", out)
	require.Contains(t, out, "Vagrantfile validated successfully")

	bare := t.TempDir()
	vf, err := os.ReadFile("../Vagrantfile")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(bare, "Vagrantfile"), vf, 0o644))
	out, err = vagrantValidate(t, bare)
	require.Error(t, err, "vagrant validate of a Vagrantfile without its script:\n%s", out)
	require.Contains(t, out, filepath.Join(bare, "hack", provision))
}
