package cli

import (
	"errors"
	"fmt"
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
