package sim_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/dataplane/conformance"
	"github.com/kpsim/kpsim/sim"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) dataplane.Dataplane {
		k, err := sim.New(sim.Options{})
		require.NoError(t, err)
		return k.Dataplane()
	}, conformance.All())
}
