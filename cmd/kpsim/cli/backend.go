package cli

import (
	"fmt"

	"github.com/kpsim/kpsim/scenarios"
)

// newBackend builds the node a scenario runs on. The kernel backend wires
// its constructor in here.
func newBackend(sc *scenarios.Scenario) (scenarios.Backend, error) {
	switch sc.Backend {
	case "sim":
		return scenarios.NewSimBackend(sc)
	case "kernel":
		return newKernelBackend(sc)
	}
	return nil, fmt.Errorf("unknown backend %q", sc.Backend)
}
