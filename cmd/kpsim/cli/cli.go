// Package cli is kpsim's command line: it runs kube-proxy scenarios (IPVS,
// nftables and iptables modes) against an in-memory or a real kernel, and turns their results files into
// reports and comparisons. It is a package, not the main package, so that
// every kpsim binary runs the same command line: cmd/kpsim's, and those the
// nested modules under upstream/ build with a kube-proxy release as the
// proxier under test.
//
// Each subcommand lives in its own file and adds its constructor to the
// table with register; Main builds the command tree (spf13/cobra, as kubectl
// and kube-proxy do) and maps errors to the exit status: 0 success, 1 a
// verdict said no (a regression, a difference), 2 bad usage or input, 3 the
// run failed (an interrupted run or load included).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
)

// commands holds every subcommand's constructor by name. A constructor
// returns a fresh command (fresh flag variables) each time, so the command
// line can be executed more than once in one process, as tests do.
var commands = map[string]func() *cobra.Command{}

func register(name string, newCmd func() *cobra.Command) { commands[name] = newCmd }

// exitError carries an exit status other than the defaults.
type exitError struct {
	code int
	err  error
	hint bool // point at --help: the command line itself was wrong
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks bad input (exit 2): a value or file the command could
// not use.
func usageError(format string, a ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, a...)}
}

// badUsage marks a wrong command line (exit 2): flags or arguments the
// command does not take; the message points at --help.
func badUsage(format string, a ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, a...), hint: true}
}

// verdict marks a negative answer such as a regression or a difference (exit 1)
// that has already been printed.
func verdict(format string, a ...any) error {
	return &exitError{code: 1, err: fmt.Errorf(format, a...)}
}

// Main runs the command line of the process and exits with its status.
// buildVersion and buildCommit name the binary (its main package's, which
// the Makefile stamps with -X main.version and -X main.commit).
func Main(buildVersion, buildCommit string) {
	version, commit = buildVersion, buildCommit
	// First: a SIGINT or SIGTERM from here on is either an interruption the
	// command handles or the default action, never lost (see signalTrap).
	trap := trapSignals()
	os.Exit(execute(trap.context(), os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line without a signal trap (tests).
func run(args []string, stdout, stderr io.Writer) int {
	return execute(context.Background(), args, stdout, stderr)
}

// execute runs one command line and returns its exit status.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if t := trapOf(ctx); t != nil {
		t.release() // a signal held during help or a usage error acts now
	}
	if err == nil {
		return 0
	}
	name := cmd.CommandPath()
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.hint {
			fmt.Fprintf(stderr, "See '%s --help' for usage.\n", name)
		}
		return ee.code
	}
	if !started(cmd) {
		// Cobra's own errors (an unknown command or flag, wrong arguments)
		// come before the command ran: bad usage.
		fmt.Fprintf(stderr, "See '%s --help' for usage.\n", name)
		return 2
	}
	return 3
}

// startedKey marks, in a command's annotations, that its RunE was entered.
const startedKey = "kpsim-started"

func started(c *cobra.Command) bool { return c.Annotations[startedKey] == "yes" }

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "kpsim",
		Short: "simulate and load-test kube-proxy in its IPVS, nftables and iptables modes",
		Long: `kpsim runs a kube-proxy proxier (kpsim's own IPVS proxier, or, in a binary built
with a kube-proxy release, that release's IPVS, nftables or iptables proxier) against
an in-memory kernel with a measured cost model, or against the real kernel inside
throwaway network namespaces, replays a scenario through a fake Kubernetes API, and
writes every sync, kernel operation and probe into one JSON results file that reports
and comparisons read.

Exit status: 0 success, 1 a verdict said no (a regression, a difference),
2 bad usage or input, 3 the run failed or was interrupted.`,
		Example: `  kpsim scenarios                          # the shipped scenarios
  kpsim run -s smoke -o out/smoke.json     # run one, write its results
  kpsim report out/smoke.json              # an HTML report next to it
  kpsim completion bash > /etc/bash_completion.d/kpsim`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			if cmd.Annotations[interruptibleKey] == "" {
				releaseSignals(cmd)
			}
		},
	}
	// Before the default commands are made: completion binds its output then.
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(flagError)
	for _, newCmd := range commands {
		c := newCmd()
		c.SetFlagErrorFunc(flagError)
		// Each usage line spells out its flags; cobra would append "[flags]".
		c.DisableFlagsInUseLine = true
		markStart(c)
		root.AddCommand(c)
	}
	// Cobra's own commands, in the style of the others.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Short = "show the help of a command"
		case "completion":
			c.Short = "print a shell completion script (bash, zsh, fish, powershell)"
			for _, sub := range c.Commands() {
				sub.Short = strings.ToLower(sub.Short[:1]) + sub.Short[1:]
			}
			c.Example = `  source <(kpsim completion bash)
  kpsim completion zsh > "${fpath[1]}/_kpsim"
  kpsim completion fish > ~/.config/fish/completions/kpsim.fish`
		}
	}
	return root
}

// markStart records in c's annotations (and its subcommands') when its
// RunE starts, so an error can be told apart as bad usage (before) or a
// failure (after).
func markStart(c *cobra.Command) {
	for _, sub := range c.Commands() {
		markStart(sub)
	}
	runE := c.RunE
	if runE == nil {
		return
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if cmd.Annotations == nil {
			cmd.Annotations = map[string]string{}
		}
		cmd.Annotations[startedKey] = "yes"
		return runE(cmd, args)
	}
}

var singleDash = regexp.MustCompile(`in (-[a-zA-Z][-a-zA-Z]+)`)

// flagError makes a flag error a usage error, and points a Go-style
// single-dash long flag (-require, as kpsim accepted before) at its
// spelling, --require.
func flagError(c *cobra.Command, err error) error {
	if m := singleDash.FindStringSubmatch(err.Error()); m != nil {
		if name := strings.TrimPrefix(m[1], "-"); c.Flags().Lookup(strings.SplitN(name, "=", 2)[0]) != nil {
			return badUsage("%v (long flags take two dashes: -%s)", err, m[1])
		}
	}
	return badUsage("%v", err)
}

// noArgs refuses positional arguments with a usage error.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return badUsage("unexpected arguments %q", args)
	}
	return nil
}
