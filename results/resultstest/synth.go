// Package resultstest builds synthetic results files with the shape of real
// runs, for tests of reports and comparisons that must not depend on running
// a scenario.
package resultstest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/prom"
)

// Options shape a synthetic run.
type Options struct {
	Name string // scenario name; "synthetic" if empty
	// Seed fixes everything deterministic about the run: the sequence of
	// syncs and their kernel operations, as a scenario seed does.
	Seed uint64
	// Run varies only the timing noise, as repeating a run does.
	Run uint64
	// Noise is the relative standard deviation of every duration (0.05 = 5%).
	Noise    float64
	Syncs    int // total syncs; at least 1
	Services int // service ports
	// IPSetExec charges one process per ipset entry (about 4 ms) instead of
	// netlink (about 15 µs), in phase "ipset-entries".
	IPSetExec bool
	Probes    bool // record probes, with failures around the restart
	DualStack bool // two proxiers syncing at once
	Metrics   bool // record histograms observed from the syncs
	// FirstSuccess records each probed target's first attempt and first
	// success, as a node that just joined sees them: target i becomes
	// reachable i×300 ms after its first attempt, and the last never does.
	FirstSuccess bool
	// Modeled runs on the modeled clock: each phase's kernel part is its
	// noiseless cost (the same for a seed, as the cost profile makes it),
	// and only the proxier's part carries the noise.
	Modeled bool
	// Release makes the run a kube-proxy release's (Release names it, as
	// "kube-proxy@v1.30.3") on the modeled clock, whose deleted ipset
	// entries and broken traffic vary from run to run as Go's map order
	// makes a release's: Run draws them, not Seed.
	Release string
}

// Phases are the phase names synthetic syncs carry, in order.
var Phases = []string{"read-kernel", "ipsets", "ipset-entries", "ipvs-services", "ipvs-destinations", "addresses", "iptables", "cleanup"}

// Epoch is when every synthetic run starts.
var Epoch = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// File returns a summarized synthetic results file.
func File(o Options) *record.File {
	if o.Name == "" {
		o.Name = "synthetic"
	}
	if o.Syncs < 1 {
		o.Syncs = 1
	}
	if o.Services < 1 {
		o.Services = 100
	}
	det := rand.New(rand.NewPCG(o.Seed, 1))
	noise := rand.New(rand.NewPCG(o.Seed, 1000+o.Run))
	vary := det // what a release's map order decides
	if o.Release != "" {
		o.Modeled, vary = true, noise
	}
	jitter := func(s float64) float64 {
		v := s * (1 + o.Noise*noise.NormFloat64())
		if v < s*0.2 {
			v = s * 0.2
		}
		return v
	}
	perEntry := 15e-6
	ipset := "netlink"
	if o.IPSetExec {
		perEntry, ipset = 4e-3, "exec"
	}
	families := []dataplane.Family{dataplane.IPv4}
	if o.DualStack {
		families = append(families, dataplane.IPv6)
	}
	scenario, _ := json.Marshal(map[string]any{
		"name":    o.Name,
		"seed":    o.Seed,
		"proxier": map[string]any{"ipset": ipset, "initialSync": "handlers"},
	})
	timeScale := 1.0
	if o.Modeled {
		timeScale = 0
	}
	f := &record.File{
		SchemaVersion: record.SchemaVersion,
		Kpsim:         record.Build{Version: "v0.0.0-test", Commit: "0123456789ab"},
		Environment:   record.Environment{OS: "linux", Kernel: "6.1.0", CPU: "synthetic CPU", CPUs: 2, GoVersion: "go1.26.0"},
		Backend:       dataplane.BackendSim,
		Basis:         record.Modeled,
		Clock:         record.ClockWall,
		Proxier:       record.ProxierKpsim,
		CostProfile:   &record.ProfileRef{Name: "host-2026", Source: "synthetic", TimeScale: timeScale},
		Scenario:      scenario,
		Start:         Epoch,
	}
	if o.Modeled {
		f.Clock = record.ClockModeled
	}
	if o.Release != "" {
		f.Proxier = o.Release
	}
	// Timeline: create the cluster, churn, restart the proxier halfway.
	restartAt := o.Syncs / 2
	t := Epoch
	step := func(kind, label string, d time.Duration) {
		f.Steps = append(f.Steps, record.Step{Index: len(f.Steps), Kind: kind, Label: label, Start: t, End: t.Add(d)})
	}
	step("create-cluster", fmt.Sprintf("%d services", o.Services), 500*time.Millisecond)
	proxier, seq := 0, 0
	var restartTime time.Time
	for i := 0; i < o.Syncs; i++ {
		full := i == 0 || i == restartAt
		if i == restartAt && i > 0 {
			proxier++
			seq = 0
			restartTime = t
			step("restart-proxier", "restart proxier", 200*time.Millisecond)
		} else if i == 1 {
			step("churn-endpoints", "rolling restarts", time.Duration(o.Syncs)*time.Second)
		}
		seq++
		changed := 1 + det.IntN(20)
		if full {
			changed = o.Services
		}
		for _, fam := range families {
			s := syncOf(f, o, det, vary, jitter, fam, proxier, seq, full, changed, perEntry, t)
			f.Syncs = append(f.Syncs, s)
			f.Totals.Ops.Add(&s.Ops)
		}
		t = t.Add(time.Second + time.Duration(det.IntN(500))*time.Millisecond)
	}
	if restartAt > 0 {
		f.Totals.Readded[dataplane.OpIPSetAdd] = int64(o.Services / 3)
	}
	f.End = t
	f.Totals.CPUSeconds = jitter(0.8)
	f.Totals.PeakRSS = int64(jitter(60 << 20))
	if o.Probes {
		f.Probes = probes(o, vary, restartTime)
		// Probes ran at a steady rate over the run.
		for i := range f.Steps {
			st := &f.Steps[i]
			st.ProbeAttempts = int(int64(f.Probes.Attempts) * int64(st.Start.Sub(Epoch)) / int64(f.End.Sub(Epoch)))
		}
	}
	if o.Metrics {
		f.Metrics = observe(f)
	}
	results.Summarize(f)
	return f
}

func syncOf(f *record.File, o Options, det, vary *rand.Rand, jitter func(float64) float64, fam dataplane.Family,
	proxier, seq int, full bool, changed int, perEntry float64, t time.Time) record.Sync {
	s := record.Sync{Proxier: proxier, Family: fam, Seq: seq, Trigger: "changes", Full: full, Start: t,
		Services: o.Services, Endpoints: o.Services * 3}
	if full {
		s.Trigger = "initial"
	}
	base := map[string]float64{
		"read-kernel":       20e-6 * float64(o.Services),
		"ipsets":            0.4e-3,
		"ipset-entries":     perEntry * float64(changed),
		"ipvs-services":     30e-6 * float64(o.Services),
		"ipvs-destinations": 20e-6 * float64(changed*3),
		"addresses":         10e-6 * float64(changed),
		"iptables":          4e-3,
		"cleanup":           0.2e-3,
	}
	for _, name := range Phases {
		p := record.Phase{Name: name, Seconds: jitter(base[name])}
		if o.Modeled {
			p.KernelSeconds, p.ProxierSeconds = base[name], jitter(base[name]/10)
			p.Seconds = p.KernelSeconds + p.ProxierSeconds
		}
		p.Wall = p.Seconds * 0.9
		switch name {
		case "ipset-entries":
			p.Ops[dataplane.OpIPSetAdd] = int64(changed)
			if !full {
				p.Ops[dataplane.OpIPSetDel] = int64(vary.IntN(changed + 1))
			}
		case "ipvs-services":
			p.Ops[dataplane.OpIPVSList] = 1
			if full {
				p.Ops[dataplane.OpIPVSServiceAdd] = int64(o.Services)
			}
		case "ipvs-destinations":
			p.Ops[dataplane.OpIPVSDestinationAdd] = int64(changed * 2)
			p.Ops[dataplane.OpIPVSDestinationUpdate] = int64(changed)
		case "iptables":
			p.Ops[dataplane.OpIPTablesRestore] = 1
			p.Ops[dataplane.OpIPTablesRestoreBytes] = 4096
		}
		s.Phases = append(s.Phases, p)
		s.Seconds += p.Seconds
		s.KernelSeconds += p.KernelSeconds
		s.ProxierSeconds += p.ProxierSeconds
		s.Wall += p.Wall
		s.Ops.Add(&p.Ops)
	}
	if !full {
		for k := 0; k < 1+det.IntN(3); k++ {
			s.Programmed = append(s.Programmed, record.Programmed{
				Object:  fmt.Sprintf("ns-%d/svc-%d-abcde", k, det.IntN(o.Services)),
				Seconds: jitter(0.3+det.Float64()) + s.Seconds,
			})
		}
	}
	return s
}

func probes(o Options, vary *rand.Rand, restart time.Time) *record.Probes {
	p := &record.Probes{Basis: record.Modeled, Interval: 0.1}
	for i := 0; i < 5; i++ {
		p.Targets = append(p.Targets, record.Target{Service: fmt.Sprintf("default/svc-%d:http", i), Kind: "clusterip",
			Address: fmt.Sprintf("10.96.0.%d:80", 10+i), Protocol: dataplane.TCP, Attempts: 10 * o.Syncs})
		p.Attempts += 10 * o.Syncs
	}
	if o.FirstSuccess {
		// Target i fails from the first attempt for i*300ms; the last never succeeds.
		for i := range p.Targets {
			t := &p.Targets[i]
			t.First = Epoch
			fails := 3 * i
			if i < len(p.Targets)-1 {
				t.FirstOK = Epoch.Add(time.Duration(fails) * 100 * time.Millisecond)
				if fails > 0 {
					t.Recovered = []time.Time{t.FirstOK}
				}
			} else {
				fails = t.Attempts
			}
			for k := 0; k < fails; k++ {
				p.Failures = append(p.Failures, record.Failure{Target: i, Time: Epoch.Add(time.Duration(k) * 100 * time.Millisecond), Outcome: "no-address"})
			}
		}
	}
	if restart.IsZero() {
		return p
	}
	// Two services break across the restart, one for longer.
	for _, target := range []int{1, 3} {
		n := 25
		if target == 1 {
			n = 8 + vary.IntN(4)
		}
		for k := 0; k < n; k++ {
			p.Failures = append(p.Failures, record.Failure{Target: target,
				Time: restart.Add(time.Duration(k) * 100 * time.Millisecond), Outcome: "no-destination"})
		}
		p.Targets[target].Recovered = append(p.Targets[target].Recovered, restart.Add(time.Duration(n)*100*time.Millisecond))
	}
	return p
}

// observe records the histograms a proxier's metrics would hold after the run.
func observe(f *record.File) []record.Metric {
	reg := prometheus.NewRegistry()
	syncs := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: record.MetricSyncDuration,
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{record.LabelFamily})
	phases := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: record.MetricSyncPhaseDuration,
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}, []string{record.LabelFamily, record.LabelPhase})
	reg.MustRegister(syncs, phases)
	for _, s := range f.Syncs {
		syncs.WithLabelValues(string(s.Family)).Observe(s.Seconds)
		for _, p := range s.Phases {
			phases.WithLabelValues(string(s.Family), p.Name).Observe(p.Seconds)
		}
	}
	ms, err := prom.Histograms(reg)
	if err != nil {
		panic(fmt.Sprintf("gather synthetic histograms: %v", err))
	}
	return ms
}

// Ask makes f's scenario ask about one segment of its timeline (as
// `question:` does) and summarizes it again.
func Ask(f *record.File, segment string) {
	var sc map[string]any
	if err := json.Unmarshal(f.Scenario, &sc); err != nil {
		panic(fmt.Sprintf("synthetic scenario: %v", err))
	}
	sc["question"] = segment
	js, err := json.Marshal(sc)
	if err != nil {
		panic(fmt.Sprintf("synthetic scenario: %v", err))
	}
	f.Scenario = js
	results.Summarize(f)
}
