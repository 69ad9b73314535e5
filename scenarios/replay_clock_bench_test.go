package scenarios

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/sim"
)

// clockBenchServices is the cluster BenchmarkModeledClock syncs: the size
// issue 23 measured a `kpsim run` at.
const clockBenchServices = 2000

// BenchmarkModeledClock measures what the modeled clock itself costs: the
// same first sync of scale-10k's cluster at 2,000 services onto an empty
// kernel, on
//
//   - sim: the in-memory kernel at time scale 0 without a clock (costs
//     accounted, nothing spent);
//   - modeled: the same kernel on a run's own scheduler (sched), released
//     with nothing else due, so that every operation's cost and the
//     proxier's work are spent on it as in a run's sync;
//   - replay: dataplane.Replay captured from an empty kernel, which costs
//     the proxier's own work and nothing else;
//   - run: a whole `kpsim run` of scale-10k at 2,000 services, up to its
//     first waitSynced, where the sync runs among the run's timeline,
//     runners and handlers; its ns/op is the whole run's (the scenario's loading not
//     timed), and sync-ns/kop
//     is the first sync's own wall time (record.Sync.Wall).
//
// Besides ns/op it reports the wall time per kernel operation the sync
// issued (ns/kop, the same count on every kernel). modeled/replay and
// run's sync-ns/kop over replay's ns/kop are the bar issue 23 sets: at most
// 1.5.
//
//	go test ./scenarios -run '^$' -bench ModeledClock -count 6
func BenchmarkModeledClock(b *testing.B) {
	sc := clockScenario(b)
	set, cfg := sc.ClusterObjects(), proxier.Config{NodeName: sc.Cluster.Node.Name}
	ops := firstSyncOps(b, set, cfg)
	b.Run("sim", func(b *testing.B) {
		benchFirstSync(b, ops, func() (dataplane.Dataplane, proxier.Options) {
			return newBenchKernel(b).Dataplane(), proxier.Options{}
		}, set, cfg)
	})
	b.Run("modeled", func(b *testing.B) {
		benchFirstSync(b, ops, func() (dataplane.Dataplane, proxier.Options) {
			k := newBenchKernel(b)
			s := releasedSched()
			if err := k.SetClock(s); err != nil {
				b.Fatal(err)
			}
			return k.Dataplane(), proxier.Options{Clock: s}
		}, set, cfg)
	})
	b.Run("replay", func(b *testing.B) {
		empty, err := dataplane.Capture(newBenchKernel(b).Dataplane(), dataplane.IPv4)
		if err != nil {
			b.Fatal(err)
		}
		benchFirstSync(b, ops, func() (dataplane.Dataplane, proxier.Options) {
			return empty.Dataplane(), proxier.Options{}
		}, set, cfg)
	})
	b.Run("run", func(b *testing.B) {
		var wall float64
		for b.Loop() {
			b.StopTimer()
			s := clockScenario(b)
			sb := simBackend(b, s)
			b.StartTimer()
			f, err := Run(context.Background(), s, RunOptions{Backend: sb})
			if err != nil {
				b.Fatal(err)
			}
			first := f.Syncs[0]
			if n := totalOps(first.Ops); n != ops {
				b.Fatalf("the run's first sync issued %d kernel operations, the benchmark's %d: not the same sync", n, ops)
			}
			wall += first.Wall
		}
		b.ReportMetric(wall*1e9/float64(b.N)/float64(ops), "sync-ns/kop")
	})
}

// clockScenario is scale-10k at clockBenchServices, up to its first
// waitSynced: the first sync onto an empty kernel, on the modeled clock.
func clockScenario(b *testing.B) *Scenario {
	b.Helper()
	s, err := Load("scale-10k", []string{fmt.Sprintf("cluster.services=%d", clockBenchServices)})
	if err != nil {
		b.Fatal(err)
	}
	if len(s.Timeline) < 3 || s.Timeline[2].WaitSynced == nil {
		b.Fatal("scale-10k no longer starts with createCluster, startProxier, waitSynced")
	}
	s.Timeline = s.Timeline[:3]
	return s
}

// releasedSched is a run's scheduler as a sync finds it: a generation
// running, the sync's runner released, nothing else due before the far
// future, so that each Spend moves the clock by itself (a run's common case).
func releasedSched() *sched {
	s := newSched(clockT0, []dataplane.Family{dataplane.IPv4}, func() int { return 0 })
	s.running, s.released, s.current = true, true, dataplane.IPv4
	s.target = clockT0.Add(24 * time.Hour)
	return s
}

func newBenchKernel(b *testing.B) *sim.Kernel {
	b.Helper()
	k, err := sim.New(sim.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return k
}

// firstSyncOps is how many kernel operations the first sync of set issues.
func firstSyncOps(b *testing.B, set *objects.Set, cfg proxier.Config) int64 {
	b.Helper()
	k := newBenchKernel(b)
	rec := benchProxier(b, k.Dataplane(), proxier.Options{}, set, cfg).Sync()
	if rec.Failed() {
		b.Fatalf("first sync: %s", rec.Error)
	}
	n := totalOps(rec.Ops)
	if n == 0 {
		b.Fatal("the first sync issued no kernel operation")
	}
	return n
}

func totalOps(o dataplane.Ops) int64 {
	var n int64
	for _, c := range o {
		n += c
	}
	return n
}

// benchFirstSync times first syncs of set on fresh dataplanes from fresh
// (not timed) and reports ns per kernel operation of the ops a sync issues.
func benchFirstSync(b *testing.B, ops int64, fresh func() (dataplane.Dataplane, proxier.Options), set *objects.Set, cfg proxier.Config) {
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		dp, opts := fresh()
		p := benchProxier(b, dp, opts, set, cfg)
		b.StartTimer()
		if rec := p.Sync(); rec.Failed() {
			b.Fatalf("first sync: %s", rec.Error)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(ops), "ns/kop")
}

// benchProxier is an IPv4 proxier on dp whose handlers have heard of set.
func benchProxier(b *testing.B, dp dataplane.Dataplane, opts proxier.Options, set *objects.Set, cfg proxier.Config) *proxier.Proxier {
	b.Helper()
	p, err := proxier.New(cfg, dataplane.IPv4, dp, opts)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range set.Events() {
		e.Deliver(p)
	}
	p.OnServicesSynced()
	p.OnEndpointSlicesSynced()
	return p
}

// BenchmarkSpend is one kernel operation's spend on a released sync's
// scheduler, with the timers a run's runner keeps armed (periodic, retry,
// rate limit): the modeled clock's cost per operation.
//
//	go test ./scenarios -run '^$' -bench Spend
func BenchmarkSpend(b *testing.B) {
	s := releasedSched()
	for range 3 {
		s.NewTimer(time.Hour)
	}
	for b.Loop() {
		s.Spend(time.Nanosecond)
	}
}
