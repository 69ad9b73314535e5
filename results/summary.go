package results

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/kpsim/kpsim/record"
)

// Summarize recomputes f.Summary from the raw samples. It is the only writer
// of Summary, so that the stored headline and what a report recomputes can
// never disagree.
func Summarize(f *record.File) { summarize(f, true) }

// summarize computes f.Summary, with its segments when withSegments (a
// segment's own view has none).
func summarize(f *record.File, withSegments bool) {
	s := record.Summary{Syncs: len(f.Syncs), Phases: map[string]record.Dist{}}
	var syncs, programmed []float64
	phases := map[string][]float64{}
	for i := range f.Syncs {
		sy := &f.Syncs[i]
		if !sy.Finished() {
			// A failed or stopped sync ended part way: its duration says
			// nothing about how long syncing takes, and it is counted apart.
			if sy.Stopped {
				s.StoppedSyncs++
			} else {
				s.FailedSyncs++
			}
			continue
		}
		syncs = append(syncs, sy.Seconds)
		for _, p := range sy.Phases {
			phases[p.Name] = append(phases[p.Name], p.Seconds)
		}
		for _, p := range sy.Programmed {
			programmed = append(programmed, p.Seconds)
		}
		if s.Slowest == nil || sy.Seconds > s.Slowest.Seconds {
			s.Slowest = slowestOf(sy)
		}
	}
	s.Sync = NewDist(syncs)
	for name, xs := range phases {
		s.Phases[name] = NewDist(xs)
	}
	s.Programming = NewDist(programmed)
	s.Disruption = Disrupt(f.Probes)
	s.Reachable, s.Unreachable = reachable(f, s.Disruption.Windows)
	f.Summary = s
	// Files before schema version 3 did not record each step's probe
	// attempts, without which a segment's broken traffic has no share.
	if !withSegments || (f.SchemaVersion > 0 && f.SchemaVersion < 3) {
		return
	}
	segs := Segments(f)
	if len(segs) > 1 {
		for i, seg := range segs {
			next := -1
			if i+1 < len(segs) {
				next = segs[i+1].Step
			}
			f.Summary.Segments = append(f.Summary.Segments, record.SegmentSummary{Segment: seg, Summary: view(f, seg, next).Summary})
		}
	}
	if q := Question(f); q != "" && View(f, q) != nil {
		f.Summary.Question = q
	}
}

// reachable is the time to first success after each disruption window
// (Summary.Reachable), and how many windows never recovered.
func reachable(f *record.File, windows []record.Window) (record.Dist, int) {
	var xs []float64
	never := 0
	for _, r := range FirstSuccesses(f, windows) {
		if r.Never {
			never++
		} else {
			xs = append(xs, r.Seconds)
		}
	}
	return NewDist(xs), never
}

// FirstSuccess is one sample of the time to first success: a disruption
// window (Summary.Reachable) and how long after its first failed attempt
// its target next succeeded; Never when it did not before probing stopped.
// In a file before schema version 3 it is a target's time from its first
// attempt to its first success, and Window names only the target.
type FirstSuccess struct {
	Window  record.Window
	Seconds float64
	Never   bool
}

// FirstSuccesses lists the samples of the time to first success of f, one
// per window of its disruption (Disrupt).
func FirstSuccesses(f *record.File, windows []record.Window) []FirstSuccess {
	p := f.Probes
	if p == nil {
		return nil
	}
	var out []FirstSuccess
	if f.SchemaVersion > 0 && f.SchemaVersion < 3 {
		for i, t := range p.Targets {
			w := record.Window{Target: i, Service: t.Service, Start: t.First}
			switch {
			case t.Attempts == 0 || t.First.IsZero():
			case t.FirstOK.IsZero():
				out = append(out, FirstSuccess{Window: w, Never: true})
			default:
				out = append(out, FirstSuccess{Window: w, Seconds: t.FirstOK.Sub(t.First).Seconds()})
			}
		}
		return out
	}
	for _, w := range windows {
		var rec []time.Time
		if w.Target >= 0 && w.Target < len(p.Targets) {
			rec = p.Targets[w.Target].Recovered
		}
		i, _ := slices.BinarySearchFunc(rec, w.Start, func(a, b time.Time) int { return a.Compare(b) })
		if i == len(rec) {
			out = append(out, FirstSuccess{Window: w, Never: true})
			continue
		}
		out = append(out, FirstSuccess{Window: w, Seconds: rec[i].Sub(w.Start).Seconds()})
	}
	return out
}

func slowestOf(sy *record.Sync) *record.SlowestSync {
	out := &record.SlowestSync{Proxier: sy.Proxier, Family: sy.Family, Seq: sy.Seq, Seconds: sy.Seconds}
	for _, p := range sy.Phases {
		if out.Phase == "" || p.Seconds > out.PhaseSeconds {
			out.Phase, out.PhaseSeconds = p.Name, p.Seconds
		}
	}
	return out
}

// NewDist summarizes samples. Quantiles are empirical (the smallest sample at
// or above the fraction), so every reported figure is a value that actually
// occurred: a p99 of "15.4 s" is a real sync, not an interpolation.
func NewDist(xs []float64) record.Dist {
	if len(xs) == 0 {
		return record.Dist{}
	}
	sorted := slices.Clone(xs)
	sort.Float64s(sorted)
	var sum float64
	for _, x := range sorted {
		sum += x
	}
	return record.Dist{
		N:    len(sorted),
		Mean: sum / float64(len(sorted)),
		P50:  empiricalQuantile(0.50, sorted),
		P90:  empiricalQuantile(0.90, sorted),
		P99:  empiricalQuantile(0.99, sorted),
		Max:  sorted[len(sorted)-1],
	}
}

// empiricalQuantile is the smallest of the sorted samples with at least a
// fraction p of them at or below it. It is computed here rather than by
// gonum/stat, whose linear-algebra dependencies would otherwise come with
// the results schema into every package that records a sync.
func empiricalQuantile(p float64, sorted []float64) float64 {
	k := int(math.Ceil(p * float64(len(sorted))))
	return sorted[min(max(k, 1), len(sorted))-1]
}

// Disrupt groups the probes' failures into windows.
//
// Only failures are stored; successes are counted. Each target is probed
// once per Interval, one attempt at a time, so the attempt after a failure
// comes about one interval later, or as the failed attempt gave up when
// that was later (a timeout). Two failures of one target belong to the
// same window when the second came no later than 1.5 intervals plus the
// first one's latency after the first: there was no room for an attempt
// between them, hence no success. A longer gap means an
// attempt happened in between and did not fail, which ends the window.
//
// A window starts at its first failure and ends one interval after its last,
// or as that attempt gave up if later (the next attempt, a success or the
// end of the run, was due no sooner), so a single failed attempt counts as
// one interval of disruption, or its timeout, and n consecutive failures as
// n of those. With no known interval, windows are
// split only by ordering and end at their last failure.
//
// Seconds is the length of the union of all windows across targets (time
// during which something was broken); LongestGap is the longest single window.
func Disrupt(p *record.Probes) record.Disruption {
	d := record.Disruption{Windows: []record.Window{}}
	if p == nil {
		return d
	}
	d.Basis = p.Basis
	d.Attempts = p.Attempts
	d.FailedAttempts = len(p.Failures)
	interval := time.Duration(p.Interval * float64(time.Second))

	end := func(fl record.Failure) time.Time {
		if interval == 0 {
			return fl.Time
		}
		return fl.Time.Add(max(interval, time.Duration(fl.Seconds*float64(time.Second))))
	}
	byTarget := map[int][]record.Failure{}
	for _, fl := range p.Failures {
		byTarget[fl.Target] = append(byTarget[fl.Target], fl)
	}
	targets := make([]int, 0, len(byTarget))
	for t := range byTarget {
		targets = append(targets, t)
	}
	sort.Ints(targets)
	for _, t := range targets {
		fs := byTarget[t]
		sort.SliceStable(fs, func(i, j int) bool { return fs[i].Time.Before(fs[j].Time) })
		service := ""
		if t >= 0 && t < len(p.Targets) {
			service = p.Targets[t].Service
		}
		var cur *record.Window
		var last record.Failure
		for _, fl := range fs {
			if cur != nil {
				limit := interval*3/2 + time.Duration(last.Seconds*float64(time.Second))
				if interval == 0 || fl.Time.Sub(last.Time) <= limit {
					cur.Failures++
					cur.End = end(fl)
					last = fl
					continue
				}
				d.Windows = append(d.Windows, *cur)
			}
			cur = &record.Window{Target: t, Service: service, Start: fl.Time, End: end(fl), Failures: 1}
			last = fl
		}
		if cur != nil {
			d.Windows = append(d.Windows, *cur)
		}
	}

	services := map[string]bool{}
	for _, w := range d.Windows {
		services[w.Service] = true
		d.LongestGap = math.Max(d.LongestGap, w.End.Sub(w.Start).Seconds())
	}
	d.ServicesAffected = len(services)
	d.Seconds = unionSeconds(d.Windows)
	return d
}

// unionSeconds is the total length covered by at least one window.
func unionSeconds(ws []record.Window) float64 {
	if len(ws) == 0 {
		return 0
	}
	sorted := slices.Clone(ws)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Start.Before(sorted[j].Start) })
	var total time.Duration
	start, end := sorted[0].Start, sorted[0].End
	for _, w := range sorted[1:] {
		if w.Start.After(end) {
			total += end.Sub(start)
			start, end = w.Start, w.End
			continue
		}
		if w.End.After(end) {
			end = w.End
		}
	}
	total += end.Sub(start)
	return total.Seconds()
}

// PhaseNames lists phases in the order the first sync that has them ran
// them, so rows read in sync order.
func PhaseNames(sides ...[]*record.File) []string {
	var names []string
	seen := map[string]bool{}
	for _, fs := range sides {
		for _, f := range fs {
			for _, s := range f.Syncs {
				for _, p := range s.Phases {
					if !seen[p.Name] {
						seen[p.Name] = true
						names = append(names, p.Name)
					}
				}
			}
		}
	}
	return names
}

// CommonBasis is the common basis of the files' durations, or "mixed".
func CommonBasis(fs []*record.File) string {
	b := ""
	for i, f := range fs {
		if i == 0 {
			b = f.Basis
		} else if f.Basis != b {
			return "mixed"
		}
	}
	return b
}
