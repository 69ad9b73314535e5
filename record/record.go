// Package record is the record a run writes: the types of the results file
// (File and everything in it, down to a sync's phases and a probe's
// failures), its schema version, the names of the implementations under
// test, and the names of the metrics a proxier exports and their labels.
// It is on the ground floor with dataplane/ and objects/: the proxier and
// the kernel testbed write these records, and the release adapters name
// these metrics, without importing results, which computes the summary,
// the figures, the printed text and reads and writes the file, and sits
// with its readers (report, compare).
//
// Schema returns a JSON Schema of the file generated from these types;
// results.schema.json is its checked-in copy (go generate ./record), and
// docs/results-format.md describes the file for readers outside kpsim.
package record

//go:generate go run ./internal/schemagen

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/kpsim/kpsim/dataplane"
)

// SchemaVersion is bumped on any change that an older reader would misread.
// Version 2 added the clock, the proxier under test, the modeled kernel and
// proxier parts of every duration and the probes' first successes; a version 1
// file reads as a version 2 file without them. Version 3 added each step's
// probe attempts before it and each target's recoveries, which give figures
// per segment and the time to first success after a failure; a version 2
// file reads without them (its first success is from each target's first
// attempt, and its segments have no attempt counts).
const SchemaVersion = 3

// Clock values: how a file's timestamps were taken.
const (
	// ClockModeled is the discrete-event clock of the in-memory kernel at time
	// scale 0: every timestamp and duration is modeled, syncs take their
	// modeled time, and a seed repeats them exactly.
	ClockModeled = "modeled"
	// ClockWall is the wall clock: the real kernel, or the sim at a time scale above 0.
	ClockWall = "wall"
)

// Where a probe's connections start (Target.From).
const (
	FromPod  = "pod"  // a pod on the node
	FromNode = "node" // the node's own network namespace (host network)
)

// ProxierKpsim names kpsim's own proxier in File.Proxier.
const ProxierKpsim = "kpsim"

// Basis values: whether a figure was measured on a real kernel, or includes
// the in-memory kernel's modeled cost.
const (
	Measured = "measured"
	Modeled  = "modeled"
	// ModeledKernel is the basis of a sim run's durations off the modeled
	// clock (a time scale above 0, or a timeline with API faults): the
	// kernel's part priced from the cost profile, the proxier's own part
	// measured.
	ModeledKernel = "modeled kernel + measured proxier"
)

// File is one run.
type File struct {
	SchemaVersion int         `json:"schemaVersion"`
	Kpsim         Build       `json:"kpsim"`
	Environment   Environment `json:"environment"`
	Backend       string      `json:"backend"` // one of dataplane.Backends
	// Basis of every duration in Syncs and Phases: Modeled for the sim on
	// the modeled clock (kernel time and the proxier's own time priced by
	// the cost profile), ModeledKernel for the sim on the wall clock (its
	// proxier time measured; files before it say Modeled), Measured for the
	// kernel backend.
	Basis string `json:"basis"`
	// Clock is ClockModeled or ClockWall: what Start, End and every other
	// timestamp in the file were read from.
	Clock string `json:"clock"`
	// Proxier is the proxier under test: ProxierKpsim, or a kube-proxy
	// release as "kube-proxy@v1.37.1".
	Proxier     string          `json:"proxier"`
	CostProfile *ProfileRef     `json:"costProfile,omitempty"` // sim only
	Scenario    json.RawMessage `json:"scenario"`              // the scenario as run, after defaults
	Start       time.Time       `json:"start"`
	End         time.Time       `json:"end"`
	// Interrupted is set when the run was stopped (Ctrl-C) before its timeline finished.
	Interrupted bool   `json:"interrupted,omitempty"`
	Error       string `json:"error,omitempty"` // why the run ended early, if it failed

	Steps   []Step   `json:"steps"`            // the timeline as executed
	Syncs   []Sync   `json:"syncs"`            // every sync of every proxier, in start order
	Probes  *Probes  `json:"probes,omitempty"` // nil when the scenario ran no probes
	Totals  Totals   `json:"totals"`
	Metrics []Metric `json:"metrics,omitempty"` // final exported histograms
	// Leftovers are what IPVS mode left on a node a restart switched to
	// nftables mode (restartProxier: {mode: nftables}), listed as the run
	// ends, one line per kind (proxier.IPVSModeLeftovers), or NothingLeft;
	// absent without a switch.
	Leftovers []string `json:"leftovers,omitempty"`
	Summary   Summary  `json:"summary"` // derived from the above by Summarize
}

// NothingLeft is File.Leftovers when a switch left nothing of IPVS mode.
const NothingLeft = "nothing of IPVS mode"

// Build identifies the kpsim binary that wrote the file.
type Build struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
}

// Environment is where the run happened.
type Environment struct {
	OS        string `json:"os"`
	Kernel    string `json:"kernel"`
	CPU       string `json:"cpu"`
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"goVersion"`
	Hostname  string `json:"hostname,omitempty"`
}

// ProfileRef names the cost profile a sim run charged, and where its numbers came from.
type ProfileRef struct {
	Name      string  `json:"name"`
	Source    string  `json:"source"`
	TimeScale float64 `json:"timeScale"`
	// Releases are the kube-proxy releases whose own work the profile
	// prices with prices of their own (the rest as kpsim's proxier).
	Releases []string `json:"releases,omitempty"`
}

// Step is one executed timeline step.
type Step struct {
	Index int       `json:"index"`
	Kind  string    `json:"kind"` // create-cluster, churn-endpoints, restart-proxier, ...
	Label string    `json:"label,omitempty"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// ProbeAttempts counts the probe attempts made before the step began,
	// so that a segment's attempts are the difference of its ends'.
	ProbeAttempts int `json:"probeAttempts,omitempty"`
}

// Sync is one run of syncProxyRules by one proxier.
type Sync struct {
	Proxier int              `json:"proxier"` // 0 for the first proxier of the run, +1 per restart
	Family  dataplane.Family `json:"family"`
	Seq     int              `json:"seq"`     // per proxier, from 1
	Trigger string           `json:"trigger"` // initial, changes, periodic, retry
	// Full is set when the sync visited every service and read the kernel back
	// (the first sync, and the periodic verification); otherwise it touched
	// only what changed.
	Full    bool      `json:"full"`
	Start   time.Time `json:"start"`
	Seconds float64   `json:"seconds"` // duration, on the file's Basis
	Parts
	Wall float64 `json:"wallSeconds"` // measured wall time (equals Seconds on the kernel)
	// Phases are the sync's named phases in order; empty for a proxier that
	// is not phased (a kube-proxy release), whose syncs are one block.
	Phases []Phase       `json:"phases"`
	Ops    dataplane.Ops `json:"ops"` // totals over phases
	// What the proxier knew when the sync started.
	Services  int `json:"services"`  // service ports
	Endpoints int `json:"endpoints"` // endpoints over all service ports
	// Programmed is one entry per EndpointSlice change this sync applied that
	// carried a trigger time: network programming latency, as kube-proxy's
	// metric defines it (change made -> this sync finished).
	Programmed []Programmed `json:"programmed,omitempty"`
	// Unfit is, per ipset, what the sync wanted in a set that was full
	// (dataplane.DefaultMaxElem): kube-proxy logs each entry that does not
	// fit and goes on, so the sync completes without them.
	Unfit map[string]Unfit `json:"unfit,omitempty"`
	Error string           `json:"error,omitempty"`
	// Stopped is set when the sync ended because its proxier was stopped
	// (a restart killed it, or the run ended): cut short, not failed; Error
	// says where it stopped.
	Stopped bool `json:"stopped,omitempty"`
}

// Unfit is what a sync could not add to a full ipset.
type Unfit struct {
	Entries int    `json:"entries"`
	First   string `json:"first"` // the first entry that did not fit, in the order they were added
}

// Finished reports whether the sync ran to its end without an error: only
// those say how long a sync takes.
func (s *Sync) Finished() bool { return s.Error == "" }

// Failed reports whether the sync ended with an error of its own, not cut
// short by its proxier being stopped.
func (s *Sync) Failed() bool { return s.Error != "" && !s.Stopped }

// Phase is one named step of a sync.
type Phase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Parts
	Wall float64       `json:"wallSeconds"`
	Ops  dataplane.Ops `json:"ops"`
	// Work is the proxier's own work in the phase, in the units a cost
	// profile prices it by, whatever the backend: on the modeled clock it
	// is what ProxierSeconds prices, on a real kernel what calibrate fits
	// the prices on.
	Work dataplane.Work `json:"work,omitzero"`
}

// Parts splits a modeled duration into the kernel's part, priced from the
// cost profile per operation, and the proxier's own part, priced from the
// profile per unit of work (on the modeled clock) or measured (at a time
// scale above 0). Both are zero on the real kernel, where nothing is modeled.
// The kernel part depends only on the operations issued, so a comparison
// holds it to exact equality, as it does operation counts.
type Parts struct {
	KernelSeconds  float64 `json:"kernelSeconds,omitempty"`
	ProxierSeconds float64 `json:"proxierSeconds,omitempty"`
}

// Programmed is the network programming latency of one change.
type Programmed struct {
	Object  string  `json:"object"` // namespace/name of the EndpointSlice
	Seconds float64 `json:"seconds"`
}

// Probes are connection attempts through the dataplane.
type Probes struct {
	Basis    string   `json:"basis"` // Modeled (sim asks its model) or Measured (real connections)
	Interval float64  `json:"intervalSeconds"`
	Targets  []Target `json:"targets"`
	Attempts int      `json:"attempts"`
	// Failures lists every failed attempt. Successful attempts are only counted.
	Failures []Failure `json:"failures"`
}

// Target is one probed service address.
type Target struct {
	Service  string             `json:"service"`        // namespace/name:port-name
	Kind     string             `json:"kind"`           // clusterip, nodeport, external, loadbalancer
	From     string             `json:"from,omitempty"` // FromPod (also when empty) or FromNode
	Address  string             `json:"address"`        // ip:port
	Protocol dataplane.Protocol `json:"protocol"`
	Attempts int                `json:"attempts"`
	// First is the target's first attempt and FirstOK its first successful
	// one (zero when none succeeded): how long a service took to become
	// reachable, e.g. from a node that just joined.
	First   time.Time `json:"first,omitzero"`
	FirstOK time.Time `json:"firstOK,omitzero"`
	// Recovered lists each success that followed a failed attempt (or the
	// target's first attempts, when those failed): when broken traffic came back.
	Recovered []time.Time `json:"recovered,omitempty"`
}

// Failure is one failed probe attempt.
type Failure struct {
	Target  int       `json:"target"` // index into Targets
	Time    time.Time `json:"time"`
	Outcome string    `json:"outcome"` // measured: refused, reset, timeout; modeled: no-address, rejected, no-virtual-server, stale-conntrack, no-destination, no-snat
	Seconds float64   `json:"seconds"` // attempt latency
}

// Totals are per-run sums.
type Totals struct {
	Ops dataplane.Ops `json:"ops"`
	// Readded counts, per add operation, kernel objects deleted and then
	// re-created within the run: wasted work.
	Readded    dataplane.Ops `json:"readded"`
	CPUSeconds float64       `json:"cpuSeconds"`   // process user+system, measured
	PeakRSS    int64         `json:"peakRSSBytes"` // measured
}

// Metric is a final Prometheus histogram as the run exported it.
type Metric struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Count  uint64            `json:"count"`
	Sum    float64           `json:"sum"`
	// Buckets are cumulative counts at each upper bound, as Prometheus exports them.
	Buckets []Bucket `json:"buckets"`
}

// Bucket is one cumulative histogram bucket.
type Bucket struct {
	UpperBound float64 `json:"le"`
	Count      uint64  `json:"count"`
}

// Summary holds statistics derived from the raw samples by Summarize; it is
// stored so that a reader without kpsim can see the headline, and recomputed
// by every reader that can.
type Summary struct {
	Syncs        int             `json:"syncs"`
	FailedSyncs  int             `json:"failedSyncs"`            // syncs that ended with an error of their own (Sync.Failed)
	StoppedSyncs int             `json:"stoppedSyncs,omitempty"` // syncs cut short by their proxier being stopped
	Sync         Dist            `json:"sync"`                   // sync Seconds over the syncs that finished (Sync.Finished)
	Phases       map[string]Dist `json:"phases"`                 // phase Seconds by phase name
	Programming  Dist            `json:"programming"`            // network programming latency
	Slowest      *SlowestSync    `json:"slowest,omitempty"`      // nil when there were no syncs
	Disruption   Disruption      `json:"disruption"`
	// Reachable is the time to first success: for each disruption window
	// (a target's run of failed attempts, including a target whose first
	// attempts failed), from its first failed attempt to the target's next
	// success. Unreachable counts the windows that never recovered before
	// probing stopped. Targets that never failed have no sample: a first
	// success is always about traffic that broke.
	Reachable   Dist `json:"reachable"`
	Unreachable int  `json:"unreachable"`
	// Question is the segment the scenario asks about (Question), and
	// Segments every segment of the timeline with its figures; empty in a
	// segment's own summary.
	Question string           `json:"question,omitempty"`
	Segments []SegmentSummary `json:"segments,omitempty"`
}

// Dist is a distribution of seconds (or counts) by gonum/stat.
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// SlowestSync points at the slowest sync and its slowest phase.
type SlowestSync struct {
	Proxier      int              `json:"proxier"`
	Family       dataplane.Family `json:"family"`
	Seq          int              `json:"seq"`
	Seconds      float64          `json:"seconds"`
	Phase        string           `json:"phase"`
	PhaseSeconds float64          `json:"phaseSeconds"`
}

// Disruption is the probes' failures grouped into windows.
type Disruption struct {
	Basis          string   `json:"basis,omitempty"`
	Attempts       int      `json:"attempts"`
	FailedAttempts int      `json:"failedAttempts"`
	Windows        []Window `json:"windows"`
	// Seconds is the total time during which at least one target failed.
	Seconds float64 `json:"seconds"`
	// LongestGap is the longest single window.
	LongestGap       float64 `json:"longestGapSeconds"`
	ServicesAffected int     `json:"servicesAffected"`
}

// Window is a run of consecutive failed attempts against one target.
type Window struct {
	Target   int       `json:"target"`
	Service  string    `json:"service"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Failures int       `json:"failures"`
}

// Segment is one part of the timeline, from the step that opened it to the
// step that opened the next (or the run's end).
type Segment struct {
	// Name is the opening step's segment name ("restart", "fault", "drift",
	// a mark's name), with "-2", "-3", ... when a name repeats; FirstSegment
	// for the part before any such step.
	Name string `json:"name"`
	// Step is the index of the step that opened it (-1 for FirstSegment),
	// Label that step's label.
	Step  int       `json:"step"`
	Label string    `json:"label,omitempty"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// SegmentSummary is a segment and its figures: the run's figures over the
// syncs that started in it and the probe attempts made in it.
type SegmentSummary struct {
	Segment
	Summary Summary `json:"summary"`
}

// SyncKey names a sync within a run. On the modeled clock, sync k of two
// runs of one scenario and seed applied the same changes.
type SyncKey struct {
	Proxier int
	Family  dataplane.Family
	Seq     int
}

// Key is the sync's SyncKey.
func (s *Sync) Key() SyncKey { return SyncKey{s.Proxier, s.Family, s.Seq} }

func (k SyncKey) String() string { return fmt.Sprintf("proxier %d %s #%d", k.Proxier, k.Family, k.Seq) }
