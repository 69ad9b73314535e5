package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpsim/kpsim/record"
)

// Write stores f as indented JSON at path (see WriteJSON).
func Write(path string, f *record.File) error {
	if f.SchemaVersion == 0 {
		f.SchemaVersion = record.SchemaVersion
	}
	return WriteJSON(path, "results", f)
}

// WriteJSON stores v as indented JSON at path, as WriteFile does; what
// names the document in errors ("results").
func WriteJSON(path, what string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", what, path, err)
	}
	if err := writeAtomic(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write %s %s: %w", what, path, err)
	}
	return nil
}

// WriteFile stores b at path, mode 0644. It writes a temporary file in the
// same directory and renames it, so that a command interrupted while
// writing never leaves a truncated file behind for a reader to trip over,
// and a reader never sees a half-written one. Every kpsim output that is a
// file is written this way.
func WriteFile(path string, b []byte) error {
	if err := writeAtomic(path, b); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// Read loads a results file. A file written by a newer (or unversioned)
// kpsim is refused rather than half-understood: a report that silently
// misreads a field would show wrong numbers with confidence.
func Read(path string) (*record.File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	var probe struct {
		SchemaVersion *int `json:"schemaVersion"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		if truncated(b) {
			// Not the run that wrote it stopping halfway: Write replaces a
			// file whole, or leaves it as it was.
			return nil, fmt.Errorf("read results %s: truncated: its JSON stops at byte %d, mid-document; "+
				"kpsim writes results files whole, so this one was cut short after it was written (a copy or download that did not finish?)", path, len(b))
		}
		return nil, fmt.Errorf("read results %s: not a kpsim results file: %w", path, err)
	}
	if probe.SchemaVersion == nil {
		return nil, fmt.Errorf("read results %s: no schemaVersion: not a kpsim results file", path)
	}
	// Version 2 only added fields: a version 1 file reads without them.
	if v := *probe.SchemaVersion; v < 1 || v > record.SchemaVersion {
		return nil, fmt.Errorf("read results %s: schemaVersion %d, this kpsim reads versions 1 to %d",
			path, v, record.SchemaVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var f record.File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("read results %s: %w", path, err)
	}
	if lacks := missing(&f); len(lacks) > 0 {
		return nil, fmt.Errorf("read results %s: not a complete kpsim results file: no %s (every run writes them)",
			path, strings.Join(lacks, ", "))
	}
	return &f, nil
}

// truncated reports whether b is a JSON object cut short: it began, and
// the input ended before the document did (where a file that is not JSON
// fails at its first wrong character).
func truncated(b []byte) bool {
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return false
	}
	var doc json.RawMessage
	return errors.Is(json.NewDecoder(bytes.NewReader(b)).Decode(&doc), io.ErrUnexpectedEOF)
}

// missing names the fields every run writes, from version 1 on, that f
// lacks: a file without them is not one kpsim wrote, and a report of it
// would show zeros with confidence.
func missing(f *record.File) []string {
	var out []string
	if s := bytes.TrimSpace(f.Scenario); len(s) == 0 || s[0] != '{' {
		out = append(out, "scenario")
	}
	if f.Start.IsZero() {
		out = append(out, "start")
	}
	if f.Backend == "" {
		out = append(out, "backend")
	}
	if f.Basis != record.Measured && f.Basis != record.Modeled && f.Basis != record.ModeledKernel {
		out = append(out, "basis")
	}
	return out
}
