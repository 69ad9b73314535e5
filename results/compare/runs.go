package compare

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// DifferentError refuses to compare runs that ran different things:
// another scenario, seed or setting. Their figures would differ for
// reasons that are not the build's, and a comparison would blame it.
type DifferentError struct {
	// Differences names each setting that differs and its values, by file.
	Differences []string
}

func (e *DifferentError) Error() string {
	return "the runs did not run the same scenario with the same settings:\n  " + strings.Join(e.Differences, "\n  ")
}

// maxDifferences bounds the differences listed; a different scenario
// differs everywhere, and the first few say so.
const maxDifferences = 12

// ignoredSettings differ without changing what ran.
var ignoredSettings = map[string]bool{"description": true}

// run is one file with the label it is known by.
type run struct {
	label string
	f     *record.File
}

func runsOf(files []*record.File, labels []string) []run {
	out := make([]run, len(files))
	for i, f := range files {
		out[i] = run{f: f, label: fmt.Sprintf("file %d", i+1)}
		if i < len(labels) {
			out[i].label = labels[i]
		}
	}
	return out
}

// differences compares what each run ran (its recorded scenario, after
// defaults, and the proxier under test) with the first run's. A setting
// both record with different values is a difference; one only some runs
// record is listed apart (onlySome): a newer kpsim records settings an
// older one did not have, which by itself is no reason to refuse.
//
// When seedsPaired, the seed is left out: each side ran the same set of
// seeds, and the comparison pairs them.
func differences(runs []run, seedsPaired bool) (diff, onlySome []string) {
	settings := make([]map[string]string, len(runs))
	paths := map[string]bool{}
	for i, r := range runs {
		settings[i] = results.Settings(r.f)
		if r.f.Proxier != "" {
			settings[i]["(proxier under test)"] = r.f.Proxier
		}
		for p := range settings[i] {
			paths[p] = true
		}
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		if !ignoredSettings[p] && !(seedsPaired && p == "seed") {
			sorted = append(sorted, p)
		}
	}
	// What a reader checks first comes first: another scenario or seed
	// explains every other difference.
	first := map[string]int{"name": 1, "seed": 2}
	sort.Slice(sorted, func(i, j int) bool {
		a, b := first[sorted[i]], first[sorted[j]]
		if (a == 0) != (b == 0) {
			return a != 0
		}
		if a != b {
			return a < b
		}
		return sorted[i] < sorted[j]
	})
	for _, p := range sorted {
		var values []string              // distinct values, in the order runs have them
		holders := map[string][]string{} // value -> labels
		missing := []string{}
		for i, r := range runs {
			v, ok := settings[i][p]
			if !ok {
				missing = append(missing, r.label)
				continue
			}
			if _, seen := holders[v]; !seen {
				values = append(values, v)
			}
			holders[v] = append(holders[v], r.label)
		}
		if len(values) > 1 {
			parts := make([]string, len(values))
			for i, v := range values {
				parts[i] = fmt.Sprintf("%s in %s", v, strings.Join(holders[v], ", "))
			}
			diff = append(diff, p+": "+strings.Join(parts, "; "))
		}
		// A list entry only some runs have is a longer or shorter list
		// (another timeline): that is a difference, not a newer kpsim.
		if len(missing) > 0 {
			line := fmt.Sprintf("%s: %s only in %s, not in %s", p, values[0], strings.Join(holders[values[0]], ", "), strings.Join(missing, ", "))
			if strings.Contains(p, "[") {
				diff = append(diff, line)
			} else {
				onlySome = append(onlySome, line)
			}
		}
	}
	return diff, onlySome
}

// clip keeps the first maxDifferences lines and counts the rest.
func clip(lines []string) []string {
	if len(lines) <= maxDifferences {
		return lines
	}
	return append(slices.Clone(lines[:maxDifferences]), fmt.Sprintf("and %d more", len(lines)-maxDifferences))
}

// incomplete says how a run ended early, or "".
func incomplete(f *record.File) string {
	switch {
	case f.Interrupted:
		return "was interrupted before its timeline finished"
	case f.Error != "":
		return "failed: " + f.Error
	}
	return ""
}

// syncSig is what must agree for two runs' k-th syncs to be the same work.
type syncSig struct {
	key                 record.SyncKey
	trigger             string
	full                bool
	services, endpoints int
}

func signature(f *record.File) []syncSig {
	out := make([]syncSig, len(f.Syncs))
	for i := range f.Syncs {
		s := &f.Syncs[i]
		out[i] = syncSig{s.Key(), s.Trigger, s.Full, s.Services, s.Endpoints}
	}
	return out
}

func (s syncSig) String() string {
	kind := s.trigger
	if s.full {
		kind += ", full"
	}
	return fmt.Sprintf("%s (%s, %d services, %d endpoints)", s.key, kind, s.services, s.endpoints)
}

// pairSyncs decides whether the runs' syncs can be compared one to one, and
// returns the syncs to pair, or why they cannot be. On the modeled clock a
// seed repeats a run exactly: the k-th sync of two runs of one scenario and
// seed applied the same changes, so its duration in one run against the
// other is a like-for-like ratio, free of what differs between syncs.
// Whether they really did is checked, sync by sync: the same proxier,
// family and sequence number, trigger, and number of services and
// endpoints known. A run that ended early pairs its syncs with the first
// syncs of the others.
func pairSyncs(runs []run) ([]record.SyncKey, string) {
	name, seed := "", ""
	for i, r := range runs {
		if r.f.Clock != record.ClockModeled {
			return nil, fmt.Sprintf("%s is not on the modeled clock (clock %q)", r.label, r.f.Clock)
		}
		s := results.Settings(r.f)
		if i == 0 {
			name, seed = s["name"], s["seed"]
		} else if s["name"] != name || s["seed"] != seed {
			return nil, "the runs are of different scenarios or seeds"
		}
	}
	longest := 0
	sigs := make([][]syncSig, len(runs))
	for i, r := range runs {
		sigs[i] = signature(r.f)
		if len(sigs[i]) > len(sigs[longest]) {
			longest = i
		}
	}
	shortest := sigs[longest]
	for i, r := range runs {
		ref := sigs[longest]
		for k, s := range sigs[i] {
			if s != ref[k] {
				return nil, fmt.Sprintf("sync %d differs: %s in %s, %s in %s", k+1, ref[k], runs[longest].label, s, r.label)
			}
		}
		if len(sigs[i]) < len(ref) && incomplete(r.f) == "" {
			return nil, fmt.Sprintf("%s has %d syncs, %s %d", r.label, len(sigs[i]), runs[longest].label, len(ref))
		}
		if len(sigs[i]) < len(shortest) {
			shortest = sigs[i]
		}
	}
	keys := make([]record.SyncKey, len(shortest))
	for k, s := range shortest {
		keys[k] = s.key
	}
	return keys, ""
}

// perSync is a side's per-sync samples of a figure: for each sync, the
// median over the side's files (repetitions; on the modeled clock they
// agree, and elsewhere the median damps their noise).
func perSync(files []*record.File, get func(*record.File) []results.SyncValue) map[record.SyncKey]float64 {
	all := map[record.SyncKey][]float64{}
	for _, f := range files {
		for _, sv := range get(f) {
			all[sv.Sync] = append(all[sv.Sync], sv.Value)
		}
	}
	out := make(map[record.SyncKey]float64, len(all))
	for k, xs := range all {
		sort.Float64s(xs)
		out[k] = xs[len(xs)/2]
	}
	return out
}

// seedOf is the seed a run's scenario ran with.
func seedOf(f *record.File) string { return results.Settings(f)["seed"] }

// once keeps one of each set of identical runs of a seed on one side (on
// the modeled clock a seed repeats a run exactly, and copies are no more
// evidence than one), and warns about the copies it dropped.
func (c *Comparison) once(side string, runs []run) []run {
	var out []run
	copies := map[int][]string{} // index in out -> labels of its copies
	for _, r := range runs {
		i := slices.IndexFunc(out, func(o run) bool { return identical(o.f, r.f) })
		if i < 0 {
			out = append(out, r)
			continue
		}
		copies[i] = append(copies[i], r.label)
	}
	for i, o := range out {
		if cs := copies[i]; len(cs) > 0 {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s: %s and %d identical copies of it (%s) are one run of seed %s on the modeled clock: counted once",
				side, o.label, len(cs), strings.Join(clip(cs), ", "), seedOf(o.f)))
		}
	}
	return out
}

// identical reports whether two files are the same modeled run: the same
// settings and every figure but the measured ones equal, sync by sync.
func identical(a, b *record.File) bool {
	if d, _ := differences([]run{{f: a}, {f: b}}, false); len(d) > 0 || a.Proxier != b.Proxier || len(a.Syncs) != len(b.Syncs) {
		return false
	}
	for i := range a.Syncs {
		sa, sb := &a.Syncs[i], &b.Syncs[i]
		if sa.Key() != sb.Key() || sa.Seconds != sb.Seconds || sa.Ops != sb.Ops || sa.Error != sb.Error {
			return false
		}
	}
	for _, d := range Catalog([]*record.File{a, b}) {
		if commonBasis([]*record.File{a, b}, d.Basis) != record.Measured && d.Value(a) != d.Value(b) {
			return false
		}
	}
	return true
}

// pairedSeeds are the seeds both sides ran, sorted, when each side ran
// the same set; nil otherwise.
func pairedSeeds(base, head []run) []string {
	set := func(rs []run) []string {
		var out []string
		for _, r := range rs {
			out = append(out, seedOf(r.f))
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	b, h := set(base), set(head)
	if len(b) == 0 || !slices.Equal(b, h) {
		return nil
	}
	return b
}

// seedPair is one seed's runs on each side.
type seedPair struct {
	seed       string
	base, head []*record.File
}

// seedPairs pairs the sides' runs by seed; without common seeds, all runs
// are one pair.
func (c *Comparison) seedPairs(base, head []run) []seedPair {
	if c.Seeds == nil {
		return []seedPair{{seed: "(any)", base: files(base), head: files(head)}}
	}
	var out []seedPair
	for _, s := range c.Seeds {
		bySeed := func(rs []run) []*record.File {
			var fs []*record.File
			for _, r := range rs {
				if seedOf(r.f) == s {
					fs = append(fs, r.f)
				}
			}
			return fs
		}
		out = append(out, seedPair{seed: s, base: bySeed(base), head: bySeed(head)})
	}
	return out
}

func labels(rs []run) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.label
	}
	return out
}

func files(rs []run) []*record.File {
	out := make([]*record.File, len(rs))
	for i, r := range rs {
		out[i] = r.f
	}
	return out
}
