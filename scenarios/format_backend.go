package scenarios

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/scenarios/backend"
)

// Modes lists the proxy modes the scenario's proxier generations run in:
// the proxier's own, then any a start or restart step switches to.
func (s *Scenario) Modes() []proxier.Mode {
	modes := []proxier.Mode{s.Proxier.Defaults().Mode}
	var walk func([]Step)
	walk = func(steps []Step) {
		for _, st := range steps {
			var m proxier.Mode
			switch {
			case st.StartProxier != nil:
				m = st.StartProxier.Mode
			case st.RestartProxier != nil:
				m = st.RestartProxier.Mode
			case st.Repeat != nil:
				walk(st.Repeat.Steps)
			}
			if m != "" && !slices.Contains(modes, m) {
				modes = append(modes, m)
			}
		}
	}
	walk(s.Timeline)
	return modes
}

// BackendSpec is what the scenario asks of the node it runs on, for
// backend.New.
func (s *Scenario) BackendSpec() (backend.Spec, error) {
	spec := backend.Spec{
		Name:      s.Backend,
		Profile:   s.Sim.Profile,
		TimeScale: s.Sim.TimeScale,
		IPSet:     s.Dataplane.IPSet,
		Clients:   s.Cluster.ProbeClients(),
		Modes:     s.Modes(),
	}
	for _, a := range s.Cluster.Node.Addresses {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return backend.Spec{}, fmt.Errorf("node address %q: %w", a, err)
		}
		spec.NodeAddresses = append(spec.NodeAddresses, p)
	}
	return spec, nil
}
