package kubeproxy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/kpsim/kpsim/kernel"
)

// kube-proxy runs its iptables commands by name (iptables, iptables-save,
// iptables-restore and their ip6tables twins) and takes whichever variant,
// legacy or nft, the node's PATH resolves them to; its image points them
// with its iptables-wrapper. The kernel backend reads (and kpsim's proxier
// writes) the variant kernel.DetectIPTablesMode picks, with the variant's
// own commands (iptables-nft-save). Where plain iptables is the other
// variant (the VM's initramfs links it to legacy, as Debian's alternatives
// may), kube-proxy's rules would land in tables kpsim never reads: its
// state dump would miss them and a parity diff would show every rule as
// kpsim's alone. iptablesVariant points the plain names at the detected
// variant, as the image's wrapper does: links in a folder put first on
// PATH, while a generation runs.
//
// PATH is the process's, so the links are shared: every generation holds
// them (a restart's new generation may start before the old one has
// returned), and the last to let go removes them and restores PATH. Nothing
// in a run creates kubelet's hint chains, so each detection agrees with the
// kernel backend's.
var iptablesLinks struct {
	sync.Mutex
	holders int
	dir     string // the links' folder while holders > 0
	path    string // PATH before it
}

// iptablesVariant holds the links for a generation; the returned function
// lets go of them (once).
func iptablesVariant() (release func(), err error) {
	l := &iptablesLinks
	l.Lock()
	defer l.Unlock()
	if l.holders == 0 {
		dir, err := linkIPTablesVariant(kernel.DetectIPTablesMode())
		if err != nil {
			return nil, fmt.Errorf("kube-proxy's iptables commands: %w", err)
		}
		l.path = os.Getenv("PATH")
		if err := os.Setenv("PATH", dir+string(os.PathListSeparator)+l.path); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("kube-proxy's iptables commands: %w", err)
		}
		l.dir = dir
	}
	l.holders++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.Lock()
			defer l.Unlock()
			if l.holders--; l.holders > 0 {
				return
			}
			// Restore PATH unless someone else changed it meanwhile.
			if cur := os.Getenv("PATH"); cur == l.dir+string(os.PathListSeparator)+l.path {
				_ = os.Setenv("PATH", l.path)
			}
			_ = os.RemoveAll(l.dir)
			l.dir, l.path = "", ""
		})
	}, nil
}

// linkIPTablesVariant makes a folder of links named as kube-proxy runs the
// commands, each to mode's command (iptables -> iptables-nft). A command
// of the variant that is not installed gets no link: kube-proxy then runs
// the plain one, and reports what it lacks.
func linkIPTablesVariant(mode string) (string, error) {
	dir, err := os.MkdirTemp("", "kpsim-iptables-")
	if err != nil {
		return "", err
	}
	for _, base := range []string{"iptables", "ip6tables"} {
		for _, verb := range []string{"", "-save", "-restore"} {
			target, err := exec.LookPath(base + "-" + mode + verb)
			if err != nil {
				continue
			}
			if !filepath.IsAbs(target) {
				target, _ = filepath.Abs(target)
			}
			if err := os.Symlink(target, filepath.Join(dir, base+verb)); err != nil {
				_ = os.RemoveAll(dir)
				return "", err
			}
		}
	}
	return dir, nil
}
