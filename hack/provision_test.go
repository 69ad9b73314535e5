// Package hack holds scripts for machines kpsim cannot test on directly
// (a Vagrant VM); its tests check what can be checked here.
package hack

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const provision = "vagrant-provision.sh"

func TestProvisionScriptParses(t *testing.T) {
	out, err := exec.Command("bash", "-n", provision).CombinedOutput()
	require.NoError(t, err, "bash -n %s: %s", provision, out)
}

// shellcheck returns the shellcheck binary, installing Debian's package
// when running as root and it is missing.
func shellcheck(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("shellcheck"); err == nil {
		return p
	}
	if os.Geteuid() != 0 {
		t.Skip("shellcheck is not installed and installing it needs root (apt-get install shellcheck)")
	}
	if out, err := exec.Command("apt-get", "install", "-y", "-qq", "--no-install-recommends", "shellcheck").CombinedOutput(); err != nil {
		if out2, err2 := exec.Command("apt-get", "update", "-qq").CombinedOutput(); err2 != nil {
			t.Skipf("shellcheck unavailable: apt-get install: %v: %s; apt-get update: %v: %s", err, out, err2, out2)
		}
		if out, err := exec.Command("apt-get", "install", "-y", "-qq", "--no-install-recommends", "shellcheck").CombinedOutput(); err != nil {
			t.Skipf("shellcheck unavailable: apt-get install: %v: %s", err, out)
		}
	}
	p, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Skipf("shellcheck unavailable after installing it: %v", err)
	}
	return p
}

func TestProvisionScriptShellcheck(t *testing.T) {
	sc := shellcheck(t)
	out, err := exec.Command(sc, "-s", "bash", "-S", "style", provision).CombinedOutput()
	require.NoError(t, err, "shellcheck %s:\n%s", provision, out)
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
