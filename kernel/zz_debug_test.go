package kernel

import (
	"os"
	"testing"
	"time"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/sim"
)

func TestZZDebugIPVS(t *testing.T) {
	if !inPrivateNetNS(t) {
		return
	}
	for _, n := range []int{300, 600, 1000} {
		s := dataplane.IPSetNetlink
		k, err := New(Options{IPSetStrategy: s})
		if err != nil {
			t.Fatal(err)
		}
		dp := k.Dataplane()
		c := &calibration{opts: CalibrateOptions{Entries: n, ExecEntries: 20}, log: os.Stdout,
			p: &sim.Profile{Ops: map[string]float64{}, ListItem: map[string]float64{}}, dp: dp}
		c.newClock = func() func() time.Duration { return c.clock(dp) }
		t.Logf("n=%d strategy %s ipvs: %v", n, s, c.ipvs())
		k.Close()
	}
}
