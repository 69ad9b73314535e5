package results

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
)

// Class says how comparisons treat a figure.
type Class string

const (
	// Timing figures (latencies, disruption, CPU, RSS) vary from run to
	// run; comparisons test them statistically.
	Timing Class = "timing"
	// Exact figures (kernel operation counts, modeled kernel time, failed
	// syncs) are deterministic for a fixed scenario seed; comparisons hold
	// them to exact equality, and any difference is real.
	Exact Class = "exact"
)

// Units of figures. Seconds and bytes are formatted for a reader; the
// others are counts of what they name.
const (
	UnitSeconds  = "s"
	UnitBytes    = "bytes"
	UnitOps      = "ops"
	UnitAttempts = "attempts"
	UnitSyncs    = "syncs"
	UnitTargets  = "targets"
	UnitRuns     = "runs"
)

// Counted is the basis of figures that are counts of what happened.
const Counted = "counted"

// Figure is one quantity of a run: the single list that the summary
// printed after a run, the report's headline and comparisons all read, so
// that a new figure is added in one place.
type Figure struct {
	// Name identifies the figure in comparisons and benchstat output
	// ("sync", "ops/ipset-add"); a distribution's quantiles add theirs
	// ("sync/p99").
	Name string
	// Label names the figure's line in the summary and its row in the
	// report's headline; empty for a figure only comparisons show.
	Label string
	Unit  string
	// Basis says how the figure was obtained in f: measured, modeled or counted.
	Basis func(f *record.File) string
	// Class is how comparisons test the figure; empty for a figure they skip.
	Class Class
	// HigherIsWorse makes an exact figure's change a regression or an
	// improvement by its direction. An exact figure without it (operation
	// counts) has no better direction: any change is a change in behaviour,
	// to be declared. Every timing figure is worse higher.
	HigherIsWorse bool

	// A compared figure is a single Value, or a distribution (Dist) whose
	// Quantiles are compared. PerSync, when set, gives the distribution's
	// samples sync by sync, so that two runs' syncs can be paired.
	Value     func(f *record.File) float64
	Dist      func(f *record.File) record.Dist
	Quantiles []Quantile
	PerSync   func(f *record.File) []SyncValue

	// Line is the figure as a reader sees it, in the summary and the
	// headline; ok is false when f has nothing to say about it (the line is
	// left out). Nil for a figure only comparisons show.
	Line func(f *record.File) (l Line, ok bool)

	// RunOnly marks a figure of the whole run that a segment has no share
	// of (operations re-added across the run, the process's CPU and RSS,
	// exported histograms, whether the run failed).
	RunOnly bool
	// Disruption marks the figures of broken traffic: a rise is a
	// regression that only `kpsim compare --allow-disruption` declares.
	Disruption bool
}

// Line is a figure's text: its value, the basis of that value (empty when
// the text holds no value, such as "no probes ran") and a note that explains it.
type Line struct {
	Text, Basis, Note string
}

// Quantile is one compared statistic of a distribution.
type Quantile struct {
	Name string
	Of   func(record.Dist) float64
}

// The quantiles comparisons read.
var (
	P50 = Quantile{"p50", func(d record.Dist) float64 { return d.P50 }}
	P99 = Quantile{"p99", func(d record.Dist) float64 { return d.P99 }}
	Max = Quantile{"max", func(d record.Dist) float64 { return d.Max }}
)

// SyncValue is one sync's sample of a distribution.
type SyncValue struct {
	Sync  record.SyncKey
	Value float64
}

// Bases of figures.
func durationBasis(f *record.File) string { return f.Basis }
func countedBasis(*record.File) string    { return Counted }
func measuredBasis(*record.File) string   { return record.Measured }
func probeBasis(f *record.File) string {
	if f.Probes == nil {
		return ""
	}
	return f.Probes.Basis
}

// Figures lists the figures of the given files, in the order a reader
// meets them. Phases and operation kinds are those any of the files has,
// so that files compared side by side list the same figures.
func Figures(files ...*record.File) []Figure {
	// Figures a file may not have at all are listed only when one of them
	// does: the kernel backend models nothing, and files before schema
	// version 2 recorded no first attempts.
	modeled := slices.ContainsFunc(files, func(f *record.File) bool { return KernelSeconds(f) != 0 })
	firsts := slices.ContainsFunc(files, recordsFirstAttempts)
	var figs []Figure
	add := func(when bool, fs ...Figure) {
		if when {
			figs = append(figs, fs...)
		}
	}
	add(true,
		Figure{Name: "sync", Label: "syncs", Unit: UnitSeconds, Basis: durationBasis, Class: Timing, HigherIsWorse: true,
			Dist: func(f *record.File) record.Dist { return f.Summary.Sync }, Quantiles: []Quantile{P50, P99, Max}, PerSync: syncSeconds,
			Line: syncsLine},
		Figure{Name: "failed-syncs", Label: "failed syncs", Unit: UnitSyncs, Basis: countedBasis, Class: Exact, HigherIsWorse: true,
			Value: func(f *record.File) float64 { return float64(f.Summary.FailedSyncs) }, Line: failedSyncsLine},
		Figure{Name: "slowest-sync", Label: "slowest sync", Unit: UnitSeconds, Basis: durationBasis, Line: slowestLine},
		Figure{Name: "unfit", Label: "ipsets full", RunOnly: true, Line: unfitLine},
		// A run that failed (it did not just stop at Ctrl-C) is worse than
		// one that did not, whatever its other figures; the summary says
		// why on its own line.
		Figure{Name: "run/failed", Unit: UnitRuns, Basis: countedBasis, Class: Exact, HigherIsWorse: true, RunOnly: true,
			Value: func(f *record.File) float64 {
				if f.Error != "" && !f.Interrupted {
					return 1
				}
				return 0
			}})
	add(modeled,
		// Modeled kernel time is priced per operation: like the operation
		// counts it follows, any change is a change in what the proxier
		// asked of the kernel, to be declared, sync by sync.
		Figure{Name: "kernel/seconds", Label: "kernel time", Unit: UnitSeconds, Basis: func(*record.File) string { return record.Modeled },
			Class: Exact, Value: KernelSeconds, PerSync: syncKernelSeconds, Line: kernelTimeLine})
	add(true,
		Figure{Name: "ops/writes", Label: "kernel writes", Unit: UnitOps, Basis: countedBasis, Class: Exact,
			Value: func(f *record.File) float64 { return float64(f.Totals.Ops.Writes()) },
			Line: func(f *record.File) (Line, bool) {
				return Line{fmt.Sprint(f.Totals.Ops.Writes()), Counted, TopOps(f.Totals.Ops, 4)}, true
			}},
		Figure{Name: "readded/total", Label: "deleted, re-added", Unit: UnitOps, Basis: countedBasis, Class: Exact, RunOnly: true,
			Value: func(f *record.File) float64 { return float64(SumOps(f.Totals.Readded)) },
			Line: func(f *record.File) (Line, bool) {
				return Line{fmt.Sprint(SumOps(f.Totals.Readded)), Counted, TopOps(f.Totals.Readded, 4)}, true
			}},
		Figure{Name: "programming", Label: "net programming", Unit: UnitSeconds, Basis: durationBasis, Class: Timing, HigherIsWorse: true,
			Dist: func(f *record.File) record.Dist { return f.Summary.Programming }, Quantiles: []Quantile{P50, P99},
			Line: func(f *record.File) (Line, bool) {
				p := f.Summary.Programming
				if p.N == 0 {
					return Line{Text: "no changes with a trigger time"}, true
				}
				return Line{Text: fmt.Sprintf("%d %s: %s", p.N, Plural(p.N, "change", "changes"), quantiles(p)), Basis: f.Basis}, true
			}},
		Figure{Name: "disruption/seconds", Label: "disruption", Unit: UnitSeconds, Basis: probeBasis, Class: Timing, HigherIsWorse: true,
			Disruption: true, Value: func(f *record.File) float64 { return f.Summary.Disruption.Seconds }, Line: disruptionLine},
		Figure{Name: "disruption/failed-attempts", Unit: UnitAttempts, Basis: probeBasis, Class: Timing, HigherIsWorse: true,
			Disruption: true, Value: func(f *record.File) float64 { return float64(f.Summary.Disruption.FailedAttempts) }},
		Figure{Name: "disruption/longest-window", Unit: UnitSeconds, Basis: probeBasis, Class: Timing, HigherIsWorse: true,
			Disruption: true, Value: func(f *record.File) float64 { return f.Summary.Disruption.LongestGap }})
	add(firsts,
		Figure{Name: "reachable", Label: "first success", Unit: UnitSeconds, Basis: probeBasis, Class: Timing, HigherIsWorse: true,
			Disruption: true, Dist: func(f *record.File) record.Dist { return f.Summary.Reachable }, Quantiles: []Quantile{P50, Max}, Line: reachableLine},
		Figure{Name: "unreachable", Unit: UnitTargets, Basis: probeBasis, Class: Timing, HigherIsWorse: true,
			Disruption: true, Value: func(f *record.File) float64 { return float64(f.Summary.Unreachable) }})
	add(true,
		Figure{Name: "histograms", Label: "histograms", Line: histogramsLine, RunOnly: true},
		Figure{Name: "leftovers", Label: "left behind", RunOnly: true, Line: func(f *record.File) (Line, bool) {
			return Line{Text: strings.Join(f.Leftovers, "; ") + " (after the switch from IPVS mode)", Basis: f.Basis}, len(f.Leftovers) > 0
		}},
		Figure{Name: "process/cpu", Label: "process", Unit: UnitSeconds, Basis: measuredBasis, Class: Timing, HigherIsWorse: true, RunOnly: true,
			Value: func(f *record.File) float64 { return f.Totals.CPUSeconds },
			Line: func(f *record.File) (Line, bool) {
				t := f.Totals
				return Line{Text: fmt.Sprintf("CPU %s, peak RSS %s", FormatSeconds(t.CPUSeconds), FormatBytes(t.PeakRSS)), Basis: record.Measured},
					t.CPUSeconds > 0 || t.PeakRSS > 0
			}},
		Figure{Name: "process/peak-rss", Unit: UnitBytes, Basis: measuredBasis, Class: Timing, HigherIsWorse: true, RunOnly: true,
			Value: func(f *record.File) float64 { return float64(f.Totals.PeakRSS) }})
	for _, ph := range PhaseNames(files) {
		figs = append(figs, Figure{Name: "phase/" + ph, Unit: UnitSeconds, Basis: durationBasis, Class: Timing, HigherIsWorse: true,
			Dist: func(f *record.File) record.Dist { return f.Summary.Phases[ph] }, Quantiles: []Quantile{P50, P99},
			PerSync: func(f *record.File) []SyncValue { return phaseSeconds(f, ph) }})
	}
	var ops, readded dataplane.Ops
	for _, f := range files {
		ops.Add(&f.Totals.Ops)
		readded.Add(&f.Totals.Readded)
	}
	for _, op := range dataplane.AllOps() {
		if ops[op] != 0 {
			figs = append(figs, Figure{Name: "ops/" + op.String(), Unit: UnitOps, Basis: countedBasis, Class: Exact,
				Value: func(f *record.File) float64 { return float64(f.Totals.Ops[op]) }})
		}
	}
	for _, op := range dataplane.AllOps() {
		if readded[op] != 0 {
			figs = append(figs, Figure{Name: "readded/" + op.String(), Unit: UnitOps, Basis: countedBasis, Class: Exact, RunOnly: true,
				Value: func(f *record.File) float64 { return float64(f.Totals.Readded[op]) }})
		}
	}
	return figs
}

// SegmentFigures are the figures of one segment of the files' timelines
// (File.View): those of Figures that a segment has a share of, named
// "SEGMENT/FIGURE" ("restart/sync"), each read from the segment's view. A
// file without the segment has nothing to say about them (zero values, no
// line).
func SegmentFigures(segment string, files ...*record.File) []Figure {
	views := make([]*record.File, 0, len(files))
	for _, f := range files {
		if v := View(f, segment); v != nil {
			views = append(views, v)
		}
	}
	cache := map[*record.File]*record.File{}
	view := func(f *record.File) *record.File {
		v, ok := cache[f]
		if !ok {
			v = View(f, segment)
			if v == nil {
				v = &record.File{Summary: record.Summary{Phases: map[string]record.Dist{}}}
			}
			cache[f] = v
		}
		return v
	}
	var out []Figure
	for _, fg := range Figures(views...) {
		if fg.RunOnly {
			continue
		}
		fg.Name = segment + "/" + fg.Name
		basis := fg.Basis
		fg.Basis = func(f *record.File) string { return basis(view(f)) }
		if v := fg.Value; v != nil {
			fg.Value = func(f *record.File) float64 { return v(view(f)) }
		}
		if d := fg.Dist; d != nil {
			fg.Dist = func(f *record.File) record.Dist { return d(view(f)) }
		}
		if ps := fg.PerSync; ps != nil {
			fg.PerSync = func(f *record.File) []SyncValue { return ps(view(f)) }
		}
		if l := fg.Line; l != nil {
			fg.Line = func(f *record.File) (Line, bool) { return l(view(f)) }
		}
		out = append(out, fg)
	}
	return out
}

// KernelSeconds is the modeled kernel time of all syncs, summed in sync
// order so that two runs that issued the same operations sum to the same
// float64, bit for bit.
func KernelSeconds(f *record.File) float64 {
	var s float64
	for i := range f.Syncs {
		s += f.Syncs[i].KernelSeconds
	}
	return s
}

func syncSeconds(f *record.File) []SyncValue {
	var out []SyncValue
	for i := range f.Syncs {
		if s := &f.Syncs[i]; s.Finished() {
			out = append(out, SyncValue{s.Key(), s.Seconds})
		}
	}
	return out
}

func syncKernelSeconds(f *record.File) []SyncValue {
	out := make([]SyncValue, len(f.Syncs))
	for i := range f.Syncs {
		out[i] = SyncValue{f.Syncs[i].Key(), f.Syncs[i].KernelSeconds}
	}
	return out
}

func phaseSeconds(f *record.File, name string) []SyncValue {
	var out []SyncValue
	for i := range f.Syncs {
		s := &f.Syncs[i]
		if !s.Finished() {
			continue
		}
		for _, p := range s.Phases {
			if p.Name == name {
				out = append(out, SyncValue{s.Key(), p.Seconds})
			}
		}
	}
	return out
}

func quantiles(d record.Dist) string {
	return fmt.Sprintf("p50 %s  p99 %s  max %s", FormatSeconds(d.P50), FormatSeconds(d.P99), FormatSeconds(d.Max))
}

func syncsLine(f *record.File) (Line, bool) {
	s := &f.Summary
	if s.Syncs == 0 {
		return Line{Text: "none"}, true
	}
	text := fmt.Sprint(s.Syncs)
	if s.FailedSyncs > 0 {
		text += fmt.Sprintf(", %d failed", s.FailedSyncs)
	}
	if s.StoppedSyncs > 0 {
		text += fmt.Sprintf(", %d stopped by a restart or the run's end", s.StoppedSyncs)
	}
	switch s.Sync.N {
	case 0:
		return Line{Text: text, Note: "none finished"}, true
	case s.Syncs:
		return Line{Text: text + ": " + quantiles(s.Sync), Basis: f.Basis}, true
	}
	return Line{Text: text + ": " + quantiles(s.Sync), Basis: f.Basis, Note: fmt.Sprintf("over the %d that finished", s.Sync.N)}, true
}

// FirstFailure is the first failed sync of f, or nil.
func FirstFailure(f *record.File) *record.Sync {
	for i := range f.Syncs {
		if f.Syncs[i].Failed() {
			return &f.Syncs[i]
		}
	}
	return nil
}

func failedSyncsLine(f *record.File) (Line, bool) {
	first := FirstFailure(f)
	if first == nil {
		return Line{}, false
	}
	errs := map[string]bool{}
	for i := range f.Syncs {
		if s := &f.Syncs[i]; s.Failed() {
			errs[s.Error] = true
		}
	}
	note := fmt.Sprintf("first: %s: %s", first.Key(), first.Error)
	if len(errs) > 1 {
		note += fmt.Sprintf(" (%d different errors)", len(errs))
	}
	return Line{fmt.Sprint(f.Summary.FailedSyncs), Counted, note}, true
}

// unfitLine says what the last sync of each family that was not stopped
// could not add to a full ipset (Sync.Unfit): entries kube-proxy does not
// program, whose services' traffic its rules then treat otherwise.
func unfitLine(f *record.File) (Line, bool) {
	last := map[string]*record.Sync{}
	for i := range f.Syncs {
		if s := &f.Syncs[i]; !s.Stopped {
			last[string(s.Family)] = s
		}
	}
	total := 0
	var parts []string
	for _, fam := range slices.Sorted(maps.Keys(last)) {
		s := last[fam]
		for _, set := range slices.Sorted(maps.Keys(s.Unfit)) {
			u := s.Unfit[set]
			total += u.Entries
			parts = append(parts, fmt.Sprintf("%s %d (the lowest %s)", set, u.Entries, u.First))
		}
	}
	if total == 0 {
		return Line{}, false
	}
	return Line{fmt.Sprint(total), Counted, fmt.Sprintf("entries the last sync did not program, their sets full (maxelem %d): %s", dataplane.DefaultMaxElem, strings.Join(parts, ", "))}, true
}

func slowestLine(f *record.File) (Line, bool) {
	sl := f.Summary.Slowest
	if sl == nil {
		return Line{}, false
	}
	phase := "not phased"
	if sl.Phase != "" {
		phase = fmt.Sprintf("slowest phase %s %s", sl.Phase, FormatSeconds(sl.PhaseSeconds))
	}
	key := record.SyncKey{Proxier: sl.Proxier, Family: sl.Family, Seq: sl.Seq}
	return Line{FormatSeconds(sl.Seconds), f.Basis, fmt.Sprintf("%s; %s", key, phase)}, true
}

func kernelTimeLine(f *record.File) (Line, bool) {
	k := KernelSeconds(f)
	if k == 0 {
		return Line{}, false
	}
	var own float64
	for i := range f.Syncs {
		own += f.Syncs[i].ProxierSeconds
	}
	note := "priced per operation from the cost profile"
	if p := f.CostProfile; p != nil {
		note = fmt.Sprintf("priced per operation from cost profile %s", p.Name)
	}
	if own > 0 {
		note += fmt.Sprintf("; the proxier's own part %s", FormatSeconds(own))
		if f.Clock == record.ClockWall {
			note += " (measured)" // priced only on the modeled clock
		}
	}
	if f.Proxier != record.ProxierKpsim && f.Clock == record.ClockModeled {
		// A release's own sync code ran for real: its histogram's time is
		// its measured wall time (on the in-memory kernel), kept apart.
		var wall float64
		for i := range f.Syncs {
			wall += f.Syncs[i].Wall
		}
		priced := "priced as kpsim's proxier is"
		if p := f.CostProfile; p != nil && slices.Contains(p.Releases, f.Proxier) {
			priced = "priced by the profile's prices for " + f.Proxier
		}
		note += fmt.Sprintf(" (%s; %s measured %s of wall time in its own syncs)", priced, f.Proxier, FormatSeconds(wall))
	}
	return Line{FormatSeconds(k), record.Modeled, note}, true
}

func disruptionLine(f *record.File) (Line, bool) {
	d := &f.Summary.Disruption
	if f.Probes == nil || d.Attempts == 0 {
		return Line{Text: "no probes ran"}, true
	}
	return Line{FormatSeconds(d.Seconds), d.Basis, fmt.Sprintf("longest window %s, %d %s, %d of %d %s failed",
		FormatSeconds(d.LongestGap), d.ServicesAffected, Plural(d.ServicesAffected, "service", "services"),
		d.FailedAttempts, d.Attempts, Plural(d.Attempts, "attempt", "attempts"))}, true
}

// recordsFirstAttempts reports whether f's probes say when each target was
// first tried (files before schema version 2 do not).
func recordsFirstAttempts(f *record.File) bool {
	return f.Probes != nil && slices.ContainsFunc(f.Probes.Targets, func(t record.Target) bool { return !t.First.IsZero() })
}

func reachableLine(f *record.File) (Line, bool) {
	if !recordsFirstAttempts(f) {
		return Line{}, false
	}
	s := &f.Summary
	if f.SchemaVersion > 0 && f.SchemaVersion < 3 {
		note := fmt.Sprintf("from each target's first attempt, over %d %s", s.Reachable.N, Plural(s.Reachable.N, "target", "targets"))
		if s.Unreachable > 0 {
			note += fmt.Sprintf("; %d never succeeded", s.Unreachable)
		}
		if s.Reachable.N == 0 {
			return Line{Text: fmt.Sprintf("no target succeeded (%d probed)", s.Unreachable)}, true
		}
		return Line{quantiles(s.Reachable), f.Probes.Basis, note}, true
	}
	switch windows := s.Reachable.N + s.Unreachable; {
	case windows == 0:
		return Line{Text: "nothing broke"}, true
	case s.Reachable.N == 0:
		return Line{Text: fmt.Sprintf("never: none of %d disruption %s recovered before probing stopped", windows, Plural(windows, "window", "windows"))}, true
	}
	note := fmt.Sprintf("from each disruption window's first failed attempt to the next success, over %d %s", s.Reachable.N, Plural(s.Reachable.N, "window", "windows"))
	if s.Unreachable > 0 {
		note += fmt.Sprintf("; %d never recovered", s.Unreachable)
	}
	return Line{quantiles(s.Reachable), f.Probes.Basis, note}, true
}

func histogramsLine(f *record.File) (Line, bool) {
	if len(f.Metrics) == 0 {
		return Line{}, false
	}
	var bad []string
	for _, c := range CheckHistograms(f) {
		if !c.Consistent {
			bad = append(bad, fmt.Sprintf("%s{%s}: %s", c.Name, c.LabelText(), c.Problems[0]))
		}
	}
	if len(bad) == 0 {
		return Line{Text: fmt.Sprintf("%d exported, all consistent with the raw samples", len(f.Metrics))}, true
	}
	return Line{Text: fmt.Sprintf("%d of %d INCONSISTENT", len(bad), len(f.Metrics)), Note: strings.Join(bad, "; ")}, true
}

// FormatValue prints a figure's value in its unit.
func FormatValue(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case unit == UnitSeconds:
		return FormatSeconds(v)
	case unit == UnitBytes:
		return FormatBytes(int64(v))
	default:
		return fmt.Sprintf("%.0f", v)
	}
}
