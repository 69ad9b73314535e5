package dataplane_test

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/sim"
)

func TestCountAndChurn(t *testing.T) {
	k, err := sim.New(sim.Options{})
	require.NoError(t, err)
	churn := dataplane.NewChurn()
	dp, counter := dataplane.Count(k.Dataplane(), churn)

	vs := dataplane.VirtualServer{ServiceKey: dataplane.ServiceKey{Address: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: dataplane.TCP}, Scheduler: "rr"}
	dst := dataplane.RealServer{Address: netip.MustParseAddr("10.0.0.1"), Port: 8080, Weight: 1}
	require.NoError(t, dp.IPVS.AddService(vs))
	require.NoError(t, dp.IPVS.AddDestination(vs.ServiceKey, dst))
	_, err = dp.IPVS.Services()
	require.NoError(t, err)
	require.NoError(t, dp.IPSet.CreateSet(dataplane.Set{Name: "S", Type: dataplane.HashIPPort, Family: dataplane.IPv4}))
	require.NoError(t, dp.IPSet.Apply([]dataplane.SetChange{{Set: "S", Add: []string{"10.96.0.1,tcp:80", "10.96.0.2,tcp:80"}}}))
	// Delete and re-create: the churn the incident is made of.
	require.NoError(t, dp.IPSet.Apply([]dataplane.SetChange{{Set: "S", Del: []string{"10.96.0.1,tcp:80"}}}))
	require.NoError(t, dp.IPSet.Apply([]dataplane.SetChange{{Set: "S", Add: []string{"10.96.0.1,tcp:80"}}}))
	require.NoError(t, dp.IPVS.DeleteService(vs.ServiceKey))
	require.NoError(t, dp.IPVS.AddService(vs))
	// A failed write is still counted: it cost a round trip.
	require.Error(t, dp.IPVS.AddService(vs))

	ops := counter.Ops()
	require.EqualValues(t, 3, ops[dataplane.OpIPVSServiceAdd])
	require.EqualValues(t, 1, ops[dataplane.OpIPVSServiceDelete])
	require.EqualValues(t, 1, ops[dataplane.OpIPVSDestinationAdd])
	require.EqualValues(t, 3, ops[dataplane.OpIPSetAdd])
	require.EqualValues(t, 1, ops[dataplane.OpIPSetDel])
	require.EqualValues(t, 1, ops[dataplane.OpIPVSList])
	require.EqualValues(t, 3+1+1+1+3+1, ops.Writes(), "reads are not writes: %v", ops)
	require.Equal(t, k.Ops(), ops, "the wrapper and the kernel count alike")

	readded := churn.Readded()
	require.EqualValues(t, 1, readded[dataplane.OpIPSetAdd])
	require.EqualValues(t, 1, readded[dataplane.OpIPVSServiceAdd])
	require.EqualValues(t, 2, readded.Writes())
}

func TestOpsJSON(t *testing.T) {
	var o dataplane.Ops
	o[dataplane.OpIPSetAdd] = 5
	o[dataplane.OpIPTablesRestoreBytes] = 1200
	b, err := json.Marshal(o)
	require.NoError(t, err)
	require.JSONEq(t, `{"ipset-add":5,"iptables-restore-bytes":1200}`, string(b))
	var back dataplane.Ops
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, o, back)
	require.EqualValues(t, 5, back.Writes(), "restore bytes measure a write, they are not one")
	require.ErrorContains(t, json.Unmarshal([]byte(`{"ipset-frob":1}`), &back), `unknown kernel operation "ipset-frob"`)
}
