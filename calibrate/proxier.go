package calibrate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/scenarios/backend"
	"github.com/kpsim/kpsim/sim"
)

// The proxier's own work has no kernel to measure: on a modeled clock the
// sim prices it per unit (dataplane.Work: per sync, service port derived,
// virtual server visited, endpoint visited, ipset entry compared), and this
// prices the units on the machine calibrate runs on. The proxier syncs
// against a dataplane.Replay, which answers reads with what a kernel held
// and takes writes without effect, so that a sync's wall time is the
// proxier's alone; the kinds of sync kpsim's scenarios are made of, at two
// sizes, give units in different proportions. The sim charges each unit in
// the phase that does the work, so the prices are fitted phase by phase:
// each phase's wall time on the units it reported (least squares, relative
// errors, no negative price), and the per-sync price is what is left of a
// whole sync, the phases without units included (median over the kinds).

// proxierRepeats is how often each kind of sync is measured; the median counts.
const proxierRepeats = 3

// changedSlices is how many EndpointSlices the changes case updates.
const changedSlices = 10

// workSample is a phase of a kind of sync (or a whole sync, phase ""):
// its units and its median wall time.
type workSample struct {
	name, phase string
	work        dataplane.Work
	seconds     float64
	// low and high are the range of the n times seconds is the median of,
	// where it is one (a release's syncs).
	low, high float64
	n         int
}

func (c *calibration) proxierWork() error {
	var syncs, phases []workSample
	for _, n := range c.opts.ProxierServices {
		s, err := c.proxierCases(n)
		if err != nil {
			return fmt.Errorf("calibrate the proxier at %d services: %w", n, err)
		}
		for _, x := range s {
			if x.phase == "" {
				syncs = append(syncs, x)
			} else {
				phases = append(phases, x)
			}
		}
	}
	price, unpriced, err := fitPhases(syncs, phases)
	if err != nil {
		return fmt.Errorf("calibrate the proxier: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Fitted by `kpsim calibrate` on %s: the proxier's syncs against a kernel that answers reads and takes writes without effect (dataplane.Replay), the median of %d of each kind: ", c.where(), proxierRepeats)
	for i, s := range syncs {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s (%s)", s.name, dur(s.seconds), unitsOf(s.work))
	}
	fmt.Fprintf(&b, ". Least squares on relative errors, phase by phase (fitPhases): %s per service port derived, %s per virtual server visited, %s per endpoint, %s per entry; %s per sync, what is left of a sync (median; %.0f%% of the syncs' time is in phases that report no units).",
		dur(price.PerDerived), dur(price.PerPort), dur(price.PerEndpoint), dur(price.PerEntry), dur(price.PerSync), 100*unpriced)
	price.Source = b.String()
	c.p.Proxier = &price
	return nil
}

// proxierCases measures every kind of sync at one size: the first sync onto
// an empty kernel at 1 and 3 endpoints per service, a sync after a few
// EndpointSlice changes, one with nothing to do, a periodic full sync, and
// the first sync of a restarted proxier onto the state its predecessor left.
func (c *calibration) proxierCases(services int) ([]workSample, error) {
	var out []workSample
	for _, endpoints := range []int{1, 3} {
		set, cfg, err := proxierCluster(services, endpoints)
		if err != nil {
			return nil, err
		}
		empty, programmed, err := replays(set, cfg)
		if err != nil {
			return nil, err
		}
		size := fmt.Sprintf("%dx%d", services, endpoints)
		first, err := c.measure("first sync "+size, empty, func() (*proxier.Proxier, error) { return startedProxier(cfg, empty, set) },
			(*proxier.Proxier).Sync)
		if err != nil {
			return nil, err
		}
		out = append(out, first...)
		if endpoints != 3 {
			continue
		}
		restart, err := c.measure("restart "+size, programmed, func() (*proxier.Proxier, error) { return startedProxier(cfg, programmed, set) },
			(*proxier.Proxier).Sync)
		if err != nil {
			return nil, err
		}
		// The rest run on a proxier that has synced once, onto what its
		// kernel holds.
		synced := func() (*proxier.Proxier, error) {
			p, err := startedProxier(cfg, programmed, set)
			if err == nil {
				err = syncErr(p.Sync())
			}
			return p, err
		}
		changes, err := c.measure(fmt.Sprintf("%d slice changes %s", changedSlices, size), programmed, synced, func(p *proxier.Proxier) record.Sync {
			for i, s := range set.EndpointSlices[:min(changedSlices, len(set.EndpointSlices))] {
				p.OnEndpointSliceUpdate(s, movedEndpoint(s, i))
			}
			return p.Sync()
		})
		if err != nil {
			return nil, err
		}
		idle, err := c.measure("no change "+size, programmed, synced, (*proxier.Proxier).Sync)
		if err != nil {
			return nil, err
		}
		periodic, err := c.measure("periodic full sync "+size, programmed, synced, (*proxier.Proxier).SyncFull)
		if err != nil {
			return nil, err
		}
		out = slices.Concat(out, restart, changes, idle, periodic)
	}
	return out, nil
}

// measure times one kind of sync proxierRepeats times, each on a proxier
// fresh from prepare, and keeps the median of the whole sync and of each
// phase that reported work.
func (c *calibration) measure(name string, r *dataplane.Replay, prepare func() (*proxier.Proxier, error), sync func(*proxier.Proxier) record.Sync) ([]workSample, error) {
	var totals []float64
	walls := map[string][]float64{}
	units := map[string]dataplane.Work{}
	var order []string
	var work dataplane.Work
	for range proxierRepeats {
		p, err := prepare()
		if err != nil {
			return nil, err
		}
		runtime.GC() // not the previous sync's garbage
		r.Work()
		start := time.Now()
		rec := sync(p)
		d := time.Since(start)
		if err := syncErr(rec); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		totals = append(totals, d.Seconds())
		work = r.Work()
		for _, ph := range rec.Phases {
			if _, seen := units[ph.Name]; !seen {
				order = append(order, ph.Name)
			}
			walls[ph.Name] = append(walls[ph.Name], ph.Wall)
			units[ph.Name] = ph.Work
		}
	}
	out := []workSample{{name: name, work: work, seconds: median(totals)}}
	fmt.Fprintf(c.log, "proxier %-40s %10.1f us (%s)\n", name, out[0].seconds*1e6, unitsOf(work))
	for _, ph := range order {
		s := workSample{name: name, phase: ph, work: units[ph], seconds: median(walls[ph])}
		s.work.Syncs = 0 // priced from what is left of the sync
		if s.work == (dataplane.Work{}) {
			continue
		}
		out = append(out, s)
		fmt.Fprintf(c.log, "proxier   %-38s %10.1f us (%s)\n", ph, s.seconds*1e6, unitsOf(s.work))
	}
	return out, nil
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func unitsOf(w dataplane.Work) string {
	return fmt.Sprintf("%d syncs, %d ports derived, %d visited, %d endpoints, %d passed over, %d entries", w.Syncs, w.Derived, w.Ports, w.Endpoints, w.Passed, w.Entries)
}

func syncErr(rec record.Sync) error {
	if rec.Failed() {
		return fmt.Errorf("sync %d failed: %s", rec.Seq, rec.Error)
	}
	return nil
}

// proxierCluster generates a cluster of the given size the way scenarios
// do, with a share of NodePort, LoadBalancer and UDP services, and the
// proxier config for its node.
func proxierCluster(services, endpoints int) (*objects.Set, proxier.Config, error) {
	spec := fmt.Sprintf(`name: calibrate-proxier
description: What does the proxier's own work cost on this machine?
seed: 1
cluster:
  services: %d
  types: {nodePort: 0.1, loadBalancer: 0.05}
  portsPerService: 1
  endpointsPerService: %d
  namespaces: 10
  nodes: 10
  udp: 0.1
timeline: [createCluster]
`, services, endpoints)
	s, err := scenarios.Parse("calibrate-proxier", []byte(spec), nil)
	if err != nil {
		return nil, proxier.Config{}, err
	}
	return s.ClusterObjects(), proxier.Config{NodeName: s.Cluster.Node.Name}, nil
}

// replays captures an empty kernel, and one the proxier programmed for set.
func replays(set *objects.Set, cfg proxier.Config) (empty, programmed *dataplane.Replay, err error) {
	fresh, err := sim.New(sim.Options{})
	if err != nil {
		return nil, nil, err
	}
	if empty, err = dataplane.Capture(fresh.Dataplane(), dataplane.IPv4); err != nil {
		return nil, nil, err
	}
	k, err := programmedKernel(set, cfg)
	if err != nil {
		return nil, nil, err
	}
	programmed, err = dataplane.Capture(k.Dataplane(), dataplane.IPv4)
	return empty, programmed, err
}

// programmedKernel is an in-memory kernel kpsim's proxier has synced set onto.
func programmedKernel(set *objects.Set, cfg proxier.Config) (*sim.Kernel, error) {
	k, err := sim.New(sim.Options{})
	if err != nil {
		return nil, err
	}
	p, err := proxier.New(cfg, dataplane.IPv4, k.Dataplane(), proxier.Options{})
	if err != nil {
		return nil, err
	}
	deliver(p, set)
	return k, syncErr(p.Sync())
}

// startedProxier is a proxier on r whose handlers have seen set.
func startedProxier(cfg proxier.Config, r *dataplane.Replay, set *objects.Set) (*proxier.Proxier, error) {
	p, err := proxier.New(cfg, dataplane.IPv4, r.Dataplane(), proxier.Options{})
	if err != nil {
		return nil, err
	}
	deliver(p, set)
	return p, nil
}

func deliver(p *proxier.Proxier, set *objects.Set) {
	for _, e := range set.Events() {
		e.Deliver(p)
	}
	p.OnServicesSynced()
	p.OnEndpointSlicesSynced()
}

// movedEndpoint is s with its first endpoint at another address, the i-th
// of a benchmark range: a pod replaced, one real server in and one out.
func movedEndpoint(s *discoveryv1.EndpointSlice, i int) *discoveryv1.EndpointSlice {
	out := s.DeepCopy()
	if len(out.Endpoints) > 0 && len(out.Endpoints[0].Addresses) > 0 {
		out.Endpoints[0].Addresses = []string{calibrationAddr(18, i).String()}
	}
	return out
}

// fitPhases prices the units: fitWork over the phases, then the per-sync
// price as the median of what the fitted units leave of each whole sync
// (never below 0). unpriced is the share of the syncs' time spent in phases
// that report no units.
func fitPhases(syncs, phases []workSample) (price sim.ProxierCost, unpriced float64, err error) {
	price, err = fitWork(phases)
	if err != nil {
		return price, 0, err
	}
	var left []float64
	var total, inPhases float64
	for _, s := range syncs {
		w := s.work
		w.Syncs = 0
		left = append(left, s.seconds-price.Price(w).Seconds())
		total += s.seconds
	}
	for _, s := range phases {
		inPhases += s.seconds
	}
	if len(left) == 0 || total <= 0 {
		return price, 0, fmt.Errorf("no whole sync to price a sync by")
	}
	price.PerSync = max(0, median(left))
	return price, max(0, 1-inPhases/total), nil
}

// fitWork prices the units of work from the samples (fitNonNegative).
func fitWork(samples []workSample) (sim.ProxierCost, error) {
	rows := make([][]float64, len(samples))
	secs := make([]float64, len(samples))
	for i, s := range samples {
		rows[i] = []float64{float64(s.work.Syncs), float64(s.work.Derived), float64(s.work.Ports), float64(s.work.Endpoints), float64(s.work.Passed), float64(s.work.Entries)}
		secs[i] = s.seconds
	}
	p, err := fitNonNegative(rows, secs)
	if err != nil {
		return sim.ProxierCost{}, err
	}
	return sim.ProxierCost{PerSync: p[0], PerDerived: p[1], PerPort: p[2], PerEndpoint: p[3], PerPassed: p[4], PerEntry: p[5]}, nil
}

// fitNonNegative solves seconds = rows . price for the prices, by least
// squares with no negative price, in errors relative to each sample's time
// but never to less than a hundredth of the longest: a sync of a thousand
// services counts as much as one of ten thousand, and samples too short to
// matter do not decide the prices. Every subset of the prices is tried and
// the best non-negative one kept (there are at most seven).
func fitNonNegative(rows [][]float64, seconds []float64) ([]float64, error) {
	if len(rows) == 0 {
		return nil, fmt.Errorf("no samples to fit")
	}
	vars := len(rows[0])
	longest := 0.0
	for _, s := range seconds {
		longest = max(longest, s)
	}
	if longest <= 0 && !slices.ContainsFunc(seconds, func(s float64) bool { return s < 0 }) {
		return make([]float64, vars), nil // nothing took time (an unpriced kind): nothing costs
	}
	scale := func(s float64) float64 { return max(s, longest/100) }
	// Each unit is solved for in multiples of its largest count: units of
	// very different sizes (a call, a byte, a product of three counts) would
	// leave the normal equations too ill-conditioned to solve in float64.
	unit := make([]float64, vars)
	for j := range vars {
		for _, r := range rows {
			unit[j] = max(unit[j], math.Abs(r[j]))
		}
		if unit[j] == 0 {
			unit[j] = 1
		}
	}
	best, bestErr := make([]float64, vars), math.Inf(1)
	for subset := 1; subset < 1<<vars; subset++ {
		var idx []int
		for j := range vars {
			if subset&(1<<j) != 0 {
				idx = append(idx, j)
			}
		}
		// Normal equations of the scaled rows (units/seconds against 1).
		a := mat.NewDense(len(idx), len(idx), nil)
		b := mat.NewVecDense(len(idx), nil)
		for i, r := range rows {
			s := seconds[i]
			if s <= 0 {
				continue
			}
			w := scale(s)
			for p, j := range idx {
				b.SetVec(p, b.AtVec(p)+r[j]/unit[j]*s/(w*w))
				for q, k := range idx {
					a.Set(p, q, a.At(p, q)+r[j]/unit[j]*r[k]/unit[k]/(w*w))
				}
			}
		}
		var x mat.VecDense
		if err := x.SolveVec(a, b); err != nil {
			continue // singular: these units do not vary independently here
		}
		price := make([]float64, vars)
		ok := true
		for p, j := range idx {
			price[j] = x.AtVec(p) / unit[j]
			ok = ok && price[j] >= 0
		}
		if !ok {
			continue
		}
		sum := 0.0
		for i, r := range rows {
			if seconds[i] <= 0 {
				continue
			}
			pred := 0.0
			for j := range vars {
				pred += r[j] * price[j]
			}
			e := (pred - seconds[i]) / scale(seconds[i])
			sum += e * e
		}
		if sum < bestErr {
			best, bestErr = price, sum
		}
	}
	if math.IsInf(bestErr, 1) {
		return nil, fmt.Errorf("no non-negative fit of %d samples", len(rows))
	}
	return best, nil
}

// kubeProxyRuleset is the iptables-restore payload kpsim's proxier writes
// for a calibration cluster (as the kernel prints it back: the chains of
// its own, nat then filter) and the sets its rules match.
func kubeProxyRuleset() ([]byte, []dataplane.Set, error) {
	set, cfg, err := proxierCluster(1000, 3)
	if err != nil {
		return nil, nil, err
	}
	k, err := programmedKernel(set, cfg)
	if err != nil {
		return nil, nil, err
	}
	var payload bytes.Buffer
	for _, table := range []string{"nat", "filter"} {
		out, err := k.Save(dataplane.IPv4, table)
		if err != nil {
			return nil, nil, err
		}
		tables, err := dataplane.ParseSave(dataplane.IPv4, out)
		if err != nil {
			return nil, nil, err
		}
		t := tables[table]
		chains := ownChains(t)
		fmt.Fprintf(&payload, "*%s\n", table)
		for _, c := range chains {
			fmt.Fprintf(&payload, ":%s - [0:0]\n", c)
		}
		for _, c := range chains {
			for _, r := range t.Rules[c] {
				fmt.Fprintf(&payload, "-A %s %s\n", c, r)
			}
		}
		payload.WriteString("COMMIT\n")
	}
	sets, err := k.Sets()
	if err != nil {
		return nil, nil, err
	}
	for i := range sets {
		sets[i].Entries = nil
	}
	return payload.Bytes(), sets, nil
}

// ownChains are a table's chains other than the built-in ones, sorted.
func ownChains(t *dataplane.Table) []string {
	var out []string
	for c, policy := range t.Chains {
		if policy == "-" {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// ownRules counts a payload's rules in chains of its own.
func ownRules(payload []byte) (int, error) {
	tables, err := dataplane.ParseSave(dataplane.IPv4, payload)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range tables {
		for _, c := range ownChains(t) {
			n += len(t.Rules[c])
		}
	}
	return n, nil
}

// flushRuleset empties a payload's chains and then deletes them: a chain
// referenced by another cannot go while the other still jumps to it.
func flushRuleset(payload []byte) ([]byte, error) {
	tables, err := dataplane.ParseSave(dataplane.IPv4, payload)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, table := range []string{"nat", "filter"} {
		chains := ownChains(tables[table])
		fmt.Fprintf(&b, "*%s\n", table)
		for _, c := range chains {
			fmt.Fprintf(&b, ":%s - [0:0]\n", c)
		}
		for _, c := range chains {
			fmt.Fprintf(&b, "-X %s\n", c)
		}
		b.WriteString("COMMIT\n")
	}
	return b.Bytes(), nil
}

// A kube-proxy release's own work is priced as kpsim's proxier's is, per
// unit of dataplane.Work, but its code cannot be run against a Replay
// phase by phase: it runs whole, in a kpsim binary built with it
// (upstream/). FitRelease times its syncs on the in-memory kernel, on the
// modeled clock, from its own sync-duration histogram (record.Sync.Wall:
// the release's code, plus what its utilities' adapters and the in-memory
// kernel do for each operation: microseconds each, and an iptables-save
// parsed back per iptables command, about 1 ms a sync at these sizes),
// at each size with 1 and 3 endpoints per
// service, and fits the prices of a sync, a service port derived, one
// passed over, an endpoint of one derived and an endpoint of one passed
// over, the units a release's sync is priced in (observed.Family.Sync).

// releaseScenario is the calibration's timeline: the first sync, then
// periodic syncs with nothing to do (a release's IPVS sync visits every
// service every time; its nftables mode syncs so only hourly), then a
// sync per second that changes one service (in nftables mode a partial
// sync, which derives that service and passes over the others).
const releaseScenario = `name: calibrate-release
description: how long does the release's own code take per sync?
seed: 1
backend: sim
sim: {timeScale: 0}
cluster:
  services: %d
  endpointsPerService: %d
  portsPerService: 1
  nodes: 3
proxier:
  minSyncPeriod: 1s
  syncPeriod: 10s
timeline:
  - createCluster
  - startProxier
  - waitSynced: {timeout: 10m}
  - sleep: 25s
  - churnEndpoints: {rate: 1, duration: 5s, share: 0.01}
  - waitSynced: {timeout: 10m}
`

// releaseRuns is how often FitRelease runs each case: a run has one full
// sync in nftables mode (the first; the next is an hour later), and one
// run's first sync took 24 to 58 ms at 1,000 services over three
// calibrations on a quiet machine here.
const releaseRuns = 3

// runRelease runs releaseScenario once for impl in mode at n services of
// endpoints each, on the in-memory kernel.
func runRelease(impl string, mode proxier.Mode, n, endpoints int) (*record.File, error) {
	s, err := scenarios.Parse("calibrate-release.yaml", fmt.Appendf(nil, releaseScenario, n, endpoints),
		[]string{"proxier.implementation=" + impl, "proxier.mode=" + string(mode)})
	if err != nil {
		return nil, err
	}
	spec, err := s.BackendSpec()
	if err != nil {
		return nil, err
	}
	b, err := backend.NewSim(spec)
	if err != nil {
		return nil, err
	}
	runtime.GC() // not the previous run's garbage: a node's kube-proxy starts with none
	return scenarios.Run(context.Background(), s, scenarios.RunOptions{Backend: b})
}

// FitRelease prices release impl's own work in proxy mode mode (see
// above), at each of services; log receives a line per case. The syncs of
// a run are two samples: its full syncs (every service derived) and its
// partial ones (len(Programmed) services derived, the others passed over),
// each at its median time.
func FitRelease(impl string, mode proxier.Mode, services []int, where string, log io.Writer) (sim.ProxierCost, error) {
	priced := proxier.Config{Implementation: impl, Mode: mode}.Priced()
	var samples []workSample
	for _, n := range services {
		for _, endpoints := range []int{1, 3} {
			walls := map[bool][]float64{} // by whether the sync was full
			works := map[bool][]dataplane.Work{}
			for range releaseRuns {
				f, err := runRelease(impl, mode, n, endpoints)
				if err != nil {
					return sim.ProxierCost{}, fmt.Errorf("%s at %dx%d: %w", priced, n, endpoints, err)
				}
				for _, rec := range f.Syncs {
					if !rec.Finished() || rec.Wall <= 0 {
						continue
					}
					w := dataplane.Work{Syncs: 1, Derived: rec.Services, Endpoints: rec.Endpoints}
					if !rec.Full {
						changed := min(max(1, len(rec.Programmed)), rec.Services)
						w = dataplane.Work{Syncs: 1, Derived: changed, Endpoints: changed * endpoints, Ports: rec.Services - changed, Passed: max(0, rec.Endpoints-changed*endpoints)}
					}
					walls[rec.Full] = append(walls[rec.Full], rec.Wall)
					works[rec.Full] = append(works[rec.Full], w)
				}
			}
			if len(walls[true]) == 0 {
				return sim.ProxierCost{}, fmt.Errorf("%s at %dx%d: no finished full sync", priced, n, endpoints)
			}
			for _, full := range []bool{true, false} {
				if len(walls[full]) == 0 {
					continue
				}
				kind := "syncs"
				if !full {
					kind = "partial syncs"
				}
				w := works[full][len(works[full])-1]
				x := workSample{name: fmt.Sprintf("%s %dx%d", kind, n, endpoints), work: w, seconds: median(walls[full]),
					low: slices.Min(walls[full]), high: slices.Max(walls[full]), n: len(walls[full])}
				fmt.Fprintf(log, "%-45s %12.1f us (median of %d, %.1f-%.1f; %s)\n", priced+" "+x.name, x.seconds*1e6, x.n, x.low*1e6, x.high*1e6, unitsOf(w))
				samples = append(samples, x)
			}
		}
	}
	price, err := fitWork(samples)
	if err != nil {
		return sim.ProxierCost{}, fmt.Errorf("calibrate %s: %w", priced, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Fitted by `kpsim calibrate` on %s: %s's own syncs in %s mode on the in-memory kernel, timed by its own sync-duration histogram over %d runs of each case, the median and range of each: ", where, impl, mode, releaseRuns)
	for i, s := range samples {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s (%s-%s of %d; %s)", s.name, dur(s.seconds), dur(s.low), dur(s.high), s.n, unitsOf(s.work))
	}
	fmt.Fprintf(&b, ". Least squares on relative errors (fitWork): %s per sync, %s per service port derived, %s per one passed over, %s per endpoint of one derived, %s per endpoint of one passed over.", dur(price.PerSync), dur(price.PerDerived), dur(price.PerPort), dur(price.PerEndpoint), dur(price.PerPassed))
	price.Source = b.String()
	return price, nil
}
