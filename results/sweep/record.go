package sweep

import (
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// Statuses of a cell: what its run recorded (Running until it ends), and
// what a merge found.
const (
	StatusRunning = "running"
	StatusOK      = "ok"
	StatusFailed  = "failed"
	// StatusMissing is a planned cell that left no record: its job never
	// ran, or died before it could write one.
	StatusMissing = "missing"
)

// RecordFile is the name of a cell's record in its directory.
const RecordFile = "cell.json"

// Record is what one cell's run leaves in its directory beside its
// results files: the cell, the build that ran it, and how each run ended.
// It is written before the first run (StatusRunning) and again after each,
// so a job that dies part way leaves a record that says how far it got.
type Record struct {
	Kind          string       `json:"kind"`
	SchemaVersion int          `json:"schemaVersion"`
	Cell          Cell         `json:"cell"`
	Kpsim         record.Build `json:"kpsim"`
	Status        string       `json:"status"`
	// Error says why the cell failed (the first run that did, or why none could start).
	Error string      `json:"error,omitempty"`
	Runs  []RunRecord `json:"runs"`
}

// RunRecord is one run of a cell.
type RunRecord struct {
	// File is the run's results file, relative to the record; empty when
	// the run wrote none.
	File  string `json:"file,omitempty"`
	Error string `json:"error,omitempty"`
}

// WriteRecord writes r at path.
func WriteRecord(path string, r *Record) error {
	r.Kind, r.SchemaVersion = KindCell, SchemaVersion
	return results.WriteJSON(path, "sweep cell record", r)
}

// ReadRecord reads a record written by WriteRecord.
func ReadRecord(path string) (*Record, error) {
	var r Record
	if err := readDoc(path, KindCell, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
