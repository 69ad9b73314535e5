package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/kernel/netns"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/scenarios/backend"
)

func init() { register("run", newRunCommand) }

func newRunCommand() *cobra.Command {
	var o runFlags
	c := &cobra.Command{
		Use:   "run [-s NAME|FILE] [-o FILE] [--set KEY=VALUE]... [--metrics-addr HOST:PORT] [--state FILE]",
		Short: "run a scenario and write its results file",
		Long: `Run a scenario (a shipped one by name, see 'kpsim scenarios', or a file) and write
its results file: every sync phase by phase, every kernel operation, network
programming latency and every failed probe. A summary is printed at the end;
failed syncs are printed as they happen. Ctrl-C (SIGINT) or SIGTERM stops the
run and still writes what was measured, marked interrupted (exit status 3); while
the scenario is still loading it stops at once and writes nothing.

The results file is written to --output, whose directory must exist unless it is
under the working directory (the default, out/, is created). A file there is
replaced whole, never left half-written; but if another run wrote it while this
one ran, it is kept, and this run's results go to NAME-2.json beside it (the
'results:' line names the file, and a warning says why).`,
		Example: `  kpsim run -s smoke
  kpsim run -s restart-stale-ipsets --set proxier.initialSync=legacy --set dataplane.ipset=exec -o out/legacy.json
  kpsim run -s scale-10k --set cluster.services=2000 --metrics-addr 127.0.0.1:9099
  sudo kpsim run -s smoke --set backend=kernel --state out/kernel-state.json`,
		Args:        noArgs,
		Annotations: map[string]string{interruptibleKey: "yes"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.runs != 1 {
				return runRepeated(cmd, o)
			}
			if o.seeds != 1 {
				return runSeeds(cmd, o)
			}
			return runRun(cmd, o)
		},
	}
	f := c.Flags()
	f.IntVar(&o.seeds, "seeds", 1, "run the scenario `N` times, with seeds SEED, SEED+1, ... (SEED: the scenario's), each to its own results file FILE-seedS.json: on the modeled clock one seed is one exact answer, and variation comes from seeds ('kpsim compare' pairs them by seed)")
	f.IntVar(&o.runs, "runs", 1, "run the scenario `N` times with the same seed, each a process of its own writing FILE-runI.json, and print each figure's median and range: where runs of one seed differ (a kube-proxy release, the kernel backend, a time scale above 0) each run is one sample, and 'kpsim compare' reads them as such (8 a side decide most comparisons)")
	f.StringVarP(&o.scenario, "scenario", "s", "smoke", "the scenario to run, a shipped `NAME|FILE` (see 'kpsim scenarios') or a file")
	f.StringVarP(&o.out, "output", "o", "", "results `FILE` (default out/<scenario>-<time>.json)")
	f.StringArrayVar(&o.sets, "set", nil, "override a scenario field, `KEY=VALUE`, e.g. proxier.initialSync=legacy or cluster.services=500 (repeatable)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on `HOST:PORT` while the run lasts, e.g. 127.0.0.1:9100")
	f.StringVar(&o.state, "state", "", "at the end of the run, read back what the dataplane holds and write it to `FILE` as a state dump (see 'kpsim state --diff')")
	f.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole command (loading the scenario included) to `FILE`, for 'go tool pprof'")
	f.StringVar(&o.memprofile, "memprofile", "", "write a heap profile to `FILE` once the timeline has ended, after a garbage collection, while the run's API objects, informers, proxier and kernel are all still live, for 'go tool pprof'")
	completeScenario(c, "scenario")
	completeSetKeys(c)
	return c
}

type runFlags struct {
	scenario, out, metricsAddr, state string
	cpuprofile, memprofile            string
	sets                              []string
	seeds, runs                       int
}

// runSeeds runs the scenario once per seed, from the scenario's own seed
// (after --set) on, each run writing its own results file.
func runSeeds(cmd *cobra.Command, o runFlags) error {
	if o.seeds < 1 || o.seeds > maxSeeds {
		return usageError("--seeds %d: want 1 to %d runs", o.seeds, maxSeeds)
	}
	if o.state != "" || o.metricsAddr != "" || o.cpuprofile != "" || o.memprofile != "" {
		return usageError("--seeds runs several scenarios: --state, --metrics-addr, --cpuprofile and --memprofile take one run")
	}
	sc, err := loadInterruptible(cmd.Context(), o.scenario, o.sets, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	stem := strings.TrimSuffix(o.out, ".json")
	if stem == "" {
		stem = filepath.Join("out", fmt.Sprintf("%s-%s", sc.Name, time.Now().Format("20060102-150405")))
	}
	var paths []string
	var errs []error
	for i := range o.seeds {
		seed := sc.Seed + int64(i)
		one := o
		one.seeds = 1
		one.sets = append(slices.Clone(o.sets), fmt.Sprintf("seed=%d", seed))
		one.out = fmt.Sprintf("%s-seed%d.json", stem, seed)
		if err := runRun(cmd, one); err != nil {
			if cmd.Context().Err() != nil {
				return err // interrupted: no more seeds
			}
			errs = append(errs, err)
		}
		paths = append(paths, one.out)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%d seeds: %s\ncompare them with another build's or setting's, paired by seed: kpsim compare %s-seed*.json -- OTHER-seed*.json\n",
		o.seeds, strings.Join(paths, " "), stem)
	return errors.Join(errs...)
}

// maxSeeds bounds --seeds: each seed is a whole run.
const maxSeeds = 1000

func runRun(cmd *cobra.Command, o runFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	// Signals interrupt from here on; the trap is released once the run
	// has returned, so a second Ctrl-C while writing ends the process.
	release := claimSignals(cmd)
	defer release()
	ctx := cmd.Context()
	// What is at the outputs now, to tell at the end whether another run
	// wrote there meanwhile.
	var outStamp, stateStamp outputStamp
	if o.out != "" {
		if err := checkOutput("--output", o.out); err != nil {
			return err
		}
		outStamp = stampOutput(o.out)
	}
	if o.state != "" {
		if err := checkOutput("--state", o.state); err != nil {
			return err
		}
		stateStamp = stampOutput(o.state)
	}
	for _, p := range []struct{ flag, path string }{{"--cpuprofile", o.cpuprofile}, {"--memprofile", o.memprofile}} {
		if p.path != "" {
			if err := checkOutput(p.flag, p.path); err != nil {
				return err
			}
		}
	}
	stopCPU, err := startCPUProfile(o.cpuprofile)
	if err != nil {
		return err
	}
	defer stopCPU()
	sc, err := loadInterruptible(ctx, o.scenario, o.sets, stderr)
	if err != nil {
		return err
	}
	if limit := sc.MemoryLimitBytes(); limit > 0 {
		if env := os.Getenv("GOMEMLIMIT"); env != "" {
			fmt.Fprintf(stderr, "kpsim run: GOMEMLIMIT=%s holds, not the scenario's memoryLimit %s\n", env, sc.MemoryLimit)
		} else {
			debug.SetMemoryLimit(limit)
			fmt.Fprintf(stderr, "kpsim run: the heap's soft limit is %s (memoryLimit): the collector runs more often near it\n", sc.MemoryLimit)
		}
	}
	// Before the kernel backend re-executes kpsim: a proxier this binary
	// does not have is refused at once, saying which binary has it.
	impl, err := sc.Implementation()
	if err != nil {
		return usageError("%v", err)
	}
	path := o.out
	if path == "" {
		path = filepath.Join("out", fmt.Sprintf("%s-%s.json", sc.Name, time.Now().Format("20060102-150405")))
		if err := checkOutput("--output", path); err != nil {
			return err
		}
		outStamp = stampOutput(path)
	}
	spec, err := sc.BackendSpec()
	if err != nil {
		return fmt.Errorf("backend %s: %w", sc.Backend, err)
	}
	node, err := backend.New(spec)
	if errors.Is(err, backend.ErrIsolate) {
		// Nothing of this process's run has started: the isolated child
		// runs the whole command line, and its status is this one's. The
		// child profiles itself into the same files, so this process's
		// profile must be finished before the child starts its own.
		stopCPU()
		return reexecIsolated(os.Args[1:], stderr)
	}
	if err != nil {
		return fmt.Errorf("backend %s: %w", sc.Backend, err)
	}
	defer node.Close()

	reg := prometheus.NewRegistry()
	if o.metricsAddr != "" {
		var g prometheus.Gatherer = reg
		if impl.Metrics != nil {
			g = prometheus.Gatherers{reg, impl.Metrics}
		}
		stop, err := serveMetrics(o.metricsAddr, reg, g, stderr)
		if err != nil {
			return usageError("--metrics-addr: %v", err)
		}
		defer stop()
	}

	opts := scenarios.RunOptions{Backend: node, Registry: reg}
	var memErr error
	if o.memprofile != "" {
		opts.BeforeStop = func() { memErr = writeHeapProfile(o.memprofile) }
	}
	bar := newProgress(stderr, sc.StepCount())
	if bar == nil {
		// Step lines come from the timeline's goroutine, failed syncs from
		// the proxier's.
		stderr = &lockedWriter{w: stderr}
	}
	failures := newFailurePrinter(stderr, bar, time.Now)
	opts.OnSync = failures.sync
	if bar != nil {
		opts.OnStep = bar.step
		opts.OnSync = func(s record.Sync) {
			bar.sync(s)
			failures.sync(s)
		}
	} else {
		fmt.Fprintf(stderr, "kpsim run: %s (%d %s) on the %s backend\n", sc.Name, sc.StepCount(), results.Plural(sc.StepCount(), "step", "steps"), sc.Backend)
		start := time.Now()
		opts.OnStep = func(st scenarios.StepStart) { fmt.Fprintln(stderr, stepLine(st, time.Since(start))) }
	}
	f, runErr := scenarios.Run(ctx, sc, opts)
	release()
	stopCPU()
	if memErr != nil {
		runErr = errors.Join(runErr, memErr)
	}
	if bar != nil {
		bar.finish()
	}
	failures.finish()
	if f == nil {
		return runErr
	}
	f.Kpsim = buildInfo()
	f.Environment = environment()
	path, err = outStamp.write(stderr, "kpsim run", func(p string) error { return results.Write(p, f) })
	if err != nil {
		return errors.Join(runErr, err)
	}
	if o.state != "" {
		// Read back from the kernel itself (the real one on the kernel
		// backend), so a sim run and a kernel run diff with the same command.
		st, err := state.Read(node.Dataplane(), sc.Proxier.Families)
		if err == nil {
			_, err = stateStamp.write(stderr, "kpsim run", func(p string) error { return writeState(p, st, stdout) })
		}
		if err != nil {
			return errors.Join(runErr, fmt.Errorf("--state: %w", err))
		}
	}
	if err := results.PrintSummary(stdout, f); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "results: %s\n", path)
	return runErr
}

// startCPUProfile starts profiling the CPU into path ("": nothing) and
// returns the function that finishes the profile, which may be called more
// than once: the profile is complete once it has been.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	fh, err := os.Create(path)
	if err != nil {
		return nil, usageError("--cpuprofile %s: %v", path, pathErr(err))
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		fh.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			fh.Close()
		})
	}, nil
}

// writeHeapProfile writes the heap profile to path after a garbage
// collection: the profile's in-use figures are those of the last completed
// collection, so without one they would lag behind what is live now.
func writeHeapProfile(path string) error {
	runtime.GC()
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--memprofile %s: %w", path, pathErr(err))
	}
	if err := pprof.Lookup("heap").WriteTo(fh, 0); err != nil {
		fh.Close()
		return fmt.Errorf("--memprofile: %w", err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	return nil
}

// loadInterruptible loads the scenario (building a large cluster takes
// seconds) while watching ctx, so that a signal during loading ends the
// command at once instead of after the load, or not at all.
func loadInterruptible(ctx context.Context, name string, sets []string, stderr io.Writer) (*scenarios.Scenario, error) {
	type loaded struct {
		sc  *scenarios.Scenario
		err error
	}
	// A kernel run's isolated child loads the scenario again, from the same
	// command line: its parent has said so, and printed the warnings.
	say := stderr
	if netns.Isolated() {
		say = io.Discard
	}
	fmt.Fprintf(say, "kpsim run: loading %s\n", name)
	done := make(chan loaded, 1)
	go func() {
		sc, err := scenarios.Load(name, sets)
		done <- loaded{sc, err}
	}()
	select {
	case l := <-done:
		if l.err != nil {
			return nil, usageError("%v", l.err)
		}
		printWarnings(say, l.sc.Warnings())
		return l.sc, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("interrupted while loading scenario %s (%v): nothing ran, no results file written", name, context.Cause(ctx))
	}
}

// progress shows the timeline's steps and the syncs so far on a terminal.
type progress struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	syncs atomic.Int64
	mu    sync.Mutex
	label string
}

// newProgress returns nil unless w is a terminal: logs and CI output stay clean.
func newProgress(w io.Writer, steps int) *progress {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return &progress{w: w, bar: progressbar.NewOptions(steps,
		progressbar.OptionSetWriter(w),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
	)}
}

func (p *progress) describe() {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := int(p.syncs.Load())
	p.bar.Describe(fmt.Sprintf("%-32s %5d %s", p.label, n, results.Plural(n, "sync", "syncs")))
}

func (p *progress) step(st scenarios.StepStart) {
	p.mu.Lock()
	p.label = st.Label
	p.mu.Unlock()
	_ = p.bar.Set(st.Done)
	p.describe()
}

func (p *progress) sync(record.Sync) {
	p.syncs.Add(1)
	p.describe()
}

// printLine prints a line above the bar: the bar is cleared first and drawn
// again on its next update, so the line does not end up inside it.
func (p *progress) printLine(line string) {
	p.mu.Lock()
	_ = p.bar.Clear()
	fmt.Fprintln(p.w, line)
	p.mu.Unlock()
	p.describe()
}

func (p *progress) finish() {
	_ = p.bar.Finish()
	fmt.Fprintln(p.w)
}

// stepLine is the line a step's start prints without a progress bar (CI, a
// pipe, a file): where the run is in its timeline and in time, modeled and
// wall, wall time being the only time of a run on the wall clock.
func stepLine(st scenarios.StepStart, wall time.Duration) string {
	at := fmt.Sprintf("%s wall (the run's only clock)", st.Elapsed.Round(10*time.Millisecond))
	if st.Clock == record.ClockModeled {
		at = fmt.Sprintf("%s modeled, %s wall", st.Elapsed.Round(10*time.Millisecond), wall.Round(10*time.Millisecond))
	}
	return fmt.Sprintf("kpsim run: step %d/%d %s: at %s", st.Done+1, st.Total, st.Label, at)
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// serveMetrics serves g (the run's registry reg, and the proxier
// implementation's own) on addr until stop is called. It listens before
// returning so that a taken port is reported before the run starts.
func serveMetrics(addr string, reg *prometheus.Registry, g prometheus.Gatherer, stderr io.Writer) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(stderr, "kpsim run: serving metrics on http://%s/metrics\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// environment describes the machine the run happened on.
func environment() record.Environment {
	e := record.Environment{OS: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if name := osRelease(); name != "" {
		e.OS += " (" + name + ")"
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		e.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
	}
	e.CPU = cpuName()
	return e
}

func osRelease() string {
	return firstField("/etc/os-release", "PRETTY_NAME=", "=")
}

func cpuName() string {
	return firstField("/proc/cpuinfo", "model name", ":")
}

// firstField returns the value after sep on the first line of file starting with prefix.
func firstField(file, prefix, sep string) string {
	fh, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, prefix) {
			if _, v, ok := strings.Cut(line, sep); ok {
				return strings.Trim(strings.TrimSpace(v), `"`)
			}
		}
	}
	return ""
}
