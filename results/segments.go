package results

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kpsim/kpsim/record"
)

// A run's timeline has segments: it is split at every step that changes the
// node (a proxier restart, a fault, drift injected into the kernel) and at
// every mark a scenario adds. Figures of the whole run mix what a scenario
// asks about with what it had to do to get there: restart-stale-ipsets
// asks about the restart, and the cold start before it is the slowest
// sync of the run. A scenario names its question's segment (`question:`),
// and the summary, reports, comparisons and sweeps give each figure for it
// as well as for the whole run.

// segmentOpeners names the segment each node-changing step kind opens; a
// mark's segment is named by its label.
var segmentOpeners = map[string]string{
	"restart-proxier": "restart",
	"api-fault":       "fault",
	"kernel-drift":    "drift",
	"mark":            "",
}

// FirstSegment names the segment from the start of the run to the first
// step that opens another.
const FirstSegment = "start"

// Segments splits f's timeline. A run without node-changing steps is one
// segment, FirstSegment.
func Segments(f *record.File) []record.Segment {
	end := f.End
	if len(f.Steps) > 0 && f.Steps[len(f.Steps)-1].End.After(end) {
		end = f.Steps[len(f.Steps)-1].End
	}
	segs := []record.Segment{{Name: FirstSegment, Step: -1, Start: f.Start, End: end}}
	seen := map[string]int{FirstSegment: 1}
	for _, st := range f.Steps {
		name, ok := segmentOpeners[st.Kind]
		if !ok {
			continue
		}
		if name == "" {
			name = st.Label
		}
		seen[name]++
		if n := seen[name]; n > 1 {
			name = fmt.Sprintf("%s-%d", name, n)
		}
		segs[len(segs)-1].End = st.Start
		segs = append(segs, record.Segment{Name: name, Step: st.Index, Label: st.Label, Start: st.Start, End: end})
	}
	return segs
}

// Question is the name of the segment f's scenario asks about, or "" when
// it names none (its figures are then the whole run's).
func Question(f *record.File) string {
	var s struct {
		Question string `json:"question"`
	}
	if len(f.Scenario) == 0 || json.Unmarshal(f.Scenario, &s) != nil {
		return ""
	}
	return s.Question
}

// SegmentNames lists the segments a scenario may name as its question for
// the given step kinds (as results files spell them) and mark names, in
// timeline order: what Segments would name them.
func SegmentNames(kinds, labels []string) []string {
	steps := make([]record.Step, len(kinds))
	for i := range kinds {
		steps[i] = record.Step{Index: i, Kind: kinds[i], Label: labels[i]}
	}
	var names []string
	for _, s := range Segments(&record.File{Steps: steps}) {
		names = append(names, s.Name)
	}
	return names
}

// View is f restricted to one segment: its syncs are those that started in
// it, its probes the attempts made in it, its operation totals those of
// its syncs. Operations not issued by a sync (the harness's own, such as
// drift it injects) and measured process figures belong to the whole run
// only. Summarized; nil when f has no such segment.
func View(f *record.File, segment string) *record.File {
	segs := f.Summary.Segments
	for i := range segs {
		if segs[i].Name == segment {
			next := -1
			if i+1 < len(segs) {
				next = segs[i+1].Step
			}
			return view(f, segs[i].Segment, next)
		}
	}
	return nil
}

// view restricts f to seg, which the step with index next ends (-1: the
// run's end, whatever happened after f.End).
func view(f *record.File, seg record.Segment, next int) *record.File {
	v := *f
	v.Start, v.End = seg.Start, seg.End
	in := func(t time.Time) bool { return !t.Before(seg.Start) && (next < 0 || t.Before(seg.End)) }
	v.Steps = slices.DeleteFunc(slices.Clone(f.Steps), func(st record.Step) bool { return !in(st.Start) })
	v.Syncs = nil
	v.Totals = record.Totals{}
	for _, s := range f.Syncs {
		if in(s.Start) {
			v.Syncs = append(v.Syncs, s)
			v.Totals.Ops.Add(&s.Ops)
		}
	}
	v.Metrics = nil
	if p := f.Probes; p != nil {
		vp := *p
		vp.Failures = slices.DeleteFunc(slices.Clone(p.Failures), func(fl record.Failure) bool { return !in(fl.Time) })
		// Each step recorded the attempts made before it began.
		vp.Attempts = p.Attempts
		if next >= 0 && next < len(f.Steps) {
			vp.Attempts = f.Steps[next].ProbeAttempts
		}
		if seg.Step >= 0 && seg.Step < len(f.Steps) {
			vp.Attempts -= f.Steps[seg.Step].ProbeAttempts
		}
		vp.Targets = slices.Clone(p.Targets)
		for i := range vp.Targets {
			t := &vp.Targets[i]
			t.Recovered = slices.DeleteFunc(slices.Clone(t.Recovered), func(r time.Time) bool { return !in(r) })
		}
		v.Probes = &vp
	}
	summarize(&v, false)
	return &v
}

// SegmentNamed is f's segment of that name and its figures.
func SegmentNamed(f *record.File, name string) (record.SegmentSummary, bool) {
	for _, s := range f.Summary.Segments {
		if s.Name == name {
			return s, true
		}
	}
	return record.SegmentSummary{}, false
}

// SegmentTitle says what a segment is for a reader: "restart (from step 5,
// restart proxier (36% known at first sync), at 48.2s)".
func SegmentTitle(f *record.File, s record.Segment) string {
	if s.Step < 0 {
		return s.Name + " (from the run's start)"
	}
	return fmt.Sprintf("%s (from step %d, %s, at %s)", s.Name, s.Step+1, strings.TrimSpace(s.Label),
		FormatSeconds(s.Start.Sub(f.Start).Seconds()))
}
