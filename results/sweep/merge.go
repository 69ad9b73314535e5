package sweep

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// Index is a merged sweep: every cell of its plan with what became of it,
// and where its results files are. A reader gets the files from Load.
type Index struct {
	Kind          string `json:"kind"`
	SchemaVersion int    `json:"schemaVersion"`
	Sweep         string `json:"sweep"`
	Description   string `json:"description,omitempty"`
	Spec          string `json:"spec"`
	// Kpsim lists the builds that planned and ran the cells: one, unless
	// the merge was told to allow more (MergeOptions.AllowMixed).
	Kpsim []record.Build `json:"kpsim"`
	Axes  []Axis         `json:"axes,omitempty"`
	// Cells are the planned cells in the plan's order: none is dropped,
	// whatever became of it.
	Cells []IndexCell `json:"cells"`
	// Notes are what the merge found beside the cells: records and
	// results files it did not use, builds it was allowed to mix.
	Notes []string `json:"notes,omitempty"`
}

// IndexCell is one cell and what became of it.
type IndexCell struct {
	Cell
	Status string `json:"status"` // StatusOK, StatusFailed or StatusMissing
	// Error says why a cell failed or is missing.
	Error string `json:"error,omitempty"`
	// Files are the cell's results files, relative to the index (a failed
	// cell's too, as far as they were written).
	Files []string `json:"files,omitempty"`
}

// Summary counts the cells by status: "6 cells: 5 ok, 1 failed".
func (ix *Index) Summary() string {
	var order []string
	n := map[string]int{}
	for _, c := range ix.Cells {
		if n[c.Status] == 0 {
			order = append(order, c.Status)
		}
		n[c.Status]++
	}
	slices.SortStableFunc(order, func(a, b string) int { return statusRank(a) - statusRank(b) })
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%d %s", n[s], s)
	}
	return fmt.Sprintf("%d %s: %s", len(ix.Cells), results.Plural(len(ix.Cells), "cell", "cells"), strings.Join(parts, ", "))
}

func statusRank(s string) int {
	return slices.Index([]string{StatusOK, StatusFailed, StatusMissing}, s)
}

// MergeOptions say what Merge reads and allows.
type MergeOptions struct {
	// Plan is the plan's path; empty to take the one plan found in the
	// merged directories.
	Plan string
	// AllowMixed merges cells run by different kpsim builds, with a note.
	AllowMixed bool
	// IndexDir is where the index will be written: results files are
	// named relative to it.
	IndexDir string
}

// MixedError refuses to merge cells that different kpsim builds ran: a
// difference between two cells could then be the builds', not their
// settings'.
type MixedError struct {
	Builds []string // each build and where it was found
}

func (e *MixedError) Error() string {
	return "the sweep was planned and run by different kpsim builds:\n  " + strings.Join(e.Builds, "\n  ")
}

// found is what a scan of the merged directories found, by path.
type found struct {
	plans, records, results []string
}

// scan walks dirs for the documents of a sweep. Temporary files (a write
// that never finished leaves one, named with a leading dot) are skipped.
func scan(dirs []string) (found, error) {
	var f found
	for _, dir := range dirs {
		st, err := os.Stat(dir)
		if err != nil {
			return f, fmt.Errorf("merge sweep: %w", err)
		}
		if !st.IsDir() {
			return f, fmt.Errorf("merge sweep: %s is not a directory", dir)
		}
		err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || filepath.Ext(p) != ".json" || strings.HasPrefix(d.Name(), ".") {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			var head struct {
				Kind          string `json:"kind"`
				SchemaVersion *int   `json:"schemaVersion"`
			}
			if json.Unmarshal(b, &head) != nil {
				return nil // not a document of a sweep
			}
			switch {
			case head.Kind == KindPlan:
				f.plans = append(f.plans, p)
			case head.Kind == KindCell:
				f.records = append(f.records, p)
			case head.Kind == "" && head.SchemaVersion != nil:
				f.results = append(f.results, p)
			}
			return nil
		})
		if err != nil {
			return f, fmt.Errorf("merge sweep: %w", err)
		}
	}
	return f, nil
}

// builds collects the builds found and where, in the order first seen.
type builds struct {
	order []record.Build
	where map[record.Build][]string
}

func (b *builds) add(build record.Build, where string) {
	if b.where == nil {
		b.where = map[record.Build][]string{}
	}
	if _, ok := b.where[build]; !ok {
		b.order = append(b.order, build)
	}
	if !slices.Contains(b.where[build], where) {
		b.where[build] = append(b.where[build], where)
	}
}

func (b *builds) lines() []string {
	out := make([]string, len(b.order))
	for i, build := range b.order {
		out[i] = fmt.Sprintf("%s (commit %s) in %s", build.Version, build.Commit, results.ListSome(b.where[build], 6))
	}
	return out
}

// Merge gathers the records and results files of a sweep's cells, found
// anywhere under dirs (downloaded artifacts: one directory per cell, named
// as the artifact was), into an index of every cell of the plan. A planned
// cell without a record is missing; one whose record says it failed, that
// never finished, or whose results files cannot be read or say the run
// failed, has failed; no cell is dropped. Records of cells the plan does
// not have, and results files no record names, are listed in the notes.
//
// Cells run by different kpsim builds (a build planned, another ran) are
// refused with a *MixedError unless o.AllowMixed.
func Merge(dirs []string, o MergeOptions) (*Index, error) {
	f, err := scan(dirs)
	if err != nil {
		return nil, err
	}
	planPath := o.Plan
	if planPath == "" {
		switch len(f.plans) {
		case 0:
			return nil, fmt.Errorf("merge sweep: no plan (%s) in %s: merge the directory that holds it too, or name it with --plan",
				KindPlan, strings.Join(dirs, ", "))
		case 1:
			planPath = f.plans[0]
		default:
			return nil, fmt.Errorf("merge sweep: %d plans (%s): name the sweep's with --plan", len(f.plans), strings.Join(f.plans, ", "))
		}
	}
	plan, err := ReadPlan(planPath)
	if err != nil {
		return nil, fmt.Errorf("merge sweep: %w", err)
	}
	indexDir, err := filepath.Abs(o.IndexDir)
	if err != nil {
		return nil, fmt.Errorf("merge sweep: %w", err)
	}
	ix := &Index{Kind: KindIndex, SchemaVersion: SchemaVersion, Sweep: plan.Sweep, Description: plan.Description,
		Spec: plan.Spec, Axes: plan.Axes}
	var bs builds
	bs.add(plan.Kpsim, "the plan")

	records := map[string]*Record{}
	recordPath := map[string]string{}
	for _, p := range f.records {
		r, err := ReadRecord(p)
		if err != nil {
			return nil, fmt.Errorf("merge sweep: %w", err)
		}
		if prev, dup := recordPath[r.Cell.Name]; dup {
			return nil, fmt.Errorf("merge sweep: cell %s has two records, %s and %s: merge one run of each cell", r.Cell.Name, prev, p)
		}
		records[r.Cell.Name], recordPath[r.Cell.Name] = r, p
	}

	merged := map[string]bool{} // cells whose record was merged, by name
	read := map[string]bool{}   // results files read, by absolute path
	for _, c := range plan.Cells {
		r := records[c.Name]
		if r == nil {
			ix.Cells = append(ix.Cells, IndexCell{Cell: c, Status: StatusMissing,
				Error: "no record of a run: its job never ran, or ended before it started the cell"})
			continue
		}
		merged[c.Name] = true
		bs.add(r.Kpsim, c.Name)
		ix.Cells = append(ix.Cells, mergeCell(c, r, filepath.Dir(recordPath[c.Name]), indexDir, &bs, read))
	}

	var strays []string
	for name, p := range recordPath {
		if !merged[name] {
			strays = append(strays, p)
		}
	}
	if len(strays) > 0 {
		slices.Sort(strays)
		ix.Notes = append(ix.Notes, fmt.Sprintf("ignored %d %s of cells the plan does not have (another spec's, or an older one's): %s",
			len(strays), results.Plural(len(strays), "record", "records"), results.ListSome(strays, 6)))
	}
	var unnamed []string
	for _, p := range f.results {
		if abs, err := filepath.Abs(p); err == nil && !read[abs] {
			unnamed = append(unnamed, p)
		}
	}
	if len(unnamed) > 0 {
		ix.Notes = append(ix.Notes, fmt.Sprintf("ignored %d results %s that no cell record names: %s",
			len(unnamed), results.Plural(len(unnamed), "file", "files"), results.ListSome(unnamed, 6)))
	}

	ix.Kpsim = bs.order
	if len(bs.order) > 1 {
		if !o.AllowMixed {
			return nil, &MixedError{Builds: bs.lines()}
		}
		ix.Notes = append(ix.Notes, "merged although different kpsim builds planned and ran the cells: "+strings.Join(bs.lines(), "; "))
	}
	return ix, nil
}

// mergeCell is a planned cell as its record and results files say it ran.
// read collects the results files it reads, by absolute path.
func mergeCell(c Cell, r *Record, dir, indexDir string, bs *builds, read map[string]bool) IndexCell {
	ic := IndexCell{Cell: c, Status: StatusOK}
	fail := func(format string, a ...any) {
		if ic.Status == StatusOK {
			ic.Status, ic.Error = StatusFailed, fmt.Sprintf(format, a...)
		}
	}
	switch {
	case r.Cell.Key() != c.Key():
		// The name's hash makes this all but impossible; a record that
		// claims a name with other settings is not this cell's run.
		fail("its record ran other settings under the same name: %v", r.Cell.Sets())
		return ic
	case r.Status == StatusRunning:
		fail("did not finish: its record stops after %d of %d %s", len(r.Runs), c.Runs, results.Plural(c.Runs, "run", "runs"))
	case r.Status == StatusFailed:
		fail("%s", r.Error)
	case r.Status != StatusOK:
		fail("its record has status %q", r.Status)
	}
	for i, run := range r.Runs {
		if run.File == "" {
			fail("run %d: %s", i+1, run.Error)
			continue
		}
		p := filepath.Join(dir, run.File)
		abs, err := filepath.Abs(p)
		if err != nil {
			fail("run %d: %v", i+1, err)
			continue
		}
		read[abs] = true
		f, err := results.Read(p)
		if err != nil {
			fail("run %d: %v", i+1, err)
			continue
		}
		bs.add(f.Kpsim, c.Name)
		rel, err := filepath.Rel(indexDir, abs)
		if err != nil {
			rel = abs
		}
		ic.Files = append(ic.Files, filepath.ToSlash(rel))
		switch {
		case f.Error != "":
			fail("run %d failed: %s", i+1, f.Error)
		case f.Interrupted:
			fail("run %d was interrupted", i+1)
		}
	}
	if len(ic.Files) < c.Runs {
		fail("%d of %d %s results", len(ic.Files), c.Runs, results.Plural(c.Runs, "run wrote", "runs wrote"))
	}
	return ic
}

// WriteIndex writes ix at path.
func WriteIndex(path string, ix *Index) error {
	return results.WriteJSON(path, "sweep index", ix)
}

// Loaded is an index with the results files of its cells that ran.
type Loaded struct {
	Path  string
	Index *Index
	// Files are the runs of every cell with StatusOK, by cell name.
	Files map[string][]*record.File
}

// Load reads the index at path and the results files of its cells that
// ran, which lie where the index names them, relative to itself.
func Load(path string) (*Loaded, error) {
	var ix Index
	if err := readDoc(path, KindIndex, &ix); err != nil {
		return nil, err
	}
	l := &Loaded{Path: path, Index: &ix, Files: map[string][]*record.File{}}
	dir := filepath.Dir(path)
	for _, c := range ix.Cells {
		if c.Status != StatusOK {
			continue
		}
		for _, run := range c.Files {
			p := filepath.FromSlash(run)
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			f, err := results.Read(p)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					err = fmt.Errorf("%w (an index names its results files relative to itself: keep them together)", err)
				}
				return nil, fmt.Errorf("sweep index %s: cell %s: %w", path, c.Name, err)
			}
			l.Files[c.Name] = append(l.Files[c.Name], f)
		}
	}
	return l, nil
}
