package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// checkOutput makes sure a file can be written at path before any work is
// done for it, so a ten-minute run does not end in "cannot write". It refuses
// an existing directory, creates a missing parent directory only under the
// working directory (out/, out/exp1/ in a checkout are conveniences; a typo
// in an absolute path must not create directory trees at / when kpsim runs
// as root), and proves the directory writable by creating and removing a
// file in it, as writing the output will. "-" (standard output) passes.
func checkOutput(flag, path string) error {
	if path == "-" {
		return nil
	}
	bad := func(format string, a ...any) error {
		return usageError("%s %s: %s", flag, path, fmt.Sprintf(format, a...))
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return bad("is a directory; give a file name, e.g. %s", filepath.Join(path, "result.json"))
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !underWorkingDir(dir) {
			return bad("directory %s does not exist (kpsim creates missing directories only under the working directory)", dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return bad("create directory %s: %v", dir, pathErr(err))
		}
	case err != nil:
		return bad("%v", pathErr(err))
	case !st.IsDir():
		return bad("%s is not a directory", dir)
	}
	probe, err := os.CreateTemp(dir, ".kpsim-write-check-*")
	if err != nil {
		return bad("cannot create files in %s: %v", dir, pathErr(err))
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}

// underWorkingDir reports whether dir, made absolute, lies inside the
// working directory.
func underWorkingDir(dir string) bool {
	wd, err := os.Getwd()
	if err != nil {
		return false
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	rel, err := filepath.Rel(wd, abs)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// pathErr is the reason without the operation and path that the message
// already names (and without a probe file's name, which means nothing to
// the user).
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// outputStamp is what was at an output path when a command started. A long
// command (kpsim run) checks it before writing at the end: two runs given
// the same -o both printed "results: same.json", and one run's results were
// silently gone.
type outputStamp struct {
	path string
	info fs.FileInfo // nil: nothing there
}

func stampOutput(path string) outputStamp {
	s := outputStamp{path: path}
	if fi, err := os.Stat(path); err == nil {
		s.info = fi
	}
	return s
}

// changed reports whether something was written at the path since the
// stamp. Gone again, or standard output ("-"), it has nothing to lose.
func (s outputStamp) changed() bool {
	if s.path == "-" {
		return false
	}
	fi, err := os.Stat(s.path)
	if err != nil {
		return false
	}
	if s.info == nil {
		return true
	}
	return !os.SameFile(s.info, fi) || !fi.ModTime().Equal(s.info.ModTime()) || fi.Size() != s.info.Size()
}

// write calls write with the stamp's path or, when another command wrote
// there since the stamp, with a free sibling name (same-2.json), and says so
// on warn: the other output is kept, since it may be the one wanted and
// either way it cannot be had back once overwritten. It returns the path
// written.
func (s outputStamp) write(warn io.Writer, who string, write func(path string) error) (string, error) {
	if !s.changed() {
		return s.path, write(s.path)
	}
	dest, err := claimSibling(s.path)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(warn, "%s: %s was written by another run since this one started; it is kept, and this run's output goes to %s\n", who, s.path, dest)
	if err := write(dest); err != nil {
		os.Remove(dest)
		return "", err
	}
	return dest, nil
}

// claimSibling creates the first free name of NAME-2.EXT, NAME-3.EXT, ...
// beside path, empty and exclusively, so that two commands finishing at
// once do not both take it; writing then replaces it.
func claimSibling(path string) (string, error) {
	ext := filepath.Ext(path)
	stem := strings.TrimSuffix(path, ext)
	for n := 2; n <= 1000; n++ {
		p := fmt.Sprintf("%s-%d%s", stem, n, ext)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("%s was written by another run, and a name beside it cannot be made: %w", path, err)
		}
		f.Close()
		return p, nil
	}
	return "", fmt.Errorf("%s was written by another run, and so were %s-2%s to %s-1000%s", path, stem, ext, stem, ext)
}
