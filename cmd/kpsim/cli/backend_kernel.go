package cli

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/kpsim/kpsim/kernel"
	"github.com/kpsim/kpsim/scenarios"
)

// newKernelBackend runs the scenario on this machine's kernel. Kernel work
// never happens in the namespace kpsim was started in: here, outside one,
// it checks that the kernel can run the scenario (failing at once with
// everything missing), re-executes the whole command line in a fresh
// network namespace, and exits with that run's status; nothing of this
// process's run has started, so there is nothing to clean up. Inside, it
// builds the backend.
func newKernelBackend(sc *scenarios.Scenario) (scenarios.Backend, error) {
	if !kernel.Isolated() {
		if missing := kernel.Detect().Missing("kernel"); len(missing) > 0 {
			return nil, fmt.Errorf("this kernel cannot run kernel scenarios (see `kpsim doctor`); missing: %s", strings.Join(missing, "; "))
		}
		code, err := kernel.RunIsolated(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		if err != nil {
			return nil, err
		}
		os.Exit(code)
	}
	opts := kernel.BackendOptions{Kernel: kernel.Options{IPSetStrategy: sc.Dataplane.IPSet}}
	for _, a := range sc.Cluster.Node.Addresses {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return nil, fmt.Errorf("node address %q: %w", a, err)
		}
		opts.Topology.NodeAddresses = append(opts.Topology.NodeAddresses, p)
	}
	opts.Topology.Clients = sc.Cluster.ProbeClients()
	return kernel.NewBackend(opts)
}
