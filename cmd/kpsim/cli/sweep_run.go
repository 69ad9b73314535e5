package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/sweep"
	"github.com/kpsim/kpsim/sweeps"
)

func newSweepRunCommand() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "run SPEC.yaml CELL [-o DIR]",
		Short: "run one cell of a sweep: its scenario with its settings, as many times as the spec says",
		Long: `Run one cell of a sweep, named as 'kpsim sweep plan' names it: the same command on a
laptop and in a GitHub Actions job. Each run is a 'kpsim run' process of its own (so
that its CPU and memory are its own), writing DIR/CELL/run-N.json; DIR/CELL/cell.json
records the cell, the kpsim build and how each run ended, and is written before the
first run and after each, so a job that dies part way still says how far it got.
'kpsim sweep merge' reads these directories.

A cell that cannot run here fails at once and says why: a kernel-backend cell needs
the kernel it names (uname -r), as root; a kube-proxy release is not a proxier this
kpsim runs. Ctrl-C or SIGTERM stops the running 'kpsim run', which still writes its
results, and the cell is recorded as failed.

Exit status: 0 every run succeeded, 2 bad usage or spec, 3 the cell failed.`,
		Example: `  kpsim sweep run sweeps/restart-scale.yaml "$(kpsim sweep plan sweeps/restart-scale.yaml --format names | head -1)"
  make sweep-cell SPEC=sweeps/restart-scale.yaml CELL=...`,
		Args:        exactArgs(2, "want a sweep spec and a cell name"),
		Annotations: map[string]string{interruptibleKey: "yes"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSweepCell(cmd, args[0], args[1], out)
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "write the cell's directory under `DIR` (default out/sweep/<sweep>/cells)")
	return c
}

func runSweepCell(cmd *cobra.Command, spec, name, outDir string) error {
	release := claimSignals(cmd)
	defer release()
	ctx := cmd.Context()
	p, err := loadPlan(spec)
	if err != nil {
		return err
	}
	cell := p.Find(name)
	if cell == nil {
		return usageError("sweep %s has no cell %s; its cells: %s", p.Sweep, name, cellNames(p))
	}
	if outDir == "" {
		outDir = filepath.Join("out", "sweep", p.Sweep, "cells")
	}
	// The cell's directory is made inside DIR, which is checked as any
	// output's directory is (created only under the working directory).
	if err := checkOutput("--output", filepath.Join(outDir, sweep.RecordFile)); err != nil {
		return err
	}
	dir := filepath.Join(outDir, cell.Name)
	if err := clearCell(dir); err != nil {
		return err
	}
	rec := &sweep.Record{Cell: *cell, Kpsim: buildInfo(), Status: sweep.StatusRunning}
	record := func() error { return sweep.WriteRecord(filepath.Join(dir, sweep.RecordFile), rec) }
	if err := record(); err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("sweep run: find this kpsim to run the cell's runs with: %w", err)
	}
	exe = cellBinary(exe, cell.Proxier)
	if why := cannotRun(exe, cell); why != "" {
		rec.Status, rec.Error = sweep.StatusFailed, why
		return errors.Join(fmt.Errorf("cell %s cannot run here: %s", cell.Name, why), record())
	}
	scenario := sweeps.ScenarioPath(spec, cell.Scenario)
	for i := 1; i <= cell.Runs && ctx.Err() == nil; i++ {
		file := fmt.Sprintf("run-%d.json", i)
		args := []string{"run", "-s", scenario, "-o", filepath.Join(dir, file)}
		for _, s := range cell.Sets() {
			args = append(args, "--set", s)
		}
		fmt.Fprintf(stderr, "kpsim sweep run: %s: run %d of %d: kpsim %s\n", cell.Name, i, cell.Runs, strings.Join(args, " "))
		run := sweep.RunRecord{}
		if err := runChild(ctx, exe, args, cmd.OutOrStdout(), stderr); err != nil {
			run.Error = err.Error()
		}
		if _, err := os.Stat(filepath.Join(dir, file)); err == nil {
			run.File = file
		}
		rec.Runs = append(rec.Runs, run)
		if err := record(); err != nil {
			return err
		}
	}
	rec.Status = sweep.StatusOK
	for i, r := range rec.Runs {
		if r.Error != "" {
			rec.Status, rec.Error = sweep.StatusFailed, fmt.Sprintf("run %d: %s", i+1, r.Error)
			break
		}
	}
	if rec.Status == sweep.StatusOK && len(rec.Runs) < cell.Runs {
		rec.Status, rec.Error = sweep.StatusFailed, fmt.Sprintf("stopped after %d of %d %s: %v", len(rec.Runs), cell.Runs, results.Plural(cell.Runs, "run", "runs"), context.Cause(ctx))
	}
	if err := record(); err != nil {
		return err
	}
	if rec.Status != sweep.StatusOK {
		return fmt.Errorf("cell %s failed: %s (record: %s)", cell.Name, rec.Error, filepath.Join(dir, sweep.RecordFile))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "cell: %s: %d %s in %s\n", cell.Name, len(rec.Runs), results.Plural(len(rec.Runs), "run", "runs"), dir)
	return nil
}

// clearCell removes what an earlier run of the cell left in dir (its
// record and results files, nothing else), so that a merge never mixes two
// runs of one cell.
func clearCell(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sweep run: %w", err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "run-*.json")) // the pattern is valid
	for _, p := range append(old, filepath.Join(dir, sweep.RecordFile)) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sweep run: clear the cell's last run: %w", err)
		}
	}
	return nil
}

// cellBinary is the kpsim that runs a cell's runs: this one, or for a
// kube-proxy release it does not have, the release's binary next to it
// (bin/kpsim-kube-proxy-v1.36.1 or bin/kpsim-kube-proxy-v1.37 beside
// bin/kpsim), when there is one.
func cellBinary(exe, impl string) string {
	if proxier.HasImplementation(impl) == nil {
		return exe
	}
	for _, bin := range proxier.ReleaseBinaries(impl) {
		if p := filepath.Join(filepath.Dir(exe), bin); fileExists(p) {
			return p
		}
	}
	return exe
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// cannotRun says why the cell cannot run on this machine with the kpsim
// at exe, or "".
func cannotRun(exe string, c *sweep.Cell) string {
	if err := proxier.HasImplementation(c.Proxier); err != nil && !slices.Contains(proxier.ReleaseBinaries(c.Proxier), filepath.Base(exe)) {
		return err.Error() + " (kpsim sweep run uses it from beside this kpsim when it is there)"
	}
	if c.Backend != dataplane.BackendKernel {
		return ""
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return fmt.Sprintf("read this machine's kernel release: %v", err)
	}
	if running := unix.ByteSliceToString(u.Release[:]); running != c.Kernel {
		return fmt.Sprintf("the cell runs on kernel %s and this machine runs %s: run it where that kernel runs", c.Kernel, running)
	}
	return ""
}

// runChild runs kpsim with args as a process of its own, its output
// passed through. Interrupting ctx sends it one SIGTERM, which it answers
// as it answers Ctrl-C: it stops and still writes its results. It is put
// in a process group of its own so that a Ctrl-C at a terminal reaches
// only this process, which passes it on once; a second signal while the
// child writes its results would end it before it could. The error is
// the child's own last line of standard error.
func runChild(ctx context.Context, exe string, args []string, stdout, stderr io.Writer) error {
	var tail lastLine
	c := exec.CommandContext(ctx, exe, args...)
	c.Stdout, c.Stderr = stdout, io.MultiWriter(stderr, &tail)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && tail.String() != "":
		return fmt.Errorf("kpsim run exited %d: %s", ee.ExitCode(), strings.TrimPrefix(tail.String(), "kpsim run: "))
	}
	return fmt.Errorf("kpsim run: %w", err)
}

// lastLine keeps the last non-empty line written to it.
type lastLine struct {
	partial, last []byte
}

func (l *lastLine) Write(b []byte) (int, error) {
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		if line := bytes.TrimSpace(l.partial[:i]); len(line) > 0 {
			l.last = append(l.last[:0], line...)
		}
		l.partial = l.partial[i+1:]
	}
	return len(b), nil
}

func (l *lastLine) String() string {
	if line := bytes.TrimSpace(l.partial); len(line) > 0 {
		return string(line)
	}
	return string(l.last)
}
