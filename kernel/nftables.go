package kernel

import (
	"errors"
	"fmt"
	"os/exec"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// nftables is dataplane.NFTables on the kernel: the nft binary (1.0.1 or
// later, as knftables requires), run in the current network namespace, as
// kube-proxy's nftables mode runs it.
type nftables struct{}

func (nftables) Table(family knftables.Family, name string, options ...knftables.Option) (knftables.Interface, error) {
	t, err := knftables.New(family, name, options...)
	if errors.Is(err, exec.ErrNotFound) {
		// No nft (the VM's initramfs has none): a kernel without nftables,
		// as one without IPVS matches EPROTONOSUPPORT.
		return nil, fmt.Errorf("nftables table %s %s: %w: %w", family, name, unix.EPROTONOSUPPORT, err)
	}
	if err != nil {
		return nil, fmt.Errorf("nftables table %s %s: %w", family, name, err)
	}
	return t, nil
}
