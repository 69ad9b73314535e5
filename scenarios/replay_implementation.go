package scenarios

import (
	"github.com/kpsim/kpsim/proxier"
)

// upstream reports code kpsim runs but did not write: a kube-proxy release.
// On the kernel backend it programs the kernel through its own netlink
// handle and utilities, in the network namespace the run re-executes in;
// on the sim its utilities are adapters onto the in-memory kernel
// (upstream/kube-proxy). Its code decides when its first sync may run,
// whatever proxier.initialSync says, so handlers that lag
// (knownAtFirstSync) are blocked rather than queued: see holdBack.
func upstream(name string) bool { return name != proxier.ImplementationKpsim }

// Implementation is the scenario's proxier implementation, or why this
// binary cannot run it (see proxier.HasImplementation).
func (s *Scenario) Implementation() (proxier.Implementation, error) {
	return proxier.LookupImplementation(s.Proxier.Defaults().Implementation)
}
