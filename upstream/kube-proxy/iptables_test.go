package kubeproxy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIPTablesVariant: while any generation runs, the iptables commands
// kube-proxy runs by name are the detected variant's, whatever the plain
// names link to; the last generation to end restores PATH. On a PATH of
// stand-ins (only nft's variant installed: detection picks it without
// running anything) that say which they are.
func TestIPTablesVariant(t *testing.T) {
	bin := t.TempDir()
	for _, base := range []string{"iptables", "ip6tables"} {
		for _, verb := range []string{"", "-save", "-restore"} {
			writeScript(t, filepath.Join(bin, base+verb), "legacy")
			writeScript(t, filepath.Join(bin, base+"-nft"+verb), "nft")
		}
	}
	t.Setenv("PATH", bin)
	which := func(name string) string {
		t.Helper()
		out, err := exec.Command(name).Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}
	require.Equal(t, "legacy", which("iptables-restore"))

	first, err := iptablesVariant()
	require.NoError(t, err)
	second, err := iptablesVariant() // a restart's generation, before the old one returned
	require.NoError(t, err)
	dir := iptablesLinks.dir
	require.True(t, pathHas(dir))
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		require.Equal(t, "nft", which(name), name)
	}
	first()
	first() // once
	require.Equal(t, "nft", which("iptables-restore"), "the second generation still runs")
	second()
	require.Equal(t, bin, os.Getenv("PATH"))
	require.NoDirExists(t, dir)
	require.Equal(t, "legacy", which("iptables-restore"))
}

func writeScript(t *testing.T, path, says string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\necho "+says+"\n"), 0o755))
}

// pathHas reports whether dir is an entry of PATH.
func pathHas(dir string) bool {
	for _, d := range strings.Split(os.Getenv("PATH"), string(os.PathListSeparator)) {
		if d == dir {
			return true
		}
	}
	return false
}
