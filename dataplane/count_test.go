package dataplane_test

import (
	"encoding/json"
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
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

	// The service delete took its real server with it: re-creating it is
	// wasted work too, though no destination delete was ever issued.
	require.NoError(t, dp.IPVS.AddDestination(vs.ServiceKey, dst))
	require.EqualValues(t, 1, churn.Readded()[dataplane.OpIPVSDestinationAdd])
}

// TestChurnDestinationsListed: real servers the proxier only read (a
// restarted proxier's kernel) count too when their service is deleted.
func TestChurnDestinationsListed(t *testing.T) {
	k, err := sim.New(sim.Options{})
	require.NoError(t, err)
	vs := dataplane.VirtualServer{ServiceKey: dataplane.ServiceKey{Address: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: dataplane.TCP}, Scheduler: "rr"}
	require.NoError(t, k.AddService(vs))
	for _, a := range []string{"10.0.0.1", "10.0.0.2"} {
		require.NoError(t, k.AddDestination(vs.ServiceKey, dataplane.RealServer{Address: netip.MustParseAddr(a), Port: 8080, Weight: 1}))
	}
	churn := dataplane.NewChurn()
	dp, _ := dataplane.Count(k.Dataplane(), churn)
	_, err = dp.IPVS.Destinations(vs.ServiceKey)
	require.NoError(t, err)
	require.NoError(t, dp.IPVS.DeleteService(vs.ServiceKey))
	require.NoError(t, dp.IPVS.AddService(vs))
	for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		require.NoError(t, dp.IPVS.AddDestination(vs.ServiceKey, dataplane.RealServer{Address: netip.MustParseAddr(a), Port: 8080, Weight: 1}))
	}
	require.EqualValues(t, 2, churn.Readded()[dataplane.OpIPVSDestinationAdd], "two came back; the third is new")
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

// nopIPVS accepts everything and counts what reached it.
type nopIPVS struct {
	dataplane.IPVS
	adds int
}

func (n *nopIPVS) AddService(dataplane.VirtualServer) error { n.adds++; return nil }

func TestStoppable(t *testing.T) {
	inner := &nopIPVS{}
	dp, stop := dataplane.Stoppable(dataplane.Dataplane{IPVS: inner})
	k := dataplane.VirtualServer{ServiceKey: dataplane.ServiceKey{Address: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: dataplane.TCP}}
	require.NoError(t, dp.IPVS.AddService(k))
	stop()
	err := dp.IPVS.AddService(k)
	require.ErrorIs(t, err, syscall.ECANCELED)
	require.ErrorContains(t, err, "ipvs add service 10.96.0.1:80/TCP")
	require.Equal(t, 1, inner.adds, "nothing reaches the kernel after stop")
}

// TestNFTTransactionOps: a transaction deletes or not, and each rule with a
// set or map of its own stands after one entry per command before it and
// per such rule's set, after those sets' elements, and after those rules.
func TestNFTTransactionOps(t *testing.T) {
	tx := knftables.NewFake(knftables.IPv4Family, "kube-proxy").NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Chain{Name: "svc"})
	tx.Flush(&knftables.Chain{Name: "svc"})
	tx.Add(&knftables.Rule{Chain: "svc", Rule: "numgen random mod 3 vmap { 0 : goto a , 1 : goto b , 2 : goto c }"})
	tx.Add(&knftables.Rule{Chain: "svc", Rule: "ip daddr 10.0.0.1 drop"})
	tx.Add(&knftables.Rule{Chain: "svc", Rule: "ip daddr { 10.0.0.2 } drop"})
	deletes, before := dataplane.NFTTransactionOps(tx)
	require.False(t, deletes)
	require.Equal(t, []dataplane.NFTMapRule{{Entries: 3, Maps: 0}, {Entries: 3 + 1 + 1 + 1, Elements: 3, Maps: 1}}, before)

	tx.Delete(&knftables.Chain{Name: "svc"})
	deletes, before = dataplane.NFTTransactionOps(tx)
	require.True(t, deletes)
	require.Len(t, before, 2)
}
