package report

import (
	"fmt"
	"image/color"
	"math"
	"sort"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// maxServiceLines bounds the per-service lines of the disruption chart;
// the rest are summed into one line.
const maxServiceLines = 6

// disruptionTimeline is failed probe attempts per second, per service (one
// run) or per run (several).
func disruptionTimeline(runs []*run, v timeView) (chart, error) {
	ch := chart{ID: "disruption-timeline", Title: "Failed probes per second",
		Caption: "Connection attempts through the dataplane that failed, per second. Any line above zero is broken service traffic; look at how long it lasts and which step it follows."}
	var probed, failed int
	basis := ""
	for _, r := range runs {
		if r.File.Probes != nil {
			probed += r.File.Probes.Attempts
			failed += len(r.File.Probes.Failures)
			basis = r.File.Probes.Basis
		}
	}
	ch.Title += " (" + results.BasisText(basis) + ")"
	v.name(&ch, runs)
	switch {
	case probed == 0:
		ch.NoData = "No data: this run made no probe attempts, so disruption was not measured."
		return ch, nil
	case failed == 0:
		ch.NoData = fmt.Sprintf("No failed probes: all %d attempts succeeded, so there is nothing to plot.", probed)
		return ch, nil
	}
	p := newPlot(timeAxis(runs), "failed attempts per second")
	type series struct {
		label  string
		times  []float64
		lo, hi float64 // the span of the run it belongs to
		color  color.RGBA
	}
	var all []series
	for _, r := range runs {
		pr := r.File.Probes
		if pr == nil || pr.Attempts == 0 {
			continue
		}
		lo, hi := timeSpan([]*run{r})
		// Nothing was probed before the first attempt ("probes on" may come
		// long after the start): no line there, rather than a zero that
		// reads as traffic that did not fail.
		var first time.Time
		for _, t := range pr.Targets {
			if !t.First.IsZero() && (first.IsZero() || t.First.Before(first)) {
				first = t.First
			}
		}
		if !first.IsZero() {
			lo = max(lo, r.since(first))
		}
		if len(runs) > 1 {
			s := series{label: r.Label, lo: lo, hi: hi, color: r.Color}
			for _, fl := range pr.Failures {
				s.times = append(s.times, r.since(fl.Time))
			}
			all = append(all, s)
			continue
		}
		// One line per service and probe kind: a service probed by
		// ClusterIP and by NodePort can fail one way only.
		byTarget := map[string][]float64{}
		for _, fl := range pr.Failures {
			name := fmt.Sprintf("target %d", fl.Target)
			if fl.Target >= 0 && fl.Target < len(pr.Targets) {
				t := pr.Targets[fl.Target]
				name = t.Service + " (" + probeKind(t) + ")"
			}
			byTarget[name] = append(byTarget[name], r.since(fl.Time))
		}
		names := make([]string, 0, len(byTarget))
		for n := range byTarget {
			names = append(names, n)
		}
		sort.Slice(names, func(i, j int) bool {
			if len(byTarget[names[i]]) != len(byTarget[names[j]]) {
				return len(byTarget[names[i]]) > len(byTarget[names[j]])
			}
			return names[i] < names[j]
		})
		var rest []float64
		for i, n := range names {
			if i >= maxServiceLines-1 && len(names) > maxServiceLines {
				rest = append(rest, byTarget[n]...)
				continue
			}
			all = append(all, series{label: n, times: byTarget[n], lo: lo, hi: hi, color: colorOf(i)})
		}
		if len(rest) > 0 {
			all = append(all, series{label: fmt.Sprintf("%d other services", len(names)-maxServiceLines+1), times: rest, lo: lo, hi: hi, color: colorOf(maxServiceLines - 1)})
		}
	}
	interval := 0.0
	for _, r := range runs {
		if r.File.Probes != nil {
			interval = math.Max(interval, r.File.Probes.Interval)
		}
	}
	lo, hi := v.lo, v.hi
	width := bucketWidth(hi-lo, interval)
	// Buckets on multiples of the width, so that zero (the run's start, or
	// the step the runs are aligned at) is a bucket's edge.
	base := math.Floor(lo/width) * width
	buckets := int(math.Ceil((hi-base)/width)) + 1
	top := 0.0
	for i, s := range all {
		pts := failureSteps(s.times, s.lo, s.hi, base, width, buckets)
		for _, pt := range pts {
			top = math.Max(top, pt.Y)
		}
		item, err := addSeries(p, pts, fmt.Sprintf("%s (%d failures)", s.label, len(s.times)), s.color, i, len(all), false)
		if err != nil {
			return ch, err
		}
		ch.Legend = append(ch.Legend, item)
	}
	setTimeRange(p, base, base+float64(buckets)*width)
	p.Y.Min, p.Y.Max = 0, top*1.1
	ch.Caption += fmt.Sprintf(" Counted in %s buckets; a rise after a bucket without failures is drawn at its first failure.", results.FormatSeconds(width))
	if len(all) > 1 {
		ch.Caption += " Lines that coincide are told apart by their dashes; each is drawn thinner than those under it."
	}
	ch.Caption += alignHint(runs)
	var err error
	ch.SVG, err = renderTimeChart(p, ch.Title, stepMarks(runs))
	return ch, err
}

// failureSteps draws the failures at times (of a series spanning lo to hi)
// per second, as steps: each of the buckets of width from base holds its
// rate across the bucket. A line spans only its own run, so that a short
// run does not read as failing nowhere for as long as the longest one ran,
// and begins where probing did. A bucket after one without failures rises
// at its first failure, not at its edge, which may be before the step that
// caused the failures.
func failureSteps(times []float64, lo, hi, base, width float64, buckets int) plotter.XYs {
	counts := make([]float64, buckets)
	first := make([]float64, buckets) // each bucket's first failure
	for _, t := range times {
		j := int(math.Floor((t - base) / width))
		if j >= 0 && j < buckets {
			if counts[j] == 0 || t < first[j] {
				first[j] = t
			}
			counts[j]++
		}
	}
	pts := make(plotter.XYs, 0, 2*buckets)
	for j, n := range counts {
		from, to := base+float64(j)*width, base+float64(j+1)*width
		if to <= lo || from > hi {
			continue
		}
		from = max(from, lo)
		if n > 0 && (j == 0 || counts[j-1] == 0) && first[j] > from {
			pts = append(pts, plotter.XY{X: from, Y: 0}, plotter.XY{X: first[j], Y: 0})
			from = first[j]
		}
		rate := n / width
		pts = append(pts, plotter.XY{X: from, Y: rate}, plotter.XY{X: to, Y: rate})
	}
	return pts
}

// probeKind names how a target was probed, as Kubernetes spells the
// service type, and from where: "NodePort from node".
func probeKind(t record.Target) string {
	kind := map[string]string{"clusterip": "ClusterIP", "nodeport": "NodePort", "loadbalancer": "LoadBalancer", "external": "external IP"}[t.Kind]
	if kind == "" {
		kind = results.OrDash(t.Kind)
	}
	from := t.From
	if from == "" {
		from = record.FromPod
	}
	return kind + " from " + from
}

// firstSuccesses are f's samples of the time to first success
// (results.FirstSuccesses): one per disruption window.
func firstSuccesses(f *record.File) []results.FirstSuccess {
	return results.FirstSuccesses(f, f.Summary.Disruption.Windows)
}

// target is the probe target a first success is of.
func target(f *record.File, fs results.FirstSuccess) record.Target {
	if p := f.Probes; p != nil && fs.Window.Target >= 0 && fs.Window.Target < len(p.Targets) {
		return p.Targets[fs.Window.Target]
	}
	return record.Target{Service: fs.Window.Service}
}

// reachability is the cumulative share of disruption windows that had
// recovered within a time of their first failed attempt: how long a node
// that just joined, or a proxier that just restarted, left services
// unreachable.
func reachability(runs []*run) (chart, error) {
	ch := chart{ID: "reachability", Title: "Time to first success after broken traffic",
		Caption: "Share of disruption windows (a target's run of failed attempts) whose target had succeeded again, by the time since the window's first failed attempt. Read the median where the curve crosses 0.5; a curve that stays below 1 means windows that never recovered before probing stopped."}
	basis, recorded, delayed, probed := "", 0, false, 0
	for _, r := range runs {
		if r.File.Probes != nil {
			basis = r.File.Probes.Basis
			probed += r.File.Probes.Attempts
		}
		for _, fs := range firstSuccesses(r.File) {
			recorded++
			delayed = delayed || fs.Never || fs.Seconds > 0
		}
	}
	ch.Title += " (" + results.BasisText(basis) + ")"
	switch {
	case probed == 0:
		ch.NoData = "No data: this run made no probe attempts."
		return ch, nil
	case recorded == 0:
		ch.NoData = "No data: no probed target failed, so nothing had to recover."
		return ch, nil
	case !delayed:
		ch.NoData = fmt.Sprintf("No delay: all %d windows recovered at once.", recorded)
		return ch, nil
	}
	p := newCDFPlot("time from the first failed attempt to the next success (s)", "share of disruption windows")
	secondsAxis(&p.X)
	for i, r := range runs {
		fss := firstSuccesses(r.File)
		if len(fss) == 0 {
			continue
		}
		var xs []float64
		for _, fs := range fss {
			if !fs.Never {
				xs = append(xs, fs.Seconds)
			}
		}
		// The curve is over every window: one that never recovered keeps
		// it below 1.
		pts := cdfPoints(xs, cdfSteps)
		share := float64(len(xs)) / float64(len(fss))
		for i := range pts {
			pts[i].Y *= share
		}
		label := fmt.Sprintf("%s (%d windows", r.Label, len(fss))
		if never := len(fss) - len(xs); never > 0 {
			label += fmt.Sprintf(", %d never recovered", never)
		}
		item, err := addSeries(p, pts, label+")", r.Color, i, len(runs), false)
		if err != nil {
			return ch, err
		}
		ch.Legend = append(ch.Legend, item)
	}
	p.X.Max *= 1.04 // as in the latency CDF
	var err error
	ch.SVG, err = render(p, ch.Title, chartHeight)
	return ch, err
}

// bucketWidth picks a round bucket for a timeline of span seconds: about
// 150 buckets, never finer than the probe interval (a finer bucket would
// show each attempt as a spike).
func bucketWidth(span, interval float64) float64 {
	for _, w := range []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300} {
		if w >= interval && span/w <= 150 {
			return w
		}
	}
	return math.Max(600, interval)
}
