package calibrate

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/sim"
)

// Calibrating the in-memory kernel by its modeled time alone must give back
// the profile it charges: this checks that every measurement times the
// operation it names and that the fits separate fixed from per-item costs.
func TestCalibrateRecoversSimProfile(t *testing.T) {
	for _, name := range []string{"host", "vm-tcg", "host-every-price"} {
		t.Run(name, func(t *testing.T) {
			want, err := sim.LoadProfile(strings.TrimSuffix(name, "-every-price"))
			require.NoError(t, err)
			if name == "host-every-price" {
				// Every price of a rule with a map, none zero.
				want.Ops[dataplane.OpNFTMapRule.String()] = 30e-6
				want.NFTMapRule = &sim.NFTMapRuleCost{PerEntry: 20e-9, PerElement: 4e-9, PerMap: 500e-9, PerTransaction: 5e-6}
				// iptables-restore growing as rules times chains, and
				// dearer when it replaces chains.
				want.IPTablesRestore = &sim.IPTablesRestoreCost{Replace: 6e-3, PerDeclared: 7e-9, PerChain: 5e-9, PerDeclaredChain: 7e-13}
				want.ListItem[dataplane.OpIPTablesRestore.String()] = 3e-6
			}
			var log bytes.Buffer
			got, err := Run(simDataplanes(want), Options{
				Entries: 200, ExecEntries: 50, Name: "from-sim", Where: "the in-memory kernel",
				Skip:  map[string]string{"conntrack": "the in-memory kernel's flows cannot be created through the dataplane"},
				Clock: modeledOnly, Log: &log, SkipProxier: true,
			})
			require.NoError(t, err)
			require.Equal(t, "from-sim", got.Name)
			require.Contains(t, got.Source, "the in-memory kernel")
			require.Contains(t, got.Source, "Not measured")
			require.Contains(t, log.String(), "ipvs-service-add")

			const tol = 1e-9 // seconds; the fits are exact up to rounding to nanoseconds
			for _, s := range dataplane.IPSetStrategies {
				require.InDelta(t, want.IPSet[s].PerEntry, got.IPSet[s].PerEntry, tol, "ipset %s per entry", s)
				require.InDelta(t, want.IPSet[s].PerCommand, got.IPSet[s].PerCommand, tol, "ipset %s per command", s)
				require.InDelta(t, want.IPSet[s].PerBatch, got.IPSet[s].PerBatch, tol, "ipset %s per batch", s)
			}
			for _, op := range []dataplane.Op{
				dataplane.OpIPVSServiceAdd, dataplane.OpIPVSServiceUpdate, dataplane.OpIPVSServiceDelete,
				dataplane.OpIPVSDestinationAdd, dataplane.OpIPVSDestinationUpdate, dataplane.OpIPVSDestinationDelete,
				dataplane.OpIPVSList, dataplane.OpIPVSDestinationList, dataplane.OpIPSetList, dataplane.OpLinkCreate, dataplane.OpAddressBind, dataplane.OpAddressUnbind,
				dataplane.OpAddressList, dataplane.OpIPTablesRestore, dataplane.OpIPTablesRestoreBytes,
				dataplane.OpSysctlWrite,
			} {
				require.InDelta(t, want.Ops[op.String()], got.Ops[op.String()], tol, op.String())
			}
			for _, op := range []dataplane.Op{dataplane.OpIPVSList, dataplane.OpIPVSDestinationList, dataplane.OpIPSetList, dataplane.OpAddressList, dataplane.OpIPTablesRestore} {
				require.InDelta(t, want.ListItem[op.String()], got.ListItem[op.String()], tol, "list item %s", op)
			}
			// Exact up to the nanoseconds each restore's charge is rounded to.
			wantRestore, gotRestore := sim.IPTablesRestoreCost{}, sim.IPTablesRestoreCost{}
			if want.IPTablesRestore != nil {
				wantRestore = *want.IPTablesRestore
			}
			if got.IPTablesRestore != nil {
				gotRestore = *got.IPTablesRestore
			}
			require.InDelta(t, wantRestore.Replace, gotRestore.Replace, tol, "iptables-restore replacing chains")
			require.InDelta(t, wantRestore.PerDeclared, gotRestore.PerDeclared, 1e-4*wantRestore.PerDeclared, "iptables-restore per rule and chain declared")
			require.InDelta(t, wantRestore.PerChain, gotRestore.PerChain, 1e-4*wantRestore.PerChain, "iptables-restore per rule and chain of the table")
			require.InDelta(t, wantRestore.PerDeclaredChain, gotRestore.PerDeclaredChain, 1e-4*wantRestore.PerDeclaredChain, "iptables-restore per rule and pair of chains")
			for _, op := range []dataplane.Op{dataplane.OpConntrackDelete, dataplane.OpConntrackList} {
				require.NotContains(t, got.Ops, op.String(), "skipped operations stay unpriced")
				require.NotContains(t, got.ListItem, op.String(), "skipped operations stay unpriced")
			}
			// nftables: the fits are least squares over sizes, exact up to
			// rounding (relative to the largest price).
			for _, op := range []dataplane.Op{dataplane.OpNFTTransaction, dataplane.OpNFTCommand, dataplane.OpNFTDeleting,
				dataplane.OpNFTList, dataplane.OpNFTListNetlink, dataplane.OpNFTListElements} {
				require.InDelta(t, want.Ops[op.String()], got.Ops[op.String()], 1e-6+1e-3*want.Ops[op.String()], op.String())
				require.InDelta(t, want.ListItem[op.String()], got.ListItem[op.String()], 1e-9+1e-3*want.ListItem[op.String()], "list item %s", op)
			}
			require.InDelta(t, want.ListPairs[dataplane.OpNFTList.String()], got.ListPairs[dataplane.OpNFTList.String()], 1e-12, "nft-list per pair")
			if name == "host" {
				require.Positive(t, got.Ops[dataplane.OpNFTTransaction.String()], "the host profile prices nft")
			}
			// A rule with a map: the same price at every place the loads
			// put one.
			wantWalk, gotWalk := sim.NFTMapRuleCost{}, sim.NFTMapRuleCost{}
			if want.NFTMapRule != nil {
				wantWalk = *want.NFTMapRule
			}
			if got.NFTMapRule != nil {
				gotWalk = *got.NFTMapRule
			}
			require.InDelta(t, want.Ops[dataplane.OpNFTMapRule.String()], got.Ops[dataplane.OpNFTMapRule.String()], 1e-7, "nft-map-rule")
			for before := 0; before < 5500; before += 50 {
				for _, maps := range []int{0, before / 7} {
					for _, table := range []int{0, 800} {
						at := dataplane.NFTMapRule{Entries: before, Elements: 2 * maps, Maps: maps, Table: table}
						w, g := wantWalk.Price(at), gotWalk.Price(at)
						require.InDelta(t, float64(w), float64(g), 1e3+0.01*float64(w), "a rule with a map at %+v", at)
					}
				}
			}
			require.InDelta(t, float64(wantWalk.Transaction(800)), float64(gotWalk.Transaction(800)), 1e3+0.01*float64(wantWalk.Transaction(800)), "a transaction onto 800 rules with maps")
		})
	}
}

func TestFit(t *testing.T) {
	tests := []struct {
		small, large  float64
		nSmall, nLarg int
		fixed, per    float64
	}{
		{small: 0.012, large: 0.102, nSmall: 10, nLarg: 100, fixed: 0.002, per: 0.001},
		{small: 0.010, large: 0.010, nSmall: 10, nLarg: 100, fixed: 0.010, per: 0},
		// Noise that makes the large batch cheaper per item than zero is clamped.
		{small: 0.020, large: 0.010, nSmall: 10, nLarg: 100, fixed: 0.020, per: 0},
	}
	for _, tc := range tests {
		fixed, per := fit(tc.small, tc.large, tc.nSmall, tc.nLarg)
		require.InDelta(t, tc.fixed, fixed, 1e-12)
		require.InDelta(t, tc.per, per, 1e-12)
	}
}

// TestFitWork: samples priced exactly by a known price give it back, and
// a unit that never varies independently of another is not priced apart.
func TestFitWork(t *testing.T) {
	want := sim.ProxierCost{PerSync: 20e-6, PerDerived: 4e-6, PerPort: 1e-6, PerEndpoint: 0.4e-6, PerPassed: 0.2e-6, PerEntry: 0.5e-6}
	sample := func(w dataplane.Work) workSample {
		return workSample{work: w, seconds: float64(w.Syncs)*want.PerSync + float64(w.Derived)*want.PerDerived + float64(w.Ports)*want.PerPort +
			float64(w.Endpoints)*want.PerEndpoint + float64(w.Passed)*want.PerPassed + float64(w.Entries)*want.PerEntry}
	}
	got, err := fitWork([]workSample{
		sample(dataplane.Work{Syncs: 1}),
		sample(dataplane.Work{Syncs: 1, Derived: 1000, Ports: 1000, Endpoints: 2000, Entries: 2000}),
		sample(dataplane.Work{Syncs: 1, Derived: 1000, Ports: 1000, Endpoints: 6000, Entries: 2000}),
		sample(dataplane.Work{Syncs: 1, Ports: 2000, Endpoints: 6000, Entries: 8000}),
		sample(dataplane.Work{Syncs: 1, Derived: 2000, Ports: 4000, Endpoints: 12000, Entries: 8000}),
		sample(dataplane.Work{Syncs: 1, Derived: 20, Ports: 20, Endpoints: 60, Entries: 10}),
		// A partial sync: one port derived, the others passed over, at
		// one and at three endpoints each.
		sample(dataplane.Work{Syncs: 1, Derived: 1, Ports: 999, Endpoints: 1, Passed: 999}),
		sample(dataplane.Work{Syncs: 1, Derived: 1, Ports: 999, Endpoints: 3, Passed: 2997}),
	})
	require.NoError(t, err)
	require.InDelta(t, want.PerSync, got.PerSync, 1e-12)
	require.InDelta(t, want.PerDerived, got.PerDerived, 1e-12)
	require.InDelta(t, want.PerPort, got.PerPort, 1e-12)
	require.InDelta(t, want.PerEndpoint, got.PerEndpoint, 1e-12)
	require.InDelta(t, want.PerPassed, got.PerPassed, 1e-12)
	require.InDelta(t, want.PerEntry, got.PerEntry, 1e-12)

	_, err = fitWork([]workSample{{work: dataplane.Work{Syncs: 1}, seconds: -1}})
	require.Error(t, err, "no sample to fit")
}

// TestFitPhases: phases priced exactly give the unit prices back; the
// per-sync price is what the units leave of whole syncs, which also spend
// time in phases without units.
func TestFitPhases(t *testing.T) {
	want := sim.ProxierCost{PerSync: 300e-6, PerDerived: 25e-6, PerPort: 4e-6, PerEndpoint: 0, PerEntry: 1e-6}
	var syncs, phases []workSample
	for _, w := range [][3]dataplane.Work{ // apply-changes, ipvs-services, ipset-entries
		{{Derived: 1000, Endpoints: 3000}, {Ports: 1000, Endpoints: 3000}, {Entries: 2500}},
		{{}, {Ports: 2000, Endpoints: 6000}, {Entries: 7600}},
		{{Derived: 4000, Endpoints: 12000}, {Ports: 8000, Endpoints: 24000}, {Entries: 30000}},
		{{Derived: 10, Endpoints: 30}, {Ports: 13, Endpoints: 40}, {Entries: 30}},
		{{}, {}, {}},
	} {
		total := want.PerSync // spent in phases without units
		var all dataplane.Work
		for _, pw := range w {
			d := want.Price(pw).Seconds()
			total += d
			all.Add(pw)
			if pw != (dataplane.Work{}) {
				phases = append(phases, workSample{phase: "p", work: pw, seconds: d})
			}
		}
		all.Syncs = 1
		syncs = append(syncs, workSample{work: all, seconds: total})
	}
	got, unpriced, err := fitPhases(syncs, phases)
	require.NoError(t, err)
	require.InDelta(t, want.PerDerived, got.PerDerived, 1e-12)
	require.InDelta(t, want.PerPort, got.PerPort, 1e-12)
	require.InDelta(t, want.PerEntry, got.PerEntry, 1e-12)
	require.InDelta(t, want.PerSync, got.PerSync, 1e-12)
	require.Greater(t, unpriced, 0.0)

	_, _, err = fitPhases(nil, phases)
	require.Error(t, err, "no whole sync")
}

// TestProxierWork measures the proxier at small sizes: every kind of sync
// is timed, and the profile gets a proxier section that says how.
func TestProxierWork(t *testing.T) {
	var log bytes.Buffer
	c := &calibration{opts: Options{ProxierServices: []int{50, 200}, Where: "the test"}, p: &sim.Profile{}, log: &log}
	require.NoError(t, c.proxierWork())
	require.NotNil(t, c.p.Proxier)
	for _, kind := range []string{"first sync 200x1", "first sync 200x3", "restart 200x3", "10 slice changes 200x3", "no change 200x3", "periodic full sync 200x3"} {
		require.Contains(t, log.String(), kind)
		require.Contains(t, c.p.Proxier.Source, kind)
	}
	require.Positive(t, c.p.Proxier.PerSync+c.p.Proxier.PerDerived+c.p.Proxier.PerPort+c.p.Proxier.PerEndpoint+c.p.Proxier.PerEntry)
}

// A kernel that slows down for part of a calibration is priced at the
// speed most of it ran at: in the last two of the five nftables rounds its
// measurements took twice as long, and the nftables prices are those of a
// kernel that held its speed (repeats in a row, as calibrate took them
// before the rounds, would have priced the loads measured late at the slow
// speed); the log warns, and the profile's source says how long each round
// took.
func TestCalibrateOutlastsASlowSpell(t *testing.T) {
	profile, err := sim.LoadProfile("host")
	require.NoError(t, err)
	open := func(dataplane.IPSetStrategy) (dataplane.Dataplane, func(), error) {
		k, err := sim.New(sim.Options{Profile: profile})
		if err != nil {
			return dataplane.Dataplane{}, nil, err
		}
		return k.Dataplane(), func() {}, nil
	}
	// calibrate runs the nftables part; each clock made from the slowFrom-th
	// on runs at half speed. It returns the log and, for each clock, where
	// the log stood when it was made.
	calibrate := func(slowFrom int) (*sim.Profile, string, []int) {
		var log bytes.Buffer
		var at []int
		clock := func(dp dataplane.Dataplane) func() time.Duration {
			at = append(at, log.Len())
			factor := time.Duration(1)
			if len(at) > slowFrom {
				factor = 2
			}
			_, start := dp.Model.Kernel()
			return func() time.Duration { _, now := dp.Model.Kernel(); return factor * (now - start) }
		}
		got, err := Run(open, Options{Entries: 200, Name: "drift", Log: &log, Clock: clock, SkipProxier: true,
			Skip: map[string]string{"ipvs": "not this test's", "conntrack": "not this test's"}})
		require.NoError(t, err)
		return got, log.String(), at
	}
	steady, log, at := calibrate(math.MaxInt)
	require.Contains(t, steady.Source, "the 5 rounds' measurements took ", "each round's time, warning or not")
	require.NotContains(t, log, "warning")
	// The first clock of the fourth round.
	fourth := strings.Index(log, fmt.Sprintf("nftables: round 4 of %d\n", nftRounds))
	require.Positive(t, fourth)
	from := slices.IndexFunc(at, func(at int) bool { return at > fourth })
	require.Positive(t, from)
	slowed, log, _ := calibrate(from)
	require.Contains(t, log, "kpsim calibrate: warning: this machine's speed moved while it was measured")
	require.Contains(t, log, "(2.00 times)")
	require.Contains(t, slowed.Source, "the 5 rounds' measurements took ")
	want, got := steady.Prices(), slowed.Prices()
	nft := 0
	for k, v := range want {
		if strings.Contains(k, "nft") {
			nft++
			require.InDelta(t, v, got[k], 1e-9*v+1e-15, k)
		}
	}
	require.Greater(t, nft, 10, "the nftables prices")
}

// TestCalibrateSkipsIPTablesMode: --skip iptables-mode prices a restore by
// kpsim's ruleset alone (a call, its bytes, and what replacing it costs
// more, per rule flushed) and says so; nothing grows with the chains.
func TestCalibrateSkipsIPTablesMode(t *testing.T) {
	want, err := sim.LoadProfile("host")
	require.NoError(t, err)
	want.IPTablesRestore = &sim.IPTablesRestoreCost{Replace: 6e-3, PerDeclared: 7e-9, PerChain: 5e-9, PerDeclaredChain: 7e-13}
	got, err := Run(simDataplanes(want), Options{
		Entries: 200, ExecEntries: 50, Name: "skipped", Where: "the in-memory kernel", SkipProxier: true, Clock: modeledOnly,
		Skip: map[string]string{"conntrack": "not here", "nftables": "not here", "iptables-mode": "--skip iptables-mode"},
	})
	require.NoError(t, err)
	require.Contains(t, got.Source, "iptables-restore at iptables mode's sizes (--skip iptables-mode)")
	require.NotNil(t, got.IPTablesRestore)
	require.Zero(t, got.IPTablesRestore.Replace+got.IPTablesRestore.PerDeclared+got.IPTablesRestore.PerChain+got.IPTablesRestore.PerDeclaredChain)
	require.Greater(t, got.ListItem[dataplane.OpIPTablesRestore.String()], want.IPTablesRestore.Replace/100, "replacing the ruleset, per rule flushed")
	require.Positive(t, got.Ops[dataplane.OpIPTablesRestore.String()])
}

// simDataplanes opens an in-memory kernel priced by p for each strategy.
func simDataplanes(p *sim.Profile) OpenDataplane {
	return func(s dataplane.IPSetStrategy) (dataplane.Dataplane, func(), error) {
		k, err := sim.New(sim.Options{Profile: p, IPSetStrategy: s})
		if err != nil {
			return dataplane.Dataplane{}, nil, err
		}
		return k.Dataplane(), func() {}, nil
	}
}

// modeledOnly times by the in-memory kernel's modeled cost alone, so that a
// calibration of it gives back its profile exactly.
func modeledOnly(dp dataplane.Dataplane) func() time.Duration {
	_, start := dp.Model.Kernel()
	return func() time.Duration { _, now := dp.Model.Kernel(); return now - start }
}
