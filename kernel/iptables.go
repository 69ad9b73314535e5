package kernel

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/kpsim/kpsim/dataplane"
)

// iptables is dataplane.IPTables over iptables-restore / iptables-save of
// one variant (legacy or nft), the way kube-proxy runs them.
type iptables struct {
	mode string // "legacy" or "nft"
}

var _ dataplane.IPTables = (*iptables)(nil)

// tool names the variant's binary: iptables-legacy-restore, ip6tables-nft-save, ...
func (t *iptables) tool(f dataplane.Family, verb string) string {
	base := "iptables"
	if f == dataplane.IPv6 {
		base = "ip6tables"
	}
	return base + "-" + t.mode + "-" + verb
}

func (t *iptables) Restore(f dataplane.Family, payload []byte) error {
	name := t.tool(f, "restore")
	if _, err := run(payload, name, "-w", "--noflush", "--counters"); err != nil {
		return fmt.Errorf("%s --noflush --counters (%d bytes): %w", name, len(payload), err)
	}
	return nil
}

func (t *iptables) Save(f dataplane.Family, table string) ([]byte, error) {
	name := t.tool(f, "save")
	out, err := run(nil, name, "-t", table)
	if err != nil {
		return nil, fmt.Errorf("%s -t %s: %w", name, table, err)
	}
	return out, nil
}

// Command runs iptables -w -t table args: its message says a chain or a
// rule is missing (toolError: ENOENT) or a chain exists (EEXIST).
func (t *iptables) Command(f dataplane.Family, table string, args ...string) error {
	name := strings.TrimSuffix(t.tool(f, ""), "-")
	if _, err := run(nil, name, append([]string{"-w", "-t", table}, args...)...); err != nil {
		return fmt.Errorf("%s -t %s %s: %w", name, table, strings.Join(args, " "), err)
	}
	return nil
}

// kubeletChains are the chains kubelet (1.17+) creates in the mangle table;
// their presence tells which variant the node uses.
var kubeletChains = regexp.MustCompile(`(?m)^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY)`)

// DetectIPTablesMode picks legacy or nft as kube-proxy's image does (its
// iptables-wrapper, kubernetes-sigs/iptables-wrappers): nft if the nft
// variant's mangle table holds kubelet's hint chains, else legacy if the
// legacy variant's tables do (read whole: asking legacy for "-t mangle"
// would create that table), else nft. A variant that is not installed is
// never chosen when the other one is.
func DetectIPTablesMode() string {
	_, nftErr := exec.LookPath("iptables-nft-save")
	_, legacyErr := exec.LookPath("iptables-legacy-save")
	switch {
	case nftErr != nil && legacyErr == nil:
		return "legacy"
	case legacyErr != nil:
		return "nft"
	}
	saves := []struct {
		mode string
		args []string
	}{
		{"nft", []string{"iptables-nft-save", "-t", "mangle"}},
		{"nft", []string{"ip6tables-nft-save", "-t", "mangle"}},
		{"legacy", []string{"iptables-legacy-save"}},
		{"legacy", []string{"ip6tables-legacy-save"}},
	}
	for _, s := range saves {
		if kubeletChains.Match(quietOutput(s.args...)) {
			return s.mode
		}
	}
	return "nft"
}

// quietOutput runs a probe whose failure only means "nothing found".
func quietOutput(args ...string) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdout = &out
	_ = cmd.Run() // a missing table or binary is an empty answer
	return out.Bytes()
}
