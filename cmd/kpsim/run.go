package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/scenarios"
)

// Set by the Makefile: go build -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = ""
)

func init() {
	register(command{
		name:  "run",
		usage: "-s NAME|FILE [-o FILE] [--set key=value ...] [--metrics-addr HOST:PORT] [--state FILE]",
		short: "run a scenario and write its results file",
		run:   runRun,
	})
}

func runRun(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", stderr)
	name := fs.String("s", "smoke", "scenario: a shipped name (see 'kpsim scenarios') or a file")
	out := fs.String("o", "", "results file (default out/<scenario>-<time>.json)")
	var sets setFlags // state.go's: repeated --set key=value
	fs.Var(&sets, "set", "override a scenario field, e.g. proxier.initialSync=legacy or cluster.services=500 (repeatable)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus /metrics on this address while the run lasts, e.g. 127.0.0.1:9100")
	stateOut := fs.String("state", "", "at the end of the run, read back what the dataplane holds and write it as a state dump (see 'kpsim state --diff')")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: kpsim run %s\n\n", commands["run"].usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError("%v", err)
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %q", fs.Args())
	}
	sc, err := scenarios.Load(*name, sets)
	if err != nil {
		return usageError("%v", err)
	}
	backend, err := newBackend(sc)
	if err != nil {
		return fmt.Errorf("backend %s: %w", sc.Backend, err)
	}
	defer backend.Close()

	path := *out
	if path == "" {
		path = filepath.Join("out", fmt.Sprintf("%s-%s.json", sc.Name, time.Now().Format("20060102-150405")))
	}
	reg := prometheus.NewRegistry()
	if *metricsAddr != "" {
		stop, err := serveMetrics(*metricsAddr, reg, stderr)
		if err != nil {
			return usageError("--metrics-addr: %v", err)
		}
		defer stop()
	}

	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	opts := scenarios.RunOptions{Backend: backend, Registry: reg}
	bar := newProgress(stderr, sc.StepCount())
	if bar != nil {
		opts.OnStep = bar.step
		opts.OnSync = bar.sync
	} else {
		fmt.Fprintf(stderr, "kpsim run: %s (%d steps) on the %s backend\n", sc.Name, sc.StepCount(), sc.Backend)
	}
	f, runErr := scenarios.Run(ctx, sc, opts)
	stopSignals() // a second Ctrl-C while writing ends the process
	if bar != nil {
		bar.finish()
	}
	if f == nil {
		return runErr
	}
	f.Kpsim = buildInfo()
	f.Environment = environment()
	if err := results.Write(path, f); err != nil {
		return errors.Join(runErr, err)
	}
	if *stateOut != "" {
		// Read back from the kernel itself (the real one on the kernel
		// backend), so a sim run and a kernel run diff with the same command.
		st, err := results.ReadState(backend.Dataplane(), scenarioFamilies(sc))
		if err == nil {
			err = writeState(*stateOut, st, stdout)
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

// scenarioFamilies is the families the scenario's proxiers ran.
func scenarioFamilies(sc *scenarios.Scenario) []dataplane.Family {
	var out []dataplane.Family
	for _, f := range sc.Proxier.Families {
		out = append(out, dataplane.Family(f))
	}
	return out
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
	p.bar.Describe(fmt.Sprintf("%-32s %5d syncs", p.label, p.syncs.Load()))
}

func (p *progress) step(done, _ int, label string) {
	p.mu.Lock()
	p.label = label
	p.mu.Unlock()
	_ = p.bar.Set(done)
	p.describe()
}

func (p *progress) sync(results.Sync) {
	p.syncs.Add(1)
	p.describe()
}

func (p *progress) finish() {
	_ = p.bar.Finish()
	fmt.Fprintln(p.w)
}

// serveMetrics serves reg on addr until stop is called. It listens before
// returning so that a taken port is reported before the run starts.
func serveMetrics(addr string, reg *prometheus.Registry, stderr io.Writer) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(stderr, "kpsim run: serving metrics on http://%s/metrics\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// buildInfo names the binary: the Makefile's -X values, else the VCS
// stamp Go embeds when building inside a checkout.
func buildInfo() results.Build {
	b := results.Build{Version: version, Commit: commit}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && b.Commit == "":
				b.Commit = s.Value
			case s.Key == "vcs.modified" && s.Value == "true" && b.Commit != "" && !strings.HasSuffix(b.Commit, "-dirty"):
				b.Commit += "-dirty"
			}
		}
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// environment describes the machine the run happened on.
func environment() results.Environment {
	e := results.Environment{OS: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
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
